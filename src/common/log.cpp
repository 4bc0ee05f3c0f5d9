#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace hotpath::detail {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Trace:
      return spdlog::level::trace;
    case LogLevel::Debug:
      return spdlog::level::debug;
    case LogLevel::Info:
      return spdlog::level::info;
    case LogLevel::Warn:
      return spdlog::level::warn;
    case LogLevel::Error:
      return spdlog::level::err;
    case LogLevel::Off:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

spdlog::logger& logger() {
  // stderr keeps the training loop's own stdout clean; messages carry their "hotpath:" prefix.
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("hotpath");
    l->set_pattern("%^%v%$");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *instance;
}

}  // namespace

void set_log_level(LogLevel level) { logger().set_level(to_spdlog(level)); }

void set_log_time(bool on) { logger().set_pattern(on ? "[%H:%M:%S.%f] %^%v%$" : "%^%v%$"); }

bool log_enabled(LogLevel level) { return logger().should_log(to_spdlog(level)); }

void log(LogLevel level, const std::string& message) {
  logger().log(to_spdlog(level), message);
  if (level >= LogLevel::Warn) logger().flush();
}

}  // namespace hotpath::detail
