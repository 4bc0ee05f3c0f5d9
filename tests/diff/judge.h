// train_diff's judging of one run (train_diff.cpp), step by step, and its verdict: arithmetic
// alone, so that test_units can hold it to its rules.
//
// Each step: hotpath's deviation from eager (loss and state) against `factor` times the largest
// deviation the references (eager again, perturbed eager) have shown up to that step, plus the
// resolution of what is compared; `exact`: no deviation at all.
#pragma once

#include <algorithm>
#include <cmath>

namespace hotpath_diff {

struct StepJudge {
  double factor = 10.0;
  bool exact = false;
  double loss_floor = 8 * 1.1920929e-7;  // 8 fp32 ulps: one reduction summed in another order
  double state_floor = 1e-7;

  double max_noise_loss = 0, max_noise_state = 0;  // the references' largest deviations so far
  double hot_loss = 0, hot_state = 0;              // hotpath's largest
  double worst = 0;                                // largest deviation / tolerance over the steps
  int worst_step = -1;                             // where
  bool pass = true;                                // every step within its tolerance

  // Step i: the references' deviations (the larger of the two of each kind) and hotpath's.
  void step(int i, double noise_loss, double noise_state, double loss, double state) {
    max_noise_loss = std::max(max_noise_loss, noise_loss);
    max_noise_state = std::max(max_noise_state, noise_state);
    const double tol_loss = exact ? 0.0 : factor * max_noise_loss + loss_floor;
    const double tol_state = exact ? 0.0 : factor * max_noise_state + state_floor;
    auto over = [](double d, double tol) { return d > tol ? (tol > 0 ? d / tol : INFINITY) : 0.0; };
    const double ratio = std::max(over(loss, tol_loss), over(state, tol_state));
    const double within =
        std::max(tol_loss > 0 ? loss / tol_loss : 0.0, tol_state > 0 ? state / tol_state : 0.0);
    if (ratio > 1.0 || std::isnan(loss) || std::isnan(state)) pass = false;
    if (std::max(ratio, within) > worst || worst_step < 0) {
      worst = std::max(ratio, within);
      worst_step = i;
    }
    hot_loss = std::max(hot_loss, loss);
    hot_state = std::max(hot_state, state);
    if (std::isnan(loss)) hot_loss = NAN;
    if (std::isnan(state)) hot_state = NAN;
  }

  // hotpath's largest deviations within `factor` times the references' largest over the whole
  // run (not only up to the step where hotpath's came).
  bool within_whole_run() const {
    if (exact) return hot_loss == 0 && hot_state == 0;
    return hot_loss <= factor * max_noise_loss + loss_floor &&
           hot_state <= factor * max_noise_state + state_floor;
  }
};

enum class Verdict { Pass, Chaotic, Fail };

// A run's verdict from its free run and, where one ran after a failure, the same setup run with
// each step started from eager's state (`resynced`, or nullptr). Chaotic: the free run took a
// branch of training no reference had taken by then, yet each step alone was within its noise
// floor and over the whole run hotpath stayed within the references' reach.
inline Verdict verdict(const StepJudge& free_run, const StepJudge* resynced) {
  if (free_run.pass) return Verdict::Pass;
  if (free_run.exact || resynced == nullptr || !resynced->pass) return Verdict::Fail;
  return free_run.within_whole_run() ? Verdict::Chaotic : Verdict::Fail;
}

}  // namespace hotpath_diff
