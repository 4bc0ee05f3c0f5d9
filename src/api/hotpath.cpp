// Public entry points. Each thread that enables detection owns one Recorder.
#include "hotpath/hotpath.h"

#include <torch/version.h>

#include <chrono>
#include <iomanip>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/faults.h"
#include "common/log.h"
#include "compile/worker.h"
#include "dispatch/dispatch_hook.h"
#include "session/session.h"

namespace hotpath {
namespace detail {

[[noreturn]] void fail(const char* file, int line, const std::string& message) {
  std::ostringstream os;
  os << "hotpath: " << message << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

namespace {
struct ThreadState {
  std::shared_ptr<Session> session;  // kept after disable so stats() stays readable
};
thread_local ThreadState tls_state;
}  // namespace

std::shared_ptr<Session> thread_session() { return tls_state.session; }

}  // namespace detail

using detail::tls_state;

void enable_hot_path_detection(int threshold) {
  Config c;
  c.threshold = threshold;
  enable_hot_path_detection(c);
}

void enable_hot_path_detection(const Config& requested) {
  const Config config = config_from_env(requested);
  detail::arm_faults_from_env();
  HOTPATH_CHECK(config.threshold >= 1, "threshold must be >= 1, got ", config.threshold);
  HOTPATH_CHECK(config.max_period_ops >= 1, "max_period_ops must be >= 1, got ",
                config.max_period_ops);
  detail::set_log_level(config.log_level);
  detail::set_log_time(config.log_time);
  HOTPATH_CHECK(config.revert_window >= 2, "revert_window must be >= 2, got ",
                config.revert_window);
  HOTPATH_CHECK(config.replay_graph_ops >= 0, "replay_graph_ops must be >= 0, got ",
                config.replay_graph_ops);
  HOTPATH_CHECK(config.compile_ahead >= 0, "compile_ahead must be >= 0 (0: compile once hot), got ",
                config.compile_ahead);
  HOTPATH_CHECK(config.revert_margin >= 0, "revert_margin must be >= 0, got ",
                config.revert_margin);
  if (detail::current_thread_attached()) {
    tls_state.session->configure(config);
    tls_state.session->prepare_known();
    return;
  }
  auto session = std::make_shared<detail::Session>(config);
  detail::attach_current_thread(session);  // throws if the key is taken; nothing changed then
  tls_state.session = std::move(session);
  tls_state.session->prepare_known();
}

void disable_hot_path_detection() {
  if (!detail::current_thread_attached()) return;
  tls_state.session->executor.flush();  // nothing deferred may stay unwritten
  tls_state.session->executor.release_buffers();
  detail::detach_current_thread();
}

bool is_enabled() { return detail::current_thread_attached(); }

void step() {
  if (!detail::current_thread_attached()) return;
  tls_state.session->boundary();
  tls_state.session->recorder.mark_step();
}

Iteration::Iteration() {
  if (!detail::current_thread_attached()) return;
  tls_state.session->boundary();
  tls_state.session->recorder.begin_scope();
}

Iteration::~Iteration() {
  if (!detail::current_thread_attached()) return;
  tls_state.session->boundary();
  tls_state.session->recorder.end_scope();
}

Pause::Pause() {
  // Nothing deferred or skipped may stay unwritten where the paused code can read it.
  if (detail::current_thread_attached()) {
    tls_state.session->cancel_plain_block();  // a block's time would include the pause's
    tls_state.session->executor.flush(/*keep_plan=*/true);
    tls_state.session->governor.note_pause(tls_state.session->recorder.next_index());
  }
  was_excluded_ = detail::pause_current_thread();
}

Pause::~Pause() {
  detail::resume_current_thread(was_excluded_);
  if (detail::current_thread_attached())
    tls_state.session->governor.resume(tls_state.session->recorder.next_index());
}

void wait_for_compilation() {
  std::vector<std::uint64_t> pending;
  if (tls_state.session) pending = tls_state.session->executor.pending_plans();
  const auto t0 = std::chrono::steady_clock::now();
  detail::CompileWorker::instance().drain();
  // The interpreter kernel only stands in for kernels still compiling: where no prebuilt copy
  // fits it compiles for seconds, and a loop whose kernels are all in must not wait for it.
  if (tls_state.session && tls_state.session->executor.waits_on_interpreter())
    detail::CompileWorker::side().drain();
  const double ms = detail::ms_since(t0);
  if (tls_state.session) tls_state.session->executor.add_stall(pending, ms);
}

Report report() {
  Report r;
  if (!tls_state.session) return r;
  Stats s = tls_state.session->recorder.snapshot();
  tls_state.session->executor.fill_stats(s);
  tls_state.session->governor.fill_report(s, r);
  return r;
}

Stats stats() {
  Stats s;
  if (tls_state.session) {
    s = tls_state.session->recorder.snapshot();
    tls_state.session->executor.fill_stats(s);
    tls_state.session->fill_stats(s);
  }
  s.enabled = detail::current_thread_attached();
  return s;
}

std::int64_t Stats::hot_signatures() const {
  std::int64_t n = 0;
  for (const auto& s : signatures) n += s.hot ? 1 : 0;
  return n;
}

SignatureStats Stats::last() const {
  for (const auto& s : signatures) {
    if (s.id == last_signature) return s;
  }
  return {};
}

std::string format_stats(const Stats& s) {
  std::ostringstream os;
  const char* mode = s.boundaries == BoundaryMode::Explicit ? "explicit"
                     : s.boundaries == BoundaryMode::Auto   ? "auto-detected"
                                                            : "none yet";
  os << "hotpath: " << (s.enabled ? "enabled" : "disabled") << ", threshold " << s.threshold
     << ", iterations " << s.iterations << " (boundaries " << mode;
  if (s.detected_period > 0) os << ", period " << s.detected_period << " ops";
  if (s.passes_per_step > 0) os << ", at forward passes, " << s.passes_per_step << " per step";
  os << "), ops seen " << s.ops_seen << " (" << s.ops_unassigned << " outside iterations";
  if (s.ops_tail_lane > 0) os << ", " << s.ops_tail_lane << " in steps' tails on the light lane";
  os << "), " << s.signatures.size() << " signature(s), " << s.hot_signatures() << " hot\n";
  if (s.stood_aside > 0) {
    os << "  stood aside " << s.stood_aside << " time(s) (" << s.aside_seconds
       << " s planned; the loop ran plain eager meanwhile)" << (s.standing_aside ? ", now" : "")
       << ": " << s.aside_reason << "\n";
  }
  if (s.host_ops > 0) {
    const double n = static_cast<double>(s.host_ops);
    os << "  host: " << s.host_ops << " op(s) timed, " << std::fixed << std::setprecision(2)
       << s.host_hook_us / n << " us an op in hotpath's hook, " << s.host_below_us / n
       << " us in the ATen work it ran below itself; of the hook's: record " << s.host_record_us / n
       << ", data flow " << s.host_flow_us / n << ", guard " << s.host_guard_us / n << ", defer "
       << s.host_defer_us / n << ", launch " << s.host_launch_us / n << ", copies "
       << s.host_copy_us / n << ", graphs " << s.host_graph_us / n << ", commit "
       << s.host_commit_us / n << std::defaultfloat << "\n";
  }
  for (const auto& sig : s.signatures) {
    os << "  " << sig.hex << "  " << sig.count << "x  " << sig.ops_per_iteration << " ops";
    if (sig.hot) os << "  hot since iteration " << sig.hot_at_iteration;
    const FusionStats& f = sig.fusion;
    if (f.planned && !f.ready) {
      os << "  being analysed in the background";
    } else if (f.planned) {
      os << "  " << f.groups.size() << " fused group(s), " << f.fused_ops << " ops";
      if (!f.groups.empty() && !f.compiled) {
        if (!f.stand_in_off.empty())
          os << ", compiling (they run eagerly meanwhile)";
        else if (!f.stand_in_kept.empty())
          os << ", compiling (the interpreter runs them meanwhile: " << f.stand_in_kept << ")";
        else
          os << ", compiling (the interpreter on trial meanwhile, every fourth iteration eager)";
      } else if (!f.groups.empty()) {
        os << ", compiled in " << static_cast<long long>(f.compile_ms + 0.5) << " ms";
        if (f.kernels_from_cache > 0) os << " (" << f.kernels_from_cache << " from cache)";
      }
      if (f.reverted) os << ", REVERTED (" << f.reason << ")";
      if (!f.remembered.empty()) os << ", " << f.remembered;
      if (!f.stand_in_off.empty()) os << ", no interpreter stand-in (" << f.stand_in_off << ")";
      if (f.first_fused_iteration >= 0) os << ", fused since iteration " << f.first_fused_iteration;
      os << ", " << f.fused_iterations << " fused iteration(s), " << f.divergences
         << " divergence(s)";
      if (f.restored > 0) os << ", " << f.restored << " skipped value(s) restored";
      if (!f.last_divergence.empty()) os << "; the last left the plan at " << f.last_divergence;
    }
    os << "\n";
    if (f.replayed_iterations > 0 || f.replay_graphs > 0 || !f.replay_off.empty()) {
      os << "    replay: " << f.replayed_iterations << " iteration(s) replayed as CUDA graphs";
      if (f.replay_graphs > 0) os << " (" << f.replay_graphs << " graph(s) now)";
      if (f.replay_pool_bytes > 0)
        os << ", their pool " << std::fixed << std::setprecision(1)
           << f.replay_pool_bytes / 1048576.0 << std::defaultfloat << " MiB";
      if (f.replay_captures > 0)
        os << ", " << f.replay_captures << " capture(s) taking " << std::fixed
           << std::setprecision(1) << f.replay_capture_ms << std::defaultfloat
           << " ms of host time (the last opened " << f.replay_capture_segments
           << " allocator segment(s))";
      if (f.replay_rescued > 0)
        os << ", " << f.replay_rescued << " value(s) the loop kept copied out of the pool";
      if (f.replay_copy_nodes > 0)
        os << ", " << f.replay_copy_nodes << " moving input(s) copied in by the graphs ("
           << f.replay_repointed << " move(s) followed)";
      if (f.replay_launcher_launches > 0)
        os << ", " << f.replay_launcher_launches << " launch(es) issued by the launcher thread in "
           << std::fixed << std::setprecision(1) << f.replay_launcher_ms << std::defaultfloat
           << " ms";
      if (f.replay_premade_outputs > 0)
        os << ", " << f.replay_premade_outputs << " output(s) it made ahead";
      if (!f.replay_off.empty()) os << "; off: " << f.replay_off;
      os << "\n";
    }
    for (const GroupStats& g : f.groups) {
      os << "    " << g.name << " (" << g.ops << " ops" << (g.gpu ? "" : ", cpu");
      if (g.gpu && g.compiled) {
        os << ", " << g.compile_ms << " ms" << (g.from_cache ? " cached" : "");
      }
      os << "): " << g.launches << " launches";
      if (g.interpreted > 0) os << " (" << g.interpreted << " interpreted)";
      os << ", " << g.eager_runs << " eager runs";
      if (!g.active && !f.reverted) os << ", reverted (runs eagerly)";
      if (g.checks > 0) {
        os << ", " << g.checks << " verified, max error " << g.max_rel_error;
        if (g.verify_failures > 0) os << ", " << g.verify_failures << " BEYOND TOLERANCE";
      }
      if (!g.error.empty()) {
        os << (g.interpretable ? ", interpreted: " : ", eager: ")
           << g.error.substr(0, g.error.find('\n'));
      }
      os << "\n";
    }
  }
  return os.str();
}

std::string libtorch_version() { return TORCH_VERSION; }

}  // namespace hotpath
