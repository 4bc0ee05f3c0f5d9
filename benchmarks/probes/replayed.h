// The probes' way to a replayed loop (host_samples.cpp, replay_host.cpp): replay measured, not
// judged (no reverts, no standing aside, nothing remembered), hot after 10 iterations; then the
// kernels waited for and `steady` more iterations, in which the plan runs whole and is observed
// and captured as CUDA graphs.
#pragma once

#include <hotpath/hotpath.h>

namespace probe {

inline hotpath::Config replay_measured(bool replay) {
  hotpath::Config c;
  c.threshold = 10;
  c.remember = false;
  c.revert_window = 1000000;
  c.stand_aside = false;
  c.replay = replay;
  return c;
}

// `step` runs one training step; each is marked with hotpath::step().
template <class Step>
void warm_until_replayed(Step&& step, bool replay, int steady) {
  hotpath::enable_hot_path_detection(replay_measured(replay));
  for (int i = 0; i < 20; ++i) {
    step();
    hotpath::step();
  }
  hotpath::wait_for_compilation();
  for (int i = 0; i < steady; ++i) {
    step();
    hotpath::step();
  }
}

}  // namespace probe
