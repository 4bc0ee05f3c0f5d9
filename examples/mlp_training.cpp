// A plain LibTorch training loop: 2-layer MLP + AdamW. The only hotpath line is the enable call;
// the loop itself is unmodified (no step() markers: hotpath finds the loop's period itself).
//
//   mlp_training [--iterations N] [--batch B] [--dim D] [--hidden H] [--threshold T] [--cpu]
//                [--cross-check N]
//
// After the loop, N more iterations a side (default 100; 0: none) cross-check the governor's
// verdict against plain eager: blocks of 10 iterations under hotpath::Pause (not intercepted at
// all) alternate with blocks of 10 under hotpath, and the medians of the blocks are compared.
//
// Defaults: Linear 1024->4096, GELU, Linear 4096->1024, batch 256 on a GPU; a quarter of each
// size on the CPU so that the run stays short.
#include <hotpath/hotpath.h>

#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>
#include "crash_backtrace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Options {
  int iterations = 200;
  int64_t batch = -1, dim = -1, hidden = -1;
  int threshold = 10;
  bool force_cpu = false;
  int cross_check = 100;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "mlp_training: %s\nusage: mlp_training [--iterations N] [--batch B] [--dim D] "
               "[--hidden H] [--threshold T] [--cpu] [--cross-check N]\n",
               msg);
  std::exit(2);
}

long parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1)
    usage((std::string(flag) + " needs a positive integer, got '" + text + "'").c_str());
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--iterations")
      o.iterations = static_cast<int>(parse_positive("--iterations", value()));
    else if (a == "--batch")
      o.batch = parse_positive("--batch", value());
    else if (a == "--dim")
      o.dim = parse_positive("--dim", value());
    else if (a == "--hidden")
      o.hidden = parse_positive("--hidden", value());
    else if (a == "--threshold")
      o.threshold = static_cast<int>(parse_positive("--threshold", value()));
    else if (a == "--cpu")
      o.force_cpu = true;
    else if (a == "--cross-check") {
      const std::string v = value();
      o.cross_check = v == "0" ? 0 : static_cast<int>(parse_positive("--cross-check", v.c_str()));
    } else if (a == "--help" || a == "-h")
      usage("help");
    else
      usage(("unknown argument '" + a + "'").c_str());
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  Options o = parse(argc, argv);
  const bool cuda = !o.force_cpu && torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const int64_t scale = cuda ? 1 : 4;
  if (o.batch < 0) o.batch = 256 / scale;
  if (o.dim < 0) o.dim = 1024 / scale;
  if (o.hidden < 0) o.hidden = 4096 / scale;
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
    // The same loop, plain eager (under hotpath::Pause: not intercepted, unseen) in blocks of 10
    // iterations alternating with blocks under hotpath; per block the time per iteration, on the
    // GPU from CUDA events around the block (the GPU's span of the block's work, as the
    // benchmarks time it), on the CPU from the clock. Training goes on either way.
    auto block = [&](bool plain) {
      std::optional<hotpath::Pause> pause;
      if (plain) pause.emplace();
      std::optional<at::cuda::CUDAEvent> start, stop;
      if (cuda) {
        start.emplace(cudaEventDefault);
        stop.emplace(cudaEventDefault);
        start->record();
      }
      const auto b0 = std::chrono::steady_clock::now();
      for (int k = 0; k < 10; ++k) {
        opt.zero_grad();
        torch::mse_loss(model->forward(x), y).backward();
        opt.step();
      }
      if (!cuda)
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0)
                   .count() /
               10;
      stop->record();
      stop->synchronize();
      return static_cast<double>(start->elapsed_time(*stop)) / 10;
    };
    std::vector<double> plain, hot;
    for (int done = 0; done < o.cross_check; done += 10) {
      plain.push_back(block(true));
      hot.push_back(block(false));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf(
        "cross-check against plain eager (hotpath::Pause), interleaved blocks of 10, %zu "
        "iterations a side: eager %.3f ms, hotpath %.3f ms per iteration: %.2fx\n",
        plain.size() * 10, median(plain), median(hot), median(plain) / median(hot));
  }
  hotpath::disable_hot_path_detection();
  std::printf("%s\n", hotpath::format_stats(hotpath::stats()).c_str());
  std::printf("%s", hotpath::format_report(hotpath::report()).c_str());
  return hotpath::stats().hot_signatures() > 0 ? 0 : 1;
}
