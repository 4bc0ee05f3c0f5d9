#include <catch2/catch.hpp>

#include "policy/stand_aside.h"

using hotpath::detail::StandAside;

TEST_CASE("standing aside: a window of iterations mostly without a live plan", "[aside]") {
  StandAside a(10);  // window: max(30, 3 * threshold)
  REQUIRE(a.window() == 30);
  // Half the iterations with a live plan (two alternating signatures, one reverted) is enough.
  for (int i = 0; i < 90; ++i) CHECK_FALSE(a.after_iteration(i % 2 == 0, 2).has_value());
  // Fewer: the reason says how many could run.
  std::optional<std::string> why;
  for (int i = 0; i < 30 && !why; ++i) why = a.after_iteration(i % 3 == 0, 2);
  REQUIRE(why.has_value());
  CHECK(why->find("only 10 of 30 iterations") != std::string::npos);
  // None hot at all.
  why.reset();
  for (int i = 0; i < 30 && !why; ++i) why = a.after_iteration(false, 0);
  REQUIRE(why.has_value());
  CHECK(why->find("no iteration signature repeated") != std::string::npos);
  // The pauses double up to 64 s.
  double p = 0;
  for (int i = 0; i < 10; ++i) p = a.pause_seconds();
  CHECK(p == 64.0);
}

TEST_CASE("standing aside: forward passes that never settle into a step", "[aside]") {
  StandAside a(10);
  // One iteration in 16 passes or more is a step; fewer is none. Each window of 64 passes is
  // judged on its own: it begins where the last one was judged.
  CHECK_FALSE(a.after_ops(true, 64, 4, 0).has_value());
  CHECK_FALSE(a.after_ops(true, 70, 5, 0).has_value());
  const auto why = a.after_ops(true, 70 + 64, 5 + 3, 0);
  REQUIRE(why.has_value());
  CHECK(why->find("no stable step: 3 iteration(s) in 64 forward passes") != std::string::npos);
  // A new look counts only what it sees itself.
  a.look_again();
  CHECK_FALSE(a.after_ops(true, 1000, 7, 0).has_value());
  CHECK_FALSE(a.after_ops(true, 1010, 8, 0).has_value());
  // Loops that never train: ops without an iteration.
  StandAside b(10);
  CHECK_FALSE(b.after_ops(false, 0, 0, StandAside::kOpsWithoutPeriod - 1).has_value());
  CHECK(b.after_ops(false, 0, 0, StandAside::kOpsWithoutPeriod).has_value());
}
