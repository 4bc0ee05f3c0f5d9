// One checked-error path: every failed check ends in hotpath::detail::fail(), which throws
// hotpath::Error with file:line.
#pragma once

#include <sstream>
#include <string>

#include "hotpath/error.h"

namespace hotpath::detail {

[[noreturn]] void fail(const char* file, int line, const std::string& message);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace hotpath::detail

#define HOTPATH_CHECK(cond, ...)                                                           \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      ::hotpath::detail::fail(__FILE__, __LINE__, ::hotpath::detail::concat(__VA_ARGS__)); \
    }                                                                                      \
  } while (0)

#define HOTPATH_FAIL(...) \
  ::hotpath::detail::fail(__FILE__, __LINE__, ::hotpath::detail::concat(__VA_ARGS__))

namespace hotpath::detail {
std::string cu_error_text(int code);  // defined in driver/cuda_driver.cpp
}  // namespace hotpath::detail

// Driver API calls: the CUresult must be CUDA_SUCCESS (0).
#define HOTPATH_CU_CHECK(call)                                                               \
  do {                                                                                       \
    const int hotpath_cu_status = static_cast<int>(call);                                    \
    if (hotpath_cu_status != 0) {                                                            \
      HOTPATH_FAIL(#call, " failed: ", ::hotpath::detail::cu_error_text(hotpath_cu_status)); \
    }                                                                                        \
  } while (0)
