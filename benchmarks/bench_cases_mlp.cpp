// bench_fusion's cases: the pointwise chain, the MLP + AdamW step, and its breakdown.
#include "bench_support.h"

namespace bench {

// chain
void bench_chain(const Options& o) {
  const int iters = o.iters;
  const long long elements = o.elements;
  const std::string& cache = o.cache;
  std::ofstream& out = *o.out;
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

// MLP + AdamW
void bench_mlp(const Options& o) {
  const int iters = o.iters;
  const std::string& cache = o.cache;
  std::ofstream& out = *o.out;
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

// breakdown: where the MLP step's time goes
void bench_breakdown(const Options& o) {
  const int iters = o.iters;
  const std::string& cache = o.cache;
  const std::string& trace = o.trace;
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
  const Breakdown bd = interleaved_breakdown(
      blocks, [&] { eager.step(); }, [&] { hot_step(kLead); });
  const auto &eager_gpu = bd.eager_gpu, &hot_gpu = bd.hot_gpu;
  const auto &eager_host = bd.eager_host, &hot_host = bd.hot_host;
  std::printf(
      "breakdown mlp+adamw (%d iterations a side, interleaved):\n"
      "  GPU-bound time per iteration (queued behind a sleep kernel), p10/p50/p90: eager "
      "%.3f/%.3f/%.3f ms, hotpath %.3f/%.3f/%.3f ms, ratio %.2fx\n"
      "  host time per iteration (body returned), p10/p50/p90: eager %.3f/%.3f/%.3f ms, hotpath "
      "%.3f/%.3f/%.3f ms, ratio %.2fx\n",
      blocks * kBlock, quantile(eager_gpu, 0.1), median(eager_gpu), quantile(eager_gpu, 0.9),
      quantile(hot_gpu, 0.1), median(hot_gpu), quantile(hot_gpu, 0.9),
      median(eager_gpu) / median(hot_gpu), quantile(eager_host, 0.1), median(eager_host),
      quantile(eager_host, 0.9), quantile(hot_host, 0.1), median(hot_host), quantile(hot_host, 0.9),
      median(eager_host) / median(hot_host));
  const KernelLists kernels = profile_both(
      10, [&] { eager.step(); }, [&] { hot_step(kLead); }, trace);
  if (const auto s = busiest(hotpath::stats())) print_groups(*s);
  hotpath::disable_hot_path_detection();
  print_kernels("eager", kernels.eager);
  print_kernels("hotpath", kernels.hot);
}

}  // namespace bench
