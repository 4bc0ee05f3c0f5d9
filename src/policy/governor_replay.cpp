// The governor's view of CUDA graph replay (exec/replay.h): a plan that starts to run replayed
// runs faster (or slower) with the same groups, so its judgement starts anew from the first
// replayed iteration, against a plain-eager block of its own; replay that loses, to plain eager
// or to the plan alone, is let go and the plan is judged on its own again. A known winner's
// capture is held until the run can pay for it (Governor::kReplayHoldMax).
#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "policy/governor.h"
#include "policy/ratio_interval.h"
#include "trace/signature.h"

namespace hotpath::detail {
namespace {
// Plain-run iterations in a row after which replay counts as gone (let go after divergences, or
// a new capture on its way): one or two between replays are an iteration that left the graphs
// and the one that observed before a new capture.
constexpr int kReplayGone = 8;
// Replay judged against the plan's iterations before it (not interleaved with them): at least
// this many of those, and replay slower by more than this ratio over the whole interval.
constexpr std::size_t kPlanBeforeReplay = 5;
constexpr double kReplayLossMargin = 1.05;
}  // namespace

bool Governor::replay_sample(std::uint64_t signature, Sig& s, const Pending& p) {
  if (p.replayed == s.replaying) {
    s.unreplayed = 0;
    return true;
  }
  // Replayed iterations the executor ran before it let replay go, still in the queue.
  if (p.replayed && s.replay_stopped) return false;
  // A rebase (every group off) and a trial (one group left out) are configurations of their own
  // (the executor drops the graphs when the groups change): their samples are theirs.
  if (s.phase == Phase::Rebase || s.phase == Phase::Trial) return true;
  if (!p.replayed && ++s.unreplayed < kReplayGone) return false;
  // A window waiting for its plain block finishes on what it began with; a reverted plan is
  // judged no more.
  if (s.phase == Phase::Plain || s.phase == Phase::Reverted) return false;
  s.replaying = p.replayed;
  s.unreplayed = 0;
  // Nothing judged yet (replay may begin with the plan's first iteration on its own kernels).
  if (s.phase == Phase::Eager) return true;
  if (s.replaying) {
    s.plan_verdict = s.verdict;
    // Without a verdict of the plan's own, its last fused samples are what replay must beat.
    s.plan_before_replay.clear();
    s.plan_before_eager = 0;
    if (!s.plan_verdict.iv.known()) s.plan_before_replay.assign(s.recent.begin(), s.recent.end());
  }
  // What was judged of the other configuration says nothing of this one: a verdict of its own,
  // against plain eager timed beside it, replaces it.
  s.judge_anew();
  s.set_verdict(RatioInterval{}, 0, 0, 0);
  log_info(concat("hotpath: signature ", short_hex(signature),
                  s.replaying ? ": replayed as CUDA graphs from here on; judged again"
                              : ": no longer replayed as CUDA graphs; judged again"));
  return true;
}

std::string Governor::replay_loses_to_plan(Sig& s, const RatioInterval& iv, double m, double e) {
  if (!s.replaying) return "";
  if (s.plan_verdict.iv.known()) {
    if (!(iv.low > s.plan_verdict.iv.high)) return "";
    return concat("replayed, fused median ", ms_text(m), " vs ", s.baseline_plain ? "plain " : "",
                  "eager ", ms_text(e), " (ratio ", interval_text(iv),
                  " at 95%), slower than the plan alone (ratio ", interval_text(s.plan_verdict.iv),
                  ")");
  }
  // Replay began before the plan was judged: its ratio to eager against the plan's fused
  // iterations just before it, as a ratio to the eager figure timed nearest them (neither is
  // interleaved with the other, so only a clear loss counts). Their times alone would not do: on
  // a host whose speed drifts, a replayed window timed 300 iterations later reads slower than the
  // plan did then (H200, the synced MLP example: eager 0.97 -> 1.27 ms, replayed 0.49 -> 0.67 ms,
  // judged slower than the plan's 0.56 ms and let go; the plan alone then ran at 1.05-1.16 ms).
  // Only a window judged against eager timed beside it says how replay compares now.
  if (s.plan_before_eager <= 0) s.plan_before_eager = e;  // replay's first window judged
  if (s.plan_before_replay.size() < kPlanBeforeReplay || !s.baseline_fresh || e <= 0 || !iv.known())
    return "";
  const double plan = median_of(s.plan_before_replay);
  const double plan_ratio = plan / s.plan_before_eager;
  if (!(iv.low > plan_ratio * kReplayLossMargin)) return "";
  return concat("replayed, fused median ", ms_text(m), " vs ", s.baseline_plain ? "plain " : "",
                "eager ", ms_text(e), " (ratio ", interval_text(iv),
                " at 95%), slower than the plan alone just before replay (", ms_text(plan),
                " over ", s.plan_before_replay.size(), " iterations against eager's ",
                ms_text(s.plan_before_eager), " timed beside replay's first window: ratio ",
                samples_text(&plan_ratio, 1), ")");
}

void Governor::stop_replay(std::uint64_t signature, Sig& s, const std::string& why) {
  plans_.no_replay(signature, why);
  log_info(concat("hotpath: signature ", short_hex(signature), ": ", why,
                  "; CUDA graph replay let go, the plan runs on without it"));
  s.replay_stopped = true;
  s.replaying = false;
  s.unreplayed = 0;
  s.judge_anew();
  // The plan's own figure stands until it is judged again.
  s.verdict = s.plan_verdict;
  forget_replay(signature);
}

void Governor::replay_costs(std::uint64_t signature, Sig& s, const Pending& p, double ms) {
  if (p.captured) {
    const double fused = s.recent.empty()
                             ? s.eager_median
                             : median_of(std::vector<double>(s.recent.begin(), s.recent.end()));
    if (fused > 0) s.capture_cost = std::max(0.0, ms - fused);
  }
  if (s.replay_held && p.fused) hold_replay(signature, s);
}

std::string Governor::catch_up(double eager, double deficit, double cost, double plan,
                               double replay_ratio) {
  if (plan <= 0)
    return concat("the run is ", ms_text(deficit),
                  " behind eager and the plan alone does not gain on it: replay is the way to "
                  "catch up");
  const double replay = replay_ratio > 0 ? eager * (1 - replay_ratio) : 0;
  if (replay <= plan) return "";
  const double with_capture = (deficit + cost) / replay, without = deficit / plan;
  if (with_capture >= without) return "";
  return concat("the run is ", ms_text(deficit), " behind eager: replayed (", ms_text(replay),
                " saved an iteration in an earlier run) it would be level after about ",
                static_cast<long long>(with_capture + 0.5),
                " iterations with the capture, the plan alone (", ms_text(plan),
                " an iteration) after about ", static_cast<long long>(without + 0.5));
}

void Governor::hold_replay(std::uint64_t signature, Sig& s) {
  const double eager = s.report_eager();
  const double net = s.ledger.net(eager);
  if (s.held++ == 0) s.held_from = net;
  // What the capture may cost this run (see kCaptureCostSpread).
  const double cost = s.capture_prior * kCaptureCostSpread;
  // What the plan alone saves an iteration, once this run has timed enough of its iterations
  // (its first ones after the switch from eager are none).
  const bool paced = s.recent.size() >= kReplayRateSamples;
  const double plan =
      paced ? eager - median_of(std::vector<double>(s.recent.begin(), s.recent.end())) : 0;
  // Against the eager figure the governor has (before this run's first plain block, an earlier
  // run's): waiting for a block of this run's own cost more than it saved (H200, MLP example:
  // the capture then came some 35 iterations later, 0.15-0.25 ms a step of replay's savings
  // forgone, against a capture of 2.4-2.8 ms it would have kept from putting the run behind).
  std::string why;
  if (eager <= 0)
    why = "no eager figure to weigh its cost against";
  else if (net >= cost)
    why = concat("the run is ", ms_text(net), " ahead of eager; the capture cost ",
                 ms_text(s.capture_prior), " in an earlier run (weighed at ", ms_text(cost), ")");
  else if (net < 0 && paced)
    why = catch_up(eager, -net, cost, plan, s.replay_ratio_prior);
  // Flat: by the plan's pace where it is known (the run's first fused iterations, slower while
  // they pay for the switch, are no sign of it), else by the run's lead since the hold began.
  const bool flat = paced ? plan <= 0 : net <= s.held_from;
  if (why.empty() && s.held >= kReplayHoldFlat && flat)
    why = concat("the plan alone has not gained on eager in ", s.held, " iterations");
  else if (why.empty() && s.held >= kReplayHoldMax)
    why = concat("held for ", s.held, " iterations");
  if (why.empty()) return;
  s.replay_held = false;
  // The executor logs the release, with why.
  plans_.release_replay(signature, why);
}

}  // namespace hotpath::detail
