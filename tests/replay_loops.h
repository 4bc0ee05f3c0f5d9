// Whole training loops for the replay tests (test_replay.cpp, test_replay_launch.cpp): an MLP +
// AdamW on the GPU run eagerly, planned and replayed in one process, and what each kept.
#pragma once

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "have_gpu.h"
#include "hotpath/hotpath.h"
#include "temp_dir.h"

namespace replay_loops {

using hotpath_test::have_gpu;

struct Run {
  std::vector<torch::Tensor> params;  // at the end, on the CPU
  std::vector<torch::Tensor> kept;    // what the loop kept along the way, on the CPU
  hotpath::Stats stats;
};

// An MLP + AdamW on the GPU for `steps` steps (hotpath on or off, replay on or off); `step`
// runs one training step and may keep tensors (it gets the step number, the model, the
// optimizer and the list to keep them in).
using Model = torch::nn::Sequential;
using Opt = torch::optim::AdamW;
using Kept = std::vector<torch::Tensor>;
using Step = std::function<void(int, Model&, Opt&, Kept&)>;

// The kernel cache the loops share; verdicts are remembered there only where a test asks.
inline const std::string& cache_path() {
  static hotpath_test::TempDir cache("hotpath-gpu-replay");
  return cache.path();
}

inline Run train(bool hot, bool replay, int steps, const Step& step, int graph_ops,
                 bool remember = false) {
  torch::manual_seed(11);
  torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                              torch::nn::Linear(256, 64));
  model->to(torch::kCUDA);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  hotpath::Config c;
  c.threshold = 3;
  c.remember = remember;
  c.revert_window = 1000000;  // correctness, not speed: nothing is reverted on timing noise
  c.stand_aside = false;
  c.replay = replay;
  c.replay_graph_ops = graph_ops;
  c.cache_dir = cache_path();
  c.log_level = hotpath::LogLevel::Warn;
  hotpath::disable_hot_path_detection();
  if (hot) hotpath::enable_hot_path_detection(c);
  Run r;
  std::vector<torch::Tensor> kept;
  for (int i = 0; i < steps; ++i) {
    step(i, model, opt, kept);
    hotpath::step();
    if (hot && i == 3) hotpath::wait_for_compilation();
  }
  if (hot) r.stats = hotpath::stats();
  hotpath::disable_hot_path_detection();
  for (auto& t : model->parameters()) r.params.push_back(t.detach().cpu());
  for (auto& t : kept) r.kept.push_back(t.detach().cpu().clone());
  return r;
}

inline double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max() /
          b.to(torch::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}

// Whether two runs ran the same plans the same way: per signature, as many fused iterations,
// divergences and replayed iterations.
inline bool same_paths(const hotpath::Stats& a, const hotpath::Stats& b) {
  if (a.signatures.size() != b.signatures.size()) return false;
  for (std::size_t i = 0; i < a.signatures.size(); ++i) {
    const hotpath::FusionStats& x = a.signatures[i].fusion;
    const hotpath::FusionStats& y = b.signatures[i].fusion;
    if (a.signatures[i].id != b.signatures[i].id || x.fused_iterations != y.fused_iterations ||
        x.divergences != y.divergences || x.replayed_iterations != y.replayed_iterations)
      return false;
  }
  return true;
}

// Hotpath's run against eager's: parameters and what the loop kept within fused kernels' rounding.
inline void check_near_eager(const Run& hot, const Run& eager) {
  INFO(hotpath::format_stats(hot.stats));
  REQUIRE(hot.params.size() == eager.params.size());
  for (std::size_t i = 0; i < eager.params.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_error(hot.params[i], eager.params[i]) <= 1e-4);
  }
  REQUIRE(hot.kept.size() == eager.kept.size());
  for (std::size_t i = 0; i < eager.kept.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_error(hot.kept[i], eager.kept[i]) <= 1e-4);
  }
}

// Hotpath with replay against eager, and against hotpath without replay: the graphs must run what
// the plan runs (bit for bit), and the plan agrees with eager within fused kernels' rounding.
inline void check_against_eager(const Run& replayed, const Run& planned, const Run& eager) {
  check_near_eager(replayed, eager);
  // Where replay left iterations (they finish eagerly) the rounding differs from the plan's.
  if (replayed.stats.last().fusion.divergences != planned.stats.last().fusion.divergences) return;
  INFO(hotpath::format_stats(replayed.stats));
  REQUIRE(replayed.params.size() == planned.params.size());
  for (std::size_t i = 0; i < planned.params.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::equal(replayed.params[i], planned.params[i]));
  }
  REQUIRE(replayed.kept.size() == planned.kept.size());
  for (std::size_t i = 0; i < planned.kept.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::equal(replayed.kept[i], planned.kept[i]));
  }
}

// graph_ops: Config::replay_graph_ops.
inline Run check(int steps, const Step& step, int graph_ops = hotpath::Config{}.replay_graph_ops) {
  const Run eager = train(false, false, steps, step, graph_ops);
  const Run planned = train(true, false, steps, step, graph_ops);
  const Run replayed = train(true, true, steps, step, graph_ops);
  check_against_eager(replayed, planned, eager);
  CHECK(planned.stats.last().fusion.replayed_iterations == 0);
  return replayed;
}

// check() of a step whose loss `loss_of` makes from the model (the gradients zeroed, its backward,
// AdamW's step, the loss kept), for 40 steps.
inline Run check_loss(const std::function<torch::Tensor(Model&)>& loss_of) {
  return check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
    opt.zero_grad();
    auto loss = loss_of(model);
    loss.backward();
    opt.step();
    kept.push_back(loss.detach());
  });
}

// One training step on (x, y); its loss.
inline torch::Tensor train_step(Model& model, Opt& opt, const torch::Tensor& x,
                                const torch::Tensor& y) {
  opt.zero_grad();
  auto loss = torch::mse_loss(model->forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

// The signature seen most often: the loop's step, where others come now and then.
inline hotpath::SignatureStats main_signature(const hotpath::Stats& s) {
  REQUIRE_FALSE(s.signatures.empty());
  return *std::max_element(s.signatures.begin(), s.signatures.end(),
                           [](const hotpath::SignatureStats& a, const hotpath::SignatureStats& b) {
                             return a.count < b.count;
                           });
}

// The loop replayed for good: replay never went off, and no replayed iteration left the plan.
inline void check_replayed(const Run& r, std::int64_t at_least) {
  const auto f = r.stats.last().fusion;
  CHECK(f.replay_off.empty());
  CHECK(f.replayed_iterations >= at_least);
  CHECK(f.divergences == 0);
  CHECK(f.replay_captures >= 1);  // each capture's host time is counted
  CHECK(f.replay_capture_ms > 0);
}

}  // namespace replay_loops
