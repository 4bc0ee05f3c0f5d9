// Capturing hotpath's own kernels for replay (exec/replay.h): a fused group's launch, or a batch's
// joint launch through the kernel's multi entry, becomes one kernel node whose parameters point
// at the shadows of its members' inputs and outputs; its scalars are rewritten at each replay.
// Where a kernel whose path depends on where its data lies (rms_norm's) reads a static copy, the
// copy notes the alignment a replay must find its input at: for hotpath's kernels and for eager's.
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstring>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "driver/cuda_driver.h"
#include "exec/plan.h"
#include "exec/replay.h"

namespace hotpath::detail {

void Replay::shadow_members(const Launch& l) {
  const PlanGroup& g = *l.group;
  HOTPATH_CHECK(g.module != nullptr, "group ", g.name, " has no kernel of its own");
  const int seg = static_cast<int>(segments_.size()) - 1;
  HOTPATH_CHECK(open_, "no segment is being captured");
  for (std::size_t m = 0; m < l.members.size(); ++m) {
    const std::size_t idx = l.indices[m];
    const PlanOp& p = *l.members[m];
    OpRecipe& r = ops_[idx];
    HOTPATH_CHECK(r.kind == Kind::kGraph && r.segment == seg, "group ", g.name,
                  " has members on both sides of an op the host waits on");
    r.scalars.clear();  // its scalars reach the kernel's node at each replay
    r.input_ptrs.clear();
    r.statics.clear();
    for (std::size_t k = 0; k < inputs_[idx].size(); ++k)
      r.input_ptrs.push_back(data_address(graph_input(idx, k, inputs_[idx][k].written)));
    for (std::size_t k = 0; k < p.outs.size(); ++k) {
      const at::Tensor real = k < l.outputs[m].size() ? l.outputs[m][k] : at::Tensor();
      if (p.out_alias >= 0) {
        keep_shadow(idx, static_cast<int>(k), shadow_of(idx, p.out_alias, -1), real, false);
        continue;
      }
      const TensorMeta& meta = p.outs[k];
      if (!meta.defined) continue;
      const at::Tensor s = at::empty_strided(
          meta.sizes, meta.strides, at::TensorOptions().dtype(meta.dtype).device(meta.device));
      keep_shadow(idx, static_cast<int>(k), s, real, true);
    }
  }
}

void Replay::launch_words(const Launch& l, std::uint64_t* w, std::size_t first, Node& n) {
  const PlanGroup& g = *l.group;
  const auto& args = g.spec.args;
  int vector_ok = l.vector_ok;
  const std::size_t group = n.members.size();
  n.members.push_back(l.indices);
  const int node = static_cast<int>(segments_.back().nodes.size());  // n is pushed after this
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    const std::size_t idx = l.indices.at(static_cast<std::size_t>(a.member));
    if (a.kind == KernelArg::Kind::Scalar) {
      std::memcpy(&w[i], &l.scalars[i], sizeof(float));
      n.scalars.emplace_back(first + i, idx, static_cast<std::size_t>(a.argument));
      continue;
    }
    const at::Tensor t =
        a.output >= 0 ? shadows_.at(ValueRef{static_cast<std::int64_t>(idx), a.output}).tensor
                      : shadow_of(idx, a.argument, a.element);
    if (a.output < 0 && a.align_bytes > 0)
      require_alignment(idx, input_at(idx, a.argument, a.element), a.align_bytes);
    void* ptr = t.defined() ? t.data_ptr() : nullptr;
    if (ptr != nullptr && a.linear && g.spec.vec_bytes > 0 &&
        reinterpret_cast<std::uintptr_t>(ptr) % static_cast<std::uintptr_t>(g.spec.vec_bytes) != 0)
      vector_ok = 0;
    std::memcpy(&w[i], &ptr, sizeof ptr);
    Out* out = a.output >= 0 && ptr != nullptr &&
                       l.members.at(static_cast<std::size_t>(a.member))->out_alias < 0
                   ? &ops_[idx].outs.at(static_cast<std::size_t>(a.output))
                   : nullptr;
    if (a.optional && out != nullptr && out->opt_node < 0) {
      out->opt_node = node;
      out->opt_slot = static_cast<int>(n.optional.size());
      Node::Optional o;
      o.word = first + i;
      o.op = idx;
      o.group = group;
      o.shadow = ptr;
      n.optional.push_back(std::move(o));
    }
  }
  if (g.spec.index64)
    std::memcpy(&w[args.size()], &l.numel64, sizeof l.numel64);
  else
    std::memcpy(&w[args.size()], &l.numel32, sizeof l.numel32);
  std::memcpy(&w[args.size() + 1], &vector_ok, sizeof vector_ok);
  n.launches.push_back(l.launches);
  log_debug(concat("hotpath: replay node for group ", g.name, ": ", l.blocks, " blocks, vector ",
                   vector_ok, " (the plan's launch: ", l.vector_ok, "), ", n.optional.size(),
                   " value(s) it writes only where held"));
}

void Replay::capture_launch(const Launch& l) {
  if (failed()) return;
  AddElapsed lap(cost_.shadows_ms);
  const PlanGroup& g = *l.group;
  try {
    c10::cuda::CUDAStreamGuard guard(side_);
    c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
    at::AutoDispatchBelowADInplaceOrView below;
    shadow_members(l);
    Node n;
    n.kernel = g.module;
    n.blocks = l.blocks;
    n.block = static_cast<unsigned>(g.spec.block);
    n.workspace = l.workspace;
    const std::size_t nargs = g.spec.args.size();
    n.words.assign(nargs + 4, 0);
    launch_words(l, n.words.data(), 0, n);
    float* partial = l.workspace.defined() ? l.workspace.data_ptr<float>() : nullptr;
    unsigned* done =
        partial != nullptr ? reinterpret_cast<unsigned*>(partial + g.spec.counters_at) : nullptr;
    std::memcpy(&n.words[nargs + 2], &partial, sizeof partial);
    std::memcpy(&n.words[nargs + 3], &done, sizeof done);
    std::vector<void*> params(n.words.size());
    for (std::size_t j = 0; j < params.size(); ++j) params[j] = &n.words[j];
    n.kernel->launch(n.blocks, n.block, side_.stream(), params.data());
    n.node = last_captured_node(side_.stream());
    segments_.back().nodes.push_back(std::move(n));
  } catch (const std::exception& e) {
    fail(concat("the launch of group ", g.name, " could not be captured: ", e.what()));
  }
}

void Replay::capture_batch(const std::vector<Launch>& launches) {
  if (failed() || launches.empty()) return;
  AddElapsed lap(cost_.shadows_ms);
  const PlanGroup& g = *launches.front().group;
  try {
    c10::cuda::CUDAStreamGuard guard(side_);
    c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
    at::AutoDispatchBelowADInplaceOrView below;
    const KernelSpec& spec = g.spec;
    HOTPATH_CHECK(g.module != nullptr && g.module->has_multi(), "group ", g.name,
                  " has no multi entry of its own");
    HOTPATH_CHECK(launches.size() <= static_cast<std::size_t>(spec.multi_segments), "a batch of ",
                  launches.size(), " groups for ", spec.multi_segments, " segments");
    // The multi entry's one parameter, as Executor::run_batch packs it: per group a segment of
    // multi_segment_bytes (its launch's words, then its first block and its blocks), then the
    // count of segments.
    const std::size_t seg_words = multi_segment_bytes(spec) / 8;
    Node n;
    n.kernel = g.module;
    n.multi = true;
    n.block = static_cast<unsigned>(spec.block);
    n.words.assign(seg_words * static_cast<std::size_t>(spec.multi_segments) + 1, 0);
    unsigned first_block = 0;
    for (std::size_t k = 0; k < launches.size(); ++k) {
      const Launch& l = launches[k];
      HOTPATH_CHECK(l.group->module == g.module, "group ", l.group->name,
                    " does not share its batch's kernel");
      shadow_members(l);
      std::uint64_t* w = n.words.data() + k * seg_words;
      launch_words(l, w, k * seg_words, n);
      const std::size_t nargs = spec.args.size();
      std::memcpy(&w[nargs + 2], &first_block, sizeof first_block);
      std::memcpy(&w[nargs + 3], &l.blocks, sizeof l.blocks);
      first_block += l.blocks;
    }
    const int count = static_cast<int>(launches.size());
    std::memcpy(&n.words.back(), &count, sizeof count);
    n.blocks = first_block;
    void* params[] = {n.words.data()};
    n.kernel->launch(n.blocks, n.block, side_.stream(), params, /*multi=*/true);
    n.node = last_captured_node(side_.stream());
    segments_.back().nodes.push_back(std::move(n));
  } catch (const std::exception& e) {
    fail(concat("the batched launch of group ", g.name, " and ", launches.size() - 1,
                " more could not be captured: ", e.what()));
  }
}

void Replay::require_alignment(std::size_t index, std::size_t k, int bytes) {
  for (OpRecipe::Static& st : ops_[index].statics)
    if (st.input == k) st.align_bytes = std::max(st.align_bytes, bytes);
}

void Replay::eager_alignment(std::size_t index, const c10::OperatorHandle& op,
                             const torch::jit::Stack& args) {
  // An eager rms_norm captured reading a static copy (aligned) took ATen's vectorized path where
  // it could: a replay whose input is elsewhere must find it aligned too.
  if (op.schema().name() != "aten::_fused_rms_norm" || args.size() < 3 || !args[1].isIntList())
    return;
  std::int64_t cols = 1;
  for (const std::int64_t c : args[1].toIntVector()) cols *= c;
  for (const std::int32_t a : {0, 2}) {
    if (!args[static_cast<std::size_t>(a)].isTensor()) continue;
    const at::Tensor& t = args[static_cast<std::size_t>(a)].toTensor();
    const int bytes = rms_norm_vector_align(t.scalar_type(), cols, t.is_contiguous());
    if (bytes > 0) require_alignment(index, input_at(index, a, -1), bytes);
  }
}

}  // namespace hotpath::detail
