// When hotpath stops intercepting a loop for a while. Interception costs every op a few
// microseconds; where it buys nothing (no stable period, no signature that repeats, nothing to
// fuse in the hot ones, every plan reverted) the loop must run at eager's speed. The session then
// takes the hook out of the thread's dispatch (dispatch/dispatch_hook.h) and looks again after a
// pause that doubles each time it finds nothing (2 s, 4 s, ... up to 64 s).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hotpath::detail {

class StandAside {
 public:
  explicit StandAside(int threshold) { configure(threshold); }
  void configure(int threshold);

  // After each iteration the recorder closes. `live`: its signature has a plan that may run (or
  // is being built). `hot`: signatures hot so far. Returns why to stand aside now, if it is
  // time to: fewer than half of a window's iterations had a live plan.
  std::optional<std::string> after_iteration(bool live, std::int64_t hot);
  // Every so many ops: whether the loop has shown no period. `training`: the step detector cuts
  // at forward passes (`anchors` of them so far, `iterations` cut); else the period detector has
  // looked at `ops_without_iteration` ops in vain.
  std::optional<std::string> after_ops(bool training, std::int64_t anchors, std::int64_t iterations,
                                       std::int64_t ops_without_iteration);
  // The pause before the next look (doubles each time), and the start of that look.
  double pause_seconds();
  void look_again();

  // Iterations a look lasts before it decides; forward passes, and ops, without a period.
  std::int64_t window() const { return window_; }
  // A look at a training loop that saw this many forward passes and cut fewer than one
  // iteration in kMaxPassesPerIteration of them found no stable step.
  static constexpr std::int64_t kAnchorsWithoutStep = 64;
  static constexpr std::int64_t kMaxPassesPerIteration = 16;
  static constexpr std::int64_t kOpsWithoutPeriod = 200000;

 private:
  std::int64_t window_ = 30;
  std::int64_t iterations_ = 0;  // in this look's window
  std::int64_t live_ = 0;        // ... of them with a live plan
  double pause_ = 1.0;           // doubled before use
  // after_ops's counts when this look began: only what the look itself saw counts.
  std::int64_t anchors_at_look_ = 0, iterations_at_look_ = 0, ops_at_look_ = 0;
  bool look_begun_ = false;
};

}  // namespace hotpath::detail
