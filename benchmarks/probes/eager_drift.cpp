// Probe (issue "An honest governor"): does plain eager slow down over a process's life, and does
// hotpath make it? The MLP example's step (Linear, GELU, Linear, MSE, AdamW) in blocks of 10
// steps, each timed with CUDA events after the GPU is waited for, over --steps steps:
//   --mode none    hotpath never enabled: every block plain eager;
//   --mode hot     hotpath enabled; every --every-th block runs under hotpath::Pause (plain
//                  eager, as the example's cross-check runs it), the rest under hotpath;
//   --mode paused  hotpath enabled, every block under hotpath::Pause: does eager in a process
//                  that has hotpath enabled (and out of the dispatch) run as eager without it?
// --fresh-data draws a new batch (x, y) every step, so the loss does not fall towards zero (the
// example's single batch is learnt to a loss of 1e-5: its gradients end up tiny).
// Prints one line per block: step, side, ms per step; with --sync, the loss every 10 blocks.
//   probe_eager_drift --mode none --steps 2000 [--sync] [--fresh-data]
#include <hotpath/hotpath.h>

#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  std::string mode = "none";
  int steps = 2000, every = 3;
  bool sync = false, fresh = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--every" && i + 1 < argc) {
      every = std::atoi(argv[++i]);
    } else if (a == "--sync") {
      sync = true;
    } else if (a == "--fresh-data") {
      fresh = true;
    } else {
      std::fprintf(
          stderr,
          "usage: probe_eager_drift [--mode none|hot|paused] [--steps N] [--every K] [--sync] "
          "[--fresh-data]\n");
      return 2;
    }
  }
  if (mode != "none" && mode != "hot" && mode != "paused") {
    std::fprintf(stderr, "probe_eager_drift: --mode is none, hot or paused, got '%s'\n",
                 mode.c_str());
    return 2;
  }
  const torch::Device device(torch::kCUDA);
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(1024, 4096), torch::nn::GELU(),
                              torch::nn::Linear(4096, 1024));
  model->to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  auto x = torch::randn({256, 1024}, device);
  auto y = torch::randn({256, 1024}, device);
  double last_loss = 0;
  auto step = [&] {
    if (fresh) {
      hotpath::Pause p;  // the batch's drawing is no part of the step under test
      x.normal_();
      y.normal_();
    }
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    if (sync) last_loss = loss.item<double>();
    loss.backward();
    opt.step();
  };
  if (mode != "none") hotpath::enable_hot_path_detection(10);
  for (int b = 0; b * 10 < steps; ++b) {
    const bool plain = mode != "hot" || b % every == 0;
    std::optional<hotpath::Pause> pause;
    if (plain && mode != "none") pause.emplace();
    for (int k = 0; k < 4; ++k) step();  // the switch from the other side
    torch::cuda::synchronize();
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (int k = 0; k < 10; ++k) step();
    stop.record();
    stop.synchronize();
    std::printf("block %4d  step %5d  %s  %.3f ms\n", b, b * 14, plain ? "eager" : "hot  ",
                static_cast<double>(start.elapsed_time(stop)) / 10);
    if (sync && b % 10 == 0) std::printf("loss %.6g\n", last_loss);
  }
  if (mode != "none") {
    hotpath::disable_hot_path_detection();
    std::printf("%s", hotpath::format_report(hotpath::report()).c_str());
  }
  return 0;
}
