// Logging front-end. Implemented on spdlog in log.cpp, which is compiled without LibTorch's
// include paths: torch ships fmt 12 headers, Debian's spdlog needs fmt 9, and one translation
// unit cannot see both. Callers format their message themselves.
#pragma once

#include <string>

#include "hotpath/hotpath.h"

namespace hotpath::detail {

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);

inline void log_info(const std::string& m) { log(LogLevel::Info, m); }
inline void log_warn(const std::string& m) { log(LogLevel::Warn, m); }
inline void log_debug(const std::string& m) { log(LogLevel::Debug, m); }

}  // namespace hotpath::detail
