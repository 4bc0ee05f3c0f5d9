// The governor's verdicts as they outlive the iteration: remembered in the cache directory for
// later runs, and filled into report() (the timing half of each signature's report).
#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/log.h"
#include "policy/governor.h"
#include "trace/signature.h"

namespace hotpath::detail {

void Governor::remember(std::uint64_t signature, const Sig& s, bool compile) {
  Decision d;
  d.compile = compile;
  d.eager_ms = s.eager_median;
  d.fused_ms = median_of(std::vector<double>(s.recent.begin(), s.recent.end()));
  d.reason = s.reason;
  d.replay_kept = compile && s.replaying;
  // This run's capture, or the one the plan was held for if it had none.
  d.capture_ms = s.capture_cost > 0 ? s.capture_cost : s.capture_prior;
  // Its pool, for the next run's capture to take before it starts (PlanPrior).
  if (d.replay_kept) {
    const PlanControl::Pool pool = plans_.replay_pool(signature);
    d.replay_pool_bytes = pool.bytes;
    d.replay_pool_small_bytes = pool.small_bytes;
  }
  if (const auto plan = plans_.groups(signature)) {
    for (std::size_t g = 0; g < plan->size(); ++g) {
      d.groups.push_back(g < s.active.size() ? s.active[g] : true);
      d.names.push_back((*plan)[g].name);
    }
  }
  std::lock_guard<std::mutex> memo(memo_mu_);
  store_.save(signature, d);
  remembered_[signature] = d;
}

void Governor::forget_replay(std::uint64_t signature) {
  std::lock_guard<std::mutex> memo(memo_mu_);
  const auto it = remembered_.find(signature);
  if (it == remembered_.end() || !it->second || !it->second->replay_kept) return;
  it->second->replay_kept = false;
  store_.save(signature, *it->second);
}

std::optional<Decision> Governor::remembered(std::uint64_t signature) {
  std::lock_guard<std::mutex> memo(memo_mu_);
  const auto it = remembered_.find(signature);
  if (it != remembered_.end()) return it->second;
  auto d = store_.load(signature);
  if (d && !d->compile) {
    if (d->skipped >= kLoserRuns) {
      log_info(concat("hotpath: signature ", short_hex(signature), " lost in an earlier run and ",
                      "has run eagerly in ", d->skipped, " runs since; trying it again"));
      d.reset();
    } else {
      ++d->skipped;  // this run keeps it eager too
      store_.save(signature, *d);
    }
  }
  remembered_[signature] = d;
  return d;
}

std::vector<std::pair<std::uint64_t, PlanPrior>> Governor::known_winners(std::size_t most) {
  std::lock_guard<std::mutex> memo(memo_mu_);
  std::vector<std::pair<std::uint64_t, PlanPrior>> out;
  for (auto& [signature, d] : store_.winners(most)) out.emplace_back(signature, std::move(d));
  return out;
}

double Governor::remembered_eager(std::uint64_t signature) {
  std::lock_guard<std::mutex> memo(memo_mu_);
  const auto it = remembered_.find(signature);
  if (it == remembered_.end() || !it->second || !it->second->compile) return 0;
  return it->second->eager_ms;
}

void Governor::fill_report(const Stats& stats, Report& report) {
  std::lock_guard<std::mutex> lock(mu_);
  drain(true);
  for (const SignatureStats& st : stats.signatures) {
    SignatureReport r;
    r.hex = st.hex;
    r.ops_per_iteration = st.ops_per_iteration;
    r.iterations = st.count;
    const FusionStats& f = st.fusion;
    r.compile_ms = f.compile_ms;
    r.stall_ms = f.stall_ms;
    for (const GroupStats& g : f.groups) r.kernels += g.gpu ? 1 : 0;
    r.kernels_from_cache = f.kernels_from_cache;
    r.kernels_ahead = f.kernels_ahead;
    r.fused_iterations = f.fused_iterations;
    r.left_plan = f.divergences;
    const auto it = sigs_.find(st.id);
    if (it != sigs_.end()) {
      const Sig& s = it->second;
      r.timed_iterations = s.timed;
      r.hot_at_iteration = s.hot_count;
      r.cuda_events = s.cuda_events;
      r.first_fused_iteration = s.first_fused;
      r.eager_median_ms = s.eager_median > 0 ? s.report_eager() : median_of(s.eager);
      r.hooked_eager_ms = s.hooked_median;
      r.baseline_remembered = s.baseline_remembered;
      r.baseline_plain = s.baseline_plain;
      r.baseline_rebased = s.baseline_rebased;
      r.plain_blocks = s.plain_blocks;
      r.plain_blocks_marked = s.plain_marked;
      r.plain_blocks_dropped = s.plain_dropped;
      r.plain_blocks_unconfirmed = s.plain_unconfirmed;
      r.fused_median_ms = median_of(std::vector<double>(s.recent.begin(), s.recent.end()));
      if (s.verdict.iv.known()) {  // the last verdict's rounds: fused windows against eager beside
        r.speedup_judged = 1 / s.verdict.iv.ratio;
        r.speedup_low = 1 / s.verdict.iv.high;
        r.speedup_high = 1 / s.verdict.iv.low;
        r.speedup_samples_fused = s.verdict.fused;
        r.speedup_samples_eager = s.verdict.eager;
        r.speedup_rounds = s.verdict.rounds;
      }
      r.before_hot_iterations = s.cold_n;
      r.before_hot_ms = s.cold_ms;
      r.warmup_iterations = s.warm_n;
      r.warmup_ms = s.warm_ms;
      r.interim_iterations = s.interim_n;
      r.interim_ms = s.interim_ms;
      r.steady_iterations = s.steady_n;
      r.steady_ms = s.steady_ms;
      r.plain_iterations = s.plain_n;
      r.plain_ms = s.plain_ms;
      if (!s.plain_all.empty()) {
        double sum = 0;
        for (const double x : s.plain_all) sum += x;
        r.plain_mean_ms = sum / static_cast<double>(s.plain_all.size());
      }
      if (s.plain_medians.size() >= 2) {
        const auto [lo, hi] = std::minmax_element(s.plain_medians.begin(), s.plain_medians.end());
        r.plain_low_ms = *lo;
        r.plain_high_ms = *hi;
      }
      // Against the figure the totals are taken against: the break-even named is where the
      // totals' sums cross, and stay across.
      const double e = r.eager_median_ms;
      if (e > 0) r.break_even_actual = s.ledger.break_even(e, s.first_fused);
      const double saving = e - r.fused_median_ms;
      if (s.first_fused >= 0 && r.fused_median_ms > 0 && saving > 0) {
        r.break_even_projected =
            s.first_fused +
            static_cast<std::int64_t>(std::ceil(s.ledger.cost_before(e, s.first_fused) / saving));
      }
      r.reason = s.reason;
      r.judged = ((s.phase == Phase::Settled && !s.refining) || s.phase == Phase::Reverted) &&
                 !s.baseline_remembered;
    }
    if (!f.remembered.empty()) {
      r.reason = r.reason.empty() ? f.remembered : f.remembered + "; " + r.reason;
    }
    // The verdict.
    if (f.reverted) {
      r.verdict = Verdict::EagerWins;
      if (r.reason.empty()) r.reason = f.reason;
    } else if (!f.planned || f.groups.empty() || r.first_fused_iteration < 0) {
      // A plan the worker has not built yet has no groups to show: not "nothing to fuse" (seen
      // on a fresh machine, its worker compiling the interpreter kernel for 2 s first).
      const bool building = f.planned && !f.ready;
      r.verdict =
          building || (f.planned && !f.groups.empty()) ? Verdict::Pending : Verdict::NotCompiled;
      if (building && r.reason.empty()) r.reason = "its plan is still being built on the worker";
      if (r.verdict == Verdict::NotCompiled && r.reason.empty()) {
        r.reason = !st.hot ? "never hot" : !f.planned ? "fusion is off" : "nothing to fuse";
      }
    } else if (r.eager_median_ms <= 0 || r.fused_median_ms <= 0) {
      r.verdict = Verdict::Pending;
    } else if (r.speedup_judged > 0) {  // as judged: beyond the margin, and the interval agrees
      if (r.speedup_judged > 1 / (1 - config_.revert_margin) && r.speedup_low > 1.0)
        r.verdict = Verdict::CompileWins;
      else if (r.speedup_judged < 1 / (1 + config_.revert_margin) && r.speedup_high < 1.0)
        r.verdict = Verdict::EagerWins;
      else
        r.verdict = Verdict::Even;
    } else if (r.fused_median_ms < r.eager_median_ms * (1 - config_.revert_margin)) {
      r.verdict = Verdict::CompileWins;
    } else if (r.fused_median_ms > r.eager_median_ms * (1 + config_.revert_margin)) {
      r.verdict = Verdict::EagerWins;
    } else {
      r.verdict = Verdict::Even;
    }
    report.signatures.push_back(std::move(r));
  }
}

}  // namespace hotpath::detail
