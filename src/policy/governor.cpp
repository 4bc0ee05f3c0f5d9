#include "policy/governor.h"

#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.h"
#include "common/log.h"
#include "compile/kernel_cache.h"
#include "trace/signature.h"

namespace hotpath::detail {
namespace {

constexpr std::size_t kRecent = 256;        // fused samples kept for the steady-state median
constexpr std::size_t kEagerCap = 1024;     // baseline samples kept
constexpr std::size_t kMinEager = 1;        // baseline samples needed before judging
constexpr std::size_t kTrustedEager = 5;    // ... to prefer them over a remembered baseline
constexpr std::size_t kEventPool = 128;     // CUDA events kept for reuse
constexpr std::size_t kMaxTrialGroups = 8;  // plans with more groups are not tried group by group

// Each pooled round's own interval.
template <typename Rounds>
std::vector<RatioInterval> intervals_of(const Rounds& evidence) {
  std::vector<RatioInterval> out;
  out.reserve(evidence.size());
  for (const auto& e : evidence) out.push_back(e.round);
  return out;
}

}  // namespace

Governor::Governor(PlanControl& plans, const Config& config)
    : plans_(plans),
      config_(config),
      store_(config.remember ? cache_dir(config.cache_dir) : std::string()) {}

void Governor::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  config_ = config;
  std::lock_guard<std::mutex> memo(memo_mu_);
  store_ = DecisionStore(config.remember ? cache_dir(config.cache_dir) : std::string());
  remembered_.clear();
}

void Governor::set_clock(std::function<double()> now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  fake_clock_ = std::move(now_ms);
}

void Governor::note_cuda(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cuda_device_ == -1) cuda_device_ = index;
  cuda_noted_ = true;
}

double Governor::now_ms() const {
  if (fake_clock_) return fake_clock_();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Governor::Stamp Governor::take_stamp(std::int64_t index) {
  Stamp s;
  s.index = index;
  s.cpu_ms = now_ms();
  if (cuda_device_ >= 0 && !fake_clock_) {
    try {
      for (const auto& e : events_) {
        if (e.use_count() == 1) {
          s.event = e;
          break;
        }
      }
      if (!s.event) {
        s.event = std::make_shared<CudaEvent>(cuda_device_);
        if (events_.size() < kEventPool) events_.push_back(s.event);
      }
      s.event->record(
          c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_device_)).stream());
    } catch (const Error& e) {
      log_warn(concat("hotpath: CUDA event timing unavailable (", e.what(),
                      "); timing with the CPU clock"));
      cuda_device_ = -2;  // do not try again
      s.event.reset();
    }
  }
  return s;
}

void Governor::stamp(std::int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stamps_.empty() && stamps_.back().index == index) return;
  stamps_.push_back(take_stamp(index));
  while (stamps_.size() > 64) stamps_.pop_front();
}

void Governor::note_pause(std::int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pauses_.empty() || pauses_.back() != index) pauses_.push_back(index);
  while (pauses_.size() > 64) pauses_.pop_front();
}

void Governor::resume(std::int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (since_resume_ >= 2 * kSwitchIterations) switching_ = kSwitchIterations;
  since_resume_ = 0;
  if (!stamps_.empty() && stamps_.back().index == index) stamps_.back() = take_stamp(index);
}

void Governor::on_iteration(const IterationEvent& c) {
  // The plan is asked outside our lock (it never calls us, but keep the order simple).
  const PlanControl::Run run = plans_.ran(c.signature, c.first);
  std::lock_guard<std::mutex> lock(mu_);
  const Stamp* a = nullptr;
  const Stamp* b = nullptr;
  for (const Stamp& s : stamps_) {
    if (s.index == c.first) a = &s;
    if (s.index == c.end) b = &s;
  }
  Sig& sig = sigs_[c.signature];
  if (c.hot && sig.hot_count < 0) {
    sig.hot_count = c.count;
    sig.hot_op = c.closed_at;
  }
  sig.last_count = c.count;
  // An iteration that left a plan part-way is a sample of that plan (what running with it cost),
  // whatever signature its ops make: judged on its complete iterations alone, a plan that is
  // often left would be judged faster than the loop runs with it.
  IterationEvent it = c;
  if (run.left_plan != 0 && run.left_plan != c.signature && c.core_end - c.first == run.plan_ops) {
    const auto planned = sigs_.find(run.left_plan);
    if (planned != sigs_.end()) {
      it.signature = run.left_plan;
      it.count = planned->second.last_count;
      it.hot = true;
    }
  }
  // A pause at c.first fell between the boundary's stamp and the first op only if resume did not
  // stamp it again: in an auto-detected loop the stamp is taken at the first op, after the pause.
  const bool paused = std::any_of(pauses_.begin(), pauses_.end(),
                                  [&](std::int64_t p) { return p > c.first && p <= c.end; });
  const bool switching = switching_ > 0;
  if (switching) --switching_;
  ++since_resume_;
  if (a != nullptr && b != nullptr && !paused) {
    pending_.push_back(Pending{it, run.fused, switching, run.epoch, run.final_tiers, run.stand_in,
                               run.waited, run.replayed, run.captured, *a, *b});
  }
  while (!stamps_.empty() && stamps_.front().index < c.end) stamps_.pop_front();
  while (!pauses_.empty() && pauses_.front() < c.end) pauses_.pop_front();
  drain(false);
}

void Governor::drain(bool block) {
  while (!plain_blocks_.empty() && plain_blocks_.front().ended &&
         !plain_blocks_.front().awaits_check) {
    const PlainBlock& b = plain_blocks_.front();
    // One sample per iteration where each iteration's start was stamped, else the block's mean.
    std::vector<const Stamp*> marks{&b.a};
    if (b.ticks.size() + 1 == static_cast<std::size_t>(b.iterations))
      for (const Stamp& t : b.ticks) marks.push_back(&t);
    marks.push_back(&b.b);
    const bool events =
        std::all_of(marks.begin(), marks.end(), [](const Stamp* m) { return m->event != nullptr; });
    if (events && !block && !b.b.event->done()) break;
    std::vector<double> gaps;
    for (std::size_t i = 1; i < marks.size(); ++i)
      gaps.push_back(marks[i]->cpu_ms - marks[i - 1]->cpu_ms);
    if (events) {
      try {
        while (!b.b.event->done()) {
        }
        for (std::size_t i = 1; i < marks.size(); ++i)
          gaps[i - 1] = CudaEvent::elapsed_ms(*marks[i - 1]->event, *marks[i]->event);
      } catch (const Error& e) {
        log_warn(concat("hotpath: reading CUDA event times failed: ", e.what()));
      }
    }
    double total = 0;
    for (const double g : gaps) total += g;
    const int iterations = b.iterations;
    if (gaps.size() == 1) gaps[0] /= iterations;
    const std::uint64_t signature = b.signature;
    plain_blocks_.pop_front();
    plain_result(signature, plain_samples(std::move(gaps), iterations), iterations, total);
  }
  while (!pending_.empty()) {
    const Pending& p = pending_.front();
    double ms = p.b.cpu_ms - p.a.cpu_ms;
    bool cuda = false;
    if (p.a.event && p.b.event) {
      try {
        if (!block && !p.b.event->done()) return;  // later; never wait in the steady state
        if (block) {
          while (!p.b.event->done()) {
          }
        }
        ms = CudaEvent::elapsed_ms(*p.a.event, *p.b.event);
        cuda = true;
      } catch (const Error& e) {
        log_warn(concat("hotpath: reading CUDA event times failed: ", e.what()));
      }
    }
    const Pending done = p;
    pending_.pop_front();
    process(done, ms, cuda);
  }
}

void Governor::process(const Pending& p, double ms, bool cuda) {
  Sig& s = sigs_[p.it.signature];
  ++s.timed;
  s.cuda_events = s.cuda_events || cuda;
  // The iterations around the switch to fused kernels, where break-even is decided; at trace
  // level every iteration (what the report's sums are made of).
  const bool early = s.hot_count >= 0 && p.it.count <= s.hot_count + 30;
  if (log_enabled(early ? LogLevel::Debug : LogLevel::Trace)) {
    log(early ? LogLevel::Debug : LogLevel::Trace,
        concat("hotpath: signature ", short_hex(p.it.signature), " iteration ", p.it.count, ": ",
               ms_text(ms), p.fused ? (p.final_tiers ? " fused" : " fused (stand-in)") : " eager",
               p.replayed ? ", replayed" : "", p.switching ? ", after a switch" : "", " (ops ",
               p.it.first, "-", p.it.end, ")"));
  }
  if (p.fused && s.first_fused < 0 && s.phase != Phase::Reverted) {
    s.first_fused = p.it.count;
    s.warming = kSwitchIterations;
    // Freeze the baseline; what the iterations between hot and now cost is the compile's price.
    // A baseline remembered from an earlier run beats one or two samples of a loop that is
    // still warming up (a known winner is compiled at first sight).
    const double prior = remembered_eager(p.it.signature);
    if (!s.eager.empty()) s.hooked_median = median_of(s.eager);
    if (prior > 0 && s.eager.size() < kTrustedEager) {
      s.eager_median = prior;
      s.base.clear();
      s.baseline_remembered = true;
      s.baseline_rebased = false;
    } else if (s.eager.size() >= kMinEager) {
      s.eager_median = median_of(s.eager);
      s.base = s.eager;
      s.baseline_remembered = false;
      s.baseline_rebased = false;
    }
    if (const auto d = remembered(p.it.signature); d && d->holds_capture()) {
      s.replay_held = true;  // as the planner held the plan's capture (Plan::replay_held)
      s.capture_prior = d->capture_ms;
      s.replay_ratio_prior = d->eager_ms > 0 ? d->fused_ms / d->eager_ms : 0;
    }
  }
  if (s.first_fused < 0) {
    if (!p.fused && s.eager.size() < kEagerCap) s.eager.push_back(ms);
    // After hot: the iterations that ran once hotpath knew the signature (an auto-detected loop
    // closes its first iterations together, after more have run).
    if (s.hot_count >= 0 && p.it.count > s.hot_count && p.it.first >= s.hot_op) {
      s.warm_n++;
      s.warm_ms += ms;
      s.ledger.add(p.it.count, ms);
    } else {
      s.cold_n++;
      s.cold_ms += ms;
    }
    return;
  }
  // (An iteration of the trial that ran the groups eagerly may have launched nothing: not fused.)
  if (!p.final_tiers && (p.stand_in || p.waited) && !s.stand_in_judged &&
      s.phase != Phase::Reverted) {
    if (s.stand_in_switch > 0) {
      --s.stand_in_switch;
    } else {
      (p.stand_in ? s.stand_in : s.stand_in_eager).push_back(ms);
      // Once per eager turn (the bootstrap runs on the training thread).
      if (!p.stand_in && s.stand_in_eager.size() >= kStandInSamples &&
          s.stand_in.size() >= kStandInSamples)
        judge_stand_in(p.it.signature, s);
    }
  }
  if (p.final_tiers) {
    s.steady_n++;
    s.steady_ms += ms;
  } else {
    s.interim_n++;
    s.interim_ms += ms;
  }
  s.ledger.add(p.it.count, ms);
  replay_costs(p.it.signature, s, p, ms);
  // Judged only as it will run from now on: not while the interpreter stands in for kernels,
  // nor in the iterations paying for a switch from plain eager.
  if (!p.fused || !p.final_tiers || p.epoch != s.epoch) return;
  if (s.warming > 0) {
    --s.warming;
    return;
  }
  if (!p.switching && replay_sample(p.it.signature, s, p)) fused_sample(p.it.signature, s, ms);
}

void Governor::fused_sample(std::uint64_t signature, Sig& s, double ms) {
  if (s.phase == Phase::Reverted) return;
  if (s.phase == Phase::Eager) s.phase = Phase::Measuring;
  const std::size_t half =
      std::max<std::size_t>(5, static_cast<std::size_t>(config_.revert_window) / 2);
  if (s.phase == Phase::Rebase) {  // the plan ran with every group off: an eager iteration
    s.eager.push_back(ms);
    if (s.eager.size() >= half) {
      s.eager_median = median_of(s.eager);
      s.base = s.eager;
      s.baseline_plain = false;  // eager under the hook
      s.baseline_rebased = true;
      s.baseline_remembered = false;
      s.baseline_fresh = true;
      s.rebased_warm = true;
      log_info(concat("hotpath: signature ", short_hex(signature), ": eager now ",
                      ms_text(s.eager_median), "; fused groups back on"));
      s.phase = Phase::Measuring;
      s.active = s.saved_active;
      apply(signature, s);
    }
    return;
  }
  s.recent.push_back(ms);
  if (s.recent.size() > kRecent) s.recent.pop_front();
  if (s.phase == Phase::Plain) return;  // the window waits for its plain-eager block
  s.window.push_back(ms);
  if (s.eager_median <= 0) {
    // No baseline (a known winner compiled at once, and nothing remembered): keep the plan.
    if (s.window.size() >= static_cast<std::size_t>(config_.revert_window)) s.window.clear();
    return;
  }
  const std::size_t need =
      s.phase == Phase::Trial ? half : static_cast<std::size_t>(config_.revert_window);
  if (s.window.size() >= need) judge_window(signature, s);
}

void Governor::judge_window(std::uint64_t signature, Sig& s) {
  const double m = median_of(s.window);
  if (s.phase == Phase::Trial)
    s.trial_samples[s.trial_pos] = s.window;
  else
    s.judged = s.window;
  s.window.clear();
  const auto plan = plans_.groups(signature);
  const std::size_t groups = plan ? plan->size() : 0;
  if (s.active.size() != groups) s.active.assign(groups, true);
  for (std::size_t g = 0; g < groups; ++g)
    if (!(*plan)[g].active_default) s.active[g] = false;

  if (s.phase == Phase::Trial) {
    trial_window(signature, s, m);
    return;
  }

  // The baseline is the loop without hotpath, timed in a block of its own, when the loop
  // allows one; timed again after a while (machines drift), less often while it holds.
  // Until a new block has been timed, the last one stays the baseline (and the report says so).
  bool recheck = std::exchange(s.plain_due, false);
  if (s.baseline_plain && ++s.windows_since_plain >= s.recheck_after) {
    recheck = true;
    s.recheck_after = std::min(s.recheck_after * 2, 80);
  }
  // An undecided first verdict pools another plain block with the next window; once settled,
  // windows are judged against the last block (a new one only when they look slower).
  const bool pool_block = (s.undecided > 0 && s.phase != Phase::Settled) || s.refining;
  if ((!s.baseline_plain || recheck || pool_block) && want_plain(signature, s)) return;
  decide(signature, s);
}

void Governor::decide(std::uint64_t signature, Sig& s) {
  const double m = median_of(s.judged);
  const double e = s.eager_median;
  const auto plan = plans_.groups(signature);
  const std::size_t groups = plan ? plan->size() : 0;
  auto rebase = [&](const std::string& why) {
    log_info(concat("hotpath: signature ", short_hex(signature), ": fused median ", ms_text(m),
                    " vs ", ms_text(e), why, "; timing eager again"));
    s.judged.clear();
    s.rounds.clear();
    s.undecided = 0;
    s.phase = Phase::Rebase;
    s.saved_active = s.active;
    s.active.assign(groups, false);
    s.eager.clear();
    apply(signature, s);
  };
  const std::vector<double> base = s.baseline_samples();
  const double limit = 1 + config_.revert_margin;
  if (m > e * limit && (s.baseline_remembered || !s.baseline_fresh) &&
      ratio_of_medians(s.judged, base, signature).low > 1.0) {
    // A regression against an old baseline is checked against a fresh one first (the machine
    // may have changed: rounds against the old one are not pooled with it).
    s.rounds.clear();
    s.undecided = 0;
    if (want_plain(signature, s)) return;
    rebase(s.baseline_remembered ? " remembered from an earlier run" : " measured earlier");
    return;
  }
  // A cold baseline flatters the fused path: a first win is confirmed against a warm one.
  if (m <= e * (1 + config_.revert_margin) && !s.rebased_warm && !s.baseline_remembered) {
    s.rebased_warm = true;
    rebase(" measured in the first iterations of the process");
    return;
  }
  // The evidence: a bootstrap interval of fused over eager. Slower only when the whole interval
  // says so, within the margin only when the whole interval does; in between, another round
  // (a window and, where the loop allows, a plain block beside it) is pooled with this one, up
  // to kMaxUndecided times. What is still within the noise then is no loss on evidence: kept.
  s.rounds.push_back(RatioRound{s.judged, base});
  const RatioInterval round =
      pooled_ratio(s.rounds, signature ^ static_cast<std::uint64_t>(s.timed));
  // A round that refines a kept plan's figure is one more sample of the same question: it is
  // judged with the rounds before it, not alone (eight rounds judged alone would revert a plan
  // whose loop is noisy, sooner or later, on one of them).
  const bool refine = s.refining && s.baseline_fresh && !s.evidence.empty();
  RatioInterval iv = round;
  if (refine) {
    std::vector<RatioInterval> all = intervals_of(s.evidence);
    all.push_back(round);
    iv = pool_intervals(all);
  }
  // One round's loss is timed again before anything reverts: a host whose speed swings puts one
  // plain block on a fast stretch and the window before it on a slow one, a loss the next round
  // (its window started at another offset, round_offset) does not repeat.
  const bool loss_seen = iv.ratio > limit && iv.low > 1.0;
  const bool slower = loss_seen && (s.rounds.size() > 1 || refine);
  const bool within = iv.high <= limit;
  const std::string evidence =
      concat(" (", percent(m, e), "; ratio ", interval_text(iv), " at 95% over ",
             s.rounds.size() + (refine ? s.evidence.size() : 0), " window(s) of ", s.judged.size(),
             " fused iterations, each against the eager ones timed beside it)");
  if (!slower && !within && s.undecided < kMaxUndecided && !refine) {
    ++s.undecided;
    (s.phase == Phase::Settled ? log_debug : log_info)(
        concat("hotpath: signature ", short_hex(signature), ": fused median ", ms_text(m), " vs ",
               s.baseline_plain ? "plain " : "", "eager ", ms_text(e), evidence,
               loss_seen ? ": slower in one round; timing another to see whether it repeats"
                         : ": within the noise; timing another window"));
    return;
  }
  const std::size_t windows = s.rounds.size();
  // Asked before the window's samples are cleared (replay against the plan's last iterations).
  const std::string replay_loss = slower ? "" : replay_loses_to_plan(s, iv, m, e);
  const Sig::Figure kept = s.verdict;
  record_evidence(signature, s, round, s.baseline_fresh, slower ? &iv : nullptr);
  s.judged.clear();
  s.rounds.clear();
  s.undecided = 0;
  if (slower) {
    const std::string why =
        concat("fused median ", ms_text(m), " vs ", s.baseline_plain ? "plain " : "", "eager ",
               ms_text(e), " (", percent(m, e), "; ratio ", interval_text(iv), " at 95%) over ",
               windows, " window(s) of ", config_.revert_window, " iterations");
    if (s.replaying) {  // the plan without its graphs is judged on its own again
      stop_replay(signature, s, concat("replayed, ", why));
      return;
    }
    std::vector<int> candidates;
    for (std::size_t g = 0; g < groups; ++g)
      if (s.active[g]) candidates.push_back(static_cast<int>(g));
    // Each group is left out for half a window: only small plans are worth it (a large plan that
    // loses is reverted whole; its loss is rarely one group's).
    if (!s.trialed && candidates.size() > 1 && candidates.size() <= kMaxTrialGroups) {
      log_info(concat("hotpath: signature ", short_hex(signature), ": ", why,
                      "; timing each group left out"));
      // Until the trial confirms the loss, the report keeps the figure it had (and says the
      // plan is being re-checked): one window that lost is not yet the plan's figure.
      if (kept.iv.known()) s.verdict = kept;
      start_trial(signature, s, candidates);
      return;
    }
    revert(signature, s, why);
    return;
  }
  s.baseline_fresh = false;  // it ages from here on
  if (!replay_loss.empty()) {
    stop_replay(signature, s, replay_loss);
    return;
  }
  if (s.phase != Phase::Settled) {
    s.phase = Phase::Settled;
    log_info(concat("hotpath: signature ", short_hex(signature), ": fused median ", ms_text(m),
                    " vs ", s.baseline_plain ? "plain " : "", "eager ", ms_text(e), evidence,
                    within ? "" : concat(": no loss beyond the noise over ", windows, " windows"),
                    "; keeping the fused path"));
    remember(signature, s, true);
  }
  // Kept; a figure too uncertain to report is measured further (only against plain eager: a
  // baseline under the hook is not what a side-by-side measures).
  const RatioInterval& v = s.verdict.iv;
  const bool wide =
      v.high > v.ratio * (1 + kVerdictPrecision) || v.low < v.ratio * (1 - kVerdictPrecision);
  const bool was_refining = s.refining;
  s.refining = wide && s.baseline_plain && !s.plain_never && s.refined < kMaxRefine;
  if (s.refining) {
    ++s.refined;
  } else if (was_refining) {
    log_info(concat("hotpath: signature ", short_hex(signature), ": steady-state speedup ",
                    speedup_text(s.verdict.iv), " at 95% over ", s.evidence.size(),
                    " round(s) of fused and plain-eager iterations"));
  }
}

void Governor::record_evidence(std::uint64_t signature, Sig& s, const RatioInterval& round,
                               bool fresh, const RatioInterval* loss) {
  auto set_verdict = [&s](const RatioInterval& iv, const auto& rounds) {
    std::int64_t fused = 0, eager = 0;
    for (const Sig::Evidence& e : rounds) fused += e.fused, eager += e.eager;
    s.set_verdict(iv, static_cast<std::size_t>(fused), static_cast<std::size_t>(eager),
                  rounds.size());
  };
  // A baseline that has aged since it was timed (the process warms up, the machine drifts)
  // flatters or wrongs the windows judged against it: they keep or re-check the plan, but they
  // are evidence for the report only while there is no other.
  if (loss == nullptr && !fresh && s.verdict.fused > 0) return;
  // Each round with its own interval: the one just computed when the decision rests on one round,
  // else each pooled round's (rare: up to kMaxUndecided of them).
  std::vector<Sig::Evidence> these;
  for (std::size_t i = 0; i < s.rounds.size(); ++i) {
    const RatioRound& r = s.rounds[i];
    const RatioInterval own =
        s.rounds.size() == 1 ? round : ratio_of_medians(r.num, r.den, signature + i);
    these.push_back(
        {own, static_cast<std::int64_t>(r.num.size()), static_cast<std::int64_t>(r.den.size())});
  }
  if (!fresh) {
    set_verdict(round, these);
    return;
  }
  if (s.evidence_epoch != s.epoch) {  // another configuration: its rounds say nothing of this one
    s.evidence.clear();
    s.refined = 0;
  }
  // A loss is reported as judged: by these rounds, or by them with the rounds they refined
  // (decide pooled those into `loss`).
  const bool with_earlier = s.refining && !s.evidence.empty();
  s.evidence_epoch = s.epoch;
  s.evidence.insert(s.evidence.end(), these.begin(), these.end());
  while (s.evidence.size() > kEvidenceRounds) s.evidence.pop_front();
  if (loss != nullptr) {
    set_verdict(*loss,
                with_earlier ? s.evidence : std::deque<Sig::Evidence>(these.begin(), these.end()));
    s.evidence.clear();
    return;
  }
  if (s.evidence.size() == these.size()) {
    set_verdict(round, these);
    return;
  }
  set_verdict(pool_intervals(intervals_of(s.evidence)), s.evidence);
}

void Governor::apply(std::uint64_t signature, Sig& s) {
  s.epoch = plans_.set_active(signature, s.active, s.reason);
  s.window.clear();
  s.recent.clear();
}

void Governor::revert(std::uint64_t signature, Sig& s, const std::string& why) {
  s.phase = Phase::Reverted;
  s.reason = "reverted: " + why;
  plans_.revert(signature, s.reason);
  log_info(concat("hotpath: signature ", short_hex(signature), ": ", why,
                  "; back to eager for the rest of this run"));
  remember(signature, s, false);
}

}  // namespace hotpath::detail
