// The host profile's clock (dispatch/host_laps.h): ticks that convert to nanoseconds, and laps
// that add them to the part each ends.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <thread>

#include "dispatch/host_laps.h"

TEST_CASE("the host profile's clock: ticks that convert to steady_clock's nanoseconds",
          "[detect]") {
  using hotpath::detail::host_ticks;
  using hotpath::detail::host_ticks_to_ns;
  using clock = std::chrono::steady_clock;
  // The same stretch on both clocks: a sleep, so that scheduling noise cannot make it short.
  const std::int64_t t0 = host_ticks();
  const auto s0 = clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const std::int64_t t1 = host_ticks();
  const auto s1 = clock::now();
  const double steady = std::chrono::duration<double, std::nano>(s1 - s0).count();
  REQUIRE(t1 > t0);
  CHECK(host_ticks_to_ns(t1 - t0) == Approx(steady).epsilon(0.05));
  CHECK(host_ticks_to_ns(0) == 0.0);
  // Laps add the ticks between them to the part each ends, nothing to the others.
  hotpath::detail::HostLaps laps;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  laps.lap(hotpath::detail::kGuardPart);
  laps.lap(hotpath::detail::kCommitPart);
  CHECK(host_ticks_to_ns(laps.ticks[hotpath::detail::kGuardPart]) >= 2e6 * 0.95);
  CHECK(laps.ticks[hotpath::detail::kGuardPart] > laps.ticks[hotpath::detail::kCommitPart]);
  CHECK(laps.ticks[hotpath::detail::kRecordPart] == 0);
}
