// The governor: times iterations per signature (CUDA events at iteration boundaries for loops on
// the GPU, a steady clock on the CPU; never a synchronisation), keeps the eager baseline (plain
// eager timed in blocks between fused iterations where the loop allows, else the iterations
// before a plan ran), compares the median of a window of fused iterations against it with a
// bootstrap interval of their ratio (policy/ratio_interval.h), reverts a signature (or only the
// groups that lose) only when the interval says it is slower and keeps it only when the interval
// says it is not, pooling more rounds (a window and a block) while the interval straddles the
// margin;
// computes break-even and verdicts, and remembers verdicts in the cache directory for later runs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "driver/cuda_driver.h"
#include "hotpath/hotpath.h"
#include "policy/decisions.h"
#include "policy/ledger.h"
#include "policy/plan_control.h"
#include "policy/ratio_interval.h"
#include "trace/recorder.h"

namespace hotpath::detail {

// A plain-eager block's samples: one per iteration (`gaps`, when there are `iterations` of them)
// less the first Governor::kPlainLead, or the block's mean as it is.
std::vector<double> plain_samples(std::vector<double> gaps, int iterations);

// What the session found after a plain-eager block the iteration marker ended
// (Governor::plain_block_checked): the plan's next ops (the block ended at an iteration start);
// ops the plan does not have there (the marker's count is wrong); or no proof either way (the
// next iteration had other inputs, or a stretch with grad mode off ran inside the block).
enum class PlainCheck { Confirmed, Miscounted, Unconfirmed };

class Governor {
 public:
  // A plain-eager block's first iterations are no sample of plain eager: they pay for the switch
  // from the fused path (over 237 blocks of the MLP example on an H100 the first ran 36% slower
  // than the block's others, the next three 6%, 3% and 2%; over 21 blocks of the suite's MLP row
  // on an H200, the first 32% above the median of the block's last six, the second 4%). The block
  // runs this many more.
  static constexpr std::size_t kPlainLead = 2;
  // A known winner whose replay an earlier run kept, and whose capture it said cost C ms beyond
  // a fused iteration, is not captured while the run is within C of eager: captured at once, the
  // run would fall behind eager again for several iterations (on an H200 the MLP+AdamW step's
  // capture cost 2.3-3.6 ms against steps of 1 ms: break-even 9 steps after hot with it, 4
  // without). The capture goes ahead once the run is C ahead of eager; or while it is behind,
  // where replay would bring it level with eager sooner than the plan alone: the deficit D and C
  // at replay's saving an iteration (the earlier run's replayed figure against eager) against D
  // at the plan's (the median of this run's last kReplayRateSamples fused iterations or more;
  // a capture let go whenever the run was C behind could put it further behind where the plan
  // alone was about to catch up); or when the plan alone has not gained on eager over
  // kReplayHoldFlat fused iterations, and after kReplayHoldMax at most. "Behind" and "ahead"
  // weigh the run against the eager figure the governor has, before this run's first plain
  // block an earlier process's: on hosts whose eager speed differs between processes by a third,
  // a wrong call either way (2026-11-27-warm-plan.md).
  // C is weighed at kCaptureCostSpread times the earlier run's figure: the same capture costs
  // one run more than another (H200, the MLP example, 0746564: 4.7 ms against the 3.5 remembered,
  // its host time 4.3 against 2.9; released as soon as the run was C ahead, the capture put it
  // behind eager again and break-even came 26-30 iterations after hot instead of 7-9).
  static constexpr double kCaptureCostSpread = 1.5;
  static constexpr int kReplayHoldFlat = 8;
  static constexpr std::size_t kReplayRateSamples = 3;
  static constexpr int kReplayHoldMax = 50;

  Governor(PlanControl& plans, const Config& config);
  void configure(const Config& config);
  // Tests: a controllable clock (milliseconds); CUDA events are not used while it is set.
  void set_clock(std::function<double()> now_ms);

  // The loop runs ops on CUDA device `index`: boundaries get CUDA events from now on.
  void note_cuda(int index);
  bool cuda_noted() const { return cuda_noted_.load(std::memory_order_relaxed); }
  // An iteration boundary lies before global op `index`.
  void stamp(std::int64_t index);
  void on_iteration(const IterationEvent& c);
  // hotpath::Pause began before global op `index`. An iteration whose timed span holds that
  // point is not a sample, unless its start is stamped again when the pause ends (resume).
  void note_pause(std::int64_t index);
  // The pause ended before op `index`: a boundary stamped there (step()) is stamped again, so
  // that the iteration starting there is timed without the pause.
  void resume(std::int64_t index);

  // A verdict of an earlier run, if remembered. Takes only the verdicts' own lock (it is called
  // from the recorder with the recorder's lock held; mu_ may call into the plans (the executor),
  // whose lock is held while it asks the recorder: taking mu_ here could close a cycle).
  std::optional<Decision> remembered(std::uint64_t signature);
  // The `most` known winners whose verdicts were written last (newest first): the plans a run may
  // build before their signatures are seen (Executor::prepare_known). Nothing without a store.
  std::vector<std::pair<std::uint64_t, PlanPrior>> known_winners(std::size_t most);

  // Fills the timing half of each signature's report (the rest comes from stats).
  void fill_report(const Stats& stats, Report& report);

  // Plain-eager blocks: the baseline a plan is judged against is the loop without hotpath at
  // all, timed in a block of iterations with the hook out of the dispatch (Session runs them;
  // possible in training loops found at their forward passes and in loops marked with step()).
  // `possible` says whether the loop can run one now.
  void set_plain_blocks(std::function<bool()> possible);
  // Cheap: whether some signature waits for a block.
  bool plain_block_wanted() const { return plain_wanted_.load(std::memory_order_relaxed); }
  // Iterations of the block `signature` wants now (0: none); the caller starts it.
  int take_plain_block(std::uint64_t signature);
  // The block's first iteration starts before op `index` (counted by the iteration marker
  // from the start: by_marks); its last one ended (the op after it, or step()).
  void plain_block_begin(std::int64_t index, bool by_marks = false);
  void plain_block_tick();  // another of the block's iterations starts (a sample per iteration)
  // The iteration marker, having learned its count in the block's first iterations, counts the
  // rest: the block is timed from here, `iterations` long.
  void plain_block_restart(int iterations);
  // awaits_check: the marker ended it; its samples wait for plain_block_checked.
  void plain_block_end(bool awaits_check = false);
  // Whether the block the marker ended did end at an iteration start (the ops after it are the
  // iteration's): its samples count, or it is dropped and asked for again.
  void plain_block_checked(PlainCheck how);
  void plain_block_cancel();  // the block taken could not start

 private:
  // Rounds pooled while the interval of the ratio straddles the margin; what is still within
  // the noise then is no loss on evidence.
  static constexpr int kMaxUndecided = 3;
  // Eager iterations of the stand-in's trial (one of every kStandInCycle, the stand-in's the rest)
  // before the stand-in is judged, and at most: still undecided then, no loss has shown and it is
  // kept.
  static constexpr std::size_t kStandInSamples = 5;
  static constexpr std::size_t kStandInMaxSamples = 10;
  // A kept plan's verdict is refined until its 95% interval lies within this fraction of its
  // figure on both sides, with at most kMaxRefine more rounds; the report pools the last
  // kEvidenceRounds rounds.
  static constexpr double kVerdictPrecision = 0.05;
  static constexpr int kMaxRefine = 7;
  static constexpr std::size_t kEvidenceRounds = 8;
  // The first fused iterations (of a plan, and after the loop comes back to the hook from plain
  // eager) run slower than the ones after them (on an H100, an MLP step: +19%, +63%, +7%, +6% of
  // the window's median at positions 0-3, then none): the GPU's queue has drained and the host's
  // caches hold eager's path. They are the price of the switch, which only measuring makes, and
  // are no sample of the plan (they still count in the totals and the break-even). After a
  // Pause, only when the loop had run at least twice as long under the hook before it: where
  // the loop pauses every few iterations the switch is part of how it runs.
  static constexpr int kSwitchIterations = 4;
  // After a plain block, a window starts a random 0 to half a window later again: a host whose
  // speed swings with a period near a round's length would otherwise put every plain block on
  // the same phase of the swing, and bias every round the same way (rounds pooled would not
  // cancel it). In a step()-marked loop the block ends with resume(), which sets the count back
  // to kSwitchIterations: the offset holds for blocks the iteration marker counts only.
  int round_offset();

  struct Stamp {
    std::int64_t index = 0;
    double cpu_ms = 0;
    std::shared_ptr<CudaEvent> event;
  };
  struct Pending {
    IterationEvent it;
    bool fused = false;
    // Among the first iterations after the loop came back to the hook from plain eager (a
    // plain block, a Pause): they pay for the switch, not for the plan (see kSwitchIterations).
    bool switching = false;
    std::int64_t epoch = 0;
    bool final_tiers = true;
    bool stand_in = false;  // PlanControl::Run's
    bool waited = false;
    bool replayed = false;
    bool captured = false;
    Stamp a, b;
  };
  // Rebase: every group off for a while, to measure this run's eager time when the baseline came
  // from an earlier run (another process on another day is not a fair comparison).
  // Plain: a window was measured; the plain-eager block to judge it against is awaited.
  enum class Phase { Eager, Measuring, Trial, Rebase, Plain, Settled, Reverted };
  static constexpr int kTrialAll = -1;  // a trial position that leaves nothing out
  struct Sig {
    Phase phase = Phase::Eager;
    bool cuda_events = false;
    std::int64_t timed = 0;
    std::int64_t hot_count = -1;
    // The op at which it turned hot: iterations that had started before it ran before hotpath
    // could do anything for them (a detector cuts a loop's first iterations after they ran), and
    // are no part of what the compile cost.
    std::int64_t hot_op = -1;
    std::int64_t last_count = 0;  // the count of its latest iteration
    std::int64_t first_fused = -1;
    // Fused iterations still to pass before they are samples: the plan's first ones pay for the
    // switch from eager as the ones after a plain block do (kSwitchIterations).
    int warming = 0;
    std::vector<double> eager;  // baseline samples (iterations before the plan ran)
    double eager_median = 0;    // frozen at the first fused sample
    // The per-iteration samples eager_median stands on (a plain block's iterations, eager ones
    // under the hook); empty for a baseline remembered from an earlier run.
    std::vector<double> base;
    double hooked_median = 0;  // eager under the hook, the iterations before the plan ran
    // The fused samples of the window being judged, and the rounds (a window against the
    // baseline timed beside it) pooled while the interval of their ratio straddled the margin
    // (`undecided` rounds so far).
    std::vector<double> judged;
    std::vector<RatioRound> rounds;
    int undecided = 0;
    // A verdict's evidence (fused over eager), the samples a side it rests on, and the rounds (a
    // window and the eager iterations timed beside it) it pools: saved and restored whole.
    struct Figure {
      RatioInterval iv;
      std::int64_t fused = 0, eager = 0, rounds = 0;
    };
    Figure verdict;  // the last verdict's: the report's figure
    // The rounds it pools: the latest (kEvidenceRounds at most) judged against a baseline timed
    // just before them, of the plan's current configuration (epoch). A loop whose times drift
    // over a few iterations (a busy host) gives one round a ratio well off the truth; the
    // verdict stands on several.
    struct Evidence {
      RatioInterval round;  // that round's own interval
      std::int64_t fused = 0, eager = 0;
    };
    std::deque<Evidence> evidence;
    std::int64_t evidence_epoch = -1;
    // Kept, but the verdict's interval is wider than kVerdictPrecision: more rounds (a window and
    // a plain block beside it) are timed for it, kMaxRefine at most, before it counts as judged.
    bool refining = false;
    int refined = 0;
    bool baseline_remembered = false;
    bool baseline_rebased = false;  // re-timed under the hook with every group off
    // Measured just before the window being judged. Machines drift (clocks, other work): a
    // regression against an old baseline is checked against a fresh one before anything reverts.
    bool baseline_fresh = true;
    // The baseline of this run's first iterations was taken in a cold process (GPU clocks, caches,
    // allocator still warming up): before a win is declared, eager is timed once more.
    bool rebased_warm = false;
    std::vector<double> window;  // fused samples of the current configuration
    std::deque<double> recent;   // last fused samples of the current configuration (report)
    std::int64_t epoch = 0;      // configuration the window belongs to
    // Trials: one group left out at a time, to find groups that lose. trial_groups: the group
    // left out at each position, kTrialAll (nothing left out) first and last: a loss that came
    // from a passing slowdown does not repeat there, and a group is judged against the plan
    // whole timed in the same stretch, not against the window that lost.
    bool trialed = false;
    std::vector<int> trial_groups;
    std::size_t trial_pos = 0;
    std::vector<double> trial_result;                // per position: the half window's median
    std::vector<std::vector<double>> trial_samples;  // per position: its samples
    Phase before_trial = Phase::Measuring;
    std::vector<bool> active;
    std::vector<bool> saved_active;  // during Rebase
    // CUDA graph replay (governor_replay.cpp): whether the configuration judged now runs
    // replayed, the plain-run iterations seen in a row since, the plan's verdict from before
    // replay began (what replay must beat), whether replay was let go, and whether the next
    // window waits for a plain block of its own.
    bool replaying = false;
    int unreplayed = 0;
    Figure plan_verdict;
    bool replay_stopped = false;
    bool plain_due = false;
    // The plan's fused samples from just before replay began, when replay began before the plan
    // had a verdict of its own: what replay's first kept verdict is checked against; and the
    // eager figure of replay's first judged window, the one timed nearest to them (0: none yet).
    // They are weighed as a ratio to it, as replay's windows are to the eager beside them: a host
    // that slows down after replay began slows replay too, and must not pass for its loss.
    std::vector<double> plan_before_replay;
    double plan_before_eager = 0;
    // The capture held back (see kReplayHoldMax): what an earlier run's capture cost, the fused
    // iterations held so far and the run's lead over eager at the first of them; and what this
    // run's capture cost beyond a fused iteration (remembered for the next run).
    bool replay_held = false;
    double capture_prior = 0;
    double replay_ratio_prior = 0;  // the earlier run's replayed over eager medians (0: unknown)
    int held = 0;
    double held_from = 0;
    double capture_cost = 0;
    // While the interpreter's stand-in is on trial (kernels still compiling): the iterations that
    // ran it, and those between them that ran its groups eagerly (judge_stand_in); the first
    // kSwitchIterations of them pay for the switch from eager and are left out.
    std::vector<double> stand_in, stand_in_eager;
    int stand_in_switch = kSwitchIterations;
    bool stand_in_judged = false;
    // Totals of timed iterations: before the signature turned hot (cold: eager, under the hook,
    // in a process that may still be warming up), from hot to the first fused one (warm-up), from
    // the first fused one on those that ran before every group had its own kernel (interim: the
    // interpreter or eager groups standing in, the capture), and the rest (steady).
    std::int64_t cold_n = 0, warm_n = 0, interim_n = 0, steady_n = 0;
    double cold_ms = 0, warm_ms = 0, interim_ms = 0, steady_ms = 0;
    // ... and the iterations of its plain-eager blocks (the loop ran them at eager's pace).
    std::int64_t plain_n = 0;
    double plain_ms = 0;
    // Every timed iteration from hot on (the warm-up, interim and steady rows' samples): the
    // report's break-even and compile cost are read from it against the report's eager figure.
    Ledger ledger;
    // Every plain-eager iteration timed in this run (kPlainPool at most): the report's eager
    // figure, the median over all of them (a machine whose speed drifts over the run is measured
    // over the run, as the totals are).
    std::vector<double> plain_all;
    std::vector<double> plain_medians;  // each block's median, in order
    double report_eager() const {
      return baseline_plain && !plain_all.empty() ? median_of(plain_all) : eager_median;
    }
    // What a window is judged against: the plain block's samples, or the baseline's median alone.
    std::vector<double> baseline_samples() const {
      return base.empty() ? std::vector<double>{eager_median} : base;
    }
    // The report's figure: one interval, on `fused` and `eager` samples a side.
    void set_verdict(const RatioInterval& iv, std::size_t fused, std::size_t eager,
                     std::size_t rounds) {
      verdict = Figure{iv, static_cast<std::int64_t>(fused), static_cast<std::int64_t>(eager),
                       static_cast<std::int64_t>(rounds)};
    }
    // Another configuration of the same groups (replay began or ended): its windows, rounds
    // and evidence start over, judged against a plain block timed for them.
    void judge_anew() {
      window.clear();
      recent.clear();
      judged.clear();
      rounds.clear();
      undecided = 0;
      evidence.clear();
      refined = 0;
      refining = false;
      plain_due = true;
      phase = Phase::Measuring;
    }
    std::string reason;
    // Plain-eager blocks (set_plain_blocks).
    bool baseline_plain = false;  // eager_median is plain eager, from a block
    bool plain_started = false;   // the awaited block runs
    Phase before_plain = Phase::Measuring;
    int plain_cancelled = 0;      // blocks cut short by a Pause
    int plain_blocks = 0;         // blocks begun (a Pause may cut one short)
    int plain_marked = 0;         // ... counted by the iteration marker
    int plain_dropped = 0;        // ... dropped: the marker's count was off
    int plain_unconfirmed = 0;    // ... dropped: their end could not be confirmed
    bool plain_never = false;     // ... too often: judged against eager under the hook
    int windows_since_plain = 0;  // judged against the block's baseline since it ran
    int recheck_after = 5;        // windows until plain eager is timed again (doubles)
  };
  struct PlainBlock {
    std::uint64_t signature = 0;
    int iterations = 0;
    Stamp a, b;
    std::vector<Stamp> ticks;  // starts of its iterations after the first
    bool ended = false;
    bool awaits_check = false;  // plain_block_checked
  };

  Stamp take_stamp(std::int64_t index);
  void drain(bool block);  // processes finished samples in order
  void process(const Pending& p, double ms, bool cuda);
  void fused_sample(std::uint64_t signature, Sig& s, double ms);
  void judge_window(std::uint64_t signature, Sig& s);
  // Stand-in iterations against the iterations between them that ran its groups eagerly: off
  // where they are slower on that evidence, kept where they are not, or no evidence came
  // (governor_trial.cpp).
  void judge_stand_in(std::uint64_t signature, Sig& s);
  void decide(std::uint64_t signature, Sig& s);  // the judged windows vs the baseline
  // A plan that lost: its groups left out one at a time (governor_trial.cpp).
  void start_trial(std::uint64_t signature, Sig& s, const std::vector<int>& candidates);
  void trial_window(std::uint64_t signature, Sig& s, double median);
  // The verdict from the rounds just judged (`round`, their interval; fresh: against a baseline
  // timed beside them; loss: the interval that reverts or trials the plan, else null).
  void record_evidence(std::uint64_t signature, Sig& s, const RatioInterval& round, bool fresh,
                       const RatioInterval* loss);
  // A plain block's iterations ended: their samples (one per iteration, or the block's mean), and
  // all of them together (`iterations`, `total_ms`).
  void plain_result(std::uint64_t signature, std::vector<double> samples, int iterations,
                    double total_ms);
  // Asks for a plain-eager block to judge the judged windows against, if the loop allows one.
  bool want_plain(std::uint64_t signature, Sig& s);
  // Replay changes how fast a plan runs without changing its groups: the first replayed
  // iteration starts the judgement anew (and so does replay that has gone for good); a replayed
  // iteration or two between plain-run ones is no sample. Returns whether `p` is a sample of
  // the configuration now judged.
  bool replay_sample(std::uint64_t signature, Sig& s, const Pending& p);
  // Replay lost (against plain eager, or against the plan alone): let go, the plan judged again.
  void stop_replay(std::uint64_t signature, Sig& s, const std::string& why);
  // After each iteration from the first fused one on: what a capture cost beyond a fused
  // iteration, and whether a held capture may go ahead now (hold_replay).
  void replay_costs(std::uint64_t signature, Sig& s, const Pending& p, double ms);
  void hold_replay(std::uint64_t signature, Sig& s);
  // Why a held capture goes ahead while the run is `deficit` ms behind eager and the plan alone
  // saves `plan` ms an iteration (see kReplayHoldFlat), or "".
  // (`replay_ratio`: an earlier run's replayed over eager medians; 0: unknown.)
  static std::string catch_up(double eager, double deficit, double cost, double plan,
                              double replay_ratio);
  // Why replay, kept against eager with interval `iv`, loses to the plan alone (its verdict, or
  // its fused iterations just before replay); "" if it does not, or nothing says so. The first
  // call after replay began notes `e` as the eager figure the plan's iterations are weighed by.
  static std::string replay_loses_to_plan(Sig& s, const RatioInterval& iv, double m, double e);
  void apply(std::uint64_t signature, Sig& s);
  void revert(std::uint64_t signature, Sig& s, const std::string& why);
  void remember(std::uint64_t signature, const Sig& s, bool compile);
  // Replay let go: a verdict remembered as won replayed no longer says so (a later run would
  // capture the plan early: exec/replay.h's kReplayAfterKnown).
  void forget_replay(std::uint64_t signature);
  double now_ms() const;
  double remembered_eager(std::uint64_t signature);  // a known winner's baseline, or 0

  PlanControl& plans_;
  mutable std::mutex mu_;
  Config config_;
  std::mutex memo_mu_;  // after mu_ when both are held; guards store_ and remembered_
  DecisionStore store_;
  std::map<std::uint64_t, std::optional<Decision>> remembered_;
  std::function<double()> fake_clock_;
  int cuda_device_ = -1;
  std::atomic<bool> cuda_noted_{false};
  std::deque<Stamp> stamps_;
  // Events are reused once no stamp holds them: creating and destroying one per iteration costs
  // driver calls on the training thread.
  std::vector<std::shared_ptr<CudaEvent>> events_;
  std::deque<std::int64_t> pauses_;  // op indices of pauses not yet behind a closed iteration
  int switching_ = 0;                // iterations still paying for a switch (kSwitchIterations)
  std::int64_t since_resume_ = 0;    // iterations closed since the last Pause ended
  std::uint64_t offsets_ = 0;        // round_offset's sequence
  std::deque<Pending> pending_;
  std::map<std::uint64_t, Sig> sigs_;
  std::function<bool()> plain_possible_;
  std::atomic<bool> plain_wanted_{false};
  std::deque<PlainBlock> plain_blocks_;  // started, not yet processed
};

}  // namespace hotpath::detail
