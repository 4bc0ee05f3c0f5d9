// The governor alone, with a fake plan and a fake clock: the interpreter's stand-in on trial
// (iterations that ran it for kernels still compiling are judged against the iterations between
// them that ran its groups eagerly; where they are slower on that evidence, the plan's groups
// wait eagerly, else the stand-in is kept), and iterations that left the plan part-way judged as
// the plan's.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compile/kernel_cache.h"
#include "exec/plan.h"
#include "fake_plans.h"
#include "policy/decisions.h"
#include "policy/governor.h"
#include "policy/plan_control.h"
#include "temp_dir.h"

// After LibTorch's headers: c10's logging defines a CHECK of its own.
#include <catch2/catch.hpp>

using namespace hotpath_test;

// The stand-in's trial as the executor runs it: the interpreter (a fused iteration), and in every
// fourth iteration after the first four its groups run eagerly while they wait (nothing
// launched: not fused), `on_ms` and `off_ms` long.
void trial(FakePlans& plans, Feed& feed, int n, double on_ms, double off_ms) {
  for (int i = 0; i < n; ++i) {
    plans.trial_plan.take_stand_in_turn();  // the executor's turns
    const bool on = plans.trial_plan.stand_in;
    plans.fused = on;
    plans.stand_in = on;
    plans.waited = !on;
    feed.run(1, on ? on_ms : off_ms);
  }
}

TEST_CASE("the stand-in is judged against its groups run eagerly beside it",
          "[governor][stand-in]") {
  FakePlans plans;
  hotpath::detail::Governor gov(plans, config());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.run(6, 10.0);  // eager under the hook, before the plan: no part of the judgement
  SECTION("slower than its groups eager: they wait eagerly") {
    // The first four iterations pay for the switch and are left out; then five eager turns.
    trial(plans, feed, 4 + 19, 15.0, 10.0);
    CHECK(plans.no_stand_in_calls == 0);  // four eager iterations beside it: not evidence yet
    trial(plans, feed, 1, 15.0, 10.0);    // the fifth
    CHECK(plans.no_stand_in_calls == 1);
    CHECK(plans.keep_stand_in_calls == 0);
    CHECK(plans.why.find("15.000 ms against 10.000 ms") != std::string::npos);
    trial(plans, feed, 20, 15.0, 10.0);
    CHECK(plans.no_stand_in_calls == 1);  // judged once
  }
  SECTION("faster than its groups eager while a compile slows both: kept") {
    // The compile running on the other cores slows every iteration: the stand-in's 12 ms is
    // slower than the 10 ms eager took before the plan, and faster than eager beside it. (An
    // earlier governor compared it with the 10 ms and turned it off.)
    trial(plans, feed, 4 + 19, 12.0, 16.0);
    CHECK(plans.keep_stand_in_calls == 0);  // four eager turns
    trial(plans, feed, 1, 12.0, 16.0);
    CHECK(plans.no_stand_in_calls == 0);
    CHECK(plans.keep_stand_in_calls == 1);
    CHECK(plans.why.find("12.000 ms against 16.000 ms") != std::string::npos);  // for stats()
    trial(plans, feed, 10, 12.0, 16.0);
    CHECK(plans.keep_stand_in_calls == 1);
  }
  SECTION("within the noise: more iterations, then kept on no evidence of a loss") {
    auto side = [&](bool on, double ms) {
      plans.fused = on;
      plans.stand_in = on;
      plans.waited = !on;
      feed.run(1, ms);
    };
    // Both sides alike, with a busy host's spread: the interval straddles the margin.
    const double cycle[] = {10.0, 10.5, 14.0, 9.8, 12.0, 10.2, 13.0};
    for (int i = 0; i < 4; ++i) side(true, 10.0);
    int k = 0;
    for (int eager = 0; eager < 9; ++eager) {
      for (int on = 0; on < 3; ++on) side(true, cycle[k++ % 7]);
      side(false, cycle[(k + 3) % 7]);
    }
    CHECK(plans.no_stand_in_calls == 0);
    CHECK(plans.keep_stand_in_calls == 0);  // undecided: the trial goes on
    for (int on = 0; on < 3; ++on) side(true, cycle[k++ % 7]);
    side(false, cycle[1]);
    CHECK(plans.keep_stand_in_calls == 1);  // ten eager turns and no loss shown
    CHECK(plans.no_stand_in_calls == 0);
  }
  SECTION("iterations with every kernel in are not the stand-in's") {
    plans.final_tiers = true;
    trial(plans, feed, 30, 15.0, 10.0);
    CHECK(plans.no_stand_in_calls == 0);
    CHECK(plans.keep_stand_in_calls == 0);
  }
}

TEST_CASE("on trial, the stand-in runs in three of every four iterations after its first four",
          "[stand-in]") {
  using hotpath::detail::StandIn;
  hotpath::detail::Plan plan;
  auto turns = [&](int n) {
    std::vector<bool> got;
    for (int i = 0; i < n; ++i) {
      plan.take_stand_in_turn();
      got.push_back(plan.stand_in);
    }
    return got;
  };
  CHECK(plan.requested_stand_in == StandIn::kTrial);  // every plan starts on trial
  CHECK(turns(13) == std::vector<bool>{true, true, true, true, true, true, true, false, true, true,
                                       true, false, true});
  plan.requested_stand_in = StandIn::kOn;
  CHECK(turns(3) == std::vector<bool>{true, true, true});
  plan.requested_stand_in = StandIn::kOff;
  CHECK(turns(3) == std::vector<bool>{false, false, false});
}

TEST_CASE("an iteration in which nothing of the plan can run is not armed", "[stand-in]") {
  using hotpath::detail::kCompiling;
  using hotpath::detail::kFailed;
  using hotpath::detail::kLoaded;
  using hotpath::detail::Plan;
  using hotpath::detail::PlanGroup;
  Plan plan;
  plan.groups.resize(2);
  for (PlanGroup& g : plan.groups) g.gpu = true;
  plan.groups[1].spec.not_interpretable = "a sum over rows";
  // Both compiling, no interpreter loaded: the iteration would only wait.
  CHECK(plan.only_waits());
  // The interpreter (only whether there is one matters here; it is never launched) stands in
  // for the first group: it runs.
  int unused = 0;
  plan.interpreter = std::shared_ptr<hotpath::detail::CudaModule>(
      std::shared_ptr<void>(), reinterpret_cast<hotpath::detail::CudaModule*>(&unused));
  plan.stand_in = true;
  CHECK_FALSE(plan.only_waits());
  plan.stand_in = false;  // the trial's eager turn, or the stand-in off
  CHECK(plan.only_waits());
  plan.groups[1].state->store(kLoaded);  // a kernel in: it runs
  CHECK_FALSE(plan.only_waits());
  plan.groups[1].state->store(kFailed);  // failed, no interpreter form: eager for good, not waiting
  CHECK(plan.only_waits());              // the first group still waits
  plan.groups[0].state->store(kFailed);  // failed: the interpreter runs it whatever the turn
  CHECK_FALSE(plan.only_waits());
  plan.groups[0].state->store(kCompiling);
  plan.groups[0].active = false;  // turned off by the governor: nothing waits
  CHECK_FALSE(plan.only_waits());
  plan.groups[0].active = true;
  plan.groups[1].gpu = false;  // a CPU group runs ATen's ops as its fused run
  plan.groups[1].state->store(kCompiling);
  CHECK_FALSE(plan.only_waits());
}

TEST_CASE("stats say what stands in for kernels still compiling", "[stand-in][stats]") {
  hotpath::Stats stats;
  hotpath::SignatureStats sig;
  sig.hex = "7";
  sig.fusion.planned = true;
  sig.fusion.ready = true;
  sig.fusion.groups.resize(2);
  auto text = [&] {
    stats.signatures = {sig};
    return hotpath::format_stats(stats);
  };
  CHECK(text().find("the interpreter on trial meanwhile, every fourth iteration eager") !=
        std::string::npos);
  sig.fusion.stand_in_kept = "its iterations took 12.000 ms against 16.000 ms";
  CHECK(text().find("the interpreter runs them meanwhile: its iterations took 12.000 ms") !=
        std::string::npos);
  sig.fusion.stand_in_off = "its iterations took 15.000 ms against 10.000 ms";
  CHECK(text().find("they run eagerly meanwhile") != std::string::npos);
  CHECK(text().find("no interpreter stand-in (its iterations took 15.000 ms") != std::string::npos);
  sig.fusion.compiled = true;  // its kernels in: the stand-in no longer matters while compiling
  CHECK(text().find("meanwhile") == std::string::npos);
}

TEST_CASE("iterations that left the plan are judged as the plan's", "[governor][divergence]") {
  FakePlans plans;
  plans.final_tiers = true;
  hotpath::detail::Governor gov(plans, config());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.run(6, 10.0);  // eager under the hook: the baseline
  plans.fused = true;
  // Complete iterations on the plan take 8 ms; two of every three leave it part-way, finish
  // eagerly in 30 ms and, their ops' inputs not the plan's, are recorded as signature 9. (The
  // window's median moves only once more than half its iterations leave the plan.)
  auto alternate = [&](std::int64_t ops) {
    for (int i = 0; i < 20; ++i) {
      feed.run(1, 8.0);
      for (int k = 0; k < 2; ++k) {
        plans.left.insert(feed.next_op);
        feed.run(1, 30.0, 9, ops);
      }
    }
  };
  SECTION("the same step: the plan costs more than it saves and is reverted") {
    alternate(10);
    CHECK(plans.reverts == 1);
    CHECK(plans.why.find("vs eager 10.000 ms") != std::string::npos);
  }
  SECTION("another step (as many ops as the plan's only if it is the same step): not the plan's") {
    alternate(6);  // an evaluation pass that shares the plan's first ops
    CHECK(plans.reverts == 0);
  }
}

TEST_CASE("iterations the detector cut after they ran are not charged to the compile",
          "[governor][break-even]") {
  // A known winner (remembered: eager 10 ms) in a loop without step(): the detector finds the
  // step after three iterations and cuts them together; the signature is hot at first sight, at
  // the first of them, though all three had run before hotpath could do anything. They took
  // 20 ms each (a process warming up, under the hook). The plan runs from the fourth, at 5 ms.
  const hotpath_test::TempDir tmp("hotpath-breakeven-test");
  hotpath::Config c = config();
  c.remember = true;
  c.cache_dir = tmp.path();
  hotpath::detail::Decision known;
  known.compile = true;
  known.eager_ms = 10.0;
  hotpath::detail::DecisionStore(hotpath::detail::cache_dir(tmp.path())).save(7, known);
  FakePlans plans;
  plans.final_tiers = true;
  hotpath::detail::Governor gov(plans, c);
  REQUIRE(gov.remembered(7).has_value());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.hot_from = 1;
  feed.closed_at = 30;
  feed.run(3, 20.0);
  feed.closed_at = -1;
  plans.fused = true;
  feed.run(3, 5.0);
  const hotpath::SignatureReport r = report_of(gov, 6);
  CHECK(r.hot_at_iteration == 1);
  CHECK(r.first_fused_iteration == 4);
  // Nothing between the moment it turned hot and its first fused iteration: repaid at once (had
  // iterations 2 and 3 been charged, 2 x 10 ms against 5 ms saved per iteration: iteration 8).
  CHECK(r.break_even_actual == 4);
}

TEST_CASE("a plan still being built is pending and not nothing to fuse", "[governor][report]") {
  FakePlans plans;
  hotpath::detail::Governor gov(plans, config());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.run(12, 10.0);  // hot from the third; the plan never ran
  const hotpath::SignatureReport building = report_of(gov, 12, /*planned=*/true);
  CHECK(building.verdict == hotpath::Verdict::Pending);
  const std::string text = hotpath::format_report(building);
  INFO(text);
  CHECK(text.find("still being built on the worker") != std::string::npos);
  CHECK(text.find("nothing to fuse") == std::string::npos);
  // Built, with no group: nothing to fuse.
  const hotpath::SignatureReport built = report_of(gov, 12, /*planned=*/true, /*ready=*/true);
  CHECK(built.verdict == hotpath::Verdict::NotCompiled);
  CHECK(built.reason == "nothing to fuse");
}

TEST_CASE("iterations that ran before every kernel was in stand apart in the report",
          "[governor][report][stand-in]") {
  // On an empty cache the MLP example with a host sync ran 467 iterations on the interpreter
  // while NVRTC compiled its kernels (412 ms), and its steady-state row took them in at 0.82 ms
  // against the kernels' 0.63.
  FakePlans plans;
  hotpath::detail::Governor gov(plans, config());
  Feed feed{gov};
  gov.set_clock([&] { return feed.now; });
  feed.run(6, 10.0);  // eager under the hook: hot from the third
  plans.fused = true;
  plans.stand_in = true;  // the interpreter stands in for kernels still compiling
  feed.run(5, 8.0);
  plans.stand_in = false;
  plans.final_tiers = true;  // every group on its own kernel
  feed.run(10, 5.0);
  const hotpath::SignatureReport r = report_of(gov, 21);
  CHECK(r.before_hot_iterations + r.warmup_iterations == 6);
  CHECK(r.interim_iterations == 5);
  CHECK(r.interim_ms == Approx(5 * 8.0));
  CHECK(r.steady_iterations == 10);
  CHECK(r.steady_ms == Approx(10 * 5.0));
  const std::string text = hotpath::format_report(r);
  INFO(text);
  CHECK(text.find("Kernels compiling (5 iters):") != std::string::npos);
  CHECK(text.find("Steady state (remaining 10 iters):") != std::string::npos);
}
