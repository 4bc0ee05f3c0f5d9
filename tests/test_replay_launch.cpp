// The replay's launcher thread (Config::replay_launcher, exec/replay_launcher.h) on whole
// training loops: the graphs it launches for the loop's thread must compute what the loop's own
// launches compute, bit for bit, where a step reads its loss in the middle (the loop's thread waits
// for the launcher first), keeps a loss the next replay would overwrite (copied out after the
// launches that made it), and brings its batch from the CPU each step (the launcher copies it
// in before the graph that reads it), and hands out outputs its thread made ahead. They need a
// GPU and are skipped without one.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <vector>

#include "env_var.h"
#include "exec/replay_launcher.h"
#include "replay_loops.h"

using namespace replay_loops;  // NOLINT(google-build-using-namespace)

TEST_CASE("graphs the launcher thread launches train as the loop's own launches do",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  torch::manual_seed(5);
  std::vector<torch::Tensor> batches;  // on the CPU: copied to the GPU inside the step
  for (int k = 0; k < 3; ++k) batches.push_back(torch::randn({32, 64}));
  const auto y = torch::randn({32, 64}, torch::kCUDA);
  const Step step = [&](int i, Model& model, Opt& opt, Kept& kept) {
    const auto x = batches[static_cast<std::size_t>(i % 3)].to(torch::kCUDA);
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    kept.push_back(torch::tensor({loss.item<double>()}, torch::kDouble));  // the host waits
    loss.backward();
    opt.step();
    if (i % 5 == 0) kept.push_back(loss.detach());  // held across the next replays
  };
  constexpr int kSteps = 80;
  const Run eager = train(false, false, kSteps, step, /*graph_ops=*/4);
  const Run threaded = train(true, true, kSteps, step, 4);
  Run own;
  {
    hotpath_test::EnvVar off("HOTPATH_REPLAY_LAUNCHER", "0");
    own = train(true, true, kSteps, step, 4);
  }
  INFO(hotpath::format_stats(threaded.stats));
  INFO(hotpath::format_stats(own.stats));
  check_replayed(threaded, 40);
  check_replayed(own, 40);
  const auto ft = threaded.stats.last().fusion;
  const auto fo = own.stats.last().fusion;
  CHECK(ft.replayed_iterations == fo.replayed_iterations);
  // Graphs of about 4 ops: several launches a step, each through the launcher (unless this
  // process may run on one CPU only: then the loop's thread launches them,
  // Config::replay_launcher).
  CHECK(ft.replay_graphs >= 3);
  if (hotpath::detail::usable_cpus() >= 2) {
    CHECK(ft.replay_launcher_launches >= ft.replayed_iterations * 2);
    CHECK(ft.replay_launcher_ms > 0);
    // The outputs it hands out were made ahead on the launcher's thread, but for the first
    // replay's (Replay::premake); the checks below hold them to the loop's own.
    CHECK(ft.replay_premade_outputs >= ft.replayed_iterations);
  } else {
    CHECK(ft.replay_launcher_launches == 0);
    CHECK(ft.replay_premade_outputs == 0);
  }
  CHECK(fo.replay_launcher_launches == 0);
  CHECK(fo.replay_premade_outputs == 0);
  CHECK(fo.replay_launcher_ms == 0);
  CHECK(ft.replay_rescued > 0);  // the kept losses were copied out, after their graphs
  // Bit for bit where both ran the same plans the same iterations: which plan an iteration
  // starts armed with depends on when a plan is ready (a second signature's, the fifth step's
  // with its kept loss, was armed at an iteration of the first in one run of a GPU call and not
  // in the other; its fused loss then rounds as the plan's kernel does, not as the replay's).
  const bool same = same_paths(threaded.stats, own.stats);
  REQUIRE(threaded.params.size() == own.params.size());
  for (std::size_t i = 0; i < own.params.size(); ++i) {
    CAPTURE(i);
    if (same) CHECK(torch::equal(threaded.params[i], own.params[i]));
    CHECK(rel_error(threaded.params[i], eager.params[i]) <= 1e-4);
  }
  REQUIRE(threaded.kept.size() == eager.kept.size());
  REQUIRE(own.kept.size() == eager.kept.size());
  for (std::size_t i = 0; i < eager.kept.size(); ++i) {
    CAPTURE(i);
    if (same) CHECK(torch::equal(threaded.kept[i], own.kept[i]));
    CHECK(rel_error(threaded.kept[i], eager.kept[i]) <= 1e-4);
  }
}
