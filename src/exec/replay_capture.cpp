// Capturing a plan's iteration for replay (exec/replay.h): the shadow of each op on the side
// stream, the graphs' segments, what a failed capture leaves behind.
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "driver/cuda_driver.h"
#include "exec/output_slot.h"
#include "exec/plan.h"
#include "exec/replay.h"

namespace hotpath::detail {
namespace {

// The caching allocator's statistics of its small blocks' segments (c10's StatType::SMALL_POOL).
constexpr auto kSmallPool = static_cast<std::size_t>(c10::CachingAllocator::StatType::SMALL_POOL);

// Drops CUDAGraph's warning that a captured graph is empty while it lives, and passes every other
// warning on to the handler before it.
class QuietEmptyGraph : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override {
    if (w.msg().find("The CUDA Graph is empty") == std::string::npos) before_->process(w);
  }

 private:
  c10::WarningHandler* before_ = c10::WarningUtils::get_warning_handler();
  c10::WarningUtils::WarningHandlerGuard in_place_{this};  // after before_: it replaces that one
};

// Replaces every tensor argument (in the order OpRecord::inputs has them: arguments in order, a
// list's tensors in order) by f(k, tensor).
template <class F>
void map_inputs(torch::jit::Stack& args, F&& f) {
  std::size_t k = 0;
  for (c10::IValue& a : args) {
    if (a.isTensor()) {
      a = f(k++, a.toTensor());
      continue;
    }
    if (!a.isList()) continue;
    const c10::List<c10::IValue> list = a.toList();
    if (std::none_of(list.begin(), list.end(), [](const c10::IValue& e) { return e.isTensor(); }))
      continue;
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list)
      out.push_back(e.isTensor() ? c10::IValue(f(k++, e.toTensor())) : c10::IValue(e));
    a = c10::IValue(std::move(out));
  }
}

}  // namespace

// ---- Capture

void Replay::begin_capture(std::int64_t iter_start, std::vector<std::uint32_t> runs) {
  capture_began_ = std::chrono::steady_clock::now();
  iter_start_ = iter_start;
  runs_ = std::move(runs);
  stretch_graphs_ = 0;
  inputs_.assign(ops_.size(), {});
  read_only_.clear();
  prints_.clear();
  prints_used_ = 0;
  pool_ = at::cuda::graph_pool_handle();
  const auto& stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_));
  reserved_before_ = stats.reserved_bytes[0].current;
  small_before_ = stats.reserved_bytes[kSmallPool].current;
  mallocs_before_ = stats.segment[0].allocated;
  cost_ = CaptureCost{};
  if (pool_hint_ > 0) {
    AddElapsed lap(cost_.pool_ms);
    grow_pool(pool_hint_, pool_small_hint_);
  }
}

void Replay::open_segment() {
  if (open_) return;
  Segment s;
  s.graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/true);
  {
    AddElapsed lap(cost_.streams_ms);
    c10::cuda::CUDAStreamGuard guard(side_);
    // Relaxed: the iteration's own ops run meanwhile on this thread, and may allocate.
    s.graph->capture_begin(pool_, cudaStreamCaptureModeRelaxed);
  }
  release_pool_ref();  // the graph holds the pool now
  segments_.push_back(std::move(s));
  open_ = true;
  segment_ops_ = 0;
}

void Replay::close_segment() {
  if (!open_) return;
  open_ = false;
  Segment& s = segments_.back();
  {
    AddElapsed lap(cost_.streams_ms);
    c10::cuda::CUDAStreamGuard guard(side_);
    // A segment of ops that made no kernel (Segment::empty): CUDAGraph warns of an empty graph,
    // which is not the program's concern.
    QuietEmptyGraph quiet;
    s.graph->capture_end();
  }
  std::size_t nodes = 0;
  const cudaError_t e = cudaGraphGetNodes(s.graph->raw_cuda_graph(), nullptr, &nodes);
  HOTPATH_CHECK(e == cudaSuccess,
                "counting a captured graph's nodes failed: ", cudaGetErrorString(e));
  s.empty = nodes == 0;
  if (!s.empty) {
    AddElapsed lap(cost_.instantiate_ms);
    s.graph->instantiate();
  }
  // Values nobody holds any more: the pool may give their memory to the next segments' values.
  const int seg = static_cast<int>(segments_.size()) - 1;
  for (auto it = shadows_.begin(); it != shadows_.end();) {
    if (!it->second.real.expired()) {
      ++it;
      continue;
    }
    if (it->second.out >= 0)
      ops_[it->second.op].outs[static_cast<std::size_t>(it->second.out)].released_after = seg;
    it = shadows_.erase(it);
  }
}

bool Replay::cut_wanted(std::size_t index) const {
  return open_ && !failed() && graph_ops_ > 0 &&
         cut_before(segment_ops_, graph_limit(), index < runs_.size() ? runs_[index] : 1, true);
}

Replay::Kind Replay::capture_op(std::size_t index, const PlanOp& p, const OpRecord& rec,
                                const TensorPtrs& inputs, const c10::OperatorHandle& op,
                                bool between_groups) {
  OpRecipe& r = ops_[index];
  if (failed()) return r.kind;
  try {
    std::vector<Input>& ins = inputs_[index];
    ins.clear();
    bool host = host_waits(rec.name);
    for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
      const TensorInput& t = rec.inputs[k];
      Input in;
      in.argument = t.argument;
      in.written = t.written;
      if (!t.meta.defined) {
        in.ref.producer = -2;
      } else {
        host = host || !t.meta.device.is_cuda();
        if (t.ref.producer >= iter_start_) {
          in.ref = ValueRef{t.ref.producer - iter_start_, t.ref.output};
        } else {
          in.ref.producer = -1;
          in.outside = at::Tensor(*inputs[k]);
          const void* at = data_address(in.outside);
          if (const auto v = saved_value(in.outside)) {
            // A value of this iteration seen through another tensor (autograd's saved output,
            // unpacked in the backward pass): its shadow's memory, seen the same way.
            in.ref = *v;
            in.saved = true;
          } else {
            // A copy each replay unless it stays where it is: a parameter, state the iteration
            // writes in place, or (too large to copy) one the observed iteration saw there too.
            // An input seen to move in an earlier replay is copied whatever its size.
            const auto& seen =
                observed_.size() > index ? observed_[index] : std::vector<const void*>{};
            const bool param = in.outside.requires_grad() && in.outside.is_leaf();
            const bool state = written_.count(at) > 0;
            const bool small = in.outside.nbytes() <= kStaticMaxBytes;
            const bool elsewhere = k < seen.size() && seen[k] != at;
            in.moving = !t.written && !param && !state &&
                        (small || elsewhere || moved_.count(std::make_pair(index, k)) > 0);
          }
        }
      }
      ins.push_back(std::move(in));
    }
    for (const TensorMeta& m : p.outs) host = host || (m.defined && !m.device.is_cuda());
    const std::string name = full_name(rec.name, rec.overload);
    if (resizes(rec.name)) {
      fail(concat("op ", index, " (", name, ") resizes a tensor in place"));
      return r.kind;
    }
    if (host) {
      // Between graphs, run as it is in each replay; a CUDA tensor it makes is elsewhere each
      // time (the graphs read copies of it), one it writes in place is written where it is.
      r.kind = Kind::kLive;
      close_segment();
      stretch_graphs_ = 0;
      return r.kind;
    }
    const c10::FunctionSchema& schema = op.schema();
    if (is_view(schema) || changes_view(op, rec.name)) {
      r.kind = Kind::kView;
      return r.kind;
    }
    r.kind = Kind::kGraph;
    const bool random = draws_random(schema, rec.name);
    if (random) {
      // Only the device's default generator takes part in a capture (CUDAGraph registers it):
      // from a generator of its own a graph would draw the same numbers in every replay.
      if (std::any_of(rec.args.begin(), rec.args.end(),
                      [](const c10::IValue& a) { return a.isGenerator(); })) {
        fail(
            concat("op ", index, " (", name, ") draws random numbers from a generator of its own"));
        return r.kind;
      }
      if (!between_groups) {
        fail(concat("op ", index, " (", name,
                    ") draws random numbers where a fused group is pending"));
        return r.kind;
      }
    }
    if (rec.name.substr(0, 6) == "c10d::") {
      fail(concat("op ", index, " (", name, ") is a collective"));
      return r.kind;
    }
    if (returns_list(schema)) {
      fail(concat("op ", index, " (", name, ") returns a list of new tensors"));
      return r.kind;
    }
    // A long stretch is cut into graphs of about graph_ops_ ops, where no fused group is
    // pending: each launches as soon as the host has handed out its ops, so the GPU runs it
    // while the host goes through the next (one graph per stretch left the GPU idle until the
    // stretch's end: a step that reads its loss ran host and GPU one after the other). The
    // stretch's first graphs are smaller (a quarter, then half of graph_ops_): after a wait the
    // GPU has work again sooner. Before a run of a graph's size or more that no cut may split (an
    // optimizer's update of a parameter), the open graph ends whatever its own size (cut_before).
    if (between_groups && (cut_wanted(index) || (random && open_))) {
      close_segment();
      ++stretch_graphs_;
    }
    if (random) {
      // While a graph captures, the default generator is in capture mode and the op's own run
      // (before its shadow's, Executor::capture_eager) would throw: its graph opens after that
      // run (Replay::capture_eager) and draws in each replay where eager would have.
      r.segment = static_cast<int>(segments_.size());
    } else {
      open_segment();
      ++segment_ops_;
      r.segment = static_cast<int>(segments_.size()) - 1;
    }
    r.input_ptrs.clear();  // once the shadows of its inputs exist (a group's: at its launch)
    r.statics.clear();
    r.outs.assign(p.outs.size(), Out{});
    r.scalars.clear();
    for (std::size_t a = 0; a < rec.args.size() && a < 64; ++a) {
      if ((rec.scalar_mask >> a) & 1u) r.scalars.emplace_back(a, rec.args[a]);
    }
  } catch (const std::exception& e) {
    fail(concat("op ", index, " could not be captured: ", e.what()));
  }
  return r.kind;
}

at::Tensor Replay::shadow_at(std::size_t index, std::size_t k) const {
  const Input& in = inputs_[index].at(k);
  if (in.ref.producer == -2) return at::Tensor();
  if (in.ref.producer < 0) return in.outside;
  const auto it = shadows_.find(in.ref);
  HOTPATH_CHECK(it != shadows_.end(), "op ", index, " reads output ", in.ref.output, " of op ",
                in.ref.producer, ", which has no shadow");
  if (!in.saved) return it->second.tensor;
  // The shadow's memory seen as the input sees its own.
  return tensor_on(it->second.tensor.storage(), it->second.tensor.scalar_type(), in.outside.sizes(),
                   in.outside.strides(), in.outside.storage_offset());
}

std::optional<ValueRef> Replay::saved_value(const at::Tensor& t) const {
  if (!t.has_storage()) return std::nullopt;
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const auto it = by_storage_.find(storage);
  if (it == by_storage_.end()) return std::nullopt;
  // The value's own storage still (not another one made where a dead one was).
  const auto s = shadows_.find(it->second);
  if (s == shadows_.end() || s->second.real.lock().get() != storage) return std::nullopt;
  return it->second;
}

std::size_t Replay::input_at(std::size_t index, std::int32_t argument, int element) const {
  // element >= 0: that element of a list argument.
  const std::vector<Input>& ins = inputs_[index];
  int seen = 0;
  for (std::size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].argument != argument) continue;
    if (seen++ == std::max(element, 0)) return k;
  }
  HOTPATH_FAIL("op ", index, " has no tensor at argument ", argument, " element ", element);
}

at::Tensor Replay::shadow_of(std::size_t index, std::int32_t argument, int element) {
  // The input at `argument`, as a graph reads it.
  const std::size_t k = input_at(index, argument, element);
  return graph_input(index, k, inputs_[index][k].written);
}

bool Replay::moving(std::size_t index, std::size_t k) const {
  const Input& in = inputs_[index].at(k);
  if (in.ref.producer == -2) return false;
  if (in.ref.producer < 0) return in.moving;
  const auto it = shadows_.find(in.ref);
  return it != shadows_.end() && it->second.moving;
}

at::Tensor Replay::graph_input(std::size_t index, std::size_t k, bool written) {
  if (!moving(index, k)) return shadow_at(index, k);
  HOTPATH_CHECK(!written, "it writes in place a tensor that is elsewhere each iteration");
  const Input& in = inputs_[index][k];
  const at::Tensor value = shadow_at(index, k);  // the tensor itself, or a view of one
  int& s = in.ref.producer < 0 ? static_of_outside_[value.unsafeGetTensorImpl()]
                               : static_of_value_[in.ref];
  if (s == 0) {
    // The bytes from its first element to its last, laid out as it is (a slice's gaps and an
    // expanded tensor's repeats included): a refill copies that span.
    // On the iteration's own stream, not the capture's: the copy lives as long as the capture.
    c10::cuda::CUDAStreamGuard plain(
        c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(device_)));
    const at::Tensor bytes =
        at::empty({std::max<std::int64_t>(span_bytes(value), 1)}, value.options().dtype(at::kByte));
    statics_.push_back(
        tensor_on(bytes.storage(), value.scalar_type(), value.sizes(), value.strides()));
    static_filled_.push_back(-1);
    // Refreshed by a copy node of the graph being captured (this op's), before the op's work:
    // no host copy at each replay, and where the input stays put no host work at all.
    StaticNode n;
    const std::int64_t span = span_bytes(value);
    if (open_ && span > 0 && value.is_cuda() && value.get_device() == device_) {
      n.src = value.const_data_ptr();
      n.bytes = static_cast<std::size_t>(span);
      const cudaError_t e = cudaMemcpyAsync(statics_.back().data_ptr(), n.src, n.bytes,
                                            cudaMemcpyDeviceToDevice, side_.stream());
      HOTPATH_CHECK(e == cudaSuccess,
                    "capturing the copy of a moving input failed: ", cudaGetErrorString(e));
      n.node = last_captured_node(side_.stream());
      n.segment = static_cast<int>(segments_.size()) - 1;
    }
    static_nodes_.push_back(n);
    s = static_cast<int>(statics_.size());  // 1-based: 0 is "none yet"
  }
  OpRecipe::Static use;
  use.input = static_cast<std::uint32_t>(k);
  use.copy = s - 1;
  ops_[index].statics.push_back(use);
  return statics_[static_cast<std::size_t>(s - 1)];
}

void Replay::observe(std::size_t index, const OpRecord& rec, const TensorPtrs& inputs) {
  std::vector<const void*>& o = observed_.at(index);
  o.assign(rec.inputs.size(), nullptr);
  for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
    if (!rec.inputs[k].meta.defined || rec.inputs[k].ref.producer >= iter_start_) continue;
    o[k] = data_address(*inputs[k]);
    if (rec.inputs[k].written) written_.insert(o[k]);
  }
}

void Replay::keep_shadow(std::size_t index, int out, const at::Tensor& shadow,
                         const at::Tensor& real, bool fresh, bool moving) {
  if (!shadow.defined()) return;
  Shadow s;
  s.tensor = shadow;
  s.moving = moving;
  if (real.defined() && real.has_storage()) {
    s.real = real.storage().getWeakStorageImpl();
    if (fresh)
      by_storage_[real.storage().unsafeGetStorageImpl()] =
          ValueRef{static_cast<std::int64_t>(index), out};
  }
  s.op = index;
  if (fresh) {
    OpRecipe& r = ops_[index];
    Out& o = r.outs.at(static_cast<std::size_t>(out));
    o.kept = true;
    o.base = shadow.storage().mutable_data();
    o.nbytes = shadow.storage().nbytes();
    o.offset = shadow.storage_offset();
    o.meta.defined = true;
    o.meta.dtype = shadow.scalar_type();
    o.meta.device = shadow.device();
    o.meta.sizes.assign(shadow.sizes().begin(), shadow.sizes().end());
    o.meta.strides.assign(shadow.strides().begin(), shadow.strides().end());
    o.meta.storage_offset = o.offset;
    s.out = out;
  }
  shadows_[ValueRef{static_cast<std::int64_t>(index), out}] = std::move(s);
}

void Replay::capture_eager(std::size_t index, const c10::OperatorHandle& op,
                           c10::DispatchKeySet keys, torch::jit::Stack args,
                           const torch::jit::Stack& outputs) {
  if (failed()) return;
  OpRecipe& r = ops_[index];
  AddElapsed lap(cost_.shadows_ms);
  try {
    const std::size_t nret = op.schema().returns().size();
    if (r.kind == Kind::kLive) {
      // Not captured: its CUDA outputs are elsewhere in each replay (graphs read copies).
      const std::vector<at::Tensor> reals = returned_tensors(outputs, nret);
      for (std::size_t k = 0; k < reals.size(); ++k) {
        if (reals[k].defined() && reals[k].is_cuda())
          keep_shadow(index, static_cast<int>(k), reals[k], reals[k], false, true);
      }
      return;
    }
    if (r.kind == Kind::kGraph && r.segment == static_cast<int>(segments_.size())) {
      // A random op (capture_op): it has run; its graph opens for its shadow.
      open_segment();
      segments_.back().random = true;
      ++segment_ops_;
    }
    bool moves = false;  // a view of a moving value moves with it
    r.input_ptrs.clear();
    map_inputs(args, [&](std::size_t k, const at::Tensor&) {
      moves = moves || moving(index, k);
      at::Tensor t = r.kind == Kind::kGraph ? graph_input(index, k, inputs_[index][k].written)
                                            : shadow_at(index, k);
      r.input_ptrs.push_back(data_address(t));
      return t;
    });
    if (r.kind == Kind::kGraph) eager_alignment(index, op, args);
    {
      c10::cuda::CUDAStreamGuard guard(side_);
      c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
      at::AutoDispatchBelowADInplaceOrView below;
      op.redispatchBoxed(keys, &args);
    }
    const std::vector<at::Tensor> shadows = returned_tensors(args, nret);
    const std::vector<at::Tensor> reals = returned_tensors(outputs, nret);
    HOTPATH_CHECK(shadows.size() == reals.size(), "the shadow made ", shadows.size(),
                  " tensors, the op ", reals.size());
    for (std::size_t k = 0; k < shadows.size(); ++k) {
      // A new tensor (not a view, not an argument written in place): handed out on its shadow's
      // memory in a replay, so its layout must be the one the plan recorded.
      const bool fresh = r.kind == Kind::kGraph && k < r.outs.size() && reals[k].defined() &&
                         op.schema().returns()[k].alias_info() == nullptr;
      if (fresh &&
          (shadows[k].sizes() != reals[k].sizes() || shadows[k].strides() != reals[k].strides() ||
           shadows[k].scalar_type() != reals[k].scalar_type()))
        HOTPATH_FAIL("its shadow's output ", k, " has another layout than its own");
      keep_shadow(index, static_cast<int>(k), shadows[k], reals[k], fresh,
                  r.kind == Kind::kView && moves);
    }
  } catch (const std::exception& e) {
    fail(concat("op ", index, " (", full_name(op.schema().name(), op.schema().overload_name()),
                ") could not be captured: ", e.what()));
  }
}

void Replay::before_own_run(std::size_t index, const c10::OperatorHandle& op,
                            const torch::jit::Stack& args) {
  if (failed() || ops_[index].kind != Kind::kGraph) return;
  AddElapsed lap(cost_.checks_ms);
  // What goes wrong here fails the capture, never the loop's op (as in capture_op).
  try {
    torch::jit::Stack walked = args;
    map_inputs(walked, [&](std::size_t k, const at::Tensor& t) {
      if (!moving(index, k) || inputs_[index][k].written || !t.is_cuda() || t.numel() == 0)
        return t;
      ReadOnly r;
      r.index = index;
      r.k = k;
      r.op = full_name(op.schema().name(), op.schema().overload_name());
      r.input = t;
      // Fingerprinted on the GPU where the kernel is loaded, else copied (keep_bytes).
      r.before_print = keep_bytes(t, r.before, /*fingerprint=*/true);
      read_only_.push_back(std::move(r));
      return t;
    });
  } catch (const std::exception& e) {
    fail(concat("op ", index, "'s read-only inputs could not be kept: ", e.what()));
  }
}

void Replay::after_own_run(std::size_t index) {
  if (failed()) return;
  AddElapsed lap(cost_.checks_ms);
  try {
    for (auto it = read_only_.rbegin(); it != read_only_.rend() && it->index == index; ++it) {
      it->after_print = keep_bytes(it->input, it->after, it->before_print >= 0);
      it->input = at::Tensor();
    }
  } catch (const std::exception& e) {
    fail(concat("op ", index, "'s read-only inputs could not be kept: ", e.what()));
  }
}

void Replay::end_capture() {
  if (failed()) return;
  release_pool_ref();  // (a capture that opened no graph)
  try {
    close_segment();
    check_read_only();
  } catch (const std::exception& e) {
    fail(concat("the capture could not end: ", e.what()));
    return;
  }
  shadows_.clear();
  by_storage_.clear();
  inputs_.clear();
  inputs_.shrink_to_fit();
  const auto& stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_));
  pool_bytes_ = std::max<std::int64_t>(0, stats.reserved_bytes[0].current - reserved_before_);
  pool_small_bytes_ =
      std::max<std::int64_t>(0, stats.reserved_bytes[kSmallPool].current - small_before_);
  cost_.mallocs = stats.segment[0].allocated - mallocs_before_;
  capture_ms_ = ms_since(capture_began_);
  if (segments_.empty()) {
    fail("the iteration has no GPU work to capture");
    return;
  }
  ready_ = true;
  start_launcher();
}

void Replay::fail(const std::string& why) {
  if (failed()) return;
  try {
    release_pool_ref();
  } catch (const std::exception&) {
  }
  failure_ = why.empty() ? "capture failed" : why;
  ready_ = false;
  read_only_.clear();
  prints_.clear();
  prints_used_ = 0;
  if (open_) {
    open_ = false;
    try {
      c10::cuda::CUDAStreamGuard guard(side_);
      QuietEmptyGraph quiet;  // as close_segment: a failed capture's last segment may be empty
      segments_.back().graph->capture_end();
    } catch (const std::exception&) {
      // An invalidated capture: out of capture mode, and the allocator no longer routes to the
      // pool (the graph's own reset does neither for a capture that did not end).
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(side_.stream(), &status) == cudaSuccess &&
          status != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = nullptr;
        if (cudaStreamEndCapture(side_.stream(), &g) == cudaSuccess && g != nullptr)
          cudaGraphDestroy(g);
      }
      // (Each may already have happened, if the capture failed late in capture_end: a cleanup
      // that finds nothing to clean is no error of the loop's.)
      const auto dev = static_cast<c10::DeviceIndex>(device_);
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(dev, pool_);
      } catch (const std::exception&) {
      }
      try {
        c10::cuda::CUDACachingAllocator::releasePool(dev, pool_);
      } catch (const std::exception&) {
      }
      (void)cudaGetLastError();
    }
  }
  shadows_.clear();
  by_storage_.clear();
  inputs_.clear();
  records_.clear();
  segments_.clear();
  log_info(concat("hotpath: CUDA graph replay is off for a plan: ", failure_));
}

}  // namespace hotpath::detail
