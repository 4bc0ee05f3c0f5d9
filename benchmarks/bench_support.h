// What bench_fusion's cases share: timing (CUDA events, side by side in one process), the
// workloads (an MLP with AdamW, rows, norms, losses), the profiler's kernel list, and printing.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/hotpath.h"

namespace bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Per-iteration GPU times (ms) of `body`, from CUDA events around each iteration. `host`, if
// given, receives the host time (ms) each iteration's body took to return (no synchronisation):
// when it is as long as the GPU time, the loop is bound by the CPU, not the GPU.
// `after`, if given, runs after each iteration's stop event: outside the times.
inline std::vector<double> time_iterations(int iters, const std::function<void(int)>& body,
                                           std::vector<double>* host = nullptr,
                                           const std::function<void(int)>& after = nullptr) {
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
    if (after) after(i);
  }
  torch::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i)
    ms.push_back(
        start[static_cast<std::size_t>(i)].elapsed_time(stop[static_cast<std::size_t>(i)]));
  return ms;
}

inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// `kernels` false: the groups run on the interpreter kernel only (no compile per signature);
// such runs remember nothing, so that they leave no verdict for the runs that compile.
inline hotpath::Config config(const std::string& cache, bool verify, bool kernels = true) {
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
// awaited at 10, 10 more iterations) and until its governor has given a first verdict (its
// plain-eager blocks and eager re-timings are its own warm-up: a Pause in them would cut them
// short), then blocks of kBlock eager iterations (under hotpath::Pause, unseen by it) alternate
// with blocks of kBlock hotpath iterations until each side has `iters` (each block's first
// kSwitch iterations not counted). Both sides sample the same host and GPU conditions: a host
// that drifts during the run moves both. GPU times from CUDA events, host times per body.
struct SideBySide {
  std::vector<double> eager, hot, eager_host, hot_host;  // the interleaved (steady) iterations
  std::vector<double> lead;                              // hotpath's first iterations
  std::vector<double> settling;  // then its iterations until the governor's first verdict
  int settle = 0;                // iterations after the lead until the governor's first verdict
  std::int64_t fused_in = 0;     // of the interleaved hotpath iterations, those that ran fused
  // The CUDA caching allocator's peak of allocated bytes: eager's over its warm-up iterations,
  // before hotpath holds anything (its buffers for a plan's temporaries stay allocated while
  // eager blocks run under Pause), or over its blocks when there is no warm-up; hotpath's over
  // its blocks.
  std::int64_t eager_peak_bytes = 0, hot_peak_bytes = 0;
  hotpath::Stats stats;
  hotpath::Report report;  // the governor's own verdicts over the same run
};

constexpr int kBlock = 10;
// Iterations at the start of each interleaved block that neither side counts: the first ones
// after a switch between plain eager and hotpath run slower than the ones after them (the GPU's
// queue drained at the block's end, the host's caches on the other side's path; on an H100 the
// MLP step's hotpath iterations at positions 0-3 of a block of 10 took 0.65, 0.52, 0.48 and
// 0.48 ms against 0.44 after them, eager's 0.72, 0.67 against 0.65). Counted, they measured the
// switching, which a loop that runs one way does not do, and more of it on hotpath's side. The
// governor leaves out the same iterations after its own plain blocks.
constexpr int kSwitch = 4;
constexpr int kLead = 20;
constexpr int kMaxSettle = 400;  // a noisy loop's figure is refined over up to 8 rounds of ~30

// The fused iterations of the busiest signature so far, and whether the governor is done
// measuring it (judged against this run's eager, or reverted).
inline std::pair<std::int64_t, bool> governor_state() {
  const auto stats = hotpath::stats();
  const hotpath::SignatureStats* top = nullptr;
  for (const auto& s : stats.signatures)
    if (!top || s.ops_per_iteration * s.count > top->ops_per_iteration * top->count) top = &s;
  if (!top) return {0, false};
  if (top->fusion.reverted) return {top->fusion.fused_iterations, true};
  for (const auto& r : hotpath::report().signatures)
    if (r.hex == top->hex) return {top->fusion.fused_iterations, r.judged};
  return {top->fusion.fused_iterations, false};
}

// Runs `block`; `peak` becomes at least the caching allocator's peak of allocated bytes on the
// current device during it.
inline void peak_of(std::int64_t& peak, const std::function<void()>& block) {
  const int device = c10::cuda::current_device();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  block();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  peak = std::max<std::int64_t>(peak, stats.allocated_bytes[0].peak);
}

inline void append(std::vector<double>& to, const std::vector<double>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// `block`: iterations per interleaved block (kBlock unless a caller asks for longer ones).
// before_disable, if given, runs last with hotpath still enabled (a profile of both sides).
inline SideBySide side_by_side(int iters, int warmup, const std::function<void()>& eager,
                               const std::function<void()>& hot, const hotpath::Config& c,
                               int block = kBlock,
                               const std::function<void()>& before_disable = {}) {
  SideBySide r;
  time_iterations(warmup, [&](int) {
    peak_of(r.eager_peak_bytes, eager);
    hot();
  });
  hotpath::enable_hot_path_detection(c);
  auto hot_step = [&](int i) {
    hot();
    hotpath::step();
    if (i == 10) hotpath::wait_for_compilation();  // the steady state, not the compile
  };
  r.lead = time_iterations(kLead, hot_step);
  // Asked every kBlock steps only: report() waits for the GPU to finish the iterations it
  // times, and a loop synchronised at every step is not the loop the governor should judge.
  while (r.settle < kMaxSettle && !governor_state().second) {
    const std::vector<double> block =
        time_iterations(kBlock, [&](int i) { hot_step(kLead + r.settle + i); });
    r.settling.insert(r.settling.end(), block.begin(), block.end());
    r.settle += kBlock;
  }
  const std::int64_t fused_before = governor_state().first;
  std::int64_t eager_blocks_peak = 0;
  // Each block's first kSwitch iterations pay for the switch from the other side and are not
  // counted (block + kSwitch run, block are timed).
  const auto timed_block = [&](std::vector<double>& to, std::vector<double>& host_to,
                               const std::function<void(int)>& body) {
    std::vector<double> host;
    const std::vector<double> ms = time_iterations(kSwitch + block, body, &host);
    append(to, std::vector<double>(ms.begin() + kSwitch, ms.end()));
    append(host_to, std::vector<double>(host.begin() + kSwitch, host.end()));
  };
  int hot_done = 0;
  for (int done = 0; done < iters; done += block) {
    peak_of(eager_blocks_peak, [&] {
      hotpath::Pause pause;
      timed_block(r.eager, r.eager_host, [&](int) { eager(); });
    });
    peak_of(r.hot_peak_bytes, [&] {
      timed_block(r.hot, r.hot_host, [&](int) { hot_step(kLead + r.settle + hot_done++); });
    });
  }
  if (warmup == 0) r.eager_peak_bytes = eager_blocks_peak;
  r.fused_in = governor_state().first - fused_before;
  r.stats = hotpath::stats();
  r.report = hotpath::report();
  if (before_disable) before_disable();
  hotpath::disable_hot_path_detection();
  return r;
}

// Eager block median over hotpath block median, per pair of neighbouring blocks.
inline std::vector<double> block_speedups(const SideBySide& r) {
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

inline void print_groups(const hotpath::SignatureStats& s) {
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
inline std::optional<hotpath::SignatureStats> busiest(const hotpath::Stats& s) {
  std::optional<hotpath::SignatureStats> best;
  for (const auto& sig : s.signatures)
    if (!best || sig.fusion.fused_iterations > best->fusion.fused_iterations) best = sig;
  return best;
}

struct Mlp {
  torch::nn::Sequential model;
  torch::optim::AdamW opt;
  torch::Tensor x, y;
  explicit Mlp(std::int64_t batch = 256, std::int64_t dim = 1024, std::int64_t hidden = 4096)
      : model(torch::nn::Linear(dim, hidden), torch::nn::GELU(), torch::nn::Linear(hidden, dim)),
        opt((model->to(torch::kCUDA), model->parameters()), torch::optim::AdamWOptions(1e-3)),
        x(torch::randn({batch, dim}, torch::kCUDA)),
        y(torch::randn({batch, dim}, torch::kCUDA)) {}
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
// kBlock iterations, which then run back to back. Needs a body that does not synchronise, and a
// sleep (in GPU cycles; the default is ~25 ms at 2 GHz) longer than the host needs for a block.
inline std::vector<double> gpu_bound(int blocks, const std::function<void(int)>& body,
                                     std::int64_t sleep_cycles = 50'000'000) {
  std::vector<double> ms;
  for (int b = 0; b < blocks; ++b) {
    at::cuda::sleep(sleep_cycles);
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
inline std::vector<KernelLine> profile_kernels(int iters, const std::function<void(int)>& body,
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

// GPU-bound and host time per iteration, eager (under hotpath::Pause) and hotpath interleaved:
// `rounds` times, a gpu_bound block and a host-timed block of kBlock iterations a side.
struct Breakdown {
  std::vector<double> eager_gpu, hot_gpu, eager_host, hot_host;
};
inline Breakdown interleaved_breakdown(int rounds, const std::function<void()>& eager,
                                       const std::function<void()>& hot,
                                       std::int64_t sleep_cycles = 50'000'000) {
  Breakdown r;
  for (int b = 0; b < rounds; ++b) {
    {
      hotpath::Pause pause;
      append(r.eager_gpu, gpu_bound(
                              1, [&](int) { eager(); }, sleep_cycles));
      time_iterations(
          kBlock, [&](int) { eager(); }, &r.eager_host);
    }
    append(r.hot_gpu, gpu_bound(
                          1, [&](int) { hot(); }, sleep_cycles));
    time_iterations(
        kBlock, [&](int) { hot(); }, &r.hot_host);
  }
  return r;
}

// The kernels of `iters` iterations of each side (eager under hotpath::Pause), from
// profile_kernels; with `trace` named, the traces go to <trace>/<prefix>eager_trace.json and
// <trace>/<prefix>hotpath_trace.json.
struct KernelLists {
  std::vector<KernelLine> eager, hot;
};
inline KernelLists profile_both(int iters, const std::function<void()>& eager,
                                const std::function<void()>& hot, const std::string& trace,
                                const std::string& prefix = "") {
  KernelLists k;
  {
    hotpath::Pause pause;
    k.eager = profile_kernels(
        iters, [&](int) { eager(); },
        trace.empty() ? "" : trace + "/" + prefix + "eager_trace.json");
  }
  k.hot = profile_kernels(
      iters, [&](int) { hot(); }, trace.empty() ? "" : trace + "/" + prefix + "hotpath_trace.json");
  return k;
}

inline void print_kernels(const char* what, const std::vector<KernelLine>& lines) {
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

// What main() passes to every case.
struct Options {
  int iters = 200;
  long long elements = 64LL << 20;
  std::string cache, trace;
  std::ofstream* out = nullptr;  // the CSV file (not open: none)
};

// The cases (bench_fusion.cpp's header says what each measures).
void bench_chain(const Options& o);
void bench_mlp(const Options& o);
void bench_breakdown(const Options& o);
void bench_rows(const Options& o);
void bench_verify(const Options& o);

}  // namespace bench
