#include "exec/planner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/log.h"
#include "compile/kernel_cache.h"
#include "driver/cuda_driver.h"
#include "fusion/partition.h"
#include "ir/graph.h"

namespace hotpath::detail {
namespace {

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
      if (is_sink(node)) ok = false;  // a recomputation replays tensor arguments, not lists
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

// The temporaries that get a buffer of their own: the smallest first, up to kSlotBudgetBytes.
void choose_slots(Plan& plan) {
  std::vector<std::tuple<std::int64_t, std::size_t, std::size_t>> sizes;  // bytes, op, output
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const PlanOp& p = plan.ops[i];
    // An op that writes an argument in place returns it: no buffer of its own to count.
    if (p.out_alias >= 0) continue;
    for (std::size_t k = 0; k < p.outs.size(); ++k) {
      if (!p.temporary[k] || !p.outs[k].defined) continue;
      const auto bytes =
          p.outs[k].numel() * static_cast<std::int64_t>(c10::elementSize(p.outs[k].dtype));
      sizes.emplace_back(bytes, i, k);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  std::int64_t total = 0;
  for (const auto& [bytes, i, k] : sizes) {
    if (total + bytes > kSlotBudgetBytes) break;
    total += bytes;
    plan.ops[i].slotted[k] = true;
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

int analyse_plan(Plan& out, const HotTrace& trace, const std::optional<PlanPrior>& remembered,
                 const Config& config, const std::optional<DeviceInfo>& device) {
  Plan* plan = &out;
  auto graph = std::make_shared<Graph>(Graph::from_trace(trace));
  const Graph& g = *graph;
  Partition part = partition_graph(g);
  plan->graph = graph;
  plan->partition = part;
  if (log_enabled(LogLevel::Debug))  // the texts are a tenth of the analysis: not for nothing
    log_debug(concat("hotpath: signature ", plan->hex, " graph:\n", g.to_text(), "partition:\n",
                     part.to_text(g)));
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const OpRecord& r = trace.ops[i];
    PlanOp p;
    p.input_key = r.input_key;
    p.args_key = r.args_key;
    p.key = r.key;
    p.op_name = r.name;
    p.op_overload = r.overload;
    p.grad_enabled = r.grad_enabled;
    for (const auto& in : r.inputs) {
      p.refs.push_back(in.ref);
      p.metas.push_back(in.meta_key);
    }
    p.outs.assign(r.outputs.begin(), r.outputs.end());
    p.out_alias = r.output_alias.empty() ? -1 : r.output_alias[0];
    for (std::size_t k = 0; k < r.outputs.size(); ++k)
      p.temporary.push_back(k < r.output_alive.size() && !r.output_alive[k]);
    p.slots.resize(r.outputs.size());
    p.slotted.assign(r.outputs.size(), false);
    plan->ops.push_back(std::move(p));
  }
  choose_slots(*plan);
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
          const DeviceInfo info = device ? *device : device_info(plan->device_index);
          plan->arch = info.arch;
          plan->sm_count = info.sm_count;
        } catch (const Error& e) {
          log_warn(concat("hotpath: signature ", plan->hex, " stays eager: ", e.what()));
          plan->groups.clear();
          for (PlanOp& op : plan->ops) op.group = -1;
          return 0;
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
    plan->replay_kept_before = remembered->replay_kept;
    plan->replay_held = remembered->holds_capture();
    if (remembered->replay_kept) {
      plan->replay_pool_hint = remembered->replay_pool_bytes;
      plan->replay_pool_small_hint = remembered->replay_pool_small_bytes;
    }
  }
  return fused_ops;
}

void build_plan(Plan& plan, const HotTrace& trace, const std::optional<PlanPrior>& remembered,
                const Config& config) {
  const auto t0 = std::chrono::steady_clock::now();
  const int fused_ops = analyse_plan(plan, trace, remembered, config, std::nullopt);
  if (remembered && remembered->compile)
    log_info(concat("hotpath: signature ", plan.hex, " is a known winner; compiling at once"));
  if (plan.groups.empty()) {
    log_info(concat("hotpath: signature ", plan.hex, ": nothing to fuse (", trace.ops.size(),
                    " ops); it runs eagerly"));
    return;
  }
  log_info(concat("hotpath: signature ", plan.hex, ": ", plan.groups.size(),
                  " fused group(s) cover ", fused_ops, " of ", trace.ops.size(),
                  " ops (plan built in ", ms_text(ms_since(t0)), ")",
                  plan.device_index >= 0 ? "; compiling in the background" : ""));
}

std::vector<int> compile_order(const Plan& plan) {
  std::vector<int> order;
  for (std::size_t i = 0; i < plan.groups.size(); ++i)
    if (plan.groups[i].gpu) order.push_back(static_cast<int>(i));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const PlanGroup& ga = plan.groups[static_cast<std::size_t>(a)];
    const PlanGroup& gb = plan.groups[static_cast<std::size_t>(b)];
    if (ga.spec.interpretable() != gb.spec.interpretable()) return !ga.spec.interpretable();
    return ga.ops.size() > gb.ops.size();
  });
  return order;
}

bool reads_cuda(const HotTrace& trace) {
  for (const OpRecord& r : trace.ops) {
    for (const TensorInput& in : r.inputs)
      if (in.meta.defined && in.meta.device.is_cuda()) return true;
  }
  return false;
}

std::vector<KernelJob> kernel_jobs(const Plan& plan, std::map<std::string, std::size_t>* job_of) {
  std::vector<KernelJob> jobs;
  std::map<std::string, std::size_t> index;  // cache key -> job
  for (const int gi : compile_order(plan)) {
    const PlanGroup& g = plan.groups[static_cast<std::size_t>(gi)];
    if (!g.active_default || !index.emplace(g.cache_key, jobs.size()).second) continue;
    jobs.push_back(KernelJob{g.spec.source, g.spec.name, g.cache_key});
  }
  if (job_of != nullptr) *job_of = std::move(index);
  return jobs;
}

}  // namespace hotpath::detail
