#include "dispatch/host_laps.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <thread>

namespace hotpath::detail {
namespace {

bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000U, &a, &b, &c, &d) == 0 || a < 0x80000007U) return false;
  if (__get_cpuid(0x80000007U, &a, &b, &c, &d) == 0) return false;
  return ((d >> 8) & 1U) != 0;  // CPUID.80000007H:EDX[8], invariant TSC
#else
  return false;
#endif
}

}  // namespace

// Before the origin below: its tick count reads it (one translation unit initialises in order).
const bool host_ticks_tsc = invariant_tsc();

namespace {

// Where the rate is measured from: a tick count and steady_clock's time, taken together.
struct Origin {
  std::int64_t ticks, ns;
};
const Origin origin{host_ticks(), steady_ns()};

}  // namespace

double host_ticks_to_ns(std::int64_t ticks) {
  if (!host_ticks_tsc) return static_cast<double>(ticks);
  constexpr std::int64_t kCalibrationNs = 5'000'000;
  std::int64_t ns = steady_ns();
  if (ns - origin.ns < kCalibrationNs) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(kCalibrationNs - (ns - origin.ns)));
    ns = steady_ns();
  }
  const std::int64_t t = host_ticks();
  if (t <= origin.ticks) return static_cast<double>(ticks);  // a counter that did not advance
  return static_cast<double>(ticks) * static_cast<double>(ns - origin.ns) /
         static_cast<double>(t - origin.ticks);
}

}  // namespace hotpath::detail
