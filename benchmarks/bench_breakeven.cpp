// Break-even measured outside hotpath: the first steps of a fresh process, timed one by one with
// CUDA events, plain eager in one process and with hotpath in another (run them in turns:
// gpu_check.sh's `breakeven` part; benchmarks/breakeven_summary.py finds where the sums cross).
// Both processes pay for their own start (CUDA's lazy module loads, cuBLAS's handles, the caching
// allocator's first blocks); hotpath's own break-even, taken in one process against plain eager
// timed later in it, charges all of that to hotpath. The step is the MLP+AdamW example's
// (Linear 1024->4096, GELU, Linear 4096->1024, batch 256, MSE, AdamW), with no step() marks.
//
//   bench_breakeven --mode eager|hotpath [--steps N] [--threshold T] [--cache DIR]
//                   [--settle N] [--label NAME] --json FILE
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_support.h"

int main(int argc, char** argv) {
  CLI::App app{"the first steps of a fresh process, plain eager or with hotpath, timed one by one"};
  std::string mode = "hotpath", cache, label, json_path;
  int steps = 60, threshold = 10, settle = 400;
  app.add_option("--mode", mode, "eager (hotpath never enabled) or hotpath")
      ->check(CLI::IsMember({"eager", "hotpath"}));
  app.add_option("--steps", steps, "steps timed from the first")->check(CLI::Range(2, 100000));
  app.add_option("--threshold", threshold, "hotpath's hot threshold")->check(CLI::Range(1, 1000));
  app.add_option("--cache", cache, "hotpath's cache directory (kernels and verdicts)");
  app.add_option("--label", label, "the run's name in the summary (default: the mode)");
  app.add_option("--settle", settle,
                 "untimed steps at most after the timed ones, until hotpath's governor has judged "
                 "the plan (and remembered its verdict for the next run)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--json", json_path, "write the steps' times here")->required();
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_breakeven: needs a CUDA device\n");
    return 2;
  }
  torch::manual_seed(0);
  bench::Mlp m;
  const bool hot = mode == "hotpath";
  if (hot) {
    hotpath::Config c;
    c.threshold = threshold;
    c.fuse = true;
    c.cache_dir = cache;
    c.log_level = hotpath::LogLevel::Warn;
    hotpath::enable_hot_path_detection(c);
  }
  const std::vector<double> ms = bench::time_iterations(steps, [&](int) { m.step(); });
  nlohmann::json out{{"mode", mode}, {"label", label.empty() ? mode : label}, {"steps_ms", ms}};
  if (hot) {
    // Asked every 10 steps only: report() waits for the GPU to finish the steps it times.
    for (int k = 0; k < settle && (k % 10 != 0 || !bench::governor_state().second); ++k) m.step();
    const auto top = bench::busiest(hotpath::stats());
    for (const auto& r : hotpath::report().signatures) {
      if (!top || r.hex != top->hex) continue;
      out["hot_at"] = r.hot_at_iteration;
      out["first_fused"] = r.first_fused_iteration;
      out["governor_break_even"] = r.break_even_actual;
    }
    hotpath::disable_hot_path_detection();
  }
  std::ofstream(json_path) << out.dump(1) << "\n";
  std::printf("%s: %d steps, first %.3f ms, median %.3f ms%s\n",
              out["label"].get<std::string>().c_str(), steps, ms.front(), bench::median(ms),
              out.contains("hot_at")
                  ? (", hot at " + std::to_string(out["hot_at"].get<long long>()) +
                     ", fused from " + std::to_string(out["first_fused"].get<long long>()))
                        .c_str()
                  : "");
  return 0;
}
