#include "trace/period_detector.h"

#include <algorithm>
#include <utility>

namespace hotpath::detail {
namespace {
constexpr std::size_t kPositionsPerKey = 16;
constexpr std::size_t kMaxHypotheses = 512;
constexpr std::uint32_t kWindowMask = 0x3u;  // the last two iterations
}  // namespace

PeriodDetector::PeriodDetector(std::int64_t max_period, std::int64_t start,
                               std::vector<Phase> known)
    : max_period_(std::max<std::int64_t>(1, max_period)), h0_(start), known_(std::move(known)) {}

bool PeriodDetector::equal_ranges(std::int64_t a, std::int64_t b, std::int64_t n) const {
  for (std::int64_t t = 0; t < n; ++t) {
    if (key_at(a + t) != key_at(b + t)) return false;
  }
  return true;
}

void PeriodDetector::trim(std::int64_t keep) {
  const auto size = static_cast<std::int64_t>(keys_.size());
  if (size <= keep) return;
  const std::int64_t drop = size - keep;
  keys_.erase(keys_.begin(), keys_.begin() + drop);
  names_.erase(names_.begin(), names_.begin() + drop);
  h0_ += drop;
  last_positions_.clear();  // positions before h0_ would be unusable; rebuilt as keys repeat
}

void PeriodDetector::restart(std::int64_t at) {
  keys_.clear();
  names_.clear();
  h0_ = at;
  last_positions_.clear();
  hypotheses_.clear();
  locked_ = false;
  period_ = 0;
  recent_bad_ = 0;
}

void PeriodDetector::boundary(std::int64_t b, std::vector<std::int64_t>& boundaries) {
  boundaries.push_back(b);
  const bool bad = b - last_boundary_ != period_;
  recent_bad_ = ((recent_bad_ << 1) | (bad ? 1u : 0u)) & kWindowMask;
  last_boundary_ = b;
}

void PeriodDetector::feed(std::int64_t pos, std::uint64_t key, std::uint64_t name,
                          std::vector<std::int64_t>& boundaries) {
  keys_.push_back(key);
  names_.push_back(name);
  if (locked_) {
    const auto a = static_cast<std::int64_t>(anchor_.size());
    const std::int64_t s = pos - a + 1;  // where an iteration would start if the anchor ends here
    bool anchored = s - last_boundary_ >= (period_ + 1) / 2 && s >= h0_;
    for (std::int64_t t = 0; anchored && t < a; ++t) anchored = name_at(s + t) == anchor_[t];
    if (anchored) {
      boundary(s, boundaries);
    } else if (pos + 1 - last_boundary_ >= 4 * period_) {
      boundary(pos + 1, boundaries);
    } else {
      return;
    }
    if ((recent_bad_ & 0x3u) == 0x3u) {
      banned_.insert(period_);
      ++losses_;
      restart(pos + 1);
      return;
    }
    if (static_cast<std::int64_t>(keys_.size()) > 4 * period_) trim(2 * period_);
    return;
  }

  // Search: drop hypotheses this op contradicts.
  hypotheses_.erase(std::remove_if(hypotheses_.begin(), hypotheses_.end(),
                                   [&](const Hypothesis& h) { return key_at(pos - h.p) != key; }),
                    hypotheses_.end());
  auto& seen = last_positions_[key];
  for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
    const std::int64_t p = pos - *it;
    if (*it < h0_ || p > max_period_) break;
    if (hypotheses_.size() >= kMaxHypotheses) break;
    if (banned_.count(p)) continue;
    const bool active = std::any_of(hypotheses_.begin(), hypotheses_.end(),
                                    [&](const Hypothesis& h) { return h.p == p; });
    if (!active) hypotheses_.push_back({p, pos});
  }
  seen.push_back(pos);
  if (seen.size() > kPositionsPerKey) seen.erase(seen.begin());

  const Hypothesis* best = nullptr;
  for (const auto& h : hypotheses_) {
    if (pos - h.since + 1 >= 2 * h.p && (!best || h.p < best->p)) best = &h;
  }
  if (best) {
    lock(best->p, pos, boundaries);
    return;
  }
  if (static_cast<std::int64_t>(keys_.size()) > 4 * max_period_) trim(2 * max_period_);
}

std::int64_t PeriodDetector::choose_phase(std::int64_t p, std::int64_t pos) const {
  const std::int64_t w = pos - p + 1;  // the last whole period is [w, pos]
  const std::int64_t known = known_rotation(p, w);
  if (known >= 0) return w + known;
  std::int64_t best_r = 0, best_len = -1;
  // The first op of the history that occurs in the period anchors the phase.
  for (std::int64_t q = h0_; q <= w && best_len < 0 && q < h0_ + p; ++q) {
    for (std::int64_t r = 0; r < p; ++r) {
      if (key_at(w + r) != key_at(q)) continue;
      std::int64_t len = 0;
      while (len < p && q + len <= pos && key_at(q + len) == key_at(w + (r + len) % p)) ++len;
      if (len > best_len) {
        best_len = len;
        best_r = r;
      }
    }
  }
  return w + best_r;
}

std::int64_t PeriodDetector::known_rotation(std::int64_t p, std::int64_t w) const {
  for (auto k = known_.rbegin(); k != known_.rend(); ++k) {
    if (k->period != p) continue;
    const auto n = static_cast<std::int64_t>(k->first_keys.size());
    for (std::int64_t r = 0; r < p; ++r) {
      bool same = true;
      for (std::int64_t t = 0; t < n && same; ++t)
        same = key_at(w + (r + t) % p) == k->first_keys[static_cast<std::size_t>(t)];
      if (same) return r;
    }
  }
  return -1;
}

void PeriodDetector::remember(std::int64_t p, std::int64_t pos, std::int64_t phase) {
  // The keys from the phase on, read around the last whole period [w, pos].
  const std::int64_t w = pos - p + 1;
  Phase ph;
  ph.period = p;
  for (std::int64_t t = 0; t < std::min(p, kPhaseKeys); ++t)
    ph.first_keys.push_back(key_at(w + (phase - w + t) % p));
  for (const Phase& k : known_)
    if (k == ph) return;
  if (known_.size() >= kKnownPhases) known_.erase(known_.begin());
  known_.push_back(std::move(ph));
}

void PeriodDetector::lock(std::int64_t p, std::int64_t pos, std::vector<std::int64_t>& boundaries) {
  const std::int64_t phase = choose_phase(p, pos);
  // Latest boundary that is complete: phase + k*p <= pos + 1.
  std::int64_t last_b = phase + ((pos + 1 - phase) / p) * p;
  // Walk back over whole periods that repeat their neighbour: those are steady iterations.
  auto steady = [&](std::int64_t x) {
    if (x < h0_) return false;
    if (x + 2 * p - 1 <= pos) return equal_ranges(x, x + p, p);
    return x - p >= h0_ && equal_ranges(x - p, x, p);
  };
  std::int64_t x = last_b - p;
  while (steady(x)) x -= p;
  const std::int64_t first_b = x + p;
  if (first_b > h0_) boundaries.push_back(first_b);  // ends the prelude
  for (std::int64_t b = first_b + p; b <= last_b; b += p) boundaries.push_back(b);

  locked_ = true;
  period_ = p;
  last_boundary_ = last_b;
  anchor_.clear();
  for (std::int64_t t = 0; t < std::min<std::int64_t>(3, p); ++t)
    anchor_.push_back(name_at(phase + t));
  remember(p, pos, phase);
  recent_bad_ = 0;
  hypotheses_.clear();
  last_positions_.clear();
}

}  // namespace hotpath::detail
