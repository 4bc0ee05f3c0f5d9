// A plain LibTorch training loop: 2-layer MLP + AdamW. The only hotpath line is the enable call;
// the loop itself is unmodified (no step() markers: hotpath finds the loop's period itself).
//
//   mlp_training [--iterations N] [--batch B] [--dim D] [--hidden H] [--threshold T] [--cpu]
//                [--cross-check N] [--sync]
//
// --sync: every step reads its loss on the host (loss.item()), as a loop that logs each step's
// loss does: the host waits for the GPU once a step.
//
// After the loop, N more iterations a side (default 100; 0: none) cross-check the governor's
// verdict against plain eager: blocks of 10 iterations under hotpath::Pause (not intercepted at
// all) alternate with blocks of 10 under hotpath, and the medians of the blocks are compared.
//
// Defaults: Linear 1024->4096, GELU, Linear 4096->1024, batch 256 on a GPU; a quarter of each
// size on the CPU so that the run stays short.
#include <hotpath/hotpath.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "crash_backtrace.h"
#include "example_support.h"

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  struct {
    int iterations = 200;
    std::int64_t batch = -1, dim = -1, hidden = -1;
    int threshold = 10;
    bool force_cpu = false;
    int cross_check = 100;
    bool sync = false;
  } o;
  hotpath_examples::Args("mlp_training",
                         "[--iterations N] [--batch B] [--dim D] [--hidden H] [--threshold T] "
                         "[--cpu] [--cross-check N] [--sync]")
      .add("--iterations", o.iterations)
      .add("--batch", o.batch)
      .add("--dim", o.dim)
      .add("--hidden", o.hidden)
      .add("--threshold", o.threshold)
      .add("--cpu", o.force_cpu)
      .add("--cross-check", o.cross_check)
      .add("--sync", o.sync)
      .parse(argc, argv);
  const bool cuda = !o.force_cpu && torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const int64_t scale = cuda ? 1 : 4;
  if (o.iterations < 1 || o.threshold < 1) {
    std::fprintf(stderr, "mlp_training: --iterations and --threshold must be at least 1\n");
    return 2;
  }
  if (o.batch <= 0) o.batch = 256 / scale;
  if (o.dim <= 0) o.dim = 1024 / scale;
  if (o.hidden <= 0) o.hidden = 4096 / scale;
  std::printf(
      "mlp_training: %s, Linear %lld->%lld, GELU, Linear %lld->%lld, batch %lld, MSE, AdamW, %d "
      "iterations\n",
      cuda ? "CUDA" : "CPU", (long long)o.dim, (long long)o.hidden, (long long)o.hidden,
      (long long)o.dim, (long long)o.batch, o.iterations);

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(o.dim, o.hidden), torch::nn::GELU(),
                              torch::nn::Linear(o.hidden, o.dim));
  model->to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const auto x = torch::randn({o.batch, o.dim}, device);
  const auto y = torch::randn({o.batch, o.dim}, device);

  hotpath::enable_hot_path_detection(o.threshold);  // the only hotpath line the loop needs

  const int report_every = std::max(1, o.iterations / 4);
  auto t0 = std::chrono::steady_clock::now();
  int last_report = 0;
  for (int it = 1; it <= o.iterations; ++it) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    if (o.sync) loss.item<double>();
    loss.backward();
    opt.step();
    if (it % report_every == 0 || it == 1) {
      const double l = loss.item<double>();  // synchronises
      const auto t1 = std::chrono::steady_clock::now();
      const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
      std::printf("iteration %4d  loss %.5f  %.3f ms/iteration\n", it, l, ms / (it - last_report));
      last_report = it;
      t0 = std::chrono::steady_clock::now();
    }
  }
  if (o.cross_check > 0) {
    hotpath_examples::cross_check(cuda, o.cross_check, [&] {
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      if (o.sync) loss.item<double>();
      loss.backward();
      opt.step();
    });
  }
  hotpath::disable_hot_path_detection();
  std::printf("%s\n", hotpath::format_stats(hotpath::stats()).c_str());
  std::printf("%s", hotpath::format_report(hotpath::report()).c_str());
  return hotpath::stats().hot_signatures() > 0 ? 0 : 1;
}
