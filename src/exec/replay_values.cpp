#include "exec/replay_values.h"

namespace hotpath::detail {

void ReplayValues::begin(std::int64_t iter_start) {
  iter_start_ = iter_start;
  latest_.clear();
  outside_.clear();
  keep_.clear();
}

void ReplayValues::returned(std::size_t index, c10::ArrayRef<const at::TensorBase*> outputs) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const at::TensorBase* t = outputs[o];
    if (t == nullptr || !t->defined()) continue;
    const ValueRef ref{static_cast<std::int64_t>(index), static_cast<std::int32_t>(o)};
    const auto [it, added] = latest_.emplace(t->unsafeGetTensorImpl(), ref);
    if (added) {
      if (outside_.find(t->unsafeGetTensorImpl()) == outside_.end()) keep(*t);
    } else {
      it->second = ref;  // written in place (or returned as it came): its producer now
    }
  }
}

bool ReplayValues::would_match(ValueRef want, const at::TensorBase& t) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const auto it = latest_.find(impl);
  if (want.producer >= 0) return it != latest_.end() && it->second == want;
  if (it != latest_.end()) return false;  // an output of the iteration, not a value from outside
  // Numbered in the order the iteration first reads them: a new one has the next number.
  const std::int64_t k = -want.producer - 1;
  const auto seen = outside_.find(impl);
  return seen != outside_.end() ? seen->second == k
                                : k == static_cast<std::int64_t>(outside_.size());
}

bool ReplayValues::matches(ValueRef want, const at::TensorBase& t, ValueRef& got) {
  if (!would_match(want, t)) return false;
  if (want.producer >= 0) {
    got = ValueRef{iter_start_ + want.producer, want.output};
    return true;
  }
  const std::int64_t k = -want.producer - 1;
  if (outside_.emplace(t.unsafeGetTensorImpl(), k).second) keep(t);
  got = ValueRef{iter_start_ - 1 - k, 0};
  return true;
}

}  // namespace hotpath::detail
