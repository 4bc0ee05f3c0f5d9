// Logging front-end. Implemented on spdlog in log.cpp, which is compiled without LibTorch's
// include paths: torch ships fmt 12 headers, Debian's spdlog needs fmt 9, and one translation
// unit cannot see both. Callers format their message themselves.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "hotpath/error.h"

namespace hotpath::detail {

void set_log_level(LogLevel level);
// Lines start with the time of day ("[14:03:07.123456] "), or not.
void set_log_time(bool on);
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);

inline void log_info(const std::string& m) { log(LogLevel::Info, m); }
inline void log_warn(const std::string& m) { log(LogLevel::Warn, m); }
inline void log_debug(const std::string& m) { log(LogLevel::Debug, m); }

// A duration for people: "0.812 ms", or "12.345 s" from ten seconds on.
inline std::string ms_text(double ms) {
  char buf[32];
  if (ms >= 10000)
    std::snprintf(buf, sizeof buf, "%.3f s", ms / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  return buf;
}

// Milliseconds from `t0` to now (steady clock).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Adds the milliseconds from its making to its end to `into`.
class AddElapsed {
 public:
  explicit AddElapsed(double& into) : into_(into), t0_(std::chrono::steady_clock::now()) {}
  ~AddElapsed() { into_ += ms_since(t0_); }
  AddElapsed(const AddElapsed&) = delete;
  AddElapsed& operator=(const AddElapsed&) = delete;

 private:
  double& into_;
  std::chrono::steady_clock::time_point t0_;
};

// Samples in milliseconds for a debug line: "0.812 0.790 ..." (three decimals, in order).
inline std::string samples_text(const double* v, std::size_t n) {
  std::string out;
  char buf[32];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, i == 0 ? "%.3f" : " %.3f", v[i]);
    out += buf;
  }
  return out;
}

}  // namespace hotpath::detail
