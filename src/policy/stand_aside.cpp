#include "policy/stand_aside.h"

#include <algorithm>

namespace hotpath::detail {

void StandAside::configure(int threshold) {
  // Long enough for a signature to turn hot and its plan to be judged by the governor.
  window_ = std::max<std::int64_t>(30, 3 * static_cast<std::int64_t>(threshold));
}

std::optional<std::string> StandAside::after_iteration(bool live, std::int64_t hot) {
  live_ += live ? 1 : 0;
  if (++iterations_ < window_) return std::nullopt;
  const std::int64_t ran = live_;
  iterations_ = live_ = 0;
  if (2 * ran >= window_) return std::nullopt;
  if (hot == 0)
    return "no iteration signature repeated often enough to turn hot in " +
           std::to_string(window_) + " iterations (the loop's ops change from step to step)";
  if (ran == 0) return "its hot signatures have nothing to fuse, or every plan was reverted";
  return "a plan could run in only " + std::to_string(ran) + " of " + std::to_string(window_) +
         " iterations (the others have nothing to fuse, or were reverted)";
}

std::optional<std::string> StandAside::after_ops(bool training, std::int64_t anchors,
                                                 std::int64_t iterations,
                                                 std::int64_t ops_without_iteration) {
  if (look_begun_) {  // what was seen before this look does not count again
    look_begun_ = false;
    anchors_at_look_ = anchors;
    iterations_at_look_ = iterations;
    ops_at_look_ = ops_without_iteration;
  }
  if (ops_without_iteration < ops_at_look_) ops_at_look_ = 0;
  const std::int64_t passes = anchors - anchors_at_look_, cut = iterations - iterations_at_look_;
  if (training && passes >= kAnchorsWithoutStep && cut * kMaxPassesPerIteration < passes) {
    look_begun_ = true;  // judged: the next look starts afresh
    return "no stable step: " + std::to_string(cut) + " iteration(s) in " + std::to_string(passes) +
           " forward passes";
  }
  if (!training && ops_without_iteration - ops_at_look_ >= kOpsWithoutPeriod) {
    look_begun_ = true;
    return "no stable period in " + std::to_string(ops_without_iteration - ops_at_look_) + " ops";
  }
  if (training && passes >= kAnchorsWithoutStep) look_begun_ = true;  // a fresh window
  return std::nullopt;
}

double StandAside::pause_seconds() {
  pause_ = std::min(64.0, pause_ * 2);
  return pause_;
}

void StandAside::look_again() {
  iterations_ = live_ = 0;
  look_begun_ = true;
}

}  // namespace hotpath::detail
