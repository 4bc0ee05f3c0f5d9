// The governor's trials: a plan that lost against plain eager has its groups left out one at a
// time, half a window each, to find the ones that lose. The plan whole is timed again first and
// last: a loss that came from a passing slowdown (a neighbour, clocks) does not repeat there, and
// each group is judged against the plan whole timed in the same stretch, not against the window
// that lost (judged against that one, every group of a plan "loses" once the slowdown is over).
// And the interpreter's trial while kernels compile: it stands in where it is not slower than the
// groups' eager ops timed beside it.
#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "policy/governor.h"
#include "trace/signature.h"

namespace hotpath::detail {

void Governor::start_trial(std::uint64_t signature, Sig& s, const std::vector<int>& candidates) {
  s.before_trial = s.phase;
  s.phase = Phase::Trial;
  s.trial_groups.assign(1, kTrialAll);
  s.trial_groups.insert(s.trial_groups.end(), candidates.begin(), candidates.end());
  s.trial_groups.push_back(kTrialAll);
  s.trial_pos = 0;
  s.trial_result.assign(s.trial_groups.size(), 0);
  s.trial_samples.assign(s.trial_groups.size(), {});
  apply(signature, s);  // the first position leaves nothing out
}

void Governor::trial_window(std::uint64_t signature, Sig& s, double median) {
  const auto plan = plans_.groups(signature);
  if (!plan || plan->size() != s.active.size()) {  // the plan went away meanwhile
    s.phase = Phase::Measuring;
    s.trial_groups.clear();
    return;
  }
  const double e = s.eager_median;
  const int left_out = s.trial_groups[s.trial_pos];
  s.trial_result[s.trial_pos] = median;
  if (left_out != kTrialAll) s.active[static_cast<std::size_t>(left_out)] = true;  // back in
  const double limit = 1 + config_.revert_margin;
  if (s.trial_pos == 0) {
    // Does the loss repeat? Judged as decide() judges a window: slower by the whole interval.
    const std::vector<double> base = s.baseline_samples();
    const RatioInterval iv = ratio_of_medians(s.trial_samples[0], base, signature ^ 0x7a1);
    if (!(iv.ratio > limit && iv.low > 1.0)) {
      log_info(concat("hotpath: signature ", short_hex(signature), ": timed again, fused median ",
                      ms_text(median), " vs ", s.baseline_plain ? "plain " : "", "eager ",
                      ms_text(e), " (", percent(median, e), "; ratio ", interval_text(iv),
                      "): the loss did not repeat (a passing slowdown); every group stays"));
      s.phase = s.before_trial == Phase::Settled ? Phase::Settled : Phase::Measuring;
      s.trial_groups.clear();
      apply(signature, s);
      // The report's figure is this round's, not the loss's (rounds of the new configuration
      // pool with it from here on).
      s.set_verdict(iv, s.trial_samples[0].size(), base.size(), 1);
      s.evidence.assign(1, Sig::Evidence{iv, s.verdict.fused, s.verdict.eager});
      s.evidence_epoch = s.epoch;
      s.refined = 0;
      return;
    }
  }
  if (++s.trial_pos < s.trial_groups.size()) {
    const int next = s.trial_groups[s.trial_pos];
    if (next != kTrialAll) s.active[static_cast<std::size_t>(next)] = false;
    apply(signature, s);
    return;
  }
  // The plan whole, timed first and last.
  std::vector<double> whole;
  for (std::size_t i = 0; i < s.trial_groups.size(); ++i)
    if (s.trial_groups[i] == kTrialAll)
      whole.insert(whole.end(), s.trial_samples[i].begin(), s.trial_samples[i].end());
  const double base = median_of(whole);
  // A group loses when leaving it out saves more than half the margin, by the whole interval of
  // the ratio (a sleep's jitter is no saving).
  std::vector<std::string> losers;
  const double saves = 1 - 0.5 * config_.revert_margin * e / base;
  for (std::size_t i = 0; i < s.trial_groups.size(); ++i) {
    const int g = s.trial_groups[i];
    if (g == kTrialAll) continue;
    const RatioInterval iv = ratio_of_medians(s.trial_samples[i], whole, signature + i);
    if (s.trial_result[i] < base * saves && (!iv.known() || iv.high < saves)) {
      s.active[static_cast<std::size_t>(g)] = false;
      const std::string& name = (*plan)[static_cast<std::size_t>(g)].name;
      losers.push_back(name);
      log_info(concat("hotpath: signature ", short_hex(signature), ": group ", name, " loses (",
                      ms_text(s.trial_result[i]), " per iteration without it, ", ms_text(base),
                      " with it); it runs eagerly"));
    }
  }
  s.trialed = true;
  s.trial_groups.clear();
  if (std::none_of(s.active.begin(), s.active.end(), [](bool a) { return a; })) {
    // The loss, as the plan whole was timed in the trial against the plain block before it.
    const std::vector<double> plain = s.baseline_samples();
    s.set_verdict(ratio_of_medians(whole, plain, signature ^ 0x7a2), whole.size(), plain.size(), 1);
    revert(signature, s, "every fused group made the iteration slower");
    return;
  }
  if (!losers.empty())
    s.reason = concat(losers.size(), " of ", s.active.size(),
                      " group(s) reverted: each made the iteration slower");
  s.phase = Phase::Measuring;
  apply(signature, s);
}

void Governor::judge_stand_in(std::uint64_t signature, Sig& s) {
  // Against the iterations between its own, which ran the same groups eagerly under the hook,
  // timed in the same stretch: while a plan is new the loop does not run as it did before it
  // (an H100 run turned a stand-in off at 0.759 ms against 0.722 ms timed before the plan; the
  // eager steps right after took 0.9-1.1 ms).
  const RatioInterval iv = ratio_of_medians(s.stand_in, s.stand_in_eager, signature);
  const double margin = 1 + config_.revert_margin;
  const bool slower = iv.low > margin;
  const bool full = s.stand_in_eager.size() >= kStandInMaxSamples;
  if (!slower && iv.high > margin && !full) return;  // not yet evidence either way
  s.stand_in_judged = true;
  const std::string what = concat(
      "its iterations took ", ms_text(median_of(s.stand_in)), " against ",
      ms_text(median_of(s.stand_in_eager)), " with its groups eager in the iterations between (",
      interval_text(iv), ", ", s.stand_in.size(), " and ", s.stand_in_eager.size(), " iterations)");
  if (!slower) {
    plans_.keep_stand_in(signature, what);
    log_info(concat("hotpath: signature ", short_hex(signature),
                    ": the interpreter stands in for kernels still compiling (", what, ")"));
    return;
  }
  plans_.no_stand_in(signature, what);
  log_info(
      concat("hotpath: signature ", short_hex(signature),
             ": the interpreter standing in for kernels still compiling is slower than eager (",
             what, "); those groups run eagerly until their kernels are in"));
}

}  // namespace hotpath::detail
