// The governor's tests' loop: CPU plans with a controllable clock (FakeLoop), one- and
// two-group bodies, and readers of the stats and the report. Shared by test_governor.cpp and
// test_governor_evidence.cpp.
#pragma once

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hotpath/hotpath.h"
#include "session/session.h"

namespace hotpath_test {

inline hotpath::Config config(const std::string& cache) {
  hotpath::Config c;
  c.threshold = 5;
  c.fuse = true;
  c.fuse_cpu = true;
  c.cache_dir = cache;
  c.revert_window = 20;
  c.revert_margin = 0.03;
  c.log_level = hotpath::LogLevel::Warn;
  return c;
}

// Group runs so far (CPU groups run through the executor: eager_runs) of the busiest signature.
inline std::vector<std::int64_t> group_runs() {
  const auto s = hotpath::stats();
  std::vector<std::int64_t> runs;
  for (const auto& sig : s.signatures) {
    if (!sig.fusion.planned) continue;
    for (const auto& g : sig.fusion.groups) runs.push_back(g.launches + g.eager_runs);
  }
  return runs;
}

// Runs `iterations` of `body` with a fake clock: 10 ms per iteration plus deltas[g] for each
// group g that ran fused in it.
struct FakeLoop {
  double now = 0;
  std::vector<double> deltas;
  std::function<void()> body;
  double base = 10.0;  // an eager iteration
  // The first cold_iterations cost cold_ms more (a process warming up).
  int cold_iterations = 0;
  double cold_ms = 0;
  // Every pause_every-th iteration is preceded by pause_ms of work under hotpath::Pause.
  int pause_every = 0;
  double pause_ms = 0;
  // Each iteration's time is scaled by (1 + jitter * u), u uniform in [-1, 1] (a noisy host).
  double jitter = 0;
  // ... and by (1 + drift * sin(2 pi i / 24)) at the loop's i-th iteration (a host whose speed
  // drifts over a few iterations, as busy machines' do).
  double drift = 0;
  int drifted = 0;
  // A passing slowdown that hits the fused path only: once armed, the spike_length iterations in
  // which every group ran, from the first one after a plain-eager iteration (the start of a window
  // judged against a fresh plain block), cost spike_ms more.
  bool spike_armed = false;
  int spike_length = 0;
  int spiked = 0;  // iterations slowed so far
  double spike_ms = 0;
  // The switch from plain eager: the switch_length iterations in which every group ran, after
  // an iteration in which none did (before hot, a plain-eager block) or a Pause, cost switch_ms
  // more (the GPU's queue drained, the host's caches on eager's path).
  int switch_length = 0;
  double switch_ms = 0;
  int switch_left = 0;
  // A tail of slow fused iterations: every tail_every-th iteration in which every group ran
  // costs tail_ms more.
  int tail_every = 0;
  double tail_ms = 0;
  int all_in_count = 0;
  bool last_plain = false;
  bool started = false;
  std::mt19937 rng{7};

  void run(int iterations) {
    hotpath::detail::thread_session()->governor.set_clock([this] { return now; });
    if (!started) hotpath::step();  // the first boundary (a later run goes on from the last)
    started = true;
    for (int i = 0; i < iterations; ++i) {
      if (pause_every > 0 && i % pause_every == 0) {
        hotpath::Pause pause;
        auto unseen = torch::randn({8}).sin();
        now += pause_ms;
        switch_left = switch_length;
      }
      const auto before = group_runs();
      body();
      const auto after = group_runs();
      double cost = base + (i < cold_iterations ? cold_ms : 0.0);
      std::size_t ran = 0;
      for (std::size_t g = 0; g < after.size() && g < deltas.size(); ++g) {
        const std::int64_t was = g < before.size() ? before[g] : 0;
        if (after[g] > was) cost += deltas[g], ++ran;
      }
      const bool all_in = ran > 0 && ran == deltas.size();
      if (spike_armed && all_in && (spiked > 0 || last_plain) && spiked < spike_length) {
        cost += spike_ms;
        ++spiked;
      }
      if (all_in && tail_every > 0 && ++all_in_count % tail_every == 0) cost += tail_ms;
      if (all_in && switch_left > 0) {
        cost += switch_ms;
        --switch_left;
      }
      last_plain = ran == 0;
      if (last_plain) switch_left = switch_length;
      if (jitter > 0) cost *= 1 + jitter * std::uniform_real_distribution<double>(-1, 1)(rng);
      if (drift > 0) cost *= 1 + drift * std::sin(2 * 3.14159265358979 * drifted++ / 24.0);
      now += cost;
      hotpath::step();
    }
  }
};

// One group: a pointwise chain.
inline std::function<void()> one_group() {
  auto x = torch::randn({32, 32});
  return [x] { auto y = (x * 1.5 + 0.5).relu(); };
}

// Two groups, separated by a matmul (a group boundary).
inline std::function<void()> two_groups() {
  auto x = torch::randn({32, 32});
  auto w = torch::randn({32, 32});
  return [x, w] {
    auto a = (x * 1.5 + 0.5).relu();
    auto b = torch::mm(a, w);
    auto c = (b * 0.5 - 1.0).sigmoid();
  };
}

inline const hotpath::SignatureStats* planned(const hotpath::Stats& s) {
  for (const auto& sig : s.signatures)
    if (sig.fusion.planned) return &sig;
  return nullptr;
}

inline const hotpath::SignatureReport* hot_report(const hotpath::Report& r) {
  for (const auto& sig : r.signatures)
    if (sig.hot_at_iteration >= 0) return &sig;
  return nullptr;
}

// The plan was kept, judged against an eager baseline of `eager` ms and fused at `fused` ms.
// A loop without step() marks: the MLP (16 -> 32 -> 16, GELU, AdamW) on the CPU for `steps`
// steps, hotpath enabled or not (threshold 3, window 10, nothing remembered, no standing aside);
// `top` runs before each step, and may change what it trains on (UnmarkedStep). What it leaves:
// hotpath's stats and report (when hot) and the parameters.
struct UnmarkedRun {
  hotpath::Stats stats;
  hotpath::Report report;
  std::vector<torch::Tensor> params;
};
struct UnmarkedStep {
  int index;
  torch::nn::Sequential& model;
  torch::Tensor x, y;  // the step's batch: the loop's own, 8 rows
};
inline UnmarkedRun train_unmarked_steps(bool hot, int steps, const std::string& cache,
                                        const std::function<void(UnmarkedStep&)>& top) {
  UnmarkedRun run;
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::GELU(),
                              torch::nn::Linear(32, 16));
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  auto x = torch::randn({8, 16}), y = torch::randn({8, 16});
  auto c = config(cache);
  c.threshold = 3;
  c.revert_window = 10;
  c.remember = false;
  c.stand_aside = false;
  hotpath::disable_hot_path_detection();
  if (hot) hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < steps; ++i) {
    UnmarkedStep step{i, model, x, y};
    top(step);
    opt.zero_grad();
    torch::mse_loss(model->forward(step.x), step.y).backward();
    opt.step();
  }
  if (hot) {
    run.stats = hotpath::stats();
    run.report = hotpath::report();
  }
  hotpath::disable_hot_path_detection();  // reading the parameters is no step of the loop
  for (auto& t : model->parameters()) run.params.push_back(t.detach().clone());
  return run;
}
inline UnmarkedRun train_unmarked(bool hot, int steps, const std::string& cache,
                                  const std::function<void()>& top = {}) {
  return train_unmarked_steps(hot, steps, cache, [&top](UnmarkedStep&) {
    if (top) top();
  });
}

// config(cache) with nothing remembered: each test's loop judged on its own.
inline hotpath::Config fresh_config(const std::string& cache) {
  auto c = config(cache);
  c.remember = false;
  return c;
}

// A session of its own on fresh_config(cache).
inline void enable_fresh(const std::string& cache) {
  hotpath::disable_hot_path_detection();
  hotpath::enable_hot_path_detection(fresh_config(cache));
}

// The report, once the planned signature is checked to be kept (not reverted).
inline hotpath::Report report_of_kept() {
  const auto st = hotpath::stats();
  const auto* sig = planned(st);
  REQUIRE(sig != nullptr);
  CHECK_FALSE(sig->fusion.reverted);
  return hotpath::report();
}

inline void check_kept(double eager, double fused) {
  const auto rep = report_of_kept();
  const auto* r = hot_report(rep);
  REQUIRE(r != nullptr);
  CHECK(r->eager_median_ms == Approx(eager));
  CHECK(r->fused_median_ms == Approx(fused));
  INFO(hotpath::format_report(*r));
  CHECK(r->verdict == hotpath::Verdict::CompileWins);
}

}  // namespace hotpath_test
