// Where a decoder-only LM's training step goes, C++ eager against hotpath, side by side in one
// process (the transformer issue's model: examples/models/transformer_lm.h; token batches drawn
// on the GPU, cross-entropy, AdamW(1e-4), no host synchronisation in the step).
//   detection: steps until the step's signature is hot and first runs fused, with and without
//              hotpath::step() marks; how many signatures turned hot on the way (junk ones too).
//   steady:    eager (under hotpath::Pause) and hotpath in interleaved blocks, a host
//              synchronisation per step (as a loop that reads its loss), CUDA events, medians.
//   breakdown: GPU time per step with the host out of the way (steps queued behind a sleep
//              kernel), host time per step and per op, and the kernels of one step from the CUDA
//              profiler (Kineto), eager and hotpath; all kernels in --kernels-csv.
// --host-batches: each step's tokens are drawn on the CPU into pinned memory and copied to the
// GPU inside the step (non-blocking), as a data loader delivers them; by default they are drawn
// on the GPU (a random op there: hotpath does not replay such a step as CUDA graphs).
// Usage: bench_lm [--batch B] [--context T] [--vocab V] [--dim D] [--layers L] [--heads H]
//                 [--ff F] [--bf16] [--host-batches] [--iters N] [--cache DIR] [--csv FILE]
//                 [--kernels-csv FILE] [--trace DIR] [--top N]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "autocast_scope.h"
#include "bench_support.h"
#include "crash_backtrace.h"
#include "host_share.h"
#include "models/transformer_lm.h"

using namespace bench;

namespace {

struct Lm {
  hotpath_examples::LmConfig c;
  std::int64_t batch;
  bool bf16;
  bool host;  // --host-batches
  hotpath_examples::TransformerLm model;
  torch::optim::AdamW opt;
  Lm(const hotpath_examples::LmConfig& config, std::int64_t b, bool half, bool host_batches)
      : c(config),
        batch(b),
        bf16(half),
        host(host_batches),
        model(seeded(config)),
        opt(model->parameters(), torch::optim::AdamWOptions(1e-4)) {}
  // The same weights in every instance, on the GPU.
  static hotpath_examples::TransformerLm seeded(const hotpath_examples::LmConfig& config) {
    torch::manual_seed(0);
    hotpath_examples::TransformerLm m(config);
    m->to(torch::kCUDA);
    return m;
  }
  torch::Tensor tokens() const {
    if (!host)
      return torch::randint(c.vocab, {batch, c.context},
                            torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    return torch::randint(c.vocab, {batch, c.context}, torch::kLong)
        .pin_memory()
        .to(torch::kCUDA, /*non_blocking=*/true);
  }
  void step() {
    auto x = tokens();
    auto y = tokens();
    opt.zero_grad();
    torch::Tensor loss;
    {
      hotpath_tools::Autocast on(bf16, c10::DeviceType::CUDA);
      auto logits = model->forward(x);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, c.vocab}), y.view({-1}));
    }
    loss.backward();
    opt.step();
  }
};

// Steps until the step's signature is hot and first fused, with or without step() marks.
void detection(const hotpath_examples::LmConfig& c, std::int64_t batch, bool bf16, bool host,
               const std::string& cache, bool marks, std::ofstream& csv) {
  Lm lm(c, batch, bf16, host);
  hotpath::Config cfg = config(cache, false);
  cfg.remember = false;  // each run finds its own way, not an earlier verdict
  hotpath::enable_hot_path_detection(cfg);
  // The step's signature: of those seen at least twice, the one with the most ops (the first
  // step has more, AdamW creating its state there, and never repeats); others that turn hot are
  // pieces of it (a detector that locked onto a sub-period).
  auto step_signature = [](const hotpath::Stats& s) {
    const hotpath::SignatureStats* best = nullptr;
    for (const auto& sig : s.signatures) {
      if (sig.count < 2) continue;
      if (best == nullptr || sig.ops_per_iteration > best->ops_per_iteration) best = &sig;
    }
    return best;
  };
  int steps = 0;
  std::int64_t hot_at = -1, fused_at = -1;
  for (; steps < 60 && fused_at < 0; ++steps) {
    lm.step();
    if (marks) hotpath::step();
    torch::cuda::synchronize();
    const auto s = hotpath::stats();
    if (const auto* sig = step_signature(s)) {
      if (sig->hot && hot_at < 0) hot_at = steps + 1;
      if (sig->fusion.first_fused_iteration >= 0 && fused_at < 0) fused_at = steps + 1;
    }
  }
  const auto s = hotpath::stats();
  hotpath::disable_hot_path_detection();
  const auto* main_sig = step_signature(s);
  const std::int64_t step_ops = main_sig != nullptr ? main_sig->ops_per_iteration : 0;
  std::int64_t junk = 0;
  for (const auto& sig : s.signatures)
    if (sig.hot && &sig != main_sig) ++junk;
  std::printf(
      "detection %s step() marks: %lld ops per step; hot after %lld steps, first fused step "
      "%lld; %lld iterations counted, %lld other signatures turned hot\n",
      marks ? "with" : "without", (long long)step_ops, (long long)hot_at, (long long)fused_at,
      (long long)s.iterations, (long long)junk);
  if (csv)
    csv << "detection," << (marks ? "marks" : "auto") << "," << step_ops << "," << hot_at << ","
        << fused_at << "," << s.iterations << "," << junk << "\n";
}

const char* verdict_text(hotpath::Verdict v) {
  switch (v) {
    case hotpath::Verdict::CompileWins:
      return "compile wins";
    case hotpath::Verdict::EagerWins:
      return "eager wins";
    case hotpath::Verdict::Even:
      return "even";
    case hotpath::Verdict::Pending:
      return "pending";
    case hotpath::Verdict::NotCompiled:
      return "not compiled";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  hotpath_examples::LmConfig c;
  std::int64_t batch = 4;
  bool bf16 = false, host = false;
  int iters = 60, top = 30;
  std::string cache = "/tmp/hotpath-bench-lm-cache", csv_path, kernels_path, trace;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_lm: missing value for " << a << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto positive = [&](const std::string& v) -> std::int64_t {
      const long long n = std::atoll(v.c_str());
      if (n <= 0) {
        std::cerr << "bench_lm: " << a << " takes a positive integer, not '" << v << "'\n";
        std::exit(2);
      }
      return n;
    };
    if (a == "--batch")
      batch = positive(next());
    else if (a == "--context")
      c.context = positive(next());
    else if (a == "--vocab")
      c.vocab = positive(next());
    else if (a == "--dim")
      c.dim = positive(next());
    else if (a == "--layers")
      c.layers = positive(next());
    else if (a == "--heads")
      c.heads = positive(next());
    else if (a == "--ff")
      c.ff = positive(next());
    else if (a == "--iters")
      iters = static_cast<int>(positive(next()));
    else if (a == "--top")
      top = static_cast<int>(positive(next()));
    else if (a == "--bf16")
      bf16 = true;
    else if (a == "--host-batches")
      host = true;
    else if (a == "--cache")
      cache = next();
    else if (a == "--csv")
      csv_path = next();
    else if (a == "--kernels-csv")
      kernels_path = next();
    else if (a == "--trace")
      trace = next();
    else {
      std::cerr << "bench_lm: unknown argument " << a << " (see benchmarks/bench_lm.cpp)\n";
      return 2;
    }
  }
  if (c.dim % c.heads != 0) {
    std::cerr << "bench_lm: --dim " << c.dim << " is not a multiple of --heads " << c.heads << "\n";
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!torch::cuda::is_available()) {
    std::cerr << "bench_lm needs a CUDA device\n";
    return 1;
  }
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "part,variant,a,b,c,d,e\n";
  }
  std::printf(
      "bench_lm: vocab %lld, %lld layers of width %lld (%lld heads, ff %lld), batch %lld "
      "x context %lld, %s, tokens %s\n",
      (long long)c.vocab, (long long)c.layers, (long long)c.dim, (long long)c.heads,
      (long long)c.ff, (long long)batch, (long long)c.context, bf16 ? "bf16 autocast" : "fp32",
      host ? "from the CPU (pinned, copied in the step)" : "drawn on the GPU");

  detection(c, batch, bf16, host, cache, true, csv);
  detection(c, batch, bf16, host, cache, false, csv);

  // Steady state: eager under Pause and hotpath, interleaved, a host synchronisation per step.
  Lm eager(c, batch, bf16, host), hot(c, batch, bf16, host);
  const SideBySide r = side_by_side(
      iters, 3,
      [&] {
        eager.step();
        torch::cuda::synchronize();
      },
      [&] {
        hot.step();
        torch::cuda::synchronize();
      },
      config(cache, false));
  const auto main_sig = busiest(r.stats);
  const std::int64_t ops = main_sig ? main_sig->ops_per_iteration : 0;
  const int fused_ops = main_sig ? main_sig->fusion.fused_ops : 0;
  const std::size_t groups = main_sig ? main_sig->fusion.groups.size() : 0;
  std::printf(
      "steady (host sync per step, %d steps a side, interleaved): eager %.3f ms, hotpath %.3f ms, "
      "speedup %.3fx (per-block p10/p50/p90 %.3f/%.3f/%.3f); %lld ops per step, %d fused into "
      "%zu groups\n",
      iters, median(r.eager), median(r.hot), median(r.eager) / median(r.hot),
      quantile(block_speedups(r), 0.1), median(block_speedups(r)), quantile(block_speedups(r), 0.9),
      (long long)ops, fused_ops, groups);
  if (main_sig) {  // what the governor did meanwhile: the steady numbers include it
    std::printf(
        "  governor: first verdict %d steps after the lead; %lld of the %zu timed "
        "steps fused; %lld fused iterations (%lld replayed as CUDA graphs%s%s), %lld divergences, "
        "%s%s\n",
        r.settle, (long long)r.fused_in, r.hot.size(), (long long)main_sig->fusion.fused_iterations,
        (long long)main_sig->fusion.replayed_iterations,
        main_sig->fusion.replay_off.empty() ? "" : "; replay off: ",
        main_sig->fusion.replay_off.c_str(), (long long)main_sig->fusion.divergences,
        main_sig->fusion.reverted ? "reverted: " : "kept",
        main_sig->fusion.reverted ? main_sig->fusion.reason.c_str() : "");
    // Its own steady-state figure, to hold against the side-by-side one above.
    for (const auto& rep : r.report.signatures) {
      if (rep.hex != main_sig->hex || rep.speedup_judged <= 0) continue;
      std::printf(
          "  governor's report: steady state %.3fx (95%% interval %.3f-%.3fx; eager %.3f ms %s, "
          "fused %.3f ms), verdict %s\n",
          rep.speedup_judged, rep.speedup_low, rep.speedup_high, rep.eager_median_ms,
          rep.baseline_plain ? "plain" : "under the hook", rep.fused_median_ms,
          verdict_text(rep.verdict));
    }
  }
  if (csv)
    csv << "steady,ms," << median(r.eager) << "," << median(r.hot) << ","
        << median(r.eager) / median(r.hot) << "," << ops << "," << fused_ops << "\n";

  // Breakdown: GPU-bound and host time, then the kernels, with hotpath's plan running.
  hotpath::enable_hot_path_detection(config(cache, false));
  auto hot_step = [&](int i) {
    hot.step();
    hotpath::step();
    if (i == 10) hotpath::wait_for_compilation();
  };
  for (int i = 0; i < kLead; ++i) {
    hot_step(i);
    torch::cuda::synchronize();
  }
  // The sleep must outlast the host's queueing of a block: kBlock steps of host time.
  const double host_ms = std::max(median(r.eager_host), median(r.hot_host));
  const auto sleep_cycles = static_cast<std::int64_t>(host_ms * kBlock * 1.5 * 2.0e6);
  const hotpath::Stats host0 = hotpath::stats();
  const Breakdown bd = interleaved_breakdown(
      3, [&] { eager.step(); }, [&] { hot_step(kLead); }, sleep_cycles);
  const hotpath::Stats host1 = hotpath::stats();
  const auto &eager_gpu = bd.eager_gpu, &hot_gpu = bd.hot_gpu;
  const auto &eager_host = bd.eager_host, &hot_host = bd.hot_host;
  std::printf(
      "breakdown (%d steps a side, interleaved):\n"
      "  GPU-bound time per step (queued behind a sleep kernel), p10/p50/p90: eager "
      "%.3f/%.3f/%.3f ms, hotpath %.3f/%.3f/%.3f ms, ratio %.3fx\n"
      "  host time per step (body returned), p50: eager %.3f ms (%.2f us per op), hotpath %.3f "
      "ms (%.2f us per op), ratio %.3fx\n",
      3 * kBlock, quantile(eager_gpu, 0.1), median(eager_gpu), quantile(eager_gpu, 0.9),
      quantile(hot_gpu, 0.1), median(hot_gpu), quantile(hot_gpu, 0.9),
      median(eager_gpu) / median(hot_gpu), median(eager_host),
      ops > 0 ? 1e3 * median(eager_host) / static_cast<double>(ops) : 0.0, median(hot_host),
      ops > 0 ? 1e3 * median(hot_host) / static_cast<double>(ops) : 0.0,
      median(eager_host) / median(hot_host));
  if (const bench::HostShare h = bench::host_share(host0, host1); h.ops > 0)
    std::printf("  of which, HOTPATH_HOST_PROFILE: %s\n", bench::host_share_text(h).c_str());
  if (csv) {
    csv << "gpu_bound,ms," << median(eager_gpu) << "," << median(hot_gpu) << ","
        << median(eager_gpu) / median(hot_gpu) << ",,\n";
    csv << "host,ms," << median(eager_host) << "," << median(hot_host) << ","
        << median(eager_host) / median(hot_host) << ",,\n";
  }
  const KernelLists kernels = profile_both(
      3, [&] { eager.step(); }, [&] { hot_step(kLead); }, trace, "lm_");
  const auto &eager_k = kernels.eager, &hot_k = kernels.hot;
  hotpath::disable_hot_path_detection();
  auto head = [&](std::vector<KernelLine> v) {
    if (v.size() > static_cast<std::size_t>(top)) v.resize(static_cast<std::size_t>(top));
    return v;
  };
  print_kernels("eager (top kernels)", head(eager_k));
  print_kernels("hotpath (top kernels)", head(hot_k));
  double eager_total = 0, hot_total = 0, eager_n = 0, hot_n = 0;
  for (const auto& k : eager_k) eager_total += k.us, eager_n += k.calls;
  for (const auto& k : hot_k) hot_total += k.us, hot_n += k.calls;
  std::printf("kernels per step: eager %.0f (%.1f ms), hotpath %.0f (%.1f ms)\n", eager_n,
              eager_total / 1e3, hot_n, hot_total / 1e3);
  if (!kernels_path.empty()) {
    std::ofstream k(kernels_path);
    k << "side,us_per_step,calls_per_step,kernel\n";
    auto write = [&](const char* side, const std::vector<KernelLine>& lines) {
      for (const auto& l : lines) {
        std::string name = l.name;
        for (char& ch : name)
          if (ch == ',' || ch == '"') ch = ';';
        k << side << "," << l.us << "," << l.calls << "," << name << "\n";
      }
    };
    write("eager", eager_k);
    write("hotpath", hot_k);
  }
  return 0;
}
