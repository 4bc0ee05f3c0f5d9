// The verdict table (report()'s printer).
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "common/log.h"
#include "hotpath/hotpath.h"

namespace hotpath {
namespace {

// Plain-eager blocks this far apart (highest median over lowest) are named in the report.
constexpr double kDriftShown = 1.10;
// The judged figure (medians) this far from the means' is named beside them.
constexpr double kMeansApartShown = 0.05;

using detail::ms_text;

std::string ratio(double num, double den) {
  if (num <= 0 || den <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", num / den);
  return buf;
}

// What the loop's time adds up to: plain eager's mean against the steady state's, beside the
// judged figure, which compares medians and so leaves out a tail of slow iterations.
void means_line(std::ostream& os, const SignatureReport& r) {
  if (r.plain_mean_ms <= 0 || r.steady_iterations <= 0 || r.steady_ms <= 0) return;
  const double fused = r.steady_ms / static_cast<double>(r.steady_iterations);
  const double by_means = r.plain_mean_ms / fused;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "By means, what the loop's time adds up to: plain eager %s, the steady state's "
                "%lld fused iterations %s as they ran: %.2fx",
                ms_text(r.plain_mean_ms).c_str(), static_cast<long long>(r.steady_iterations),
                ms_text(fused).c_str(), by_means);
  os << buf;
  const double apart = r.speedup_judged / by_means - 1;  // the judged figure beside the means'
  if (r.speedup_judged > 0 && std::abs(apart) > kMeansApartShown) {
    std::snprintf(buf, sizeof buf,
                  " (the judged figure, medians of its latest windows, reads %.0f%% %s: slow "
                  "iterations weigh on a mean and not on a median, as does a slower stretch "
                  "earlier in the run)",
                  100 * std::abs(apart), apart > 0 ? "higher" : "lower");
    os << buf;
  }
  os << "\n";
}

std::string row(const std::string& label, double eager, double actual) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-40s %14s %14s %10s\n", label.c_str(), ms_text(eager).c_str(),
                ms_text(actual).c_str(), ratio(eager, actual).c_str());
  return buf;
}

}  // namespace

std::string format_report(const SignatureReport& r) {
  std::ostringstream os;
  os << "hotpath report: signature " << r.hex << ", " << r.ops_per_iteration << " ops/iteration, "
     << r.iterations << " iterations (" << r.timed_iterations << " timed with "
     << (r.cuda_events ? "CUDA events" : "a steady clock") << ")\n";
  if (r.hot_at_iteration >= 0) {
    os << "  hot at iteration " << r.hot_at_iteration;
    if (r.first_fused_iteration >= 0) os << ", fused from iteration " << r.first_fused_iteration;
    if (r.kernels > 0) {
      char ahead[64] = "";
      if (r.kernels_ahead > 0)
        std::snprintf(ahead, sizeof ahead, ", %d compiled ahead of hot", r.kernels_ahead);
      char buf[224];
      std::snprintf(buf, sizeof buf,
                    "; %d kernel(s), %.1f ms compiling on the worker (%d from the cache%s), "
                    "training thread waited %.1f ms",
                    r.kernels, r.compile_ms, r.kernels_from_cache, ahead, r.stall_ms);
      os << buf;
    }
    os << "\n";
  }
  if (r.left_plan > 0) {
    os << "  left the plan part-way in " << r.left_plan << " of "
       << r.fused_iterations + r.left_plan
       << " iterations that started on it (each finished eagerly; not in the judged speedup, so "
          "the loop gains less than it says; stats() says where the last one left)\n";
  }
  const double e = r.eager_median_ms;
  const bool table = e > 0 && r.timed_iterations > 0;
  // The run's totals: the iterations before hot and the plain-eager blocks as they ran on both
  // sides; from hot on, the eager median times the iterations against what they took.
  const double overall_eager =
      r.before_hot_ms +
      e * static_cast<double>(r.warmup_iterations + r.interim_iterations + r.steady_iterations) +
      r.plain_ms;
  const double overall = r.before_hot_ms + r.warmup_ms + r.interim_ms + r.steady_ms + r.plain_ms;
  if (table) {
    const std::string line(82, '-');
    char head[160];
    std::snprintf(head, sizeof head, "%-40s %14s %14s %10s\n", "Results", "No Compile", "Compile",
                  "Speedup");
    os << "\n" << head << line << "\n";
    const auto bn = r.before_hot_iterations, wn = r.warmup_iterations, in = r.interim_iterations,
               sn = r.steady_iterations;
    if (bn > 0) {
      os << row("Before hot (first " + std::to_string(bn) + " iters):", r.before_hot_ms,
                r.before_hot_ms);
    }
    if (wn > 0) {
      os << row("Warm-up (" + std::to_string(wn) + " iters from hot):", e * static_cast<double>(wn),
                r.warmup_ms);
      os << row("  Per iteration:", e, r.warmup_ms / static_cast<double>(wn));
    }
    if (in > 0) {
      os << row("Kernels compiling (" + std::to_string(in) + " iters):",
                e * static_cast<double>(in), r.interim_ms);
      os << row("  Per iteration:", e, r.interim_ms / static_cast<double>(in));
    }
    os << row("Steady state (remaining " + std::to_string(sn) + " iters):",
              e * static_cast<double>(sn), r.steady_ms);
    if (sn > 0) os << row("  Per iteration:", e, r.steady_ms / static_cast<double>(sn));
    const auto pn = r.plain_iterations;
    if (pn > 0)
      os << row("Plain-eager blocks (" + std::to_string(pn) + " iters):", r.plain_ms, r.plain_ms);
    os << line << "\n";
    const auto n = bn + wn + in + sn + pn;
    os << row("TOTAL TIME:", overall_eager, overall);
    if (n > 0)
      os << row("Average per iteration:", overall_eager / static_cast<double>(n),
                overall / static_cast<double>(n));
    if (bn > 0) {
      os << "(Before hot: on both sides those iterations as they ran, eagerly under the hook; "
            "their first ones pay for the process's start, as plain eager's would. The hook's "
            "cost in them is not counted here.)\n";
    }
    if (pn > 0) {
      os << "(Plain-eager blocks: iterations the governor ran with hotpath out of the dispatch, "
            "to time eager beside the fused path; on both sides as they ran. The fused "
            "iterations that paid for the switch back are in the rows above.)\n";
    }
    if (in > 0) {
      os << "(Kernels compiling: fused iterations that ran before every group had its own kernel, "
            "the interpreter or the groups' eager ops standing in; an iteration captured as CUDA "
            "graphs counts here too.)\n";
    }
    os << "(No Compile from hot on: the eager median, " << ms_text(e) << ", times the iterations; ";
    if (r.baseline_plain)
      os << "timed plain, with hotpath out of the dispatch (" << r.plain_blocks
         << (r.plain_blocks == 1 ? " block" : " blocks") << " of iterations"
         << (r.plain_blocks_marked > 0
                 ? ", " + std::to_string(r.plain_blocks_marked) + " counted by the iteration marker"
                 : std::string())
         << (r.plain_blocks_dropped > 0
                 ? ", " + std::to_string(r.plain_blocks_dropped) + " dropped: miscounted"
                 : std::string())
         << (r.plain_blocks_unconfirmed > 0
                 ? ", " + std::to_string(r.plain_blocks_unconfirmed) + " dropped: end unconfirmed"
                 : std::string())
         << "))\n";
    else
      os << (r.baseline_remembered ? "remembered from an earlier run"
             : r.baseline_rebased
                 ? "re-timed under the hook with every fused group off: interception's cost "
                   "included, so the speedup over plain eager is smaller"
                 : "measured under the hook before the plan ran")
         << ")\n";
    if (r.first_fused_iteration >= 0) {
      os << "Medians: eager " << ms_text(e) << ", fused " << ms_text(r.fused_median_ms)
         << "; break-even ";
      if (r.break_even_projected >= 0)
        os << "projected at iteration " << r.break_even_projected;
      else
        os << "never (no saving)";
      if (r.break_even_actual >= 0) {
        os << ", reached at iteration " << r.break_even_actual;
        if (r.hot_at_iteration >= 0)
          os << " (" << r.break_even_actual - r.hot_at_iteration << " after hot)";
      } else {
        os << ", not reached";
      }
      os << "\n";
      if (r.speedup_judged > 0) {
        char buf[240];
        std::snprintf(buf, sizeof buf,
                      "As judged: steady-state speedup %.2fx, 95%% interval %.2f-%.2fx (bootstrap "
                      "over %lld fused iterations, each window against the %lld eager ones timed "
                      "beside it",
                      r.speedup_judged, r.speedup_low, r.speedup_high,
                      static_cast<long long>(r.speedup_samples_fused),
                      static_cast<long long>(r.speedup_samples_eager));
        os << buf;
        if (r.speedup_rounds == 1)
          os << "; one round: the interval does not cover how far eager timed at another moment "
                "may fall";
        else if (r.speedup_rounds > 1)
          os << "; pooled over " << r.speedup_rounds << " rounds";
        os << ")\n";
      }
      means_line(os, r);
    }
    if (r.baseline_plain && r.hooked_eager_ms > 0) {
      os << "Eager under the hook, before the plan ran: " << ms_text(r.hooked_eager_ms)
         << " per iteration (" << ratio(r.hooked_eager_ms, e)
         << " of plain eager: the hook's cost on ops it does not fuse, in iterations of a "
            "process still warming up)\n";
    }
  }
  // A machine whose speed moved while the run was timed: the judged figure's interval does not
  // cover that.
  if (r.plain_low_ms > 0 && r.plain_high_ms >= r.plain_low_ms * kDriftShown) {
    os << "Plain eager moved over the run: its blocks' medians ranged " << ms_text(r.plain_low_ms)
       << " to " << ms_text(r.plain_high_ms) << " (" << ratio(r.plain_high_ms, r.plain_low_ms)
       << " apart); a side-by-side timed at another moment can read a speedup that far from "
          "this run's\n";
  }
  std::string steady =
      r.steady_iterations > 0 && r.fused_median_ms > 0 ? ratio(e, r.fused_median_ms) : "-";
  if (r.speedup_judged > 0) {  // the judged figure, where there is one, and how sure it is
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2fx (95%%: %.2f-%.2fx)", r.speedup_judged, r.speedup_low,
                  r.speedup_high);
    steady = buf;
  }
  os << "\nVERDICT: ";
  switch (r.verdict) {
    case Verdict::CompileWins:
      // Faster per iteration; overall only once the compile has been repaid.
      if (overall > 0 && overall_eager < overall)
        os << "COMPILE WINS (steady state " << steady
           << "; not repaid yet: " << ratio(overall_eager, overall) << " overall so far)";
      else
        os << "COMPILE WINS (" << ratio(overall_eager, overall)
           << " faster overall) · steady state " << steady;
      if (r.break_even_actual >= 0)
        os << " · break-even at iteration " << r.break_even_actual;
      else if (r.break_even_projected >= 0)
        os << " · break-even projected at iteration " << r.break_even_projected;
      break;
    case Verdict::EagerWins:
      os << "EAGER WINS";
      if (table) os << " (" << ratio(overall_eager, overall) << " overall)";
      os << (r.reason.empty() ? "" : " · ") << r.reason;
      break;
    case Verdict::Even:
      os << "EVEN (" << ratio(overall_eager, overall) << " overall) · steady state " << steady;
      break;
    case Verdict::Pending:
      os << "PENDING (still measuring)";
      break;
    case Verdict::NotCompiled:
      os << "NOT COMPILED (" << r.reason << ")";
      break;
  }
  if (!r.reason.empty() && r.verdict != Verdict::EagerWins && r.verdict != Verdict::NotCompiled)
    os << " · " << r.reason;
  os << "\n";
  return os.str();
}

std::string format_report(const Report& r) {
  std::ostringstream os;
  int quiet = 0;
  for (const SignatureReport& s : r.signatures) {
    if (s.hot_at_iteration < 0) {
      ++quiet;
      continue;
    }
    os << format_report(s) << "\n";
  }
  if (quiet > 0)
    os << quiet << " other signature(s) never turned hot (they ran eagerly, untouched)\n";
  return os.str();
}

}  // namespace hotpath
