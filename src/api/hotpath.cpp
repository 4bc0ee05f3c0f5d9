// Public entry points. Each thread that enables detection owns one Recorder.
#include "hotpath/hotpath.h"

#include <torch/version.h>

#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/dispatch_hook.h"
#include "trace/recorder.h"

namespace hotpath {
namespace detail {

[[noreturn]] void fail(const char* file, int line, const std::string& message) {
  std::ostringstream os;
  os << "hotpath: " << message << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

namespace {
struct ThreadState {
  std::shared_ptr<Recorder> recorder;  // kept after disable so stats() stays readable
};
thread_local ThreadState tls_state;
}  // namespace

}  // namespace detail

using detail::tls_state;

void enable_hot_path_detection(int threshold) {
  Config c;
  c.threshold = threshold;
  enable_hot_path_detection(c);
}

void enable_hot_path_detection(const Config& requested) {
  const Config config = config_from_env(requested);
  HOTPATH_CHECK(config.threshold >= 1, "threshold must be >= 1, got ", config.threshold);
  HOTPATH_CHECK(config.max_period_ops >= 1, "max_period_ops must be >= 1, got ",
                config.max_period_ops);
  detail::set_log_level(config.log_level);
  if (detail::current_thread_attached()) {
    tls_state.recorder->configure(config);
    return;
  }
  auto recorder = std::make_shared<detail::Recorder>(config);
  detail::attach_current_thread(recorder);  // throws if the key is taken; nothing changed then
  tls_state.recorder = std::move(recorder);
}

void disable_hot_path_detection() { detail::detach_current_thread(); }

bool is_enabled() { return detail::current_thread_attached(); }

void step() {
  if (detail::current_thread_attached()) tls_state.recorder->mark_step();
}

Iteration::Iteration() {
  if (detail::current_thread_attached()) tls_state.recorder->begin_scope();
}

Iteration::~Iteration() {
  if (detail::current_thread_attached()) tls_state.recorder->end_scope();
}

Stats stats() {
  Stats s;
  if (tls_state.recorder) s = tls_state.recorder->snapshot();
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
  os << "), ops seen " << s.ops_seen << " (" << s.ops_unassigned << " outside iterations), "
     << s.signatures.size() << " signature(s), " << s.hot_signatures() << " hot\n";
  for (const auto& sig : s.signatures) {
    os << "  " << sig.hex << "  " << sig.count << "x  " << sig.ops_per_iteration << " ops";
    if (sig.hot) os << "  hot since iteration " << sig.hot_at_iteration;
    os << "\n";
  }
  return os.str();
}

std::string libtorch_version() { return TORCH_VERSION; }

}  // namespace hotpath
