#include "trace/step_detector.h"

#include <algorithm>

#include "common/hash.h"

namespace hotpath::detail {
namespace {
constexpr std::uint64_t kTokenSeed = 0x5e97e47ULL;
// Segments the search keeps: enough to find a step of kMaxSegments segments many times over.
constexpr std::size_t kMaxHistory = 256;
}  // namespace

bool StepDetector::feed(std::int64_t pos, std::uint64_t name, bool grad_enabled, bool reads_param,
                        bool writes_param, std::vector<std::int64_t>& boundaries) {
  if (!any_op_) {
    any_op_ = true;
    history_start_ = pos;
  }
  const bool anchor = grad_enabled && reads_param && (anchors_ == 0 || grad_off_since_anchor_);
  if (!grad_enabled) {
    grad_off_since_anchor_ = true;
    ++open_off_;
  }
  if (anchor) {
    ++anchors_;
    grad_off_since_anchor_ = false;
    if (open_) close_segment();
    if (locked_) {
      slot_ = (slot_ + 1) % period_;
      if (slot_ == 0) boundaries.push_back(pos);
      if (mismatches_ >= 2) {  // the loop changed: look for its step again from here
        ++losses_;
        restart(pos);
      }
    }
    if (!locked_) {
      if (starts_.size() >= kMaxHistory) {
        starts_.erase(starts_.begin());
        tokens_.erase(tokens_.begin());
        updates_.erase(updates_.begin());
      }
      starts_.push_back(pos);
      try_lock(boundaries);
    }
    open_ = true;
    open_token_ = kTokenSeed;
    open_ops_ = 0;
    open_off_ = 0;
    open_update_ = false;
  }
  open_update_ = open_update_ || (writes_param && !grad_enabled);
  if (open_ && open_ops_ < kTokenOps) {
    open_token_ = hash_combine(open_token_, name);
    ++open_ops_;
  }
  return anchor;
}

void StepDetector::close_segment() {
  open_ = false;
  open_token_ = hash_combine(open_token_, 0x0ff00000ULL + static_cast<std::uint64_t>(open_off_));
  open_token_ = hash_combine(open_token_, open_update_ ? 0x0bdULL : 0x0b0ULL);
  if (!locked_) {
    tokens_.push_back(open_token_);
    updates_.push_back(open_update_);
    return;
  }
  mismatches_ = open_token_ == step_tokens_[static_cast<std::size_t>(slot_)] ? 0 : mismatches_ + 1;
}

void StepDetector::try_lock(std::vector<std::int64_t>& boundaries) {
  // tokens_[i] belongs to the segment that started at starts_[i]; starts_.back() just started.
  const auto n = static_cast<std::int64_t>(tokens_.size());
  const bool updating = std::find(updates_.begin(), updates_.end(), true) != updates_.end();
  if (!updating && n <= kMaxSegments) return;  // an update may still come
  int found = 0;
  for (int p = 1; p <= kMaxSegments && 2 * p <= n && found == 0; ++p) {
    bool periodic = true, updates = !updating;
    for (std::int64_t k = n - p; k < n && periodic; ++k) {
      periodic = tokens_[k] == tokens_[k - p];
      updates = updates || updates_[static_cast<std::size_t>(k)];
    }
    if (periodic && updates) found = p;
  }
  if (found == 0) return;
  // The earliest segment of the periodic run starts the first iteration; what came before it
  // (a prelude) belongs to none.
  std::int64_t s = n - 2 * found;
  while (s > 0 && tokens_[s - 1] == tokens_[s - 1 + found]) --s;
  // A step seen before starts at the segment it started at then (s moves at most found - 1
  // segments on: a whole step stays before the segment just closed).
  s += known_shift(s, found);
  locked_ = true;
  period_ = found;
  mismatches_ = 0;
  step_tokens_.assign(tokens_.begin() + s, tokens_.begin() + s + found);
  history_start_ = starts_[static_cast<std::size_t>(s)];
  for (std::int64_t b = s + found; b <= n; b += found) boundaries.push_back(starts_[b]);
  slot_ = static_cast<int>((n - s) % found);
  starts_.clear();
  tokens_.clear();
  updates_.clear();
  remember();
}

int StepDetector::known_shift(std::int64_t s, int period) const {
  for (auto k = known_.rbegin(); k != known_.rend(); ++k) {
    if (static_cast<int>(k->size()) != period) continue;
    for (int r = 0; r < period; ++r) {
      bool same = true;
      for (int j = 0; j < period && same; ++j)
        same = tokens_[static_cast<std::size_t>(s + (r + j) % period)] ==
               (*k)[static_cast<std::size_t>(j)];
      if (same) return r;
    }
  }
  return 0;
}

void StepDetector::remember() {
  for (const Step& k : known_)
    if (k == step_tokens_) return;
  if (known_.size() >= kKnownSteps) known_.erase(known_.begin());
  known_.push_back(step_tokens_);
}

void StepDetector::restart(std::int64_t at) {
  starts_.clear();
  tokens_.clear();
  updates_.clear();
  locked_ = false;
  period_ = 0;
  slot_ = 0;
  mismatches_ = 0;
  history_start_ = at;
  open_ = false;
}

}  // namespace hotpath::detail
