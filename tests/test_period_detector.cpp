#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trace/period_detector.h"

using hotpath::detail::PeriodDetector;

namespace {

// Feeds keys and returns every boundary reported. An op's name is its key modulo 100 (so keys
// 11 and 1 are the same operator with other shapes).
std::vector<std::int64_t> run(PeriodDetector& d, const std::vector<std::uint64_t>& keys) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < keys.size(); ++i)
    d.feed(static_cast<std::int64_t>(i), keys[i], keys[i] % 100, out);
  return out;
}

std::vector<std::uint64_t> repeat(const std::vector<std::uint64_t>& body, int times) {
  std::vector<std::uint64_t> s;
  for (int i = 0; i < times; ++i) s.insert(s.end(), body.begin(), body.end());
  return s;
}

}  // namespace

TEST_CASE("a repeated body is cut at its first op", "[period]") {
  const std::vector<std::uint64_t> body{1, 2, 3, 2, 4, 5, 6};
  PeriodDetector d(1000);
  auto keys = repeat(body, 6);
  keys.insert(keys.end(), {1, 2, 3});  // the seventh iteration starts
  const auto b = run(d, keys);
  REQUIRE(d.period() == 7);
  // Every boundary is a multiple of the body's length: the phase follows the loop's first op.
  REQUIRE(!b.empty());
  for (auto x : b) CHECK(x % 7 == 0);
  CHECK(b.back() == 42);  // the sixth iteration is complete
  // Iterations 1..6 are all reported (retroactively for the ones before the lock).
  CHECK(b.size() == 6);
}

TEST_CASE("an irregular first iteration becomes a prelude of its own", "[period]") {
  // Iteration 1 creates optimizer state (two extra ops); later ones do not.
  std::vector<std::uint64_t> keys{1, 2, 3, 9, 9, 4, 5};
  const auto steady = repeat({1, 2, 3, 4, 5}, 6);
  keys.insert(keys.end(), steady.begin(), steady.end());
  keys.insert(keys.end(), {1, 2, 3});
  PeriodDetector d(1000);
  const auto b = run(d, keys);
  REQUIRE(d.period() == 5);
  REQUIRE(b.size() >= 2);
  CHECK(b[0] == 7);  // the prelude is exactly the first iteration
  for (std::size_t i = 1; i < b.size(); ++i) CHECK(b[i] - b[i - 1] == 5);
  CHECK(b.back() == 7 + 30);
}

TEST_CASE("a period found again from the middle of an iteration keeps its phase", "[period]") {
  // hotpath looked away and looks again from the fourth op of an iteration: a fresh search would
  // cut there, another signature for the same iteration.
  const std::vector<std::uint64_t> body{1, 2, 3, 2, 4, 5, 6};
  PeriodDetector before(1000);
  run(before, repeat(body, 5));
  REQUIRE(before.period() == 7);
  REQUIRE(before.known().size() == 1);

  std::vector<std::uint64_t> keys(body.begin() + 3, body.end());  // 4 ops, then whole bodies
  const auto more = repeat(body, 6);
  keys.insert(keys.end(), more.begin(), more.end());
  PeriodDetector again(1000, 0, before.known());
  const auto b = run(again, keys);
  REQUIRE(again.period() == 7);
  REQUIRE(!b.empty());
  for (auto x : b) CHECK((x - 4) % 7 == 0);  // at the body's first op
  CHECK(again.known().size() == 1);

  PeriodDetector fresh(1000);  // without the memory: cut where the history resumed
  const auto c = run(fresh, keys);
  REQUIRE(!c.empty());
  CHECK(c.back() % 7 == 0);
}

TEST_CASE("a block repeated twice inside the body is not taken for the period", "[period]") {
  // body = A B B C : the sub-period |B| holds for one copy only, the true one is 8.
  const std::vector<std::uint64_t> body{10, 1, 2, 3, 1, 2, 3, 20};
  PeriodDetector d(1000);
  run(d, repeat(body, 40));
  CHECK(d.period() == 8);
}

TEST_CASE("a shape change inside a locked period keeps the period and phase", "[period]") {
  const std::vector<std::uint64_t> a{1, 2, 3, 4}, b{101, 102, 103, 104};  // same ops, new shapes
  auto keys = repeat(a, 6);
  const auto more = repeat(b, 6);
  keys.insert(keys.end(), more.begin(), more.end());
  keys.insert(keys.end(), {1, 2, 3});
  PeriodDetector d(1000);
  const auto bounds = run(d, keys);
  CHECK(d.period() == 4);
  CHECK(d.losses() == 0);
  for (auto x : bounds) CHECK(x % 4 == 0);
  CHECK(bounds.back() == 48);
}

TEST_CASE("an op inserted every few iterations does not lose the phase", "[period]") {
  // loss.item() at the end of every fifth iteration: one extra op.
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> starts;
  for (int it = 0; it < 30; ++it) {
    starts.push_back(static_cast<std::int64_t>(keys.size()));
    keys.insert(keys.end(), {1, 2, 3, 4, 5, 6});
    if (it % 5 == 4) keys.push_back(77);
  }
  PeriodDetector d(1000);
  const auto bounds = run(d, keys);
  CHECK(d.period() == 6);
  CHECK(d.losses() == 0);
  // Every reported boundary is the start of a loop iteration.
  for (auto x : bounds) CHECK(std::find(starts.begin(), starts.end(), x) != starts.end());
  CHECK(bounds.size() >= 25);
}

TEST_CASE("a body that changes for good is found again", "[period]") {
  auto keys = repeat({1, 2, 3, 4}, 6);
  const auto more = repeat({1, 2, 3, 4, 5, 6}, 12);
  keys.insert(keys.end(), more.begin(), more.end());
  PeriodDetector d(1000);
  run(d, keys);
  CHECK(d.period() == 6);
  CHECK(d.losses() >= 1);
}

TEST_CASE("no period in a stream that never repeats", "[period]") {
  std::vector<std::uint64_t> keys;
  for (std::uint64_t i = 0; i < 500; ++i) keys.push_back(i);
  PeriodDetector d(1000);
  CHECK(run(d, keys).empty());
  CHECK(d.period() == 0);
}

TEST_CASE("periods longer than the limit are not reported and history stays bounded", "[period]") {
  std::vector<std::uint64_t> body;
  for (std::uint64_t i = 0; i < 50; ++i) body.push_back(i);
  PeriodDetector d(20);
  CHECK(run(d, repeat(body, 10)).empty());
  CHECK(d.period() == 0);
  CHECK(d.history_start() > 0);  // old ops were dropped
}
