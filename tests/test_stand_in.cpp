// The interpreter's stand-in on trial: iterations that ran it for kernels still compiling are
// judged against eager under the hook; where they are slower, the plan's groups wait eagerly.
// The governor alone, with a fake plan and a fake clock.
#include <optional>
#include <string>
#include <vector>

#include "policy/governor.h"
#include "policy/plan_control.h"

// After LibTorch's headers: c10's logging defines a CHECK of its own.
#include <catch2/catch.hpp>

namespace {

using hotpath::detail::PlanControl;

struct FakePlans : PlanControl {
  bool fused = false;        // the iterations from now on ran the plan
  bool final_tiers = false;  // ... with every group's own kernel
  int no_stand_in_calls = 0;
  std::string why;
  Run ran(std::uint64_t, std::int64_t) const override {
    Run r;
    r.fused = fused;
    r.final_tiers = final_tiers;
    return r;
  }
  std::optional<std::vector<Group>> groups(std::uint64_t) const override {
    return std::vector<Group>{Group{"g", true}};
  }
  std::int64_t set_active(std::uint64_t, const std::vector<bool>&, const std::string&) override {
    return 0;
  }
  void revert(std::uint64_t, const std::string&) override {}
  void no_stand_in(std::uint64_t, const std::string& reason) override {
    ++no_stand_in_calls;
    why = reason;
  }
};

// Feeds iterations of signature 7 that take `ms` each to the governor (ten ops each).
struct Feed {
  hotpath::detail::Governor& gov;
  double now = 0;
  std::int64_t count = 0;
  void run(int n, double ms) {
    for (int i = 0; i < n; ++i) {
      if (count == 0) gov.stamp(0);
      now += ms;
      ++count;
      gov.stamp(count * 10);
      hotpath::detail::IterationEvent e;
      e.signature = 7;
      e.first = (count - 1) * 10;
      e.end = e.core_end = count * 10;
      e.count = count;
      e.hot = count >= 3;
      gov.on_iteration(e);
    }
  }
};

hotpath::Config config() {
  hotpath::Config c;
  c.remember = false;
  c.revert_margin = 0.03;
  c.revert_window = 20;
  return c;
}

}  // namespace

TEST_CASE("a stand-in slower than eager under the hook is taken off", "[governor][stand-in]") {
  FakePlans plans;
  hotpath::detail::Governor gov(plans, config());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.run(6, 10.0);  // eager under the hook
  plans.fused = true;
  SECTION("slower: the groups wait eagerly") {
    feed.run(4, 15.0);
    CHECK(plans.no_stand_in_calls == 0);  // four iterations are not evidence yet
    feed.run(1, 15.0);
    CHECK(plans.no_stand_in_calls == 1);
    CHECK(plans.why.find("15.000 ms against 10.000 ms") != std::string::npos);
    feed.run(10, 15.0);
    CHECK(plans.no_stand_in_calls == 1);  // judged once
  }
  SECTION("faster, or within the margin: it stays") {
    feed.run(5, 8.0);
    feed.run(5, 10.2);
    CHECK(plans.no_stand_in_calls == 0);
  }
  SECTION("iterations with every kernel in are not the stand-in's") {
    plans.final_tiers = true;
    feed.run(10, 15.0);
    CHECK(plans.no_stand_in_calls == 0);
  }
}
