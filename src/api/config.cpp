#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "hotpath/hotpath.h"

namespace hotpath {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

long long parse_integer(const char* name, const char* text, long long min, long long max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  HOTPATH_CHECK(errno == 0 && end != text && *end == '\0' && v >= min && v <= max, name, "='", text,
                "' is not an integer in [", min, ", ", max, "]");
  return v;
}

double parse_fraction(const char* text) {
  const std::string s = text;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  HOTPATH_CHECK(!s.empty() && end == s.c_str() + s.size() && v >= 0 && v < 10,
                "HOTPATH_REVERT_MARGIN='", s, "' must be a fraction such as 0.03 (3%)");
  return v;
}

bool parse_flag(const char* name, const char* text) {
  const std::string s = text;
  HOTPATH_CHECK(s == "0" || s == "1", name, "='", s, "' must be 0 or 1");
  return s == "1";
}

}  // namespace

Config config_from_env(Config base) {
  if (const char* v = env("HOTPATH_THRESHOLD")) {
    base.threshold = static_cast<int>(parse_integer("HOTPATH_THRESHOLD", v, 1, 1'000'000'000));
  }
  if (const char* v = env("HOTPATH_MAX_PERIOD")) {
    base.max_period_ops = parse_integer("HOTPATH_MAX_PERIOD", v, 1, 1LL << 24);
  }
  if (const char* v = env("HOTPATH_AUTO_PERIOD")) {
    base.auto_detect_period = parse_flag("HOTPATH_AUTO_PERIOD", v);
  }
  if (const char* v = env("HOTPATH_FUSE")) base.fuse = parse_flag("HOTPATH_FUSE", v);
  if (const char* v = env("HOTPATH_FUSE_CPU")) base.fuse_cpu = parse_flag("HOTPATH_FUSE_CPU", v);
  if (const char* v = env("HOTPATH_CACHE_DIR")) base.cache_dir = v;
  if (const char* v = env("HOTPATH_VERIFY")) base.verify = parse_flag("HOTPATH_VERIFY", v);
  if (const char* v = env("HOTPATH_REVERT_WINDOW")) {
    base.revert_window = static_cast<int>(parse_integer("HOTPATH_REVERT_WINDOW", v, 2, 1'000'000));
  }
  if (const char* v = env("HOTPATH_REVERT_MARGIN")) base.revert_margin = parse_fraction(v);
  if (const char* v = env("HOTPATH_REMEMBER")) base.remember = parse_flag("HOTPATH_REMEMBER", v);
  if (const char* v = env("HOTPATH_STAND_ASIDE")) {
    base.stand_aside = parse_flag("HOTPATH_STAND_ASIDE", v);
  }
  if (const char* v = env("HOTPATH_COMPILE_KERNELS")) {
    base.compile_kernels = parse_flag("HOTPATH_COMPILE_KERNELS", v);
  }
  if (const char* v = env("HOTPATH_COMPILE_AHEAD")) {
    base.compile_ahead =
        static_cast<int>(parse_integer("HOTPATH_COMPILE_AHEAD", v, 0, 1'000'000'000));
  }
  if (const char* v = env("HOTPATH_PREPARE_KNOWN")) {
    base.prepare_known = parse_flag("HOTPATH_PREPARE_KNOWN", v);
  }
  if (const char* v = env("HOTPATH_REPLAY")) base.replay = parse_flag("HOTPATH_REPLAY", v);
  if (const char* v = env("HOTPATH_REPLAY_GRAPH_OPS")) {
    base.replay_graph_ops =
        static_cast<int>(parse_integer("HOTPATH_REPLAY_GRAPH_OPS", v, 0, 1'000'000));
  }
  if (const char* v = env("HOTPATH_REPLAY_FAST_LANE")) {
    base.replay_fast_lane = parse_flag("HOTPATH_REPLAY_FAST_LANE", v);
  }
  if (const char* v = env("HOTPATH_REPLAY_LAUNCHER")) {
    base.replay_launcher = parse_flag("HOTPATH_REPLAY_LAUNCHER", v);
  }
  if (const char* v = env("HOTPATH_LOG_TIME")) base.log_time = parse_flag("HOTPATH_LOG_TIME", v);
  if (const char* v = env("HOTPATH_HOST_PROFILE")) {
    base.host_profile = parse_flag("HOTPATH_HOST_PROFILE", v);
  }
  if (const char* v = env("HOTPATH_LOG_LEVEL")) {
    const std::string s = v;
    if (s == "trace")
      base.log_level = LogLevel::Trace;
    else if (s == "debug")
      base.log_level = LogLevel::Debug;
    else if (s == "info")
      base.log_level = LogLevel::Info;
    else if (s == "warn")
      base.log_level = LogLevel::Warn;
    else if (s == "error")
      base.log_level = LogLevel::Error;
    else if (s == "off")
      base.log_level = LogLevel::Off;
    else
      HOTPATH_FAIL("HOTPATH_LOG_LEVEL='", s,
                   "' must be one of trace, debug, info, warn, error, off");
  }
  return base;
}

}  // namespace hotpath
