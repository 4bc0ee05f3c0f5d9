// The governor and CUDA graph replay, with a fake plan and a fake clock: replay changes how fast
// a plan runs without changing its groups, so its first replayed iteration starts a judgement of
// its own (the figure reported is the replayed loop's, not the plan's before it); replay that is
// slower than plain eager, or than the plan alone, is let go while the plan stays; replay gone
// for good is judged again as the plan.
#include <cmath>
#include <tuple>

#include "fake_plans.h"
#include "policy/decisions.h"
#include "temp_dir.h"

using namespace hotpath_test;

namespace {

// The loop as the fake plan runs it: eager 10 ms (and with every group off, as the governor
// asks while it times eager again), the plan alone `plan_ms`, replayed `replay_ms` (while
// `replay`, and not with every group off: the executor drops the graphs when the groups change).
struct Loop {
  FakePlans& plans;
  Feed& feed;
  double plan_ms = 8.0, replay_ms = 5.0, eager_ms = 10.0;
  bool replay = false;
  void run(int n) {
    for (int i = 0; i < n; ++i) {
      plans.replayed = replay && !plans.all_off;
      feed.run(1, plans.all_off ? eager_ms : plans.replayed ? replay_ms : plan_ms);
    }
  }
};

// The test governor's settings, its verdicts remembered under `cache` (none if empty).
hotpath::Config with_cache(const std::string& cache) {
  hotpath::Config c = config();
  c.remember = !cache.empty();
  c.cache_dir = cache;
  return c;
}

// The governor on a fake plan and clock, after 6 iterations of eager under the hook (10 ms)
// and with the plan's kernels in from then on.
struct Setup {
  FakePlans plans;
  hotpath::detail::Governor gov;
  Feed feed{gov};
  Loop loop{plans, feed};
  explicit Setup(const std::string& cache = "") : gov(plans, with_cache(cache)) {
    gov.set_clock([this] { return feed.now; });
    feed.run(6, 10.0);
    plans.fused = true;
    plans.final_tiers = true;
  }
  std::tuple<FakePlans&, hotpath::detail::Governor&, Feed&, Loop&> parts() {
    return {plans, gov, feed, loop};
  }
};

double judged(hotpath::detail::Governor& gov, const Feed& feed) {
  return report_of(gov, feed.count).speedup_judged;
}

}  // namespace

TEST_CASE("a plan replayed from its first iteration on its own kernels is judged replayed",
          "[governor][replay]") {
  // As the 12-layer LM runs: its kernels are in after the plan has run for a while on the
  // interpreter, and the iterations after them are captured at once. (An earlier governor
  // waited for a plan-alone sample that never came, and never judged the plan.)
  Setup setup;
  auto [plans, gov, feed, loop] = setup.parts();
  loop.replay = true;
  loop.run(80);
  CHECK(judged(gov, feed) == Approx(2.0));
  loop.replay_ms = 12.0;  // and where replay loses, it is let go
  loop.run(120);
  CHECK(plans.no_replay_calls == 1);
  CHECK(plans.reverts == 0);
}

TEST_CASE("replay is judged as a configuration of its own", "[governor][replay]") {
  Setup setup;
  auto [plans, gov, feed, loop] = setup.parts();
  // The plan's first window, eager timed again in a warm process, the window judged against it.
  loop.run(80);
  REQUIRE(judged(gov, feed) == Approx(1.25));  // 10 ms against 8 ms
  CHECK(plans.reverts == 0);

  SECTION("the replayed loop's figure replaces the plan's") {
    loop.replay = true;
    loop.run(3);
    CHECK(judged(gov, feed) == 0);  // judged anew: nothing yet
    loop.run(30);
    CHECK(judged(gov, feed) == Approx(2.0));  // 10 ms against 5 ms
    CHECK(plans.no_replay_calls == 0);
    SECTION("an iteration that left the graphs is no sample of them") {
      loop.replay = false;
      loop.plan_ms = 40.0;  // it left them part-way: slow, and not what replay costs
      loop.run(1);
      loop.plan_ms = 8.0;
      loop.replay = true;
      loop.run(40);
      CHECK(judged(gov, feed) == Approx(2.0));
    }
    SECTION("replay gone for good: the plan is judged again") {
      loop.replay = false;
      loop.run(40);
      CHECK(judged(gov, feed) == Approx(1.25));
      CHECK(plans.no_replay_calls == 0);
      CHECK(plans.reverts == 0);
    }
  }
  SECTION("replay slower than the plan alone is let go; the plan stays") {
    loop.replay_ms = 9.0;  // faster than eager, slower than the plan
    loop.replay = true;
    loop.run(30);
    CHECK(plans.no_replay_calls == 1);
    CHECK(plans.why.find("slower than the plan alone") != std::string::npos);
    CHECK(judged(gov, feed) == Approx(1.25));  // the plan's figure again
    loop.replay = false;                       // the executor let it go
    loop.run(40);
    CHECK(judged(gov, feed) == Approx(1.25));
    CHECK(plans.reverts == 0);
    CHECK(plans.no_replay_calls == 1);
  }
  SECTION("replay slower than plain eager is let go; the plan stays") {
    loop.replay_ms = 12.0;
    loop.replay = true;
    loop.run(80);  // eager timed again (the baseline had aged), then two windows that lose
    CHECK(plans.no_replay_calls == 1);
    CHECK(plans.why.find("replayed, fused median 12.000 ms") != std::string::npos);
    CHECK(plans.reverts == 0);
    loop.replay = false;
    loop.run(3);
    CHECK(judged(gov, feed) == Approx(1.25));
    loop.replay = true;  // replayed iterations still queued when it was let go: no samples
    loop.run(2);
    loop.replay = false;
    loop.run(60);
    CHECK(judged(gov, feed) == Approx(1.25));
    CHECK(plans.reverts == 0);
    CHECK(plans.no_replay_calls == 1);
  }
}

TEST_CASE("replay begun before the plan was judged is checked against the plan's last iterations",
          "[governor][replay]") {
  // As RoPE ran: the plan's kernels took 0.07 ms, the replayed step 0.28 (it copied its inputs
  // at every replay), eager 0.42. Replay began before the plan's first verdict, so it was judged
  // against eager alone, and kept.
  Setup setup;
  auto [plans, gov, feed, loop] = setup.parts();
  loop.plan_ms = 2.0;
  loop.run(12);  // the plan alone, not yet judged
  REQUIRE(judged(gov, feed) == 0);
  loop.replay = true;
  SECTION("slower than the plan: let go, the plan stays") {
    loop.replay_ms = 7.0;
    loop.run(60);
    CHECK(plans.no_replay_calls == 1);
    CHECK(plans.why.find("slower than the plan alone just before replay (2.000 ms over") !=
          std::string::npos);
    loop.replay = false;  // the executor let it go
    loop.run(80);
    CHECK(judged(gov, feed) == Approx(5.0));  // the plan judged on its own: 10 ms against 2
    CHECK(plans.reverts == 0);
  }
  SECTION("faster than the plan: kept") {
    loop.replay_ms = 1.0;
    loop.run(60);
    CHECK(plans.no_replay_calls == 0);
    CHECK(judged(gov, feed) == Approx(10.0));
  }
  SECTION("faster than the plan on a host that then slows down: kept") {
    // As the synced MLP example ran on an H200: replay judged faster than eager in its first
    // windows; then the host slowed, eager and replay alike, until a replayed window took longer
    // than the plan's iterations had before replay, and replay was let go. Weighed against eager
    // timed beside it, replay wins as it did: the plan's 2 ms were a fifth of eager's 10, replay's
    // 1.5 ms an eighth of eager's 12, and its 15 ms on the slower host an eighth of eager's 120.
    loop.replay_ms = 1.5;
    loop.eager_ms = 12.0;
    loop.run(60);
    REQUIRE(plans.no_replay_calls == 0);
    loop.replay_ms = 15.0;
    loop.eager_ms = 120.0;
    loop.run(200);
    CHECK(plans.no_replay_calls == 0);
    CHECK(plans.why.empty());
    CHECK(judged(gov, feed) == Approx(8.0));
  }
}

TEST_CASE("a verdict remembers whether the plan won replayed, for a later run's early capture",
          "[governor][replay]") {
  // A later run captures a plan kept replayed after kReplayAfterKnown iterations instead of
  // kReplayAfter; one whose replay was let go waits as a new plan does.
  hotpath_test::TempDir cache("hotpath-replay-verdict");
  const hotpath::detail::DecisionStore store(cache.path() + "/hotpath");
  Setup setup(cache.path() + "/hotpath");
  auto [plans, gov, feed, loop] = setup.parts();
  plans.pool = {138 << 20, 4 << 20};  // the graphs' pool, as the executor reports it
  loop.replay = true;
  loop.run(80);
  REQUIRE(judged(gov, feed) == Approx(2.0));
  auto kept = store.load(7);
  REQUIRE(kept.has_value());
  CHECK(kept->compile);
  CHECK(kept->replay_kept);
  // ... and how large its pool grew: a later run's capture takes that much at once.
  CHECK(kept->replay_pool_bytes == 138 << 20);
  CHECK(kept->replay_pool_small_bytes == 4 << 20);
  SECTION("replay that loses later is remembered as lost") {
    loop.replay_ms = 12.0;
    loop.run(120);
    REQUIRE(plans.no_replay_calls == 1);
    const auto after = store.load(7);
    REQUIRE(after.has_value());
    CHECK(after->compile);
    CHECK_FALSE(after->replay_kept);
    CHECK(after->replay_pool_bytes == 0);
  }
  SECTION("a plan kept unreplayed is remembered so") {
    hotpath_test::TempDir other("hotpath-replay-verdict");
    Setup plain(other.path() + "/hotpath");
    plain.loop.run(80);
    REQUIRE(judged(plain.gov, plain.feed) == Approx(1.25));
    const auto d = hotpath::detail::DecisionStore(other.path() + "/hotpath").load(7);
    REQUIRE(d.has_value());
    CHECK(d->compile);
    CHECK_FALSE(d->replay_kept);
  }
}

TEST_CASE("a known winner's capture waits until the run can pay for it", "[governor][replay]") {
  // The first run captures the plan (one iteration of 30 ms against its 8 ms: the capture cost
  // 22 ms beyond a fused iteration), keeps it replayed and remembers both.
  hotpath_test::TempDir cache("hotpath-replay-held");
  const std::string dir = cache.path() + "/hotpath";
  {
    Setup first(dir);
    auto [plans, gov, feed, loop] = first.parts();
    loop.run(20);
    CHECK(plans.release_replay_calls == 0);  // nothing remembered: nothing held
    plans.captured = true;
    plans.final_tiers = false;  // as the executor says of a capture
    feed.run(1, 30.0);
    plans.captured = false;
    plans.final_tiers = true;
    loop.replay = true;
    loop.run(80);
    REQUIRE(judged(gov, feed) == Approx(2.0));
  }
  // What the verdict remembers of replay: kept, and the capture's cost.
  const auto kept_capture = [&dir] {
    const auto d = hotpath::detail::DecisionStore(dir).load(7);
    REQUIRE(d.has_value());
    CHECK(d->replay_kept);
    return d->capture_ms;
  };
  CHECK(kept_capture() == Approx(22.0));

  // A later run: eager 10 ms, the plan alone `plan_ms`; the capture is held from the first fused
  // iteration on.
  Setup later(dir);
  auto [plans, gov, feed, loop] = later.parts();
  // What the capture may cost this run: the earlier run's 22 ms, weighed with its spread.
  const double weighed = 22.0 * hotpath::detail::Governor::kCaptureCostSpread;
  SECTION("released once the plan alone has saved what the capture may cost") {
    loop.run(11);  // 2 ms ahead an iteration: 22 ms, what the capture cost the earlier run
    CHECK(plans.release_replay_calls == 0);  // a capture that costs more would put it behind
    const int ahead = static_cast<int>(std::ceil(weighed / 2.0));
    loop.run(ahead - 12);
    CHECK(plans.release_replay_calls == 0);
    loop.run(1);
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("ahead of eager") != std::string::npos);
    CHECK(plans.why.find("weighed at 33") != std::string::npos);
    loop.run(20);
    CHECK(plans.release_replay_calls == 1);
  }
  // Behind eager, the capture goes ahead only where replay would bring the run level sooner than
  // the plan alone: the earlier run replayed at 5 ms against eager's 10 (5 saved an iteration),
  // its capture cost 22. The plan's pace is known from its third sample on (its first
  // kSwitchIterations fused iterations are none).
  const int first_samples = 4 + static_cast<int>(hotpath::detail::Governor::kReplayRateSamples);
  SECTION("released where the run is behind and the plan alone does not gain on eager") {
    loop.plan_ms = 40.0;
    loop.run(first_samples);
    CHECK(plans.release_replay_calls == 0);
    loop.run(1);
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("behind eager and the plan alone does not gain") != std::string::npos);
  }
  SECTION("released where the run is behind and replay would catch up sooner") {
    feed.run(4, 20.0);   // 40 ms behind
    loop.plan_ms = 9.5;  // 0.5 an iteration: level after some 80, replayed after some 12
    loop.run(first_samples - 4);
    CHECK(plans.release_replay_calls == 0);
    loop.run(1);
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("behind eager: replayed") != std::string::npos);
  }
  SECTION("held while behind where the plan alone catches up sooner") {
    feed.run(4, 20.0);   // 40 ms behind
    loop.plan_ms = 6.0;  // 4 an iteration: level after 10, replayed after (40 + 33) / 5
    loop.run(12);
    CHECK(plans.release_replay_calls == 0);
    loop.run(12);  // 33 ahead after some 18
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("ahead of eager") != std::string::npos);
  }
  SECTION("released where the plan alone does not gain on eager") {
    loop.plan_ms = 10.0;
    loop.run(7);
    CHECK(plans.release_replay_calls == 0);
    loop.run(1);
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("has not gained") != std::string::npos);
  }
  SECTION("released after kReplayHoldMax fused iterations where the plan gains too little") {
    loop.plan_ms = 9.9;  // 0.1 ms ahead an iteration: 5 ms after 50
    loop.run(hotpath::detail::Governor::kReplayHoldMax - 1);
    CHECK(plans.release_replay_calls == 0);
    loop.run(1);
    CHECK(plans.release_replay_calls == 1);
    CHECK(plans.why.find("held for") != std::string::npos);
  }
  SECTION("a capture whose cost went unseen leaves the earlier run's figure remembered") {
    loop.run(static_cast<int>(std::ceil(weighed / 2.0)));
    REQUIRE(plans.release_replay_calls == 1);
    loop.replay = true;  // (its capture iteration not told apart: no cost of this run's)
    loop.run(80);
    REQUIRE(judged(gov, feed) == Approx(2.0));
    CHECK(kept_capture() == Approx(22.0));
  }
}
