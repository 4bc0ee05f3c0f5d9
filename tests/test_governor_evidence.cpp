// How sure the governor's verdicts are: noisy loops pool more rounds before a verdict, clear
// losses and wins are judged after one window, the ratio's bootstrap interval covers the truth,
// and a group made slower on purpose (HOTPATH_FAULTS=slow) is turned off.
#include <string>

#include "env_var.h"
#include "governor_support.h"
#include "policy/ratio_interval.h"
#include "temp_dir.h"

using namespace hotpath_test;

TEST_CASE("a verdict rests on evidence: noise pools windows, a clear loss reverts when it repeats",
          "[governor][interval]") {
  const hotpath_test::TempDir tmp("hotpath-governor-test");
  hotpath::disable_hot_path_detection();
  auto c = fresh_config(tmp.path());

  SECTION("a fused path within the noise is neither reverted nor called a win") {
    hotpath::enable_hot_path_detection(c);
    // Fused 9.9 ms vs 10 ms eager, every iteration +-30%: one window and one block of 10 cannot
    // tell them apart; a coin flip would revert or keep at random.
    FakeLoop loop{0, {-0.1}, one_group()};
    loop.jitter = 0.3;
    loop.run(460);
    const auto rep = report_of_kept();
    const auto* r = hot_report(rep);
    REQUIRE(r != nullptr);
    const std::string text = hotpath::format_report(*r);
    INFO(text);
    CHECK(r->plain_blocks >= 2);  // more evidence was gathered before deciding
    CHECK(r->speedup_low < 1.0);
    CHECK(r->speedup_high > 1.0);
    CHECK(r->verdict == hotpath::Verdict::Even);
    CHECK(r->judged);  // kept after four rounds (no loss on evidence), then measured further
    CHECK(text.find("95% interval") != std::string::npos);
    hotpath::disable_hot_path_detection();
  }
  SECTION("a report before the first window is not judged, after it is") {
    hotpath::enable_hot_path_detection(c);
    FakeLoop loop{0, {-2.5}, one_group()};
    loop.run(15);  // hot at 5, fused from 6: half a window
    auto rep = hotpath::report();
    REQUIRE(hot_report(rep) != nullptr);
    CHECK_FALSE(hot_report(rep)->judged);
    loop.run(40);  // the window, then the plain block to judge it against
    rep = hotpath::report();
    REQUIRE(hot_report(rep) != nullptr);
    CHECK(hot_report(rep)->judged);
    hotpath::disable_hot_path_detection();
  }
  SECTION("a fused path slower beyond the noise is reverted after its second window") {
    hotpath::enable_hot_path_detection(c);
    FakeLoop loop{0, {2.5}, one_group()};  // 12.5 ms vs 10 ms, +-10% each iteration
    loop.jitter = 0.1;
    loop.run(80);
    const auto st = hotpath::stats();
    const auto* sig = planned(st);
    REQUIRE(sig != nullptr);
    CHECK(sig->fusion.reverted);
    CHECK(sig->fusion.reason.find(" at 95%) over 2 window(s)") != std::string::npos);
    // Two windows, the iteration before each block, the switches before each window (4, and
    // 4 more and up to half a window after the block).
    CHECK(sig->fusion.fused_iterations <= 4 + 20 + 1 + 4 + 9 + 20 + 1);
    hotpath::disable_hot_path_detection();
  }
  SECTION("a fused path faster beyond the noise is kept after its first window") {
    hotpath::enable_hot_path_detection(c);
    FakeLoop loop{0, {-2.5}, one_group()};  // 7.5 ms vs 10 ms, +-10% each iteration
    loop.jitter = 0.1;
    loop.run(50);  // hot at 5, a window of 20, the block, the decision
    const auto first = hotpath::stats();
    REQUIRE(planned(first) != nullptr);
    CHECK_FALSE(planned(first)->fusion.reverted);
    loop.run(30);
    const auto rep = hotpath::report();
    const auto* r = hot_report(rep);
    REQUIRE(r != nullptr);
    INFO(hotpath::format_report(*r));
    CHECK(r->verdict == hotpath::Verdict::CompileWins);
    CHECK(r->plain_blocks <= 2);  // kept after the first; the second narrows the figure
    CHECK(r->speedup_low > 1.2);
    CHECK(r->speedup_high < 1.5);
    CHECK(r->speedup_low <= r->speedup_judged);  // the figure lies in its own interval
    CHECK(r->speedup_judged <= r->speedup_high);
    CHECK(hotpath::format_report(*r).find("As judged: steady-state speedup") != std::string::npos);
    hotpath::disable_hot_path_detection();
  }
  // 200 iterations of `loop`, then its signature's report and the report's text.
  const auto judged_run = [](FakeLoop& loop) {
    loop.run(200);
    const auto rep = hotpath::report();
    const auto* r = hot_report(rep);
    REQUIRE(r != nullptr);
    return std::make_pair(*r, hotpath::format_report(*r));
  };
  SECTION("a tail of slow fused iterations: the report gives the means beside the medians") {
    hotpath::enable_hot_path_detection(c);
    // Fused 7.5 ms, every fifth fused iteration 10 ms more: a median of 7.5, a mean of 9.5.
    FakeLoop loop{0, {-2.5}, one_group()};
    loop.tail_every = 5;
    loop.tail_ms = 10.0;
    const auto [r, text] = judged_run(loop);
    INFO(text);
    REQUIRE(r.speedup_judged > 0);
    CHECK(r.speedup_judged == Approx(10.0 / 7.5).epsilon(0.02));  // medians
    CHECK(r.plain_mean_ms == Approx(10.0));
    const double fused = r.steady_ms / static_cast<double>(r.steady_iterations);
    CHECK(fused == Approx(9.5).epsilon(0.03));
    char means[64];
    std::snprintf(means, sizeof means, "as they ran: %.2fx (the judged figure", 10.0 / fused);
    CHECK(text.find("By means, what the loop's time adds up to: plain eager 10.000 ms") !=
          std::string::npos);
    CHECK(text.find(means) != std::string::npos);
    CHECK(text.find("% higher: slow iterations weigh on a mean") != std::string::npos);
    hotpath::disable_hot_path_detection();
  }
  SECTION("no tail: the means agree with the judged figure, and the report says no more") {
    hotpath::enable_hot_path_detection(c);
    FakeLoop loop{0, {-2.5}, one_group()};
    const std::string text = judged_run(loop).second;
    INFO(text);
    CHECK(text.find("By means, what the loop's time adds up to") != std::string::npos);
    CHECK(text.find("(the judged figure, medians") == std::string::npos);
    hotpath::disable_hot_path_detection();
  }
}

TEST_CASE("the ratio's bootstrap agrees with one that reorders each resample",
          "[governor][interval]") {
  // The interval reads each resample's median from counts over the sorted samples; a plain
  // bootstrap (a resampled copy, sorted) of many resamples must give the same bounds, up to the
  // resampling's own noise, for odd and even counts, ties, and rounds pooled. (Below nine samples
  // a side the resampled ratios take few values and a bound sits on a jump between two of them.)
  std::mt19937 rng(23);
  auto reference = [&](const std::vector<std::pair<std::vector<double>, std::vector<double>>>& rs) {
    auto median = [](std::vector<double> v) {
      const std::size_t n = v.size();
      std::sort(v.begin(), v.end());
      return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    };
    std::vector<double> ratios;
    for (int i = 0; i < 20000; ++i) {
      double logs = 0;
      for (const auto& [num, den] : rs) {
        auto resample = [&](const std::vector<double>& v) {
          std::vector<double> c(v.size());
          std::uniform_int_distribution<std::size_t> pick(0, v.size() - 1);
          for (double& x : c) x = v[pick(rng)];
          return median(c);
        };
        logs += std::log(resample(num) / resample(den));
      }
      ratios.push_back(std::exp(logs / static_cast<double>(rs.size())));
    }
    std::sort(ratios.begin(), ratios.end());
    return std::make_pair(ratios[500], ratios[19499]);  // 2.5% and 97.5%
  };
  auto draw = [&](double centre, int n, bool ties) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) {
      double x = centre * (1 + 0.15 * std::normal_distribution<>()(rng));
      if (ties) x = std::round(x * 20) / 20;  // 0.05 ms steps: many equal samples
      v.push_back(x);
    }
    return v;
  };
  for (const auto& [n_num, n_den, ties] : std::vector<std::tuple<int, int, bool>>{
           {9, 10, false}, {10, 9, false}, {20, 10, false}, {11, 14, true}, {20, 20, true}}) {
    CAPTURE(n_num, n_den, ties);
    const auto num = draw(0.5, n_num, ties), den = draw(0.6, n_den, ties);
    const auto iv = hotpath::detail::ratio_of_medians(num, den, 9, 4000);
    const auto [low, high] = reference({{num, den}});
    CHECK(iv.low == Approx(low).epsilon(0.02));
    CHECK(iv.high == Approx(high).epsilon(0.02));
  }
  std::vector<hotpath::detail::RatioRound> rounds;
  std::vector<std::pair<std::vector<double>, std::vector<double>>> pairs;
  for (int k = 0; k < 3; ++k) {
    rounds.push_back({draw(0.5, 20, false), draw(0.6, 9, false)});
    pairs.emplace_back(rounds.back().num, rounds.back().den);
  }
  const auto pooled = hotpath::detail::pooled_ratio(rounds, 4, 4000);
  const auto [low, high] = reference(pairs);
  CHECK(pooled.low == Approx(low).epsilon(0.02));
  CHECK(pooled.high == Approx(high).epsilon(0.02));
}

TEST_CASE("a ratio's interval covers the truth and narrows with samples", "[governor][interval]") {
  std::mt19937 rng(11);
  auto draw = [&](double centre, int n) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(centre * (1 + 0.2 * std::normal_distribution<>()(rng)));
    return v;
  };
  const auto few = hotpath::detail::ratio_of_medians(draw(8, 10), draw(10, 10), 1);
  const auto many = hotpath::detail::ratio_of_medians(draw(8, 400), draw(10, 400), 1);
  CHECK(few.low < 0.8);
  CHECK(few.high > 0.8);
  CHECK(many.low < 0.8);
  CHECK(many.high > 0.8);
  CHECK(many.high - many.low < 0.5 * (few.high - few.low));
  CHECK(many.ratio == Approx(0.8).epsilon(0.05));
  // The same samples and seed give the same interval; no samples give none.
  const auto a = draw(8, 30), b = draw(10, 30);
  CHECK(hotpath::detail::ratio_of_medians(a, b, 5).low ==
        hotpath::detail::ratio_of_medians(a, b, 5).low);
  CHECK_FALSE(hotpath::detail::ratio_of_medians({}, b, 5).known());
  CHECK_FALSE(hotpath::detail::ratio_of_medians(a, {}, 5).known());
  const auto one = hotpath::detail::ratio_of_medians({3.0}, {6.0}, 5);
  CHECK(one.ratio == 0.5);
  CHECK(one.low == 0.5);
  CHECK(one.high == 0.5);
  // Rounds judged one at a time pool without resampling: eight rounds of 20 and 10 samples,
  // each with its own interval, narrow around the truth like one round of all their samples.
  std::vector<hotpath::detail::RatioInterval> rounds;
  for (int k = 0; k < 8; ++k)
    rounds.push_back(hotpath::detail::ratio_of_medians(draw(8, 20), draw(10, 10), 100 + k));
  const auto pooled = hotpath::detail::pool_intervals(rounds);
  CHECK(pooled.low < 0.8);
  CHECK(pooled.high > 0.8);
  CHECK(pooled.ratio == Approx(0.8).epsilon(0.05));
  CHECK(pooled.high - pooled.low < 0.5 * (rounds[0].high - rounds[0].low));
  CHECK(hotpath::detail::pool_intervals({rounds[3]}).ratio == Approx(rounds[3].ratio));
  CHECK_FALSE(hotpath::detail::pool_intervals({}).known());
  // Rounds that scatter more than their own intervals say (the host's speed moved between them,
  // as the MLP step's rounds on the GPU hosts did: 0.66-0.97, each +-5%): the pooled interval
  // is as wide as their scatter, not the +-2% their own intervals would add up to.
  std::vector<hotpath::detail::RatioInterval> drifting;
  for (const double x : {0.768, 0.754, 0.968, 0.669, 0.656, 0.752}) {
    hotpath::detail::RatioInterval iv;
    iv.ratio = x, iv.low = x * 0.95, iv.high = x * 1.05;
    drifting.push_back(iv);
  }
  const auto wide = hotpath::detail::pool_intervals(drifting);
  CHECK(wide.ratio == Approx(0.755).epsilon(0.01));
  // The mean of the logs -0.281, their variance 0.0193 against each round's own 0.0006.
  CHECK(wide.low == Approx(0.675).epsilon(0.01));
  CHECK(wide.high == Approx(0.844).epsilon(0.01));
  // Rounds that agree as well as their own intervals say pool as before: in quadrature.
  std::vector<hotpath::detail::RatioInterval> agreeing(4, drifting[0]);
  const auto narrow = hotpath::detail::pool_intervals(agreeing);
  CHECK(narrow.high / narrow.ratio ==
        Approx(std::exp(0.25 * (std::log(1.05) - std::log(0.95)))).epsilon(1e-6));
}

TEST_CASE("when its last plan is reverted hotpath stands aside at once", "[governor][aside]") {
  // A loop whose only plan loses: once it is reverted the hook costs every op and buys nothing;
  // hotpath takes it out of the dispatch from the next op, not at the end of its 30-iteration
  // stand-aside window.
  const hotpath_test::TempDir tmp("hotpath-governor-test");
  hotpath::disable_hot_path_detection();
  auto c = fresh_config(tmp.path());
  hotpath::enable_hot_path_detection(c);
  FakeLoop loop{0, {2.5}, one_group()};  // 12.5 ms fused vs 10 ms eager
  loop.jitter = 0.1;
  loop.run(100);
  const auto st = hotpath::stats();
  INFO(hotpath::format_stats(st));
  const auto* sig = planned(st);
  REQUIRE(sig != nullptr);
  REQUIRE(sig->fusion.reverted);
  CHECK(st.stood_aside == 1);
  CHECK(st.standing_aside);
  CHECK(st.aside_reason.find("its last plan that could run was reverted (signature " + sig->hex) !=
        std::string::npos);
  // The iterations seen end with the revert: none ran under the hook after it.
  CHECK(st.iterations < 80);
  hotpath::disable_hot_path_detection();
}

TEST_CASE("a group made slower on purpose is turned off within two windows", "[governor][faults]") {
  // HOTPATH_FAULTS=slow: the plan's first group costs 2 ms more each time it runs fused; the
  // loop (CPU plans, the real clock, ~0.1 ms an iteration) is timed as it runs. The first window
  // against plain eager shows the loss, each group is left out for half a window, and the slow
  // one is turned off while the other stays.
  const hotpath_test::TempDir tmp("hotpath-governor-test");
  hotpath::disable_hot_path_detection();
  hotpath_test::EnvVar faults("HOTPATH_FAULTS", "slow");
  auto c = fresh_config(tmp.path());
  hotpath::enable_hot_path_detection(c);
  const auto body = two_groups();
  int turned_off_after = -1;
  for (int i = 0; i < 240 && turned_off_after < 0; ++i) {
    body();
    hotpath::step();
    const auto st = hotpath::stats();
    const auto* sig = planned(st);
    if (sig != nullptr && sig->fusion.groups.size() == 2 && !sig->fusion.groups[0].active)
      turned_off_after = static_cast<int>(sig->fusion.fused_iterations);
  }
  const auto st = hotpath::stats();
  const auto* sig = planned(st);
  REQUIRE(sig != nullptr);
  INFO(hotpath::format_stats(st));
  REQUIRE(sig->fusion.groups.size() == 2);
  CHECK_FALSE(sig->fusion.groups[0].active);
  CHECK(sig->fusion.groups[1].active);
  CHECK_FALSE(sig->fusion.reverted);
  // Judged on two windows' worth of fused iterations when the machine is quiet (one window of
  // 20, then half a window with each group left out; a few more run while each decision waits
  // for the next iteration start: 42-43 seen). On a loaded machine (tests run side by side) a
  // first round may be too noisy to decide and another is timed: one round's room more.
  CHECK(turned_off_after > 0);
  CHECK(turned_off_after <= 3 * c.revert_window + 5);
  hotpath::disable_hot_path_detection();
}

TEST_CASE("a noisy loop's figure is measured until its interval is narrow",
          "[governor][interval]") {
  // A host whose speed drifts over a few iterations: one window and the block after it can land
  // in different moods, so one round's ratio is off by more than the 5%. The plan is
  // kept after the first round; the report's figure pools rounds (a window and a plain block
  // each) until its 95% interval is within 5% a side, and only then is it called judged.
  const hotpath_test::TempDir tmp("hotpath-governor-test");
  hotpath::disable_hot_path_detection();
  auto c = fresh_config(tmp.path());
  hotpath::enable_hot_path_detection(c);
  FakeLoop loop{0, {-2.5}, one_group()};  // 7.5 ms vs 10 ms: 1.333x
  loop.jitter = 0.15;
  loop.drift = 0.2;  // and a slow wave of +-20% over 24 iterations
  loop.run(60);
  auto rep = hotpath::report();
  REQUIRE(hot_report(rep) != nullptr);
  CHECK_FALSE(hot_report(rep)->judged);  // one round: too uncertain to be the figure
  CHECK(hot_report(rep)->speedup_rounds == 1);
  CHECK_THAT(hotpath::format_report(*hot_report(rep)), Catch::Contains("one round: the interval"));
  const double first_width = hot_report(rep)->speedup_high / hot_report(rep)->speedup_low;
  loop.run(340);
  rep = hotpath::report();
  const auto* r = hot_report(rep);
  REQUIRE(r != nullptr);
  INFO(hotpath::format_report(*r));
  CHECK(r->judged);
  CHECK(r->plain_blocks >= 3);
  // The figure pools the rounds kept as evidence (kEvidenceRounds, 8, at most), each a window and
  // its plain block, and the report says how many.
  CHECK(r->speedup_rounds >= 3);
  CHECK(r->speedup_rounds <= 8);
  CHECK(r->speedup_rounds <= r->plain_blocks);
  CHECK_THAT(hotpath::format_report(*r),
             Catch::Contains("; pooled over " + std::to_string(r->speedup_rounds) + " rounds)"));
  // The first verdict (up to four rounds) and kMaxRefine (7) more, at most.
  CHECK(r->plain_blocks <= 11);
  CHECK(r->verdict == hotpath::Verdict::CompileWins);
  CHECK(r->speedup_judged == Approx(10.0 / 7.5).epsilon(0.05));
  // As narrow as the rounds allow, and no narrower: the drift moves whole rounds (their ratios
  // scatter beyond each one's own interval), so eight of them leave about +-10% here, and the
  // interval still covers the truth.
  CHECK(r->speedup_high / r->speedup_low < first_width);
  CHECK(r->speedup_low < 10.0 / 7.5);
  CHECK(r->speedup_high > 10.0 / 7.5);
  CHECK(r->speedup_low > 10.0 / 7.5 * 0.85);
  CHECK(r->speedup_high < 10.0 / 7.5 * 1.15);
  hotpath::disable_hot_path_detection();
}

TEST_CASE("rounds that refine a kept plan's figure are judged together and not one by one",
          "[governor][interval]") {
  // A small win on a loop whose speed drifts: single rounds land anywhere between a clear win and
  // a clear loss. Kept after its first round, the plan is measured further; each later round is
  // one more sample of the same question, and none of them alone can revert it. The swing is
  // met at a phase of its own in each loop: a first round whose plain block fell on the swing's
  // fast stretch is timed again (at another offset) before anything reverts. With one phase for
  // all twenty, rounds judged one by one reverted 6 of them; with a phase each and a first loss
  // reverting at once, 5; with the loss timed again, at most one (two losing rounds in a row
  // on a +-40% swing is then what the evidence says).
  const hotpath_test::TempDir tmp("hotpath-governor-test");
  hotpath::disable_hot_path_detection();
  auto c = fresh_config(tmp.path());
  int reverted = 0;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    hotpath::enable_hot_path_detection(c);
    FakeLoop loop{0, {-1.0}, one_group()};  // 9 ms vs 10 ms: 1.11x
    loop.rng.seed(seed);
    loop.jitter = 0.3;
    loop.drift = 0.4;
    loop.drifted = static_cast<int>(seed * 7 % 24);
    loop.run(400);
    const auto st = hotpath::stats();
    REQUIRE(planned(st) != nullptr);
    if (planned(st)->fusion.reverted) {
      ++reverted;
      UNSCOPED_INFO("seed " << seed << ": " << planned(st)->fusion.reason);
    }
    hotpath::disable_hot_path_detection();
  }
  CHECK(reverted <= 1);
}
