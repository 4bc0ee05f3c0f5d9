// The governor's plain-eager blocks: asked for when a window of fused iterations is to be judged,
// run by the session (the loop with the hook out of the dispatch), and turned into the baseline.
#include <algorithm>

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "policy/governor.h"
#include "trace/signature.h"

namespace hotpath::detail {
namespace {
constexpr int kPlainTries = 3;               // plain-eager blocks cut short before giving up
constexpr std::size_t kMinPartialBlock = 3;  // iterations a cut block keeps as samples
constexpr std::size_t kPlainPool = 4096;     // plain-eager samples kept for the report's figure
}  // namespace

std::vector<double> plain_samples(std::vector<double> gaps, int iterations) {
  // One gap per iteration: the first ones pay for the switch from the fused path.
  if (gaps.size() == static_cast<std::size_t>(iterations) &&
      gaps.size() >= Governor::kPlainLead + kMinPartialBlock)
    gaps.erase(gaps.begin(), gaps.begin() + Governor::kPlainLead);
  return gaps;
}

void Governor::set_plain_blocks(std::function<bool()> possible) {
  std::lock_guard<std::mutex> lock(mu_);
  plain_possible_ = std::move(possible);
}

int Governor::take_plain_block(std::uint64_t signature) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = sigs_.find(signature);
  if (it == sigs_.end() || it->second.phase != Phase::Plain || it->second.plain_started) return 0;
  it->second.plain_started = true;
  ++it->second.plain_blocks;
  plain_wanted_.store(std::any_of(sigs_.begin(), sigs_.end(),
                                  [](const auto& kv) {
                                    return kv.second.phase == Phase::Plain &&
                                           !kv.second.plain_started;
                                  }),
                      std::memory_order_relaxed);
  PlainBlock b;
  b.signature = signature;
  b.iterations = std::max(10, config_.revert_window / 2) + static_cast<int>(kPlainLead);
  plain_blocks_.push_back(b);
  return b.iterations;
}

void Governor::plain_block_begin(std::int64_t index, bool by_marks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (plain_blocks_.empty()) return;
  Stamp a = take_stamp(index);
  if (a.event) {
    // A GPU-bound loop's host runs ahead: the GPU may still have the fused iterations before the
    // block queued. Timed from an event recorded behind them, a host-bound block's iterations
    // would go at the GPU's pace until it caught up (the MLP example's plain eager read 0.60 ms
    // where the cross-check beside it read 0.94). The block starts once the GPU is through them.
    try {
      a.event->wait();
      a.cpu_ms = now_ms();
    } catch (const Error& e) {
      log_warn(
          concat("hotpath: waiting for the GPU before a plain-eager block failed: ", e.what()));
    }
  }
  plain_blocks_.back().a = std::move(a);
  if (!by_marks) return;
  if (const auto it = sigs_.find(plain_blocks_.back().signature); it != sigs_.end())
    ++it->second.plain_marked;
}

void Governor::plain_block_tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plain_blocks_.empty() && !plain_blocks_.back().ended)
    plain_blocks_.back().ticks.push_back(take_stamp(-1));
}

void Governor::plain_block_end(bool awaits_check) {
  std::lock_guard<std::mutex> lock(mu_);
  if (plain_blocks_.empty()) return;
  plain_blocks_.back().b = take_stamp(-1);
  plain_blocks_.back().ended = true;
  plain_blocks_.back().awaits_check = awaits_check;
  switching_ = kSwitchIterations + round_offset();
  drain(false);
}

int Governor::round_offset() {
  const int span = std::max(1, config_.revert_window / 2);
  return static_cast<int>(mix64(++offsets_) % static_cast<std::uint64_t>(span));
}

void Governor::plain_block_restart(int iterations) {
  std::lock_guard<std::mutex> lock(mu_);
  if (plain_blocks_.empty() || plain_blocks_.back().ended) return;
  PlainBlock& b = plain_blocks_.back();
  b.a = take_stamp(-1);
  b.ticks.clear();
  b.iterations = iterations;
  if (const auto it = sigs_.find(b.signature); it != sigs_.end()) ++it->second.plain_marked;
}

void Governor::plain_block_checked(PlainCheck how) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto b = std::find_if(plain_blocks_.begin(), plain_blocks_.end(),
                              [](const PlainBlock& p) { return p.awaits_check; });
  if (b == plain_blocks_.end()) return;
  if (how == PlainCheck::Confirmed) {
    b->awaits_check = false;
    drain(false);
    return;
  }
  // Its iterations were miscounted, or may have been: no sample; the block is asked for again.
  const std::uint64_t signature = b->signature;
  plain_blocks_.erase(b);
  const auto it = sigs_.find(signature);
  if (it == sigs_.end()) return;
  Sig& s = it->second;
  ++(how == PlainCheck::Miscounted ? s.plain_dropped : s.plain_unconfirmed);
  if (s.plain_marked > 0) --s.plain_marked;
  if (s.phase != Phase::Plain) return;
  s.plain_started = false;
  plain_wanted_.store(true, std::memory_order_relaxed);
}

void Governor::plain_block_cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (plain_blocks_.empty() || plain_blocks_.back().ended) return;
  PlainBlock& b = plain_blocks_.back();
  // A Pause cut the block: the iterations it had finished are plain eager all the same (a loop
  // that pauses every few steps, a cross-check, still gets a fresh baseline). The one the pause
  // fell in is not.
  if (b.ticks.size() >= kMinPartialBlock) {
    b.b = b.ticks.back();
    b.ticks.pop_back();
    b.iterations = static_cast<int>(b.ticks.size()) + 1;
    b.ended = true;
    drain(false);
    return;
  }
  const std::uint64_t signature = b.signature;
  plain_blocks_.pop_back();
  const auto it = sigs_.find(signature);
  if (it == sigs_.end() || it->second.phase != Phase::Plain) return;
  Sig& s = it->second;
  if (++s.plain_cancelled < kPlainTries) {
    s.plain_started = false;  // asked for again
    plain_wanted_.store(true, std::memory_order_relaxed);
    return;
  }
  // The loop pauses in every block (a comparison model stepped under Pause each iteration):
  // the baseline stays the one measured under the hook.
  s.plain_never = true;
  s.phase = s.before_plain == Phase::Settled ? Phase::Settled : Phase::Measuring;
  log_info(concat("hotpath: signature ", short_hex(signature),
                  ": plain eager cannot be timed (a Pause in every block); judged against ",
                  s.baseline_plain ? "the last plain-eager block" : "eager under the hook"));
  decide(signature, s);
}

bool Governor::want_plain(std::uint64_t signature, Sig& s) {
  if (s.plain_never || !plain_possible_ || !plain_possible_()) return false;
  const double m = median_of(s.judged);
  s.before_plain = s.phase;
  s.phase = Phase::Plain;
  s.plain_started = false;
  plain_wanted_.store(true, std::memory_order_relaxed);
  log_debug(concat("hotpath: signature ", short_hex(signature), ": fused median ", ms_text(m),
                   "; timing plain eager (hook out of the dispatch) to judge it"));
  return true;
}

void Governor::plain_result(std::uint64_t signature, std::vector<double> samples, int iterations,
                            double total_ms) {
  Sig& s = sigs_[signature];
  // Iterations of the run all the same, whatever becomes of them as samples.
  s.plain_n += iterations;
  s.plain_ms += total_ms;
  if (s.phase != Phase::Plain || samples.empty()) return;
  for (const double x : samples)
    if (s.plain_all.size() < kPlainPool) s.plain_all.push_back(x);
  s.base = std::move(samples);
  s.eager_median = median_of(s.base);
  s.plain_medians.push_back(s.eager_median);
  s.baseline_plain = true;
  s.baseline_rebased = false;
  s.baseline_remembered = false;
  s.baseline_fresh = true;
  s.rebased_warm = true;
  s.windows_since_plain = 0;
  s.phase = s.before_plain == Phase::Settled ? Phase::Settled : Phase::Measuring;
  log_info(concat("hotpath: signature ", short_hex(signature), ": plain eager ",
                  ms_text(s.eager_median), " per iteration over ", s.base.size(),
                  " iteration(s) (hook out of the dispatch), fused ",
                  ms_text(median_of(s.judged))));
  if (log_enabled(LogLevel::Debug))
    log_debug(concat("hotpath: signature ", short_hex(signature), ": plain-eager samples (ms) ",
                     samples_text(s.base.data(), s.base.size()), "; fused window (ms) ",
                     samples_text(s.judged.data(), s.judged.size())));
  decide(signature, s);
}

}  // namespace hotpath::detail
