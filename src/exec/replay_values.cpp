#include "exec/replay_values.h"

namespace hotpath::detail {

std::vector<ReplayValues::Kept> ReplayValues::begin(std::int64_t iter_start) {
  iter_start_ = iter_start;
  values_.clear();
  outside_count_ = 0;
  std::vector<Kept> last;
  last.reserve(keep_.size());
  last.swap(keep_);
  return last;
}

void ReplayValues::returned(std::size_t index, c10::ArrayRef<const at::TensorBase*> outputs,
                            bool trusted) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const at::TensorBase* t = outputs[o];
    if (t == nullptr || !t->defined()) continue;
    const auto [it, added] = values_.emplace(t->unsafeGetTensorImpl(), Entry{});
    if (added) keep_.emplace_back(t->getIntrusivePtr());
    // Written in place (or returned as it came): its producer now.
    it->second.latest = ValueRef{static_cast<std::int64_t>(index), static_cast<std::int32_t>(o)};
    it->second.returned = true;
    it->second.trusted = trusted;
  }
}

void ReplayValues::written(const at::TensorBase& t) {
  const auto it = values_.find(t.unsafeGetTensorImpl());
  if (it != values_.end()) it->second.trusted = false;
}

bool ReplayValues::would_match(ValueRef want, const at::TensorBase& t) const {
  const auto it = values_.find(t.unsafeGetTensorImpl());
  const Entry* e = it != values_.end() ? &it->second : nullptr;
  if (want.producer >= 0) return e != nullptr && e->returned && e->latest == want;
  if (e != nullptr && e->returned) return false;  // an output of the iteration, not from outside
  // Numbered in the order the iteration first reads them: a new one has the next number.
  const std::int64_t k = -want.producer - 1;
  return e != nullptr && e->outside >= 0 ? e->outside == k : k == outside_count_;
}

bool ReplayValues::matches(ValueRef want, const at::TensorBase& t, ValueRef& got, bool* trusted) {
  if (trusted != nullptr) *trusted = false;
  if (want.producer >= 0) {
    const auto it = values_.find(t.unsafeGetTensorImpl());
    if (it == values_.end() || !it->second.returned || !(it->second.latest == want)) return false;
    if (trusted != nullptr) *trusted = it->second.trusted;
    got = ValueRef{iter_start_ + want.producer, want.output};
    return true;
  }
  const std::int64_t k = -want.producer - 1;
  const auto [it, added] = values_.emplace(t.unsafeGetTensorImpl(), Entry{});
  Entry& e = it->second;
  if (e.returned || (e.outside >= 0 ? e.outside != k : k != outside_count_)) {
    if (added) values_.erase(it);  // nothing noted for a tensor that did not match
    return false;
  }
  if (e.outside < 0) {
    e.outside = k;
    ++outside_count_;
  }
  if (added) keep_.emplace_back(t.getIntrusivePtr());
  got = ValueRef{iter_start_ - 1 - k, 0};
  return true;
}

}  // namespace hotpath::detail
