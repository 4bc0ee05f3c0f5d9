#include <catch2/catch.hpp>

#include "policy/ledger.h"

using hotpath::detail::Ledger;

TEST_CASE("break-even: where the run's sums cross against eager, and stay across", "[ledger]") {
  Ledger l;
  // Hot at 10; iterations 11-12 (the warm-up) take 30 ms where eager takes 10; from 13 on the
  // fused path takes 6.
  l.add(11, 30);
  l.add(12, 30);
  CHECK(l.break_even(10, -1) == -1);  // nothing fused yet
  CHECK(l.cost_before(10, -1) == Approx(40));
  for (int i = 13; i <= 30; ++i) l.add(i, 6);
  // 40 ms to repay at 4 ms an iteration: 10 iterations, 13..22.
  CHECK(l.break_even(10, 13) == 22);
  CHECK(l.cost_before(10, 13) == Approx(40));
  // Against a slower eager, sooner; against one the fused path does not beat, never.
  CHECK(l.break_even(20, 13) == 14);  // 2 x 10 behind, then 14 ahead an iteration
  CHECK(l.break_even(6, 13) == -1);
  CHECK(l.cost_before(40, 13) == 0);  // the warm-up beat that eager: no cost
  // A stretch that falls behind again moves break-even to where the run got back ahead for good.
  for (int i = 31; i <= 40; ++i) l.add(i, 20);  // 10 x 10 behind: net 32 - 100 < 0
  CHECK(l.break_even(10, 13) == -1);
  for (int i = 41; i <= 60; ++i) l.add(i, 6);  // 68 to repay at 4: 17 iterations, 41..57
  CHECK(l.break_even(10, 13) == 57);
  CHECK(l.iterations() == 50);
  CHECK(l.ms() == Approx(60 + 18 * 6 + 10 * 20 + 20 * 6));
}

TEST_CASE("the ledger stays bounded in a long run and keeps its sums", "[ledger]") {
  Ledger l;
  l.add(1, 50);  // the warm-up: 40 ms behind an eager of 10
  const std::int64_t n = 200000;
  for (std::int64_t i = 2; i <= n; ++i) l.add(i, i < 100000 ? 10.0 : 9.0);
  CHECK(l.entries() < Ledger::kCap);
  CHECK(l.iterations() == n);
  CHECK(l.ms() == Approx(50 + 99998 * 10.0 + 100001 * 9.0));
  // Even until 100000, then 1 ms an iteration ahead: repaid 40 iterations later, named at the
  // end of the bucket that holds that iteration.
  const std::int64_t b = l.break_even(10, 2);
  CHECK(b >= 100039);
  CHECK(b < 100039 + 256);
  // The exact part stays exact.
  Ledger m;
  for (std::int64_t i = 1; i <= n; ++i) m.add(i, i <= 5 ? 20.0 : 5.0);
  CHECK(m.break_even(10, 6) == 15);  // 50 ms behind after 5, 5 ms an iteration ahead
}

TEST_CASE("the ledger's lead over eager", "[ledger]") {
  Ledger l;
  CHECK(l.net(10) == 0);
  l.add(1, 30);  // 20 behind
  l.add(2, 6);
  l.add(3, 6);  // 4 ahead each
  CHECK(l.net(10) == Approx(-12));
  CHECK(l.net(20) == Approx(18));
}
