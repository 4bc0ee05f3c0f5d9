// Probe (issue "Launch-bound loops": the hook at <= 1 us an op while replaying): bench_overhead's
// replayed row alone, for `perf record` to see only it. The small MLP+AdamW step (64-256-64, batch
// 32) replayed as CUDA graphs, its body timed host only (the GPU's work queued, synchronised
// every --block steps outside the clock), no host profile; plain eager (under Pause) in blocks
// between, for the host's time an op against it.
//   perf record -g -- probe_replay_host --steps 20000    (benchmarks/probes/replay_perf.sh)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <hotpath/hotpath.h>

#include "replayed.h"

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 20000, block = 25;
  bool eager = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::stoi(argv[++i]);
    else if (a == "--block" && i + 1 < argc)
      block = std::max(1, std::stoi(argv[++i]));
    else if (a == "--no-eager")
      eager = false;
    else {
      std::fprintf(stderr, "usage: probe_replay_host [--steps N] [--block K] [--no-eager]\n");
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "probe_replay_host: needs a CUDA device\n");
    return 2;
  }
  const torch::Device dev(torch::kCUDA);
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                              torch::nn::Linear(256, 64));
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const auto x = torch::randn({32, 64}, dev), y = torch::randn({32, 64}, dev);
  auto step = [&] {
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
  };
  probe::warm_until_replayed(step, true, 40);
  torch::cuda::synchronize();
  const auto ops = hotpath::stats().last().ops_per_iteration;
  const auto before = hotpath::stats().last().fusion.replayed_iterations;
  std::vector<double> hp, plain;
  using clock = std::chrono::steady_clock;
  for (int done = 0; done < steps; done += block) {
    auto t0 = clock::now();
    for (int i = 0; i < block; ++i) {
      step();
      hotpath::step();
    }
    hp.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() / block);
    torch::cuda::synchronize();
    if (!eager || (done / block) % 8 != 0) continue;  // plain eager in one block of eight
    hotpath::Pause pause;
    t0 = clock::now();
    for (int i = 0; i < block; ++i) step();
    plain.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() / block);
    torch::cuda::synchronize();
  }
  const auto replayed = hotpath::stats().last().fusion.replayed_iterations - before;
  hotpath::disable_hot_path_detection();
  std::printf(
      "probe_replay_host: %lld ops a step, %d steps (%lld replayed): host %.1f us a step (%.3f us "
      "an op) replayed; plain eager %.1f us (%.3f us an op), medians of blocks of %d\n",
      static_cast<long long>(ops), steps, static_cast<long long>(replayed), median(hp),
      median(hp) / static_cast<double>(std::max<std::int64_t>(ops, 1)), median(plain),
      median(plain) / static_cast<double>(std::max<std::int64_t>(ops, 1)), block);
  return 0;
}
