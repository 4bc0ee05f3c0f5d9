#include "exec/executor.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAStream.h>

#include <ATen/ops/abs.h>
#include <ATen/ops/any.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/logical_xor.h>
#include <ATen/ops/max.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "common/error.h"
#include "common/faults.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/log.h"
#include "compile/kernel_builder.h"
#include "compile/nvrtc.h"
#include "compile/worker.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "trace/signature.h"

namespace hotpath::detail {
namespace {

constexpr std::int64_t kDivergenceLogs = 5;

// Gives placeholder `p` the data of `r` (the eager result of the op p stood for). Its storage is
// replaced only when nothing else shares it: autograd saves an op's output (softmax, sigmoid,
// ...) as a second tensor on the same storage, which must see the data.
void adopt(const at::Tensor& p, const at::Tensor& r) {
  c10::TensorImpl* impl = p.unsafeGetTensorImpl();
  if (p.storage().use_count() == 1 && impl->allow_tensor_metadata_change() &&
      p.sizes() == r.sizes() && p.strides() == r.strides() && p.dtype() == r.dtype() &&
      p.device() == r.device()) {
    impl->set_storage_keep_dtype(r.storage());
    impl->set_storage_offset(r.storage_offset());
    return;
  }
  at::AutoDispatchBelowADInplaceOrView below;
  p.copy_(r);
}

int count_refs(const at::Tensor& t, c10::ArrayRef<c10::IValue> args) {
  int n = 0;
  for (const auto& a : args) {
    if (a.isTensor() && a.toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) ++n;
  }
  return n;
}

// The tensors the members of a group read and write (Value::tensor ids).
void touched(const Graph& g, const PlanGroup& pg, std::set<int>& read, std::set<int>& written) {
  for (int n : pg.ops) {
    const Node& node = g.node(n);
    for (const auto& in : node.inputs) {
      if (in.value < 0) continue;
      (in.written ? written : read).insert(g.value(in.value).tensor);
    }
    for (int out : node.outputs) written.insert(g.value(out).tensor);
  }
}

// Which tensors the group makes may be skipped even while a temporary holds them (see PlanGroup).
void plan_speculative(const Graph& g, const HotTrace& trace, const FusionGroup& fg, PlanGroup& pg) {
  const auto& args = pg.spec.args;
  pg.speculative.assign(args.size(), false);
  pg.cone.assign(args.size(), {});
  std::map<int, int> member_of;
  for (std::size_t i = 0; i < fg.nodes.size(); ++i) member_of[fg.nodes[i]] = static_cast<int>(i);
  // Tensors the group writes in place that it did not make.
  std::set<int> written_outside;
  for (const auto& a : args) {
    if (a.kind == KernelArg::Kind::Tensor && a.written && a.output < 0) {
      const Node& n = g.node(fg.nodes[static_cast<std::size_t>(a.member)]);
      written_outside.insert(g.value(n.input_at(a.argument)).tensor);
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    if (a.kind != KernelArg::Kind::Tensor || !a.optional) continue;
    const int base = g.node(fg.nodes[static_cast<std::size_t>(a.member)])
                         .outputs[static_cast<std::size_t>(a.output)];
    int final_value = base;
    for (int m : fg.nodes) {
      for (int v : g.node(m).outputs) {
        if (g.value(v).tensor == g.value(base).tensor) final_value = v;
      }
    }
    bool ok = true;
    for (int r : g.readers(final_value)) ok = ok && member_of.count(r) > 0;
    const Value& fv = g.value(final_value);
    const auto& alive = trace.ops[static_cast<std::size_t>(fv.producer)].output_alive;
    if (static_cast<std::size_t>(fv.output) >= alive.size() ||
        alive[static_cast<std::size_t>(fv.output)])
      ok = false;
    // The members that compute it.
    std::set<int> cone;
    std::vector<int> work{fv.producer};
    while (ok && !work.empty()) {
      const int n = work.back();
      work.pop_back();
      if (!member_of.count(n) || !cone.insert(n).second) continue;
      const Node& node = g.node(n);
      for (const auto& in : node.inputs) {
        if (in.value < 0) continue;
        const Value& v = g.value(in.value);
        if (written_outside.count(v.tensor)) ok = false;  // would read data the group overwrote
        if (v.producer >= 0) work.push_back(v.producer);
      }
    }
    if (!ok) continue;
    pg.speculative[i] = true;
    for (int n : cone) pg.cone[i].push_back(member_of[n]);
  }
}

}  // namespace

// Groups that share one pointwise kernel and follow each other with no other op between them (an
// optimizer's update of each parameter: one group per parameter) launch together, at the last
// one's last op, through the kernel's multi entry: one launch instead of one per group. Their
// order is then the GPU's, so none may touch what another writes.
void plan_batches(const Graph& g, Plan& plan) {
  std::vector<int> run;
  std::set<int> run_read, run_written;
  auto close = [&] {
    if (run.size() >= 2) {
      const int b = static_cast<int>(plan.batches.size());
      for (int gi : run)
        plan.ops[static_cast<std::size_t>(plan.groups[gi].ops.back())].launch = false;
      plan.ops[static_cast<std::size_t>(plan.groups[run.back()].ops.back())].batch = b;
      plan.batches.push_back(run);
    }
    run.clear();
    run_read.clear();
    run_written.clear();
  };
  for (std::size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const PlanGroup& pg = plan.groups[gi];
    std::set<int> read, written;
    touched(g, pg, read, written);
    bool joins = false;
    if (!run.empty()) {
      const PlanGroup& first = plan.groups[static_cast<std::size_t>(run.front())];
      const PlanGroup& last = plan.groups[static_cast<std::size_t>(run.back())];
      joins = pg.gpu && pg.spec.multi_segments > 0 && pg.cache_key == first.cache_key &&
              static_cast<int>(run.size()) < pg.spec.multi_segments &&
              pg.ops.front() == last.ops.back() + 1 &&
              pg.ops.back() - pg.ops.front() + 1 == static_cast<int>(pg.ops.size());
      for (int t : written) joins = joins && !run_read.count(t) && !run_written.count(t);
      for (int t : read) joins = joins && !run_written.count(t);
    }
    if (!joins) close();
    const bool can_start = pg.gpu && pg.spec.multi_segments > 0 &&
                           pg.ops.back() - pg.ops.front() + 1 == static_cast<int>(pg.ops.size());
    if (!joins && !can_start) continue;
    run.push_back(static_cast<int>(gi));
    run_read.insert(read.begin(), read.end());
    run_written.insert(written.begin(), written.end());
  }
  close();
}

Executor::Executor(Recorder& recorder, const Config& config)
    : recorder_(recorder), config_(config), cache_(cache_dir(config.cache_dir)) {
  if (config.fuse) start_nvrtc(cache_);
}

Executor::~Executor() = default;

void Executor::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  config_ = config;
  cache_ = KernelCache(cache_dir(config.cache_dir));
  if (config.fuse) start_nvrtc(cache_);
}

void Executor::start_nvrtc(const KernelCache& cache) {
  static std::once_flag once;
  std::call_once(once, [cache] {
    // NVRTC's first compile, here on the enabling thread and before the compile worker exists:
    // NVRTC crashed (inside nvrtcCompileProgram) when its first use was on another thread, and
    // the static state it creates then must be destroyed after the worker at exit (the worker
    // finishes a running job first).
    runtime_headers();
    log_enabled(LogLevel::Debug);
    // Without a CUDA driver no plan is ever compiled on the worker: nothing to start.
    if (!cuda_driver_available()) return;
    int arch = 90;
    try {
      arch = device_info(0).arch;
    } catch (const Error& e) {
      log_warn(concat("hotpath: no usable CUDA device (", e.what(), "); kernels for sm_90"));
    }
    try {
      nvrtc_start(arch);
    } catch (const Error& e) {
      log_warn(concat("hotpath: NVRTC does not work here; hot paths stay eager: ", e.what()));
      return;
    }
    // The interpreter kernel (from the cache, or compiled) and the driver's first module load,
    // in the background while the loop is profiled: the first hot signature runs on it at once.
    CompileWorker::instance().submit([cache] { interpreter_for(0, cache); });
  });
}

std::shared_ptr<CudaModule> Executor::interpreter_for(int device, const KernelCache& cache) {
  // Never destroyed: a compile job may still run while static destructors do at exit.
  struct Loaded {
    std::mutex mu;
    std::map<int, std::shared_ptr<CudaModule>> modules;
    std::set<int> failed;
  };
  static Loaded* const state = new Loaded;
  std::lock_guard<std::mutex> lock(state->mu);
  auto& loaded = state->modules;
  auto& failed = state->failed;
  if (const auto it = loaded.find(device); it != loaded.end()) return it->second;
  if (failed.count(device)) return nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const int arch = device_info(device).arch;
    const std::string& source = interpreter_source();
    const BuiltKernel built =
        load_or_compile(KernelJob{source, kInterpreterFunction, kernel_cache_key(source, arch)},
                        arch, runtime_headers(), cache);
    const bool hit = built.from_cache;
    auto module = std::make_shared<CudaModule>(built.cubin, kInterpreterFunction, device);
    // One launch with nothing to do, here on the worker: the driver grows the context's local
    // memory for the interpreter's registers at a kernel's first launch (milliseconds), which
    // would otherwise stall the first fused iteration.
    hp::Program empty{};
    void* params[] = {&empty};
    module->launch(1, kInterpreterBlock, nullptr, params);
    log_info(concat(
        "hotpath: interpreter kernel for device ", device, " ready in ",
        ms_text(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count()),
        hit ? " (prebuilt or cached: nothing compiled)" : ""));
    loaded[device] = module;
    return module;
  } catch (const Error& e) {
    failed.insert(device);
    log_warn(concat("hotpath: no interpreter kernel for device ", device,
                    " (fused groups wait for their own kernels): ", e.what()));
    return nullptr;
  }
}

void Executor::on_hot(HotTrace&& trace, const std::optional<Decision>& remembered) {
  auto plan = std::make_shared<Plan>();
  plan->signature = trace.signature;
  plan->hex = short_hex(trace.signature);
  Config config;
  KernelCache cache{""};
  {
    std::lock_guard<std::mutex> lock(mu_);
    config = config_;
    cache = cache_;
    if (!config.fuse || plans_.count(trace.signature)) return;
    plans_[plan->signature] = plan;  // never analysed twice; not armed before it is ready
  }
  if (remembered && !remembered->compile) {
    plan->reverted = true;
    plan->remembered = "known loser from an earlier run";
    plan->reason = remembered->reason.empty() ? plan->remembered : remembered->reason;
    log_info(concat("hotpath: signature ", plan->hex, " is a known loser (", plan->reason,
                    "); it runs eagerly, nothing is compiled"));
    plan->compiled = true;
    plan->ready = true;  // nothing to compile; never armed
    return;
  }
  bool cuda = false;
  for (const OpRecord& r : trace.ops) {
    for (const TensorInput& in : r.inputs)
      cuda = cuda || (in.meta.defined && in.meta.device.is_cuda());
  }
  auto ready = ready_plans_;
  if (!cuda) {
    // CPU plans (Config::fuse_cpu) have nothing to compile: built here, ready at once.
    build(*plan, trace, remembered, config);
    plan->counted = !plan->groups.empty();
    plan->compiled = true;
    plan->ready = true;
    if (plan->counted) ++*ready;
    return;
  }
  // Everything else happens on the worker, so the training thread does not wait: analysis,
  // code generation, NVRTC (or the disk cache) and module loads.
  auto shared_trace = std::make_shared<HotTrace>(std::move(trace));
  CompileWorker::instance().submit([plan, shared_trace, remembered, config, cache, ready] {
    build(*plan, *shared_trace, remembered, config);
    // Ready before its kernels compile: the interpreter runs the groups meanwhile.
    if (!plan->groups.empty() && plan->device_index >= 0) {
      plan->interpreter = interpreter_for(plan->device_index, cache);
    }
    plan->counted = !plan->groups.empty();
    plan->ready = true;
    if (plan->counted) ++*ready;
    if (!plan->groups.empty()) compile(*plan, cache, config.compile_kernels);
    plan->compiled = true;
  });
}

void Executor::build(Plan& out, const HotTrace& trace, const std::optional<Decision>& remembered,
                     const Config& config) {
  Plan* plan = &out;
  const auto t0 = std::chrono::steady_clock::now();
  auto graph = std::make_shared<Graph>(Graph::from_trace(trace));
  const Graph& g = *graph;
  Partition part = partition_graph(g);
  plan->graph = graph;
  plan->partition = part;
  log_debug(concat("hotpath: signature ", plan->hex, " graph:\n", g.to_text(), "partition:\n",
                   part.to_text(g)));
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const OpRecord& r = trace.ops[i];
    PlanOp p;
    p.input_key = r.input_key;
    p.key = r.key;
    p.op_name = r.name;
    p.op_overload = r.overload;
    for (const auto& in : r.inputs) p.refs.push_back(in.ref);
    p.outs.assign(r.outputs.begin(), r.outputs.end());
    p.out_alias = r.output_alias.empty() ? -1 : r.output_alias[0];
    for (std::size_t k = 0; k < r.outputs.size(); ++k)
      p.temporary.push_back(k < r.output_alive.size() && !r.output_alive[k]);
    p.slots.resize(r.outputs.size());
    plan->ops.push_back(std::move(p));
  }
  // Forward passes start where the step detector anchors (trace/step_detector.h).
  bool grad_off = true;
  for (const OpRecord& r : trace.ops) {
    if (r.grad_enabled && r.reads_param && grad_off) {
      plan->pass_starts.emplace_back(r.name);
      grad_off = false;
    }
    grad_off = grad_off || !r.grad_enabled;
  }
  int fused_ops = 0;
  std::vector<const FusionGroup*> fused_from;  // per plan group
  for (const FusionGroup& fg : part.groups) {
    const bool gpu = fg.domain.device.is_cuda();
    if (!gpu && !config.fuse_cpu) continue;
    if (!gpu && !fg.domain.device.is_cpu()) continue;
    PlanGroup pg;
    pg.name = fg.name;
    pg.ops = fg.nodes;
    pg.gpu = gpu;
    if (gpu) {
      if (plan->device_index < 0) {
        plan->device_index = fg.domain.device.index();
        try {
          const DeviceInfo info = device_info(plan->device_index);
          plan->arch = info.arch;
          plan->sm_count = info.sm_count;
        } catch (const Error& e) {
          log_warn(concat("hotpath: signature ", plan->hex, " stays eager: ", e.what()));
          plan->groups.clear();
          for (PlanOp& op : plan->ops) op.group = -1;
          return;
        }
      }
      if (fg.domain.device.index() != plan->device_index) continue;  // one device per plan
      try {
        pg.spec = generate_kernel(g, fg);
      } catch (const Error& e) {
        log_warn(concat("hotpath: group ", fg.name, " stays eager: ", e.what()));
        continue;
      }
      pg.cache_key = kernel_cache_key(pg.spec.source, plan->arch);
    } else {
      // Not run on CPU, but kept for inspection and tests; a group codegen refuses stays eager
      // there too.
      try {
        pg.spec = generate_kernel(g, fg);
      } catch (const Error& e) {
        log_warn(concat("hotpath: group ", fg.name, " stays eager: ", e.what()));
        continue;
      }
    }
    plan_speculative(g, trace, fg, pg);
    const int gi = static_cast<int>(plan->groups.size());
    if (remembered && remembered->groups.size() == part.groups.size() &&
        static_cast<std::size_t>(gi) < remembered->names.size() &&
        remembered->names[static_cast<std::size_t>(gi)] == pg.name &&
        !remembered->groups[static_cast<std::size_t>(gi)]) {
      pg.active_default = false;  // lost in an earlier run: not compiled, runs eagerly
      pg.active = false;
    }
    for (int n : fg.nodes) plan->ops[static_cast<std::size_t>(n)].group = gi;
    plan->ops[static_cast<std::size_t>(fg.nodes.back())].launch = true;
    fused_ops += static_cast<int>(fg.nodes.size());
    plan->groups.push_back(std::move(pg));
    fused_from.push_back(&fg);
  }
  plan_batches(g, *plan);
  // A batch's kernel has the multi entry (the others do without: it costs compile time).
  for (const auto& batch : plan->batches) {
    for (int gi : batch) {
      PlanGroup& pg = plan->groups[static_cast<std::size_t>(gi)];
      pg.spec = generate_kernel(g, *fused_from[static_cast<std::size_t>(gi)], true);
      pg.cache_key = kernel_cache_key(pg.spec.source, plan->arch);
    }
  }
  if (remembered && remembered->compile) {
    plan->remembered = "known winner from an earlier run";
    log_info(concat("hotpath: signature ", plan->hex, " is a known winner; compiling at once"));
  }
  if (plan->groups.empty()) {
    log_info(concat("hotpath: signature ", plan->hex, ": nothing to fuse (", trace.ops.size(),
                    " ops); it runs eagerly"));
    return;
  }
  log_info(concat(
      "hotpath: signature ", plan->hex, ": ", plan->groups.size(), " fused group(s) cover ",
      fused_ops, " of ", trace.ops.size(), " ops (plan built in ",
      ms_text(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()),
      ")", plan->device_index >= 0 ? "; compiling in the background" : ""));
}

void Executor::compile(Plan& out, const KernelCache& cache, bool kernels) {
  Plan* plan = &out;
  const auto t0 = std::chrono::steady_clock::now();
  double cpu_ms = 0;  // of the NVRTC compiles, on whichever threads ran them
  // The plan's distinct kernels: the plan is ready when its slowest kernel is, not after the sum
  // of them (compile/kernel_builder.h).
  std::vector<KernelJob> jobs;
  std::map<std::string, std::size_t> job_of;  // cache key -> job
  for (const PlanGroup& g : plan->groups) {
    if (!kernels || !g.gpu || !g.active_default || job_of.count(g.cache_key)) continue;
    job_of.emplace(g.cache_key, jobs.size());
    jobs.push_back(KernelJob{g.spec.source, g.spec.name, g.cache_key});
  }
  KernelBuilder builder(std::move(jobs), plan->arch, runtime_headers(), cache);
  builder.compile_here();                        // this thread too
  std::map<std::string, const PlanGroup*> done;  // groups with the same kernel compile once
  auto failed = [](PlanGroup& g, const Error& e) {
    g.error = e.what();
    log_warn(concat("hotpath: group ", g.name, " stays ",
                    g.spec.interpretable() ? "on the interpreter: " : "eager: ", e.what()));
  };
  for (PlanGroup& g : plan->groups) {
    if (!g.gpu) continue;
    if (!g.active_default) {
      g.error = "not compiled: it lost in an earlier run";
      g.state->store(kFailed, std::memory_order_release);
      continue;
    }
    if (!kernels) {
      g.error = "kernels are not compiled (Config::compile_kernels)";
      g.state->store(kFailed, std::memory_order_release);
      continue;
    }
    const auto g0 = std::chrono::steady_clock::now();
    if (const auto same = done.find(g.cache_key); same != done.end()) {
      g.cubin = same->second->cubin;
      g.error = same->second->error;
      g.module = same->second->module;
      g.from_cache = true;
      ++plan->from_cache;
    } else {
      const BuiltKernel& b = builder.wait(job_of.at(g.cache_key));
      g.from_cache = b.from_cache;
      plan->from_cache += b.from_cache ? 1 : 0;
      cpu_ms += b.cpu_ms;
      g.cubin = b.cubin;
      if (!b.error.empty()) failed(g, Error(b.error));
    }
    // Loaded here too: cuModuleLoadData on the training thread would be a stall.
    if (g.error.empty() && g.module == nullptr) {
      try {
        g.module = std::make_shared<CudaModule>(g.cubin, g.spec.name, plan->device_index,
                                                g.spec.multi_name);
      } catch (const Error& e) {
        failed(g, e);
      }
    }
    g.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g0).count();
    done.emplace(g.cache_key, &g);
    g.state->store(g.error.empty() ? kLoaded : kFailed, std::memory_order_release);
  }
  plan->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!kernels) return;
  // NVRTC's CPU time next to wall time: compiles in parallel show more CPU than wall time; a
  // worker that waits for a core, less.
  log_info(concat("hotpath: signature ", plan->hex, ": ", plan->groups.size(),
                  " kernel(s) ready in ", static_cast<long long>(plan->compile_ms + 0.5), " ms (",
                  builder.compiled(), " compiled on ", builder.threads(), " thread(s), ",
                  static_cast<long long>(cpu_ms + 0.5), " ms CPU; ", plan->from_cache,
                  " from the cache)"));
}

void Executor::apply_requests(Plan& plan) {
  if (plan.requested_epoch == plan.epoch) return;
  for (std::size_t g = 0; g < plan.groups.size() && g < plan.requested_active.size(); ++g)
    plan.groups[g].active = plan.requested_active[g] && plan.groups[g].active_default;
  plan.epoch = plan.requested_epoch;
}

bool Executor::try_arm() {
  // Called for every op while plans are ready but none is armed: decide without the recorder's
  // lock when this op cannot start an iteration.
  if (recorder_.next_index() != recorder_.expected_start()) return false;
  const StreamPosition pos = recorder_.position();
  if (pos.expected_start != pos.next_op) return false;
  const auto it = plans_.find(pos.predicted_signature);
  if (it == plans_.end() || !it->second->ready || it->second->groups.empty() ||
      it->second->reverted)
    return false;
  apply_requests(*it->second);
  armed_ = it->second;
  cursor_ = 0;
  launched_ = false;
  waited_ = false;
  tiers_final_ = true;
  iter_start_ = pos.next_op;
  iteration_ = pos.iterations + 1;
  outside_.clear();
  return true;
}

bool Executor::guard(const PlanOp& p, const OpRecord& rec, bool check_key) {
  if ((check_key && rec.input_key != p.input_key) || rec.inputs.size() != p.refs.size())
    return false;
  for (std::size_t k = 0; k < p.refs.size(); ++k) {
    if (!rec.inputs[k].meta.defined) continue;
    const ValueRef e = p.refs[k];
    const ValueRef a = rec.inputs[k].ref;
    if (e.producer >= 0) {
      if (a.producer != iter_start_ + e.producer || a.output != e.output) return false;
    } else {
      if (a.producer >= iter_start_) return false;
      const std::uint64_t id = hash_combine(static_cast<std::uint64_t>(a.producer),
                                            static_cast<std::uint64_t>(a.output));
      const auto it = outside_.emplace(id, static_cast<std::int64_t>(outside_.size())).first;
      if (it->second != -e.producer - 1) return false;
    }
  }
  return true;
}

const c10::OperatorHandle* Executor::in_place_twin(const PlanOp& p, const OpRecord& rec,
                                                   const torch::jit::Stack& stack,
                                                   std::size_t index) {
  // Autograd accumulates a gradient into its buffer in place (add_) only when nothing else holds
  // the buffer; the ops a plan defers hold their arguments until their group runs, so the same
  // loop can ask for an out-of-place add where the trace has add_. When only autograd holds the
  // buffer (eager would have added in place), the recorded add_ runs instead: the same result.
  static const c10::OperatorHandle add_ =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add_", "Tensor");
  if (p.op_name != "aten::add_" || p.op_overload != "Tensor" || rec.name != "aten::add" ||
      rec.overload != "Tensor")
    return nullptr;
  if (!armed_ || armed_->graph == nullptr || rec.inputs.size() != p.refs.size()) return nullptr;
  const Node& n = armed_->graph->node(static_cast<int>(index));
  for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
    const int v = n.input_at(rec.inputs[k].argument);
    if (v < 0) return nullptr;
    const TensorMeta& want = armed_->graph->value(v).meta;
    const TensorMeta& got = rec.inputs[k].meta;
    if (got.dtype != want.dtype || got.device != want.device || got.sizes != want.sizes ||
        got.strides != want.strides || got.storage_offset != want.storage_offset)
      return nullptr;
  }
  const std::size_t nargs = add_.schema().arguments().size();
  if (stack.size() < nargs || !stack[stack.size() - nargs].isTensor()) return nullptr;
  const at::Tensor& self = stack[stack.size() - nargs].toTensor();
  int ours = 0;
  for (const Deferred& d : deferred_) ours += count_refs(self, d.args);
  for (std::size_t k = stack.size() - nargs; k < stack.size(); ++k) {
    if (stack[k].isTensor() &&
        stack[k].toTensor().unsafeGetTensorImpl() == self.unsafeGetTensorImpl())
      ++ours;
  }
  const bool only_autograd = self.use_count() == static_cast<std::size_t>(ours) + 1 &&
                             self.storage().use_count() == 1 && self.is_non_overlapping_and_dense();
  if (!only_autograd || !guard(p, rec, false)) return nullptr;
  return &add_;
}

void Executor::diverge(const std::string& why) {
  materialize_all();
  restore_unwritten(true);  // the op that left the plan may read a value a kernel skipped
  ++armed_->divergences;
  if (divergence_logs_++ < kDivergenceLogs) {
    log_info(
        concat("hotpath: signature ", armed_->hex, ": iteration ", iteration_, " left the plan (",
               why, "); it finishes eagerly",
               divergence_logs_ == kDivergenceLogs ? " (further divergences are not logged)" : ""));
  }
  disarm();
}

bool Executor::intercept(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack, OpRecord& rec) {
  if (ready_plans_->load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_ && !try_arm()) {
    // Between plans (a step's tail): an op that reads a value a kernel skipped gets it computed.
    if (!unwritten_.empty()) restore_read(*stack, op.schema().arguments().size());
    return false;
  }
  const std::size_t index = cursor_;
  if (index == 0 && !unwritten_.empty()) restore_unwritten(false);  // the last iteration is over
  const PlanOp& p = armed_->ops[index];
  const c10::OperatorHandle* as = &op;
  if (!guard(p, rec, true)) {
    as = in_place_twin(p, rec, *stack, index);
    if (as != nullptr) {
      rec.name = p.op_name;
      rec.overload = p.op_overload;
      rec.planned_key = p.key;
      rec.planned_alias = p.out_alias;
    }
    if (as == nullptr) {
      const std::string want = full_name(p.op_name, p.op_overload);
      const std::string got = full_name(rec.name, rec.overload);
      diverge(concat("op ", index, ": expected ", want, ", got ", got,
                     got == want ? " with other inputs" : ""));
      return false;
    }
  }
  ++cursor_;
  bool handled = false;
  const PlanGroup* group =
      p.group >= 0 ? &armed_->groups[static_cast<std::size_t>(p.group)] : nullptr;
  if (group != nullptr && group->active && !group->eager_only) {
    try {
      defer(*as, keys, stack, p, static_cast<int>(index));
    } catch (const c10::OutOfMemoryError& e) {
      // No memory for a fused group's output: what is pending runs eagerly, the buffers the
      // plan keeps for its temporaries are let go, and this op and the rest of the iteration
      // run as eager would (if eager has no memory either, the loop sees eager's error).
      for (PlanOp& op : armed_->ops) op.slots.assign(op.slots.size(), nullptr);
      diverge(concat("out of memory for the output of op ", index, " (",
                     full_name(p.op_name, p.op_overload), ")"));
      return false;
    }
    handled = true;
    if (p.launch) run_group(p.group);
  }
  if (p.batch >= 0) run_batch(p.batch);
  if (cursor_ == armed_->ops.size()) complete_iteration();
  return handled;
}

void Executor::defer(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack, const PlanOp& p, int index) {
  if (fault_armed(kFaultOom))
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (injected: HOTPATH_FAULTS=oom)");
  // Built where it stays (a Deferred holds its arguments inline: moving it copies them).
  Deferred& d = deferred_.emplace_back(Deferred{op, keys, index, p.group, {}, p.out_alias, {}});
  try {
    const std::size_t nargs = op.schema().arguments().size();
    for (auto it = stack->end() - static_cast<std::ptrdiff_t>(nargs); it != stack->end(); ++it)
      d.args.push_back(std::move(*it));
    torch::jit::drop(*stack, nargs);
    if (p.out_alias >= 0) {
      stack->emplace_back(d.args[static_cast<std::size_t>(p.out_alias)]);
      return;
    }
    const bool gpu = armed_->groups[static_cast<std::size_t>(p.group)].gpu;
    for (std::size_t k = 0; k < p.outs.size(); ++k) {
      const TensorMeta& m = p.outs[k];
      if (!m.defined) {  // an output eager leaves undefined (a gradient not asked for)
        d.made.emplace_back(at::Tensor().getIntrusivePtr());
        stack->emplace_back(at::Tensor());
        continue;
      }
      at::Tensor out = gpu && p.temporary[k]
                           ? OutputSlot::make(p.slots[k], m)
                           : at::empty_strided(m.sizes, m.strides,
                                               at::TensorOptions().dtype(m.dtype).device(m.device));
      d.made.emplace_back(out.getIntrusivePtr());
      stack->emplace_back(std::move(out));
    }
  } catch (...) {
    deferred_.pop_back();  // the op fails as it would eagerly; nothing half-deferred stays
    throw;
  }
}

std::vector<Executor::Deferred*> Executor::members_of(int group) {
  std::vector<Deferred*> members;
  for (Deferred& d : deferred_) {
    if (d.group == group) members.push_back(&d);
  }
  return members;
}

void Executor::forget_group(int group) {
  deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(),
                                 [&](const Deferred& d) { return d.group == group; }),
                  deferred_.end());
}

void Executor::run_group(int group) {
  const std::vector<Deferred*> members = members_of(group);
  PlanGroup& g = armed_->groups[static_cast<std::size_t>(group)];
  if (!g.gpu) {
    launched_ = true;  // a CPU group's "kernel" is ATen's, run by materialize
    if (armed_->first_fused_iteration < 0) armed_->first_fused_iteration = iteration_;
  }
  if (!g.gpu || !launch(g, members)) {
    materialize(members);
    ++g.eager_runs;
  }
  forget_group(group);
}

void Executor::run_batch(int batch) {
  // The batch's groups that have deferred work (an inactive group's ops ran eagerly).
  std::vector<int> pending;
  std::vector<std::vector<Deferred*>> members;
  for (int gi : armed_->batches[static_cast<std::size_t>(batch)]) {
    std::vector<Deferred*> m = members_of(gi);
    if (m.empty()) continue;
    pending.push_back(gi);
    members.push_back(std::move(m));
  }
  auto group = [&](int gi) -> PlanGroup& { return armed_->groups[static_cast<std::size_t>(gi)]; };
  // One launch needs every group's own kernel, loaded (they share it: one source), and, since
  // their order is then the GPU's, no group touching a storage another one writes (views of one
  // tensor are different values in the plan). Else they launch one by one, in order.
  const CudaModule* kernel = pending.empty() ? nullptr : group(pending.front()).module.get();
  bool together = pending.size() >= 2 && kernel != nullptr && kernel->has_multi();
  for (int gi : pending) {
    together = together && group(gi).state->load(std::memory_order_acquire) == kLoaded &&
               group(gi).module.get() == kernel;
  }
  if (together) {
    // Each group's tensors, once (the written ones flagged), then every written one against the
    // other groups' tensors.
    std::vector<std::vector<std::pair<at::Tensor, bool>>> tensors(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) {
      for (const KernelArg& a : group(pending[k]).spec.args) {
        if (a.kind != KernelArg::Kind::Tensor) continue;
        const Deferred& m = *members[k][static_cast<std::size_t>(a.member)];
        at::Tensor t = a.output >= 0 ? m.output(static_cast<std::size_t>(a.output))
                                     : m.args[static_cast<std::size_t>(a.argument)].toTensor();
        if (t.defined()) tensors[k].emplace_back(std::move(t), a.written);
      }
    }
    for (std::size_t x = 0; x < pending.size() && together; ++x) {
      for (const auto& [w, written] : tensors[x]) {
        if (!written) continue;
        for (std::size_t y = 0; y < pending.size() && together; ++y) {
          if (x == y) continue;
          for (const auto& t : tensors[y])
            together = together && !t.first.storage().is_alias_of(w.storage());
        }
      }
    }
  }
  if (!together) {
    for (int gi : pending) run_group(gi);
    return;
  }
  std::vector<LaunchArgs> args;
  args.reserve(pending.size());
  std::vector<std::size_t> filled;  // positions in pending
  for (std::size_t k = 0; k < pending.size(); ++k) {
    args.emplace_back();
    if (fill(group(pending[k]), members[k], true, args.back())) {
      filled.push_back(k);
    } else {
      args.pop_back();
      materialize(members[k]);
      ++group(pending[k]).eager_runs;
    }
  }
  const KernelSpec& spec = group(pending.front()).spec;
  // A plan batches at most multi_segments groups (plan_batches): one launch.
  HOTPATH_CHECK(filled.size() <= static_cast<std::size_t>(spec.multi_segments), "a batch of ",
                filled.size(), " groups for ", spec.multi_segments, " segments");
  const std::size_t seg_bytes = multi_segment_bytes(spec);
  const std::size_t nargs = spec.args.size();
  std::vector<unsigned char> param(seg_bytes * static_cast<std::size_t>(spec.multi_segments) + 8,
                                   0);
  unsigned first_block = 0;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const LaunchArgs& a = args[k];
    unsigned char* seg = param.data() + k * seg_bytes;
    for (std::size_t i = 0; i < nargs; ++i) {
      if (spec.args[i].kind == KernelArg::Kind::Scalar)
        std::memcpy(seg + 8 * i, &a.scalars[i], sizeof(float));
      else
        std::memcpy(seg + 8 * i, &a.ptrs[i], sizeof(void*));
    }
    if (spec.index64)
      std::memcpy(seg + 8 * nargs, &a.numel64, sizeof(long long));
    else
      std::memcpy(seg + 8 * nargs, &a.numel32, sizeof(int));
    std::memcpy(seg + 8 * (nargs + 1), &a.vector_ok, sizeof(int));
    const auto blocks = static_cast<unsigned>(a.blocks);
    std::memcpy(seg + 8 * (nargs + 2), &first_block, sizeof(unsigned));
    std::memcpy(seg + 8 * (nargs + 3), &blocks, sizeof(unsigned));
    first_block += blocks;
  }
  const int count = static_cast<int>(args.size());
  std::memcpy(param.data() + seg_bytes * static_cast<std::size_t>(spec.multi_segments), &count,
              sizeof(int));
  void* params[] = {param.data()};
  try {
    if (!args.empty())
      kernel->launch(first_block, static_cast<unsigned>(spec.block), current_stream(), params,
                     true);
    for (std::size_t k = 0; k < args.size(); ++k)
      finish(group(pending[filled[k]]), members[filled[k]], args[k], false);
  } catch (const Error& e) {
    log_warn(concat("hotpath: the joint launch of kernel ", kernel->name(),
                    " failed; its groups launch one by one from now on: ", e.what()));
    armed_->batches[static_cast<std::size_t>(batch)].clear();
    for (std::size_t k : filled) {
      materialize(members[k]);
      ++group(pending[k]).eager_runs;
    }
  }
  for (int gi : pending) forget_group(gi);
}

void* Executor::current_stream() const {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(armed_->device_index))
      .stream();
}

bool Executor::fill(PlanGroup& g, const std::vector<Deferred*>& members, bool own_kernel,
                    LaunchArgs& l) {
  const auto& args = g.spec.args;
  l.ptrs.assign(args.size(), nullptr);
  l.scalars.assign(args.size(), 0.0f);
  l.tensors.assign(args.size(), at::Tensor());
  l.numel64 = g.spec.numel;
  l.numel32 = static_cast<int>(g.spec.numel);
  l.vector_ok = g.spec.vec > 1 ? 1 : 0;
  const std::size_t unwritten_before = unwritten_.size();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    const Deferred& m = *members[static_cast<std::size_t>(a.member)];
    if (a.kind == KernelArg::Kind::Scalar) {
      l.scalars[i] =
          static_cast<float>(m.args[static_cast<std::size_t>(a.argument)].toScalar().toDouble());
      continue;
    }
    // A strong reference for the launch (one more use of a tensor the group made).
    const at::Tensor t = a.output >= 0 ? m.output(static_cast<std::size_t>(a.output))
                                       : m.args[static_cast<std::size_t>(a.argument)].toTensor();
    if (!t.defined()) {
      if (!a.optional) return false;  // cannot happen: the last member's output is on the stack
      continue;                       // nobody holds it: nothing to write
    }
    bool pass = true;
    if (a.optional) {
      int ours = 1;  // `t`
      for (const Deferred* d : members) ours += count_refs(t, d->args);
      // Nobody else holds it: nothing can read it. Someone does, but the trace says it dies
      // unread: skip it, and keep what restores it should that turn out wrong.
      // A second tensor on its storage (autograd's saved copy of an output) reads it too.
      const bool shared = t.storage().use_count() > 1;
      pass = t.use_count() > static_cast<std::size_t>(ours) || shared;
      if (pass && !shared && !g.speculative.empty() && g.speculative[i]) {
        pass = false;
        speculate(t, g, i, members);
      }
    }
    l.tensors[i] = t;
    l.ptrs[i] = pass ? t.data_ptr() : nullptr;
    if (pass && a.linear && g.spec.vec_bytes > 0 &&
        reinterpret_cast<std::uintptr_t>(l.ptrs[i]) %
                static_cast<std::uintptr_t>(g.spec.vec_bytes) !=
            0)
      l.vector_ok = 0;
  }
  // Element-wise in-place updates are only safe when a written tensor does not partly overlap
  // another operand (eager would see every element updated before the next op reads it).
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].written || l.ptrs[i] == nullptr) continue;
    for (std::size_t j = 0; j < args.size(); ++j) {
      if (j == i || args[j].kind != KernelArg::Kind::Tensor || !l.tensors[j].defined()) continue;
      if (l.tensors[i].storage().is_alias_of(l.tensors[j].storage())) {
        unwritten_.erase(unwritten_.begin() + static_cast<std::ptrdiff_t>(unwritten_before),
                         unwritten_.end());  // materialised instead: all written
        return false;
      }
    }
  }
  const std::int64_t per_block = own_kernel
                                     ? std::int64_t{g.spec.block} * g.spec.vec
                                     : std::int64_t{kInterpreterBlock} * kInterpreterElements;
  std::int64_t grid = own_kernel && g.spec.rows > 0
                          ? (g.spec.rows + g.spec.rows_per_block - 1) / g.spec.rows_per_block
                      : own_kernel && g.spec.col_tiles > 0
                          ? g.spec.col_tiles
                          : (g.spec.numel + per_block - 1) / per_block;
  l.blocks =
      std::max<std::int64_t>(1, std::min<std::int64_t>(grid, std::int64_t{armed_->sm_count} * 16));
  if (own_kernel && g.spec.fixed_blocks > 0) {
    l.blocks = g.spec.fixed_blocks;  // the workspace is laid out for these blocks
    if (!g.workspace.defined()) {
      g.workspace =
          at::zeros({g.spec.workspace_floats},
                    at::TensorOptions()
                        .dtype(at::kFloat)
                        .device(c10::Device(c10::kCUDA,
                                            static_cast<c10::DeviceIndex>(armed_->device_index))));
    }
    l.partial = g.workspace.data_ptr<float>();
    l.done = reinterpret_cast<unsigned*>(l.partial + g.spec.counters_at);  // 0.0f is 0u
  }
  if (config_.verify) prepare_verify(g, l);
  return true;
}

void Executor::finish(PlanGroup& g, const std::vector<Deferred*>& members, LaunchArgs& l,
                      bool interpreted) {
  ++g.launches;
  if (interpreted) ++g.interpreted;
  launched_ = true;
  if (config_.verify) verify(g, members, l);
  if (armed_->first_fused_iteration < 0) {
    armed_->first_fused_iteration = iteration_;
    log_info(concat("hotpath: signature ", armed_->hex, ": fused kernels running from iteration ",
                    iteration_));
  }
}

void Executor::launch_own(const PlanGroup& g, LaunchArgs& l) {
  const auto& args = g.spec.args;
  std::vector<void*> params(args.size() + 4, nullptr);
  for (std::size_t i = 0; i < args.size(); ++i)
    params[i] = args[i].kind == KernelArg::Kind::Scalar ? static_cast<void*>(&l.scalars[i])
                                                        : static_cast<void*>(&l.ptrs[i]);
  params[args.size()] =
      g.spec.index64 ? static_cast<void*>(&l.numel64) : static_cast<void*>(&l.numel32);
  params[args.size() + 1] = &l.vector_ok;
  params[args.size() + 2] = &l.partial;  // read by kernels with a workspace only
  params[args.size() + 3] = &l.done;
  g.module->launch(static_cast<unsigned>(l.blocks), static_cast<unsigned>(g.spec.block),
                   current_stream(), params.data());
}

bool Executor::launch(PlanGroup& g, const std::vector<Deferred*>& members) {
  // The group's own kernel once the worker has loaded it, else the interpreter.
  const int state = g.state->load(std::memory_order_acquire);
  const CudaModule* kernel = state == kLoaded ? g.module.get() : nullptr;
  const CudaModule* interpreter =
      kernel == nullptr && g.spec.interpretable() ? armed_->interpreter.get() : nullptr;
  // An iteration that ran a group on a stand-in while its kernel compiles is not the final
  // configuration's: the governor does not judge it.
  if (state == kCompiling) {
    tiers_final_ = false;
    waited_ = waited_ || interpreter == nullptr;
  }
  if (kernel == nullptr && interpreter == nullptr) return false;
  LaunchArgs l;
  if (!fill(g, members, kernel != nullptr, l)) return false;
  const auto& args = g.spec.args;
  try {
    if (kernel != nullptr) {
      launch_own(g, l);
    } else {
      hp::Program program = g.spec.program;
      for (std::size_t i = 0; i < args.size(); ++i) {
        program.ptr[i] = l.ptrs[i];
        program.scalar[i] = l.scalars[i];
      }
      void* interpreter_params[] = {&program};
      interpreter->launch(static_cast<unsigned>(l.blocks), kInterpreterBlock, current_stream(),
                          interpreter_params);
    }
  } catch (const Error& e) {
    g.eager_only = true;
    log_warn(concat("hotpath: group ", g.name, " runs eagerly from now on: ", e.what()));
    return false;
  }
  finish(g, members, l, kernel == nullptr);
  return true;
}

void Executor::materialize(const std::vector<Deferred*>& members) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(c10::DispatchKey::Fake);
  for (Deferred* d : members) {
    torch::jit::Stack s(d->args.begin(), d->args.end());
    d->op.redispatchBoxed(d->keys, &s);
    if (d->out_alias >= 0) continue;
    for (std::size_t k = 0; k < d->made.size(); ++k) {
      if (const at::Tensor out = d->output(k); out.defined()) adopt(out, s.at(k).toTensor());
    }
  }
}

void Executor::materialize_all() {
  if (deferred_.empty()) return;
  std::vector<Deferred*> all;
  for (Deferred& d : deferred_) all.push_back(&d);
  std::sort(all.begin(), all.end(),
            [](const Deferred* a, const Deferred* b) { return a->index < b->index; });
  materialize(all);
  for (Deferred* d : all) {
    if (armed_) ++armed_->groups[static_cast<std::size_t>(d->group)].eager_runs;
  }
  deferred_.clear();
}

void Executor::complete_iteration() {
  materialize_all();  // empty unless a group's kernel could not run
  ++armed_->fused_iterations;
  completed_[completed_next_++ % std::size(completed_)] =
      Completed{armed_->signature, iter_start_, armed_->epoch, launched_ || !waited_, tiers_final_};
  launched_ = false;
  waited_ = false;
  tiers_final_ = true;
  // The governor's requests take effect between iterations; the next iteration is armed where
  // the recorder expects it to start (after a training step's tail, which runs eagerly).
  disarm();
}

void Executor::on_boundary() {
  std::lock_guard<std::mutex> lock(mu_);
  if (armed_ && cursor_ != 0) {
    diverge(concat("the iteration ended after ", cursor_, " of ", armed_->ops.size(), " ops"));
  }
  restore_unwritten(true);  // the loop body's temporaries are gone: what is alive is kept
  disarm();  // re-armed at the next op, where the recorder expects an iteration to start
}

void Executor::flush(bool keep_plan) {
  std::lock_guard<std::mutex> lock(mu_);
  materialize_all();
  restore_unwritten(true);
  if (!keep_plan) disarm();
}

void Executor::run_eager(const std::vector<const Deferred*>& members,
                         std::map<const c10::TensorImpl*, at::Tensor>& remap) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(c10::DispatchKey::Fake);
  at::AutoDispatchBelowADInplaceOrView below;
  for (const Deferred* d : members) {
    torch::jit::Stack s;
    for (const auto& a : d->args) {
      if (a.isTensor()) {
        const auto it = remap.find(a.toTensor().unsafeGetTensorImpl());
        s.emplace_back(it != remap.end() ? c10::IValue(it->second) : a);
      } else {
        s.push_back(a);
      }
    }
    d->op.redispatchBoxed(d->keys, &s);
    if (d->out_alias >= 0) continue;
    for (std::size_t k = 0; k < d->made.size(); ++k) {
      if (const at::Tensor out = d->output(k); out.defined())
        remap[out.unsafeGetTensorImpl()] = s.at(k).toTensor();
    }
  }
}

void Executor::speculate(const at::Tensor& t, const PlanGroup& g, std::size_t arg,
                         const std::vector<Deferred*>& members) {
  Unwritten u{WeakTensor(t.getIntrusivePtr())};
  u.group = g.name;
  u.plan = armed_;
  u.epoch = iteration_;
  std::map<const c10::TensorImpl*, int> slot_of;  // tensors the cone makes
  for (int m : g.cone[arg]) {
    const Deferred& d = *members[static_cast<std::size_t>(m)];
    ConeOp c{d.op, d.keys, std::vector<c10::IValue>(d.args.begin(), d.args.end()), {}, {}};
    for (std::size_t k = 0; k < c.args.size(); ++k) {
      if (!c.args[k].isTensor() || !c.args[k].toTensor().defined()) continue;
      const at::Tensor& in = c.args[k].toTensor();
      const auto it = slot_of.find(in.unsafeGetTensorImpl());
      if (it != slot_of.end()) {
        c.made.emplace_back(k, it->second);
        c.args[k] = c10::IValue();
      } else {
        u.versions.emplace_back(in, in._version());
      }
    }
    if (d.out_alias < 0) {
      for (std::size_t k = 0; k < d.made.size(); ++k) {
        c.out_slots.push_back(u.slots++);
        if (const at::Tensor out = d.output(k); out.defined())
          slot_of[out.unsafeGetTensorImpl()] = c.out_slots.back();
      }
    }
    u.cone.push_back(std::move(c));
  }
  const auto it = slot_of.find(t.unsafeGetTensorImpl());
  HOTPATH_CHECK(it != slot_of.end(), "the members of group ", g.name,
                " that compute a skipped value do not make it");
  u.target_slot = it->second;
  unwritten_.push_back(std::move(u));
}

void Executor::restore_read(const torch::jit::Stack& stack, std::size_t nargs) {
  for (std::size_t k = stack.size() - nargs; k < stack.size(); ++k) {
    const c10::IValue& a = stack[k];
    auto reads = [&](const at::Tensor& t) {
      if (!t.defined()) return false;
      for (const Unwritten& u : unwritten_) {
        if (!u.target.expired() &&
            at::Tensor(u.target.lock()).unsafeGetTensorImpl() == t.unsafeGetTensorImpl())
          return true;
      }
      return false;
    };
    bool hit = a.isTensor() && reads(a.toTensor());
    if (!hit && a.isTensorList())
      for (const at::Tensor& t : a.toTensorList().vec()) hit = hit || reads(t);
    if (hit) {
      restore_unwritten(true);
      return;
    }
  }
}

void Executor::restore_unwritten(bool all) {
  for (auto it = unwritten_.begin(); it != unwritten_.end();) {
    if (!all && it->epoch >= iteration_) {
      ++it;
      continue;
    }
    at::Tensor target(it->target.lock());
    if (target.defined()) {
      for (const auto& [in, version] : it->versions) {
        HOTPATH_CHECK(in._version() == version, "a value of fused group ", it->group,
                      " that the recorded iterations never kept is needed after all, and its "
                      "inputs have changed since; it cannot be restored. Disable fusion for this "
                      "loop (HOTPATH_FUSE=0) and report the loop.");
      }
      c10::impl::ExcludeDispatchKeyGuard no_hook(c10::DispatchKey::Fake);
      at::AutoDispatchBelowADInplaceOrView below;
      std::vector<at::Tensor> slots(static_cast<std::size_t>(it->slots));
      for (const ConeOp& c : it->cone) {
        torch::jit::Stack s(c.args.begin(), c.args.end());
        for (const auto& [k, slot] : c.made) s[k] = slots[static_cast<std::size_t>(slot)];
        c.op.redispatchBoxed(c.keys, &s);
        for (std::size_t k = 0; k < c.out_slots.size(); ++k)
          slots[static_cast<std::size_t>(c.out_slots[k])] = s.at(k).toTensor();
      }
      adopt(target, slots[static_cast<std::size_t>(it->target_slot)]);
      ++it->plan->restored;
      log_debug(concat("hotpath: restored a skipped value of group ", it->group));
    }
    it = unwritten_.erase(it);
  }
}

void Executor::prepare_verify(const PlanGroup& g, LaunchArgs& l) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(c10::DispatchKey::Fake);
  at::AutoDispatchBelowADInplaceOrView below;
  l.verify_inputs.clear();
  // The eager reference runs on copies of what the kernel overwrites, taken before it does.
  for (std::size_t i = 0; i < g.spec.args.size(); ++i) {
    const KernelArg& a = g.spec.args[i];
    if (a.kind != KernelArg::Kind::Tensor || !a.written || a.output >= 0) continue;
    l.verify_inputs[l.tensors[i].unsafeGetTensorImpl()] = l.tensors[i].clone();
  }
  // Poison what the kernel must write from scratch.
  for (std::size_t i = 0; i < g.spec.args.size(); ++i) {
    const KernelArg& a = g.spec.args[i];
    if (a.kind == KernelArg::Kind::Tensor && a.written && a.output >= 0 && l.ptrs[i] != nullptr)
      l.tensors[i].fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

namespace {

// How far a kernel's output is from eager's on the same inputs: max|fused - eager| over
// max|eager| (so that an all-zero reference is no division by zero, and a kernel that writes
// values where eager has zeros shows), with NaN and infinities required where eager has them.
struct Mismatch {
  double error = 0;      // 0 when equal up to kAbsFloor; infinity for a NaN/Inf mismatch
  std::int64_t at = -1;  // linear index of the worst element
  double fused = 0, eager = 0;
};

Mismatch compare(const at::Tensor& fused, const at::Tensor& ref) {
  constexpr double kAbsFloor = 1e-30;
  const at::Tensor a = fused.to(at::kDouble).reshape({-1});
  const at::Tensor b = ref.to(at::kDouble).reshape({-1});
  Mismatch m;
  if (a.numel() == 0) return m;
  // Non-finite values must match exactly (NaN where eager has NaN, the same infinities).
  const at::Tensor a_fin = at::isfinite(a), b_fin = at::isfinite(b);
  const at::Tensor bad_kind = at::logical_or(
      at::logical_xor(a_fin, b_fin),
      at::logical_and(at::logical_not(a_fin),
                      at::logical_not(at::logical_or(
                          at::eq(a, b), at::logical_and(at::isnan(a), at::isnan(b))))));
  if (at::any(bad_kind).item<bool>()) {
    m.error = std::numeric_limits<double>::infinity();
    m.at = at::argmax(bad_kind.to(at::kInt)).item<std::int64_t>();
  } else {
    const at::Tensor both = at::logical_and(a_fin, b_fin);
    const at::Tensor diff = at::where(both, at::abs(at::sub(a, b)), at::zeros_like(a));
    const double scale = at::where(b_fin, at::abs(b), at::zeros_like(b)).max().item<double>();
    m.at = at::argmax(diff).item<std::int64_t>();
    const double worst = diff[m.at].item<double>();
    m.error = worst <= kAbsFloor ? 0.0 : worst / std::max(scale, kAbsFloor);
  }
  m.fused = a[m.at].item<double>();
  m.eager = b[m.at].item<double>();
  return m;
}

// Coordinates of linear index `at` in `sizes`, as "[i, j, k]".
std::string coordinates(c10::IntArrayRef sizes, std::int64_t at) {
  std::vector<std::int64_t> c(sizes.size());
  for (std::size_t d = sizes.size(); d-- > 0;) {
    c[d] = sizes[d] > 0 ? at % sizes[d] : 0;
    at = sizes[d] > 0 ? at / sizes[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < c.size(); ++d) s += (d ? ", " : "") + std::to_string(c[d]);
  return s + "]";
}

}  // namespace

double verify_tolerance(c10::ScalarType dtype) {
  return dtype == at::kFloat ? 1e-5 : dtype == at::kDouble ? 1e-12 : 1e-2;
}

void Executor::verify(PlanGroup& g, const std::vector<Deferred*>& members, LaunchArgs& l) {
  const std::vector<at::Tensor>& tensors = l.tensors;
  const std::vector<void*>& ptrs = l.ptrs;
  std::map<const c10::TensorImpl*, at::Tensor> remap = std::move(l.verify_inputs);
  std::vector<const Deferred*> all(members.begin(), members.end());
  run_eager(all, remap);
  c10::impl::ExcludeDispatchKeyGuard no_hook(c10::DispatchKey::Fake);
  at::AutoDispatchBelowADInplaceOrView below;
  bool failed = false;
  for (std::size_t i = 0; i < g.spec.args.size(); ++i) {
    const KernelArg& a = g.spec.args[i];
    if (a.kind != KernelArg::Kind::Tensor || !a.written || ptrs[i] == nullptr) continue;
    const at::Tensor& fused = tensors[i];
    const at::Tensor& ref = remap.at(fused.unsafeGetTensorImpl());
    const Mismatch m = compare(fused, ref);
    g.max_rel_error = std::max(g.max_rel_error, m.error);
    if (m.error <= verify_tolerance(fused.scalar_type()) || failed) continue;
    failed = true;
    ++g.verify_failures;
    if (g.verify_failures > 3) continue;  // the first few of each group are logged
    std::string ops;
    for (const Deferred* d : members)
      ops += " " + full_name(d->op.schema().name(), d->op.schema().overload_name());
    const std::string what = concat(
        "hotpath: verify: group ", g.name, " (ops:", ops, ") of signature ", armed_->hex,
        ", iteration ", iteration_, ": kernel argument ", a.name, " ",
        format_meta(TensorMeta{
            true, fused.scalar_type(), fused.device(),
            c10::SmallVector<std::int64_t, 5>(fused.sizes().begin(), fused.sizes().end()),
            c10::SmallVector<std::int64_t, 5>(fused.strides().begin(), fused.strides().end()),
            fused.storage_offset()}),
        " differs from eager: error ", m.error, " at ", coordinates(fused.sizes(), m.at),
        " (fused ", m.fused, ", eager ", m.eager, ")");
    if (g.first_failure.empty()) g.first_failure = what;
    log_warn(what);
  }
  ++g.checks;
}

void Executor::fill_stats(Stats& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& sig : s.signatures) {
    const auto it = plans_.find(sig.id);
    if (it == plans_.end()) continue;
    const Plan& p = *it->second;
    sig.fusion.planned = true;
    sig.fusion.ready = p.ready;
    sig.fusion.stall_ms = p.stall_ms;
    if (!p.ready) continue;  // the worker is still building it: nothing else to read yet
    const bool compiled = p.compiled.load(std::memory_order_acquire);
    sig.fusion.compiled = compiled;
    if (compiled) {
      sig.fusion.compile_ms = p.compile_ms;
      sig.fusion.kernels_from_cache = p.from_cache;
    }
    sig.fusion.first_fused_iteration = p.first_fused_iteration;
    sig.fusion.fused_iterations = p.fused_iterations;
    sig.fusion.divergences = p.divergences;
    sig.fusion.restored = p.restored;
    sig.fusion.reverted = p.reverted;
    sig.fusion.reason = p.reason;
    sig.fusion.remembered = p.remembered;
    for (const PlanGroup& g : p.groups) {
      GroupStats gs;
      gs.name = g.name;
      gs.ops = static_cast<int>(g.ops.size());
      gs.gpu = g.gpu;
      gs.interpretable = g.spec.interpretable();
      if (g.state->load(std::memory_order_acquire) != kCompiling) {
        gs.compiled = g.error.empty();
        gs.compile_ms = g.compile_ms;
        gs.from_cache = g.from_cache;
        gs.error = g.error;
      }
      if (g.eager_only && gs.error.empty()) gs.error = "a launch failed";
      gs.launches = g.launches;
      gs.interpreted = g.interpreted;
      gs.eager_runs = g.eager_runs;
      gs.checks = g.checks;
      gs.max_rel_error = g.max_rel_error;
      gs.verify_failures = g.verify_failures;
      gs.first_failure = g.first_failure;
      gs.active = g.active && !p.reverted;
      sig.fusion.fused_ops += gs.ops;
      sig.fusion.groups.push_back(std::move(gs));
    }
  }
}

}  // namespace hotpath::detail

namespace hotpath::detail {
Executor::RunInfo Executor::ran(std::uint64_t signature, std::int64_t first) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Completed& c : completed_) {
    if (c.signature == signature && c.first == first)
      return RunInfo{c.fused, c.epoch, c.final_tiers};
  }
  return RunInfo{};
}

std::int64_t Executor::set_active(std::uint64_t signature, const std::vector<bool>& active,
                                  const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return 0;
  it->second->requested_active = active;
  if (!reason.empty()) it->second->reason = reason;
  return ++it->second->requested_epoch;
}

void Executor::revert(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return;
  Plan& plan = *it->second;
  plan.reverted = true;
  plan.reason = reason;
  if (armed_ != it->second) uncount_if_reverted(plan);  // else when it is disarmed
}

void Executor::uncount_if_reverted(Plan& plan) {
  // A plan that can no longer run stops counting as ready: with none left, ops skip the
  // executor's lock altogether.
  if (plan.reverted && plan.ready && plan.counted) {
    plan.counted = false;
    --*ready_plans_;
  }
}

void Executor::disarm() {
  if (!armed_) return;
  const std::shared_ptr<Plan> plan = std::move(armed_);  // leaves armed_ empty
  uncount_if_reverted(*plan);
}

std::vector<std::uint64_t> Executor::pending_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::uint64_t> out;
  for (const auto& [sig, p] : plans_)
    if (!p->ready) out.push_back(sig);
  return out;
}

void Executor::add_stall(const std::vector<std::uint64_t>& signatures, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::uint64_t sig : signatures) {
    const auto it = plans_.find(sig);
    if (it != plans_.end()) it->second->stall_ms += ms;
  }
}

bool Executor::plan_live(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  return it != plans_.end() && !it->second->reverted &&
         (!it->second->ready || !it->second->groups.empty());
}

std::shared_ptr<const Plan> Executor::plan(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  return it == plans_.end() ? nullptr : it->second;
}
}  // namespace hotpath::detail
