// Fused vs eager on the GPU, side by side in one process, CUDA events, medians.
//   chain:  a memory-bound pointwise chain on N elements, and the device-to-device copy of the
//           same bytes (the bandwidth ceiling), eager vs fused.
//   mlp:    Linear 1024->4096, GELU, Linear 4096->1024, batch 256, MSE, AdamW; eager vs fused.
//   verify: every fused group of the MLP step and of a LayerNorm->GELU->residual chain checked
//           against eager on fresh random inputs each launch (Config::verify), on the groups'
//           own kernels and on the interpreter kernel (Config::compile_kernels = false).
//   Each case also runs on the interpreter alone, for its speed.
//   breakdown (only when asked for): where the MLP step's time goes, eager and hotpath: the GPU
//           time per iteration with the host out of the way (iterations queued behind a sleep
//           kernel), and the step's kernels from the CUDA profiler (Kineto/CUPTI), per iteration.
// Usage: bench_fusion [--iters N] [--elements N] [--csv FILE] [--cache DIR]
//                     [--only chain|mlp|rows|verify|breakdown] [--trace DIR]
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/hotpath.h"

#include "crash_backtrace.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Per-iteration GPU times (ms) of `body`, from CUDA events around each iteration. `host`, if
// given, receives the host time (ms) each iteration's body took to return (no synchronisation):
// when it is as long as the GPU time, the loop is bound by the CPU, not the GPU.
std::vector<double> time_iterations(int iters, const std::function<void(int)>& body,
                                    std::vector<double>* host = nullptr) {
  std::vector<at::cuda::CUDAEvent> start, stop;
  for (int i = 0; i < iters; ++i) {
    start.emplace_back(cudaEventDefault);  // timing enabled
    stop.emplace_back(cudaEventDefault);
  }
  for (int i = 0; i < iters; ++i) {
    const auto s = c10::cuda::getCurrentCUDAStream();
    start[static_cast<std::size_t>(i)].record(s);
    const auto t0 = std::chrono::steady_clock::now();
    body(i);
    if (host != nullptr)
      host->push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    stop[static_cast<std::size_t>(i)].record(s);
  }
  torch::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i)
    ms.push_back(
        start[static_cast<std::size_t>(i)].elapsed_time(stop[static_cast<std::size_t>(i)]));
  return ms;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// `kernels` false: the groups run on the interpreter kernel only (no compile per signature);
// such runs remember nothing, so that they leave no verdict for the runs that compile.
hotpath::Config config(const std::string& cache, bool verify, bool kernels = true) {
  hotpath::Config c;
  c.threshold = 10;
  c.fuse = true;
  c.cache_dir = cache;
  c.verify = verify;
  c.compile_kernels = kernels;
  c.remember = kernels;
  return c;
}

// Eager and hotpath side by side in one process, interleaved: both step functions warm up
// together; then hotpath runs alone until its kernels are in place (hot at iteration 10, compile
// awaited at 10, 10 more iterations), then blocks of kBlock eager iterations (under
// hotpath::Pause, unseen by it) alternate with blocks of kBlock hotpath iterations until each side
// has `iters`. Both sides sample the same host and GPU conditions: a host that drifts during the
// run moves both. GPU times from CUDA events, host times per body.
struct SideBySide {
  std::vector<double> eager, hot, eager_host, hot_host;  // the interleaved (steady) iterations
  std::vector<double> lead;                              // hotpath's first iterations
  hotpath::Stats stats;
};

constexpr int kBlock = 10;
constexpr int kLead = 20;

SideBySide side_by_side(int iters, int warmup, const std::function<void()>& eager,
                        const std::function<void()>& hot, const hotpath::Config& c) {
  SideBySide r;
  time_iterations(warmup, [&](int) {
    eager();
    hot();
  });
  hotpath::enable_hot_path_detection(c);
  auto hot_step = [&](int i) {
    hot();
    hotpath::step();
    if (i == 10) hotpath::wait_for_compilation();  // the steady state, not the compile
  };
  r.lead = time_iterations(kLead, hot_step);
  auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (int done = 0; done < iters; done += kBlock) {
    {
      hotpath::Pause pause;
      append(r.eager, time_iterations(
                          kBlock, [&](int) { eager(); }, &r.eager_host));
    }
    append(r.hot, time_iterations(
                      kBlock, [&](int i) { hot_step(kLead + done + i); }, &r.hot_host));
  }
  r.stats = hotpath::stats();
  hotpath::disable_hot_path_detection();
  return r;
}

// Eager block median over hotpath block median, per pair of neighbouring blocks.
std::vector<double> block_speedups(const SideBySide& r) {
  std::vector<double> v;
  for (std::size_t b = 0; b + kBlock <= r.eager.size() && b + kBlock <= r.hot.size(); b += kBlock) {
    const auto at = [&](const std::vector<double>& x) {
      return median(std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(b),
                                        x.begin() + static_cast<std::ptrdiff_t>(b + kBlock)));
    };
    v.push_back(at(r.eager) / at(r.hot));
  }
  return v;
}

void print_groups(const hotpath::SignatureStats& s) {
  std::printf("    %lld fused iterations, %lld divergences, %lld skipped values restored\n",
              static_cast<long long>(s.fusion.fused_iterations),
              static_cast<long long>(s.fusion.divergences),
              static_cast<long long>(s.fusion.restored));
  for (const auto& g : s.fusion.groups) {
    std::printf(
        "    group %-44s %2d ops  compile %7.1f ms%s  launches %lld (%lld interpreted)  eager %lld",
        g.name.c_str(), g.ops, g.compile_ms, g.from_cache ? " (cache)" : "",
        static_cast<long long>(g.launches), static_cast<long long>(g.interpreted),
        static_cast<long long>(g.eager_runs));
    if (g.checks > 0)
      std::printf("  checks %lld  max rel err %.3g%s", static_cast<long long>(g.checks),
                  g.max_rel_error, g.verify_failures > 0 ? "  BEYOND TOLERANCE" : "");
    if (!g.error.empty()) std::printf("  ERROR %s", g.error.c_str());
    std::printf("\n");
  }
}

// The signature that ran fused most often (a copy: callers pass temporaries).
std::optional<hotpath::SignatureStats> busiest(const hotpath::Stats& s) {
  std::optional<hotpath::SignatureStats> best;
  for (const auto& sig : s.signatures)
    if (!best || sig.fusion.fused_iterations > best->fusion.fused_iterations) best = sig;
  return best;
}

struct Mlp {
  torch::nn::Sequential model;
  torch::optim::AdamW opt;
  torch::Tensor x, y;
  Mlp()
      : model(torch::nn::Linear(1024, 4096), torch::nn::GELU(), torch::nn::Linear(4096, 1024)),
        opt((model->to(torch::kCUDA), model->parameters()), torch::optim::AdamWOptions(1e-3)),
        x(torch::randn({256, 1024}, torch::kCUDA)),
        y(torch::randn({256, 1024}, torch::kCUDA)) {}
  void step() {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
  }
};

// Softmax and log_softmax over rows, with the pointwise work around them, forward and backward:
// the row kernels (reductions along the last dimension).
struct Rows {
  torch::Tensor x, b, g;
  explicit Rows(torch::Dtype dtype, std::int64_t rows = 8192)
      : x(torch::randn({rows, 512}, torch::TensorOptions(torch::kCUDA).dtype(dtype))
              .requires_grad_()),
        b(torch::randn({512}, torch::TensorOptions(torch::kCUDA).dtype(dtype))),
        g(torch::randn({rows, 512}, torch::TensorOptions(torch::kCUDA).dtype(dtype))) {}
  void step() {
    x.mutable_grad() = torch::Tensor();
    auto h = x * 0.125 + b;
    auto p = torch::softmax(h, -1);
    auto l = torch::log_softmax(h * 2.0, -1);
    auto c = h - h.mean(-1, true);
    // c * c * g: the gradient through the mean sums terms that do not cancel (with a constant
    // factor they sum to ~0 and a relative error measures nothing but rounding).
    ((p * g + l * 0.1).sum() + (c * c * g).sum(-1, true).sum() * 1e-3).backward();
  }
};

// A norm with a weight, then GELU, times a random tensor, forward and backward. The norm's forward
// (native_layer_norm: out, mean, rstd; on CUDA rms_norm is _fused_rms_norm: out, rstd) fuses with
// the GELU and the multiply after it; the backward ops (the multiply's, the GELU's and the
// norm's, with its weight and bias gradients summed over all rows) fuse into one row kernel.
// Rows of more than 1024 elements (`cols`) take a block per row instead of a warp.
struct Norm {
  torch::Tensor x, w, b, g;
  bool layer = false;
  std::int64_t cols;
  Norm(torch::Dtype dtype, std::int64_t rows, bool layer_norm, std::int64_t cols = 512)
      : x(torch::randn({rows, cols}, torch::TensorOptions(torch::kCUDA).dtype(dtype))
              .requires_grad_()),
        w(torch::randn({cols}, torch::TensorOptions(torch::kCUDA).dtype(dtype)).requires_grad_()),
        b(torch::randn({cols}, torch::TensorOptions(torch::kCUDA).dtype(dtype)).requires_grad_()),
        g(torch::randn({rows, cols}, torch::TensorOptions(torch::kCUDA).dtype(dtype))),
        layer(layer_norm),
        cols(cols) {}
  void step() {
    for (auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
    auto y = layer ? torch::layer_norm(x, {cols}, w, b, 1e-5) : torch::rms_norm(x, {cols}, w, 1e-6);
    (torch::gelu(y) * g).sum().backward();
  }
};

// Cross-entropy over scaled logits, forward and backward: log_softmax and nll_loss (mean or
// sum) fuse with the scaling into one row kernel whose loss is summed across its blocks; the
// backward (nll_loss_backward, log_softmax's backward, the scaling's) into another. Every 7th
// target is the ignore_index. More than 1024 classes: a block per row.
struct CrossEntropy {
  torch::Tensor z, target;
  torch::Reduction::Reduction reduction;
  std::int64_t classes;
  CrossEntropy(torch::Dtype dtype, std::int64_t rows,
               torch::Reduction::Reduction r = torch::Reduction::Mean, std::int64_t classes = 1000)
      : z(torch::randn({rows, classes}, torch::TensorOptions(torch::kCUDA).dtype(dtype))
              .requires_grad_()),
        target(torch::randint(0, classes, {rows},
                              torch::TensorOptions(torch::kCUDA).dtype(torch::kLong))),
        reduction(r),
        classes(classes) {
    fresh_targets();
  }
  void fresh_targets() {
    target.random_(0, classes);
    target.index_put_({torch::arange(0, target.size(0), 7, target.options())}, -100);
  }
  void step() {
    z.mutable_grad() = torch::Tensor();
    auto loss = torch::nll_loss(torch::log_softmax(z * 0.5, -1), target, {}, reduction, -100);
    loss.backward();
  }
};

// Attention's softmax: scores [B, H, T, T] scaled, a causal mask [T, T] filled with -inf, softmax
// over the last dimension, times a random tensor; forward and backward. The mask broadcasts over
// batch and heads: the row kernels index it from the row number.
struct MaskedSoftmax {
  torch::Tensor x, g, mask;
  MaskedSoftmax(torch::Dtype dtype, std::int64_t batch)
      : x(torch::randn({batch, 8, 256, 256}, torch::TensorOptions(torch::kCUDA).dtype(dtype))
              .requires_grad_()),
        g(torch::randn({batch, 8, 256, 256}, torch::TensorOptions(torch::kCUDA).dtype(dtype))),
        mask(torch::ones({256, 256}, torch::kCUDA).triu(1).to(torch::kBool)) {}
  void step() {
    x.mutable_grad() = torch::Tensor();
    auto p = torch::softmax((x * 0.125).masked_fill(mask, -INFINITY), -1);
    (p * g).sum().backward();
  }
};

// GPU time per iteration with no host bubbles: a sleep kernel holds the GPU while the host queues
// kBlock iterations, which then run back to back. Needs a body that does not synchronise.
std::vector<double> gpu_bound(int blocks, const std::function<void(int)>& body) {
  std::vector<double> ms;
  for (int b = 0; b < blocks; ++b) {
    at::cuda::sleep(50'000'000);  // ~25 ms at 2 GHz: longer than the host needs for a block
    const auto block = time_iterations(kBlock, [&](int i) { body(b * kBlock + i); });
    ms.insert(ms.end(), block.begin(), block.end());
  }
  return ms;
}

// The GPU kernels (and copies, sets) of `iters` calls of `body` from the CUDA profiler, summed per
// name and divided by `iters`; the trace goes to `trace` (Chrome format) when one is named.
struct KernelLine {
  std::string name;
  double calls = 0, us = 0;
};
std::vector<KernelLine> profile_kernels(int iters, const std::function<void(int)>& body,
                                        const std::string& trace) {
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  const ProfilerConfig cfg(ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(cfg, activities);
  torch::autograd::profiler::enableProfiler(cfg, activities);
  for (int i = 0; i < iters; ++i) body(i);
  torch::cuda::synchronize();
  const auto result = torch::autograd::profiler::disableProfiler();
  std::map<std::string, KernelLine> by_name;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    KernelLine& k = by_name[e.name()];
    k.name = e.name();
    k.calls += 1.0 / iters;
    k.us += static_cast<double>(e.durationNs()) / 1e3 / iters;
  }
  if (!trace.empty()) result->save(trace);
  std::vector<KernelLine> lines;
  for (auto& [name, k] : by_name) lines.push_back(k);
  std::sort(lines.begin(), lines.end(),
            [](const KernelLine& a, const KernelLine& b) { return a.us > b.us; });
  return lines;
}

void print_kernels(const char* what, const std::vector<KernelLine>& lines) {
  double total = 0, calls = 0;
  for (const auto& k : lines) {
    total += k.us;
    calls += k.calls;
  }
  std::printf("  %s: %.0f kernels, %.1f us of kernel time per iteration\n", what, calls, total);
  for (const auto& k : lines) {
    std::string name = k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name;
    std::printf("    %7.1f us  %4.1f x  %s\n", k.us, k.calls, name.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  int iters = 200;
  long long elements = 64LL << 20;
  std::string csv, cache = "/tmp/hotpath-bench-cache", only, trace;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value for " + a);
      return argv[++i];
    };
    if (a == "--iters")
      iters = std::stoi(next());
    else if (a == "--elements")
      elements = std::stoll(next());
    else if (a == "--csv")
      csv = next();
    else if (a == "--cache")
      cache = next();
    else if (a == "--only")
      only = next();
    else if (a == "--trace")
      trace = next();
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!torch::cuda::is_available()) {
    std::cerr << "bench_fusion needs a CUDA device\n";
    return 1;
  }
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "case,variant,median_ms,gbps,speedup\n";
  }

  auto run = [&](const char* name) { return only.empty() || only == name; };
  if (!only.empty() && !run("chain") && !run("mlp") && !run("rows") && !run("verify") &&
      only != "breakdown") {
    std::cerr << "--only takes chain, mlp, rows, verify or breakdown, not " << only << "\n";
    return 2;
  }

  // ---- chain -------------------------------------------------------------------------------
  if (run("chain")) {
    torch::manual_seed(0);
    auto x = torch::randn({elements}, torch::kCUDA);
    auto dst = torch::empty_like(x);
    const double bytes = 2.0 * static_cast<double>(elements) * 4;  // one read, one write
    auto chain = [&] { return torch::sigmoid(torch::relu(x * 1.5 + 0.5)) * 2.0; };
    const auto copy_ms = median(time_iterations(iters, [&](int) { dst.copy_(x); }));
    const auto eager_ms = median(time_iterations(iters, [&](int) { auto y = chain(); }));
    // The steady state, not the compile nor the governor's first checks: 60 iterations with the
    // host in step with the GPU (as a loop that reads its loss is), so that the governor sees
    // each iteration's time before the next starts, then `iters` timed ones.
    auto steady = [&](const hotpath::Config& c) {
      hotpath::enable_hot_path_detection(c);
      for (int i = 0; i < 60; ++i) {
        auto y = chain();
        hotpath::step();
        if (i == 10) hotpath::wait_for_compilation();
        torch::cuda::synchronize();
      }
      return time_iterations(iters, [&](int) {
        auto y = chain();
        hotpath::step();
      });
    };
    const std::vector<double> fused = steady(config(cache, false));
    const auto st = hotpath::stats();
    hotpath::disable_hot_path_detection();
    const std::vector<double> interp = steady(config(cache, false, false));
    hotpath::disable_hot_path_detection();
    // Correctness of the fused result on this data.
    hotpath::enable_hot_path_detection(config(cache, false));
    torch::Tensor y_fused;
    for (int i = 0; i < 15; ++i) {
      y_fused = chain();
      hotpath::step();
      if (i == 10) hotpath::wait_for_compilation();
    }
    hotpath::disable_hot_path_detection();
    const auto ref = chain();
    const double err = ((y_fused - ref).norm() / ref.norm()).item<double>();
    const double fused_ms = median(fused);
    const double interp_ms = median(interp);
    const double copy_bw = bytes / copy_ms / 1e6, fused_bw = bytes / fused_ms / 1e6;
    std::printf(
        "chain %lld elements: copy %.3f ms (%.0f GB/s), eager %.3f ms, fused %.3f ms "
        "(%.0f GB/s, %.1f%% of copy), speedup %.2fx, rel err %.2g; interpreter %.3f ms "
        "(%.1f%% of copy)\n",
        elements, copy_ms, copy_bw, eager_ms, fused_ms, fused_bw, 100 * fused_bw / copy_bw,
        eager_ms / fused_ms, err, interp_ms, 100 * copy_ms / interp_ms);
    if (const auto s = busiest(st)) print_groups(*s);
    if (out) {
      out << "chain,copy," << copy_ms << "," << copy_bw << ",\n";
      out << "chain,eager," << eager_ms << "," << bytes / eager_ms / 1e6 << ",1\n";
      out << "chain,fused," << fused_ms << "," << fused_bw << "," << eager_ms / fused_ms << "\n";
      out << "chain,interpreter," << interp_ms << "," << bytes / interp_ms / 1e6 << ","
          << eager_ms / interp_ms << "\n";
    }
  }

  // ---- MLP + AdamW ---------------------------------------------------------------------------
  if (run("mlp")) {
    torch::manual_seed(1);
    Mlp eager;
    torch::manual_seed(1);
    Mlp hot;
    // Warm-up of both models: cuBLAS handles, allocator (the governor's eager baseline for the
    // hot model comes from its first iterations and must not include this).
    const SideBySide r = side_by_side(
        iters, 20, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false));
    const auto s = busiest(r.stats);
    if (s) print_groups(*s);
    // The governor's verdict for the loop's signature, as the library reports it.
    for (const auto& rep : hotpath::report().signatures)
      if (s && rep.hex == s->hex) std::printf("%s", hotpath::format_report(rep).c_str());
    // The same, the groups on the interpreter kernel only (no compile per signature).
    const SideBySide in = side_by_side(
        iters, 0, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false, false));
    const double eager_ms = median(r.eager), fused_ms = median(r.hot);
    const double interp_ms = median(in.hot), interp_eager_ms = median(in.eager);
    std::printf(
        "mlp+adamw: eager %.3f ms, hotpath steady %.3f ms, speedup %.2fx (interleaved blocks of "
        "%d, %zu iterations each side); first fused iteration %lld, compile %.0f ms (%d from "
        "cache)\n",
        eager_ms, fused_ms, eager_ms / fused_ms, kBlock, r.hot.size(),
        s ? static_cast<long long>(s->fusion.first_fused_iteration) : -1LL,
        s ? s->fusion.compile_ms : 0.0, s ? s->fusion.kernels_from_cache : 0);
    std::printf("    per-block speedup p10/p50/p90: %.2f/%.2f/%.2f\n",
                quantile(block_speedups(r), 0.1), quantile(block_speedups(r), 0.5),
                quantile(block_speedups(r), 0.9));
    std::printf(
        "    host time per iteration, p10/p50/p90: eager %.3f/%.3f/%.3f ms, hotpath "
        "%.3f/%.3f/%.3f ms\n",
        quantile(r.eager_host, 0.1), median(r.eager_host), quantile(r.eager_host, 0.9),
        quantile(r.hot_host, 0.1), median(r.hot_host), quantile(r.hot_host, 0.9));
    std::printf(
        "    GPU time per iteration, p10/p50/p90: eager %.3f/%.3f/%.3f ms, hotpath "
        "%.3f/%.3f/%.3f ms\n",
        quantile(r.eager, 0.1), median(r.eager), quantile(r.eager, 0.9), quantile(r.hot, 0.1),
        median(r.hot), quantile(r.hot, 0.9));
    std::printf(
        "    interpreter only (no compile per signature): eager %.3f ms, steady %.3f ms, speedup "
        "%.2fx\n",
        interp_eager_ms, interp_ms, interp_eager_ms / interp_ms);
    if (out) {
      out << "mlp_adamw,eager," << eager_ms << ",,1\n";
      out << "mlp_adamw,hotpath," << fused_ms << ",," << eager_ms / fused_ms << "\n";
      out << "mlp_adamw,interpreter_eager," << interp_eager_ms << ",,1\n";
      out << "mlp_adamw,interpreter," << interp_ms << ",," << interp_eager_ms / interp_ms << "\n";
    }
  }

  // ---- breakdown: where the MLP step's time goes ----------------------------------------------
  if (only == "breakdown") {
    torch::manual_seed(1);
    Mlp eager;
    torch::manual_seed(1);
    Mlp hot;
    for (int i = 0; i < 20; ++i) {
      eager.step();
      hot.step();
    }
    hotpath::enable_hot_path_detection(config(cache, false));
    auto hot_step = [&](int i) {
      hot.step();
      hotpath::step();
      if (i == 10) hotpath::wait_for_compilation();
    };
    for (int i = 0; i < kLead; ++i) hot_step(i);
    const int blocks = std::max(2, iters / kBlock);
    std::vector<double> eager_gpu, hot_gpu, eager_host, hot_host;
    for (int b = 0; b < blocks; ++b) {  // interleaved, as in side_by_side
      {
        hotpath::Pause pause;
        const auto g = gpu_bound(1, [&](int) { eager.step(); });
        eager_gpu.insert(eager_gpu.end(), g.begin(), g.end());
        time_iterations(
            kBlock, [&](int) { eager.step(); }, &eager_host);
      }
      const auto g = gpu_bound(1, [&](int) { hot_step(kLead); });
      hot_gpu.insert(hot_gpu.end(), g.begin(), g.end());
      time_iterations(
          kBlock, [&](int) { hot_step(kLead); }, &hot_host);
    }
    std::printf(
        "breakdown mlp+adamw (%d iterations a side, interleaved):\n"
        "  GPU-bound time per iteration (queued behind a sleep kernel), p10/p50/p90: eager "
        "%.3f/%.3f/%.3f ms, hotpath %.3f/%.3f/%.3f ms, ratio %.2fx\n"
        "  host time per iteration (body returned), p10/p50/p90: eager %.3f/%.3f/%.3f ms, hotpath "
        "%.3f/%.3f/%.3f ms, ratio %.2fx\n",
        blocks * kBlock, quantile(eager_gpu, 0.1), median(eager_gpu), quantile(eager_gpu, 0.9),
        quantile(hot_gpu, 0.1), median(hot_gpu), quantile(hot_gpu, 0.9),
        median(eager_gpu) / median(hot_gpu), quantile(eager_host, 0.1), median(eager_host),
        quantile(eager_host, 0.9), quantile(hot_host, 0.1), median(hot_host),
        quantile(hot_host, 0.9), median(eager_host) / median(hot_host));
    std::vector<KernelLine> eager_k;
    {
      hotpath::Pause pause;
      eager_k = profile_kernels(
          10, [&](int) { eager.step(); }, trace.empty() ? "" : trace + "/eager_trace.json");
    }
    const auto hot_k =
        profile_kernels(10, hot_step, trace.empty() ? "" : trace + "/hotpath_trace.json");
    if (const auto s = busiest(hotpath::stats())) print_groups(*s);
    hotpath::disable_hot_path_detection();
    print_kernels("eager", eager_k);
    print_kernels("hotpath", hot_k);
  }

  // ---- rows: softmax / log_softmax / mean / sum over the last dimension, fwd + bwd -----------
  if (run("rows")) {
    // One line per workload ("<label>: eager .. ms, hotpath steady .. ms, speedup ..x; host p50"),
    // its groups, and two CSV rows under `key`.
    auto report = [&](const std::string& label, const std::string& key, const SideBySide& r) {
      const double eager_ms = median(r.eager);
      const double fused_ms = median(r.hot);
      std::printf(
          "%s: eager %.3f ms, hotpath steady %.3f ms, speedup %.2fx; host p50: eager %.3f ms, "
          "hotpath %.3f ms\n",
          label.c_str(), eager_ms, fused_ms, eager_ms / fused_ms, median(r.eager_host),
          median(r.hot_host));
      if (const auto s = busiest(r.stats)) print_groups(*s);
      if (out) {
        out << key << ",eager," << eager_ms << ",,1\n";
        out << key << ",hotpath," << fused_ms << ",," << eager_ms / fused_ms << "\n";
      }
    };
    // 8192 rows: the loop is bound by the host (dispatch of ~40 ops); 65536 rows: by the GPU.
    for (const std::int64_t rows : {8192, 65536}) {
      torch::manual_seed(3);
      Rows eager(torch::kFloat, rows), hot(torch::kFloat, rows);
      report("rows (softmax, log_softmax, mean, sum over " + std::to_string(rows) +
                 "x512 fp32, fwd+bwd)",
             "rows" + std::to_string(rows),
             side_by_side(
                 iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
    }
    {
      // A bias gradient over many rows (a transformer's B*T): column kernels in chunks of rows.
      torch::manual_seed(8);
      const auto o = torch::TensorOptions(torch::kCUDA);
      auto x = torch::randn({16384, 1024}, o), b = torch::randn({1024}, o);
      auto body = [&] { auto s = torch::gelu(x * 0.5 + b).sum(0); };
      report("tall column sum (gelu(x * 0.5 + b).sum(0), 16384x1024 fp32)", "tall_column_sum",
             side_by_side(iters, 10, body, body, config(cache, false)));
    }
    for (const std::int64_t batch : {2, 16}) {
      torch::manual_seed(9);
      MaskedSoftmax eager(torch::kFloat, batch), hot(torch::kFloat, batch);
      report("masked softmax (" + std::to_string(batch) +
                 "x8x256x256 fp32, causal mask [256, 256], fwd+bwd)",
             "masked_softmax" + std::to_string(batch),
             side_by_side(
                 iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
    }
    for (const std::int64_t rows : {8192, 65536}) {
      torch::manual_seed(6);
      CrossEntropy eager(torch::kFloat, rows), hot(torch::kFloat, rows);
      report("cross_entropy (" + std::to_string(rows) + "x1000 fp32 logits, mean, fwd+bwd)",
             "cross_entropy" + std::to_string(rows),
             side_by_side(
                 iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
    }
    for (const std::int64_t rows : {8192, 65536})
      for (const bool layer : {false, true}) {
        torch::manual_seed(4);
        Norm eager(torch::kFloat, rows, layer), hot(torch::kFloat, rows, layer);
        const std::string what = layer ? "layer_norm" : "rms_norm";
        report(what + " (weight, gelu, " + std::to_string(rows) + "x512 fp32, fwd+bwd)",
               what + std::to_string(rows),
               side_by_side(
                   iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
      }
  }

  // ---- verification: every fused group against eager, fresh random inputs each launch, on the
  // groups' own kernels and on the interpreter ----------------------------------------------
  for (const bool kernels : {true, false}) {
    if (!run("verify")) break;
    const char* tier = kernels ? "compiled kernels" : "interpreter";
    torch::manual_seed(2);
    Mlp mlp;
    hotpath::enable_hot_path_detection(config(cache, true, kernels));
    for (int i = 0; i < 30; ++i) {
      mlp.x.normal_();
      mlp.y.normal_();
      mlp.step();
      hotpath::step();
      if (i == 10) hotpath::wait_for_compilation();
    }
    std::printf("verify mlp+adamw (fp32, %s):\n", tier);
    if (const auto s = busiest(hotpath::stats())) print_groups(*s);
    hotpath::disable_hot_path_detection();

    if (kernels) {  // row kernels have no interpreter form
      // 30 steps on fresh random inputs, every launch checked against eager.
      auto verify = [&](const char* what, torch::Dtype dtype, const std::function<void()>& fresh,
                        const std::function<void()>& step) {
        hotpath::enable_hot_path_detection(config(cache, true, kernels));
        for (int i = 0; i < 30; ++i) {
          fresh();
          step();
          hotpath::step();
          if (i == 10) hotpath::wait_for_compilation();
        }
        std::printf("verify %s (%s, %s):\n", what, dtype == torch::kFloat ? "fp32" : "bf16", tier);
        if (const auto s = busiest(hotpath::stats())) print_groups(*s);
        hotpath::disable_hot_path_detection();
      };
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        Rows rows(dtype);
        verify(
            "rows: softmax, log_softmax, mean, sum, fwd+bwd", dtype,
            [&] {
              rows.x.detach().normal_();
              rows.g.normal_();
            },
            [&] { rows.step(); });
        {
          // Sums over the first dimension (column kernels), 1000 columns: the last tile of 32 is
          // partly empty.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({256, 1000}, o), b = torch::randn({1000}, o);
          verify(
              "column sums: gelu(x * 0.5 + b).sum(0), (g * g).sum(0, keepdim)", dtype,
              [&] {
                x.normal_();
                b.normal_();
              },
              [&] {
                auto g = torch::gelu(x * 0.5 + b);
                auto s = g.sum(0);
                auto k = (g * g).sum(0, true);
              });
        }
        {
          // Taller than a column kernel's block walks: 16384 rows in chunks, a bias-gradient-like
          // sum with a pointwise chain before it.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({16384, 1000}, o), b = torch::randn({1000}, o);
          verify(
              "tall column sums: gelu(x * 0.5 + b).sum(0) over 16384 rows", dtype,
              [&] {
                x.normal_();
                b.normal_();
              },
              [&] { auto s = torch::gelu(x * 0.5 + b).sum(0); });
        }
        {
          // mse_loss reduced to one value (total kernels), mean and sum, 1M elements.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({1024, 1024}, o), t = torch::randn({1024, 1024}, o);
          verify(
              "mse_loss to one value: mean(x * 0.5, t), sum(x, t)", dtype,
              [&] {
                x.normal_();
                t.normal_();
              },
              [&] {
                auto m = torch::mse_loss(x * 0.5, t);
                auto s = torch::mse_loss(x, t, at::Reduction::Sum);
              });
        }
        {
          MaskedSoftmax ms(dtype, 2);
          verify(
              "masked softmax (causal mask over batch and heads), fwd+bwd", dtype,
              [&] {
                ms.x.detach().normal_();
                ms.g.normal_();
              },
              [&] { ms.step(); });
        }
        for (const auto reduction : {torch::Reduction::Mean, torch::Reduction::Sum}) {
          CrossEntropy ce(dtype, 8192, reduction);
          verify(
              reduction == torch::Reduction::Mean ? "cross_entropy (mean), fwd+bwd"
                                                  : "cross_entropy (sum), fwd+bwd",
              dtype,
              [&] {
                ce.z.detach().normal_();
                ce.fresh_targets();
              },
              [&] { ce.step(); });
        }
        {
          // Rows longer than 1024: a block per row, forward and backward.
          CrossEntropy ce(dtype, 1024, torch::Reduction::Mean, 5000);
          verify(
              "cross_entropy (mean, 5000 classes), fwd+bwd", dtype,
              [&] {
                ce.z.detach().normal_();
                ce.fresh_targets();
              },
              [&] { ce.step(); });
        }
        for (const bool layer : {true, false}) {
          Norm wide(dtype, 1024, layer, 2000);
          verify(
              layer ? "layer_norm -> gelu -> mul over 2000 columns, fwd+bwd"
                    : "rms_norm -> gelu -> mul over 2000 columns, fwd+bwd",
              dtype,
              [&] {
                wide.x.detach().normal_();
                wide.g.normal_();
              },
              [&] { wide.step(); });
        }
        for (const bool layer : {true, false}) {
          Norm norm(dtype, 8192, layer);
          verify(
              layer ? "layer_norm -> gelu -> mul, fwd+bwd" : "rms_norm -> gelu -> mul, fwd+bwd",
              dtype,
              [&] {
                norm.x.detach().normal_();
                norm.g.normal_();
              },
              [&] { norm.step(); });
        }
      }
    }

    if (kernels) {
      // Two in-place chains on a tensor and a view of it: one kernel, batched by the plan; the
      // executor must see the shared storage and launch them in order. Against the same loop
      // run eagerly on a copy.
      torch::manual_seed(7);
      auto x = torch::randn({1024, 1024}, torch::kCUDA);
      auto x_eager = x.clone();
      auto v = x.view({-1}), v_eager = x_eager.view({-1});  // made outside: no op between
      auto loop = [](torch::Tensor& a, torch::Tensor& view) {
        a.mul_(0.5).add_(1.0);
        view.mul_(0.25).add_(2.0);
      };
      hotpath::enable_hot_path_detection(config(cache, false, kernels));
      for (int i = 0; i < 30; ++i) {
        loop(x, v);
        hotpath::step();
        if (i == 10) hotpath::wait_for_compilation();
      }
      const auto st = hotpath::stats();
      hotpath::disable_hot_path_detection();
      for (int i = 0; i < 30; ++i) loop(x_eager, v_eager);
      const double err = ((x - x_eager).norm() / x_eager.norm()).item<double>();
      std::printf("verify views of one tensor updated in turn (fp32, %s): rel err %.3g\n", tier,
                  err);
      if (const auto s = busiest(st)) print_groups(*s);
    }
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      auto ln = torch::nn::LayerNorm(torch::nn::LayerNormOptions({1024}));
      ln->to(torch::kCUDA, dtype);
      auto x = torch::randn({512, 1024}, opts);
      hotpath::enable_hot_path_detection(config(cache, true, kernels));
      {
        torch::NoGradGuard ng;
        for (int i = 0; i < 30; ++i) {
          x.normal_();
          auto y = torch::gelu(ln->forward(x)) + x;
          hotpath::step();
          if (i == 10) hotpath::wait_for_compilation();
        }
      }
      std::printf("verify layernorm->gelu->residual (%s, %s):\n",
                  dtype == torch::kFloat ? "fp32" : "bf16", tier);
      if (const auto s = busiest(hotpath::stats())) print_groups(*s);
      hotpath::disable_hot_path_detection();
    }
  }
  return 0;
}
