#include "exec/replay.h"

#include <ATen/EmptyTensor.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "driver/cuda_driver.h"
#include "exec/output_slot.h"
#include "exec/plan.h"
#include "exec/replay_launcher.h"

namespace hotpath::detail {
namespace {

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isDouble() && b.isDouble()) {
    const double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isBool() && b.isBool()) return a.toBool() == b.toBool();
  if (a.isNone() && b.isNone()) return true;
  if (a.isScalar() || b.isScalar() || a.isNone() || b.isNone()) return false;
  return a == b;
}

// Calls f on each tensor `args` hold, in a list too.
template <class F>
void for_each_tensor(c10::ArrayRef<c10::IValue> args, F&& f) {
  for (const c10::IValue& a : args) {
    if (a.isTensor()) f(a.toTensor());
    if (a.isTensorList())
      for (const c10::IValue& e : a.toListRef())
        if (e.isTensor()) f(e.toTensor());
  }
}

std::string value_text(const c10::IValue& v) {
  if (v.isDouble()) return std::to_string(v.toDouble());
  if (v.isInt()) return std::to_string(v.toInt());
  if (v.isBool()) return v.toBool() ? "true" : "false";
  return v.tagKind();
}

}  // namespace

// The tensors among an op's returns, in order (a list's in order).
std::vector<at::Tensor> returned_tensors(const torch::jit::Stack& stack, std::size_t nret) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& r : torch::jit::last(stack, nret)) {
    if (r.isTensor()) {
      out.push_back(r.toTensor());
    } else if (r.isList()) {
      for (const c10::IValue& e : r.toListRef())
        if (e.isTensor()) out.push_back(e.toTensor());
    }
  }
  return out;
}

std::int64_t span_bytes(const at::TensorBase& t) {
  return static_cast<std::int64_t>(at::detail::computeStorageNbytes(
      t.sizes(), t.strides(), static_cast<std::size_t>(t.element_size())));
}

void copy_bytes(void* dst, const void* src, std::int64_t n, int device) {
  if (n == 0) return;
  // A copy of raw bytes on the current stream, as ATen's copy_ of two byte tensors would make it,
  // without building them and a TensorIterator (a replay refreshes its static inputs with these).
  const c10::cuda::CUDAStream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
  const cudaError_t e = cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n),
                                        cudaMemcpyDeviceToDevice, stream.stream());
  HOTPATH_CHECK(e == cudaSuccess, "a copy of ", n,
                " bytes on the GPU failed: ", cudaGetErrorString(e));
}

int count_refs(const at::Tensor& t, c10::ArrayRef<c10::IValue> args) {
  int n = 0;
  for_each_tensor(args, [&](const at::Tensor& a) {
    if (a.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) ++n;
  });
  return n;
}

const void* data_address(const at::TensorBase& t) {
  return t.defined() && t.has_storage() ? t.const_data_ptr() : nullptr;
}

void prepare_replay_streams(int device) {
  const auto t0 = std::chrono::steady_clock::now();
  (void)c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device));
  log_debug(
      concat("hotpath: device ", device, "'s pool of streams ready in ", ms_text(ms_since(t0))));
}

Replay::Replay(int device, std::int64_t epoch, std::size_t ops, int graph_ops, bool launcher)
    : device_(device),
      epoch_(epoch),
      side_(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device))),
      ops_(ops),
      graph_ops_(graph_ops),
      use_launcher_(launcher) {}

Replay::~Replay() {
  try {
    release();
  } catch (const std::exception& e) {
    log_warn(concat("hotpath: letting go of a plan's CUDA graphs failed: ", e.what()));
  }
}

void Replay::grow_pool(std::int64_t bytes, std::int64_t small_bytes) {
  // The caching allocator's small blocks (1 MiB and less) come from 2 MiB segments of their own,
  // two 1 MiB blocks to a segment.
  constexpr std::int64_t kSmallSegment = std::int64_t{2} << 20;
  constexpr std::size_t kSmallBlock = std::size_t{1} << 20;
  const auto dev = static_cast<c10::DeviceIndex>(device_);
  const c10::cuda::CUDAGuard device(dev);
  const cudaStream_t side = side_.stream();
  c10::cuda::CUDACachingAllocator::CUDAAllocator* allocator =
      c10::cuda::CUDACachingAllocator::get();
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(
      dev, pool_, [side](cudaStream_t s) { return s == side; });
  pool_ref_ = true;
  small_bytes = std::clamp<std::int64_t>(small_bytes, 0, bytes);
  const std::int64_t segments = (small_bytes + kSmallSegment - 1) / kSmallSegment;
  std::vector<void*> blocks;
  try {
    if (bytes - small_bytes > 0)
      blocks.push_back(
          allocator->raw_alloc_with_stream(static_cast<std::size_t>(bytes - small_bytes), side));
    for (std::int64_t b = 0; b < 2 * segments; ++b)
      blocks.push_back(allocator->raw_alloc_with_stream(kSmallBlock, side));
  } catch (const std::exception& e) {
    // Out of memory, say: the capture grows the pool as it goes, as it would have.
    log_debug(concat("hotpath: a capture's pool could not be grown to ", bytes >> 20,
                     " MiB first: ", e.what()));
  }
  for (void* b : blocks) allocator->raw_delete(b);
  c10::cuda::CUDACachingAllocator::endAllocateToPool(dev, pool_);
}

void Replay::release_pool_ref() {
  if (!pool_ref_) return;
  pool_ref_ = false;
  c10::cuda::CUDACachingAllocator::releasePool(static_cast<c10::DeviceIndex>(device_), pool_);
}

void Replay::release() {
  launcher_.reset();  // issues what it was handed, then ends its thread
  premade_.clear();
  in_flight_.clear();
  release_pool_ref();
  rescue(carried_);  // everything handed out is due
  for (std::vector<Handed>& h : handed_) rescue(h);
  records_.clear();
  refills_.clear();
  shadows_.clear();
  segments_.clear();  // the copy nodes go with their graphs
  static_nodes_.clear();
  statics_.clear();
}

// ---- Replay

at::Tensor Replay::placeholder(std::size_t index, std::size_t k) const {
  const Out& o = ops_[index].outs[k];
  const c10::Device dev(c10::kCUDA, static_cast<c10::DeviceIndex>(device_));
  c10::Storage storage(c10::Storage::use_byte_size_t(), o.nbytes, c10::DataPtr(o.base, dev),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return tensor_on(std::move(storage), o.meta.dtype, o.meta.sizes, o.meta.strides, o.offset);
}

void Replay::begin_replay(std::int64_t iter_start) {
  iter_start_ = iter_start;
  ++iteration_;
  // What the last replay handed out is due at this one's first launch.
  for (std::size_t b = handed_next_; b < handed_.size(); ++b) {
    carried_.insert(carried_.end(), std::make_move_iterator(handed_[b].begin()),
                    std::make_move_iterator(handed_[b].end()));
    handed_[b].clear();
  }
  handed_.resize(segments_.size() + 1);
  handed_next_ = 0;
  records_.clear();
  refills_.clear();
  moved_input_.reset();
  handed_any_ = false;
}

Replay::Step Replay::replay_op(std::size_t index, const PlanOp& p, const TensorPtrs& inputs,
                               c10::ArrayRef<ValueRef> refs, c10::ArrayRef<std::uint8_t> written,
                               const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                               torch::jit::Stack* stack, std::string& why) {
  const OpRecipe& r = ops_[index];
  if (r.kind == Kind::kView) return Step::kEager;
  if (r.kind == Kind::kLive) {
    launch_pending();
    settle();  // the op runs on the stream after the graphs (and the host waits on it)
    return Step::kEager;
  }
  // The ops before this one were the last of their graph (a stretch cut in graphs): it launches.
  if (!records_.empty() && ops_[records_.front().index].segment != r.segment) launch_pending();
  if (inputs.size() != r.input_ptrs.size()) {
    why = concat(inputs.size(), " tensor inputs where the captured iteration had ",
                 r.input_ptrs.size());
    return Step::kLeave;
  }
  for (const OpRecipe::Static& use : r.statics) {
    const std::size_t k = use.input;
    const auto sk = static_cast<std::size_t>(use.copy);
    if (use.align_bytes > 0 && reinterpret_cast<std::uintptr_t>(data_address(*inputs[k])) %
                                       static_cast<std::uintptr_t>(use.align_bytes) !=
                                   0) {
      // Eager's kernel takes another path here than the captured one did on the aligned copy.
      why = concat("input ", k, " is at ", data_address(*inputs[k]), ", not aligned to ",
                   use.align_bytes,
                   " bytes as the copy the graph reads is (eager's kernel takes "
                   "another path for it)");
      return Step::kLeave;
    }
    if (static_filled_[sk] == iteration_) continue;
    static_filled_[sk] = iteration_;
    StaticNode& n = static_nodes_[sk];
    if (n.node == nullptr) {
      refills_.emplace_back(use.copy, at::Tensor(*inputs[k]));  // copied in at launch
      continue;
    }
    // Its graph copies it in; where it moved, from there on (the deferred call holds the tensor
    // until the graph has launched).
    const void* src = data_address(*inputs[k]);
    if (src == n.src) continue;
    const cudaError_t e = cudaGraphExecMemcpyNodeSetParams1D(
        segments_[static_cast<std::size_t>(n.segment)].graph->raw_cuda_graph_exec(),
        static_cast<cudaGraphNode_t>(n.node), statics_[sk].data_ptr(), src, n.bytes,
        cudaMemcpyDeviceToDevice);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      why = concat("its graph's copy of input ", k, " could not be pointed at its new address (",
                   cudaGetErrorString(e), ")");
      return Step::kLeave;
    }
    n.src = src;
    ++repointed_;
  }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (std::any_of(r.statics.begin(), r.statics.end(),
                    [&](const OpRecipe::Static& e) { return e.input == k; }))
      continue;
    if (data_address(*inputs[k]) != r.input_ptrs[k]) {
      const ValueRef ref = k < refs.size() ? refs[k] : ValueRef{};
      const bool outside = ref.producer < iter_start_;
      if (outside && k < written.size() && written[k] == 0) moved_input_ = std::make_pair(index, k);
      why = concat("input ", k, " (",
                   outside ? std::string("from outside the iteration")
                           : concat("output ", ref.output, " of op ", ref.producer - iter_start_),
                   ") is at ", data_address(*inputs[k]), ", not at ", r.input_ptrs[k],
                   " where the captured iteration's was (a graph reads its inputs where they "
                   "were)");
      return Step::kLeave;
    }
  }
  const std::size_t nargs = op.schema().arguments().size();
  const auto args = torch::jit::last(*stack, nargs);
  for (const auto& [a, v] : r.scalars) {
    if (a >= args.size() || !same_value(args[a], v)) {
      why = concat("scalar argument ", a, " is ",
                   a < args.size() ? value_text(args[a]) : std::string("missing"),
                   " where the captured iteration's was ", value_text(v));
      return Step::kLeave;
    }
  }
  if (p.out_alias < 0) {
    for (std::size_t k = 0; k < p.outs.size(); ++k) {
      if (p.outs[k].defined && (k >= r.outs.size() || !r.outs[k].kept)) {
        why = concat("its output ", k, " had no tensor in the captured iteration");
        return Step::kLeave;
      }
    }
  }
  handed_any_ = true;
  records_.push_back(Record{index, op, keys, {}});
  Record& d = records_.back();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(nargs); it != stack->end(); ++it)
    d.args.push_back(std::move(*it));
  torch::jit::drop(*stack, nargs);
  if (p.out_alias >= 0) {
    stack->push_back(d.args[static_cast<std::size_t>(p.out_alias)]);
    return Step::kHandled;
  }
  for (std::size_t k = 0; k < p.outs.size(); ++k) {
    if (!p.outs[k].defined) {
      stack->emplace_back(at::Tensor());
      continue;
    }
    at::Tensor t = take_placeholder(index, k);
    if (r.outs[k].opt_node >= 0) {
      Node::Optional& o = segments_[static_cast<std::size_t>(r.segment)]
                              .nodes[static_cast<std::size_t>(r.outs[k].opt_node)]
                              .optional[static_cast<std::size_t>(r.outs[k].opt_slot)];
      o.handed = true;
      o.tensor = c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr());
      o.storage = t.storage().getWeakStorageImpl();
    }
    const int released = r.outs[k].released_after;
    handed_[released >= 0 ? static_cast<std::size_t>(released) + 1 : segments_.size()].push_back(
        t.storage().getWeakStorageImpl());
    stack->push_back(std::move(t));
  }
  return Step::kHandled;
}

void Replay::rescue(int segment) {
  rescue(carried_);
  for (; handed_next_ < handed_.size() && handed_next_ <= static_cast<std::size_t>(segment);
       ++handed_next_)
    rescue(handed_[handed_next_]);
}

void Replay::rescue(std::vector<Handed>& due) {
  const c10::Device dev(c10::kCUDA, static_cast<c10::DeviceIndex>(device_));
  bool settled = false;
  for (const Handed& h : due) {
    c10::intrusive_ptr<c10::StorageImpl> s = h.lock();
    if (s && !settled && !in_flight_.empty()) {
      // The copy goes on the stream after the graph that made the value, and a launch still in
      // flight may be what holds it (its deferred calls): settled first, then asked again.
      s.reset();
      settle();
      settled = true;
      s = h.lock();
    }
    if (!s) continue;
    // The program holds it where a launch would overwrite it: its storage gets a copy.
    const auto n = static_cast<std::int64_t>(s->nbytes());
    if (n > 0) {
      c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
      const at::Tensor copy = at::empty({n}, at::TensorOptions().dtype(at::kByte).device(dev));
      copy_bytes(copy.data_ptr(), s->data(), n, device_);
      s->set_data_ptr_noswap(copy.storage().set_data_ptr(c10::DataPtr(nullptr, dev)));
    }
    ++rescued_;
  }
  due.clear();
}

int Replay::static_nodes() const {
  return static_cast<int>(std::count_if(static_nodes_.begin(), static_nodes_.end(),
                                        [](const StaticNode& n) { return n.node != nullptr; }));
}

const Replay::Record* Replay::deferred(std::size_t index) const {
  const auto it = std::lower_bound(records_.begin(), records_.end(), index,
                                   [](const Record& r, std::size_t i) { return r.index < i; });
  return it != records_.end() && it->index == index ? &*it : nullptr;
}

Replay::Held Replay::held(const at::Tensor& t) const {
  Held h;
  std::vector<const c10::TensorImpl*> views;
  auto count = [&](const std::vector<Record>& records) {
    for (const Record& d : records) {
      for_each_tensor(d.args, [&](const at::Tensor& a) {
        if (a.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
          ++h.references;
        } else if (a.defined() && a.is_view() &&
                   a._base().unsafeGetTensorImpl() == t.unsafeGetTensorImpl() &&
                   std::find(views.begin(), views.end(), a.unsafeGetTensorImpl()) == views.end()) {
          views.push_back(a.unsafeGetTensorImpl());
        }
      });
    }
  };
  count(records_);
  // The calls of segments handed to the launcher hold theirs until it has issued them.
  for (const InFlight& f : in_flight_) count(f.records);
  h.views = static_cast<int>(views.size());
  return h;
}

void Replay::end_replay() {
  launch_pending();
  // The iteration's work is issued when its last op returns, as the loop's own launches would be:
  // the loop may synchronise the device, or record an event, outside any op.
  settle();
  ++replayed_;
  premake();  // after the wait: the loop's thread goes on while the launcher's makes them
}

void Replay::leave() {
  settle();
  refills_.clear();
  if (records_.empty()) return;
  rescue(ops_[records_.front().index].segment);
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
  at::AutoDispatchBelowADInplaceOrView below;
  for (Record& d : records_) {
    torch::jit::Stack s(d.args.begin(), d.args.end());
    d.op.redispatchBoxed(d.keys, &s);
    const OpRecipe& r = ops_[d.index];
    const std::vector<at::Tensor> outs = returned_tensors(s, d.op.schema().returns().size());
    for (std::size_t k = 0; k < outs.size() && k < r.outs.size(); ++k) {
      if (r.outs[k].kept && outs[k].defined()) placeholder(d.index, k).copy_(outs[k]);
    }
  }
  records_.clear();
}

}  // namespace hotpath::detail
