// Config::verify: every fused launch checked against eager on the same inputs (outputs poisoned
// first), the error per group kept for stats() and the first few logged.
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
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "exec/executor.h"

namespace hotpath::detail {

void Executor::prepare_verify(const PlanGroup& g, LaunchArgs& l) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
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
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
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

}  // namespace hotpath::detail
