// Probe (issue "An honest governor": break-even ≤ 5 steps after hot with a warm cache): where a
// fresh process's first steps spend their host time, function by function, plain eager against
// hotpath. The step is bench_breakeven's (the MLP+AdamW example's, no step() marks); the loop's
// thread, autograd's and hotpath's workers are sampled (SIGPROF every --period-us of wall-clock
// time, sampler.h) during steps --from to --to, each sample tagged with its step and thread. A warm
// run (a cache that a hotpath run of the same step filled) turns hot at step 4 and runs fused from
// step 5; those steps cost it about 3.5 ms more than eager's on an H200, not all of it explained by
// the op times (2026-11-29-status.md). first_steps.py sums many processes' samples per step.
//   probe_first_steps --mode eager|hotpath [--cache DIR] [--steps 10] [--from 2] [--to 8]
//                     [--period-us 50] --out FILE
// Each step's time (CUDA events) is printed as "step N ms". --no-remember: hotpath keeps no
// verdict (a cache of kernels without decisions stays so from run to run: each run turns hot
// after 10 iterations and captures its CUDA graphs after kReplayAfter fused ones); the step in
// which a capture happened is written to the samples as "captured STEP" (first_steps.py
// --align capture sums the steps around it).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../bench_support.h"
#include "sampler.h"

int main(int argc, char** argv) {
  std::string mode = "hotpath", cache, out;
  int steps = 10, from = 2, to = 8, period_us = 50;
  bool remember = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "probe_first_steps: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mode")
      mode = value();
    else if (a == "--cache")
      cache = value();
    else if (a == "--steps")
      steps = std::stoi(value());
    else if (a == "--from")
      from = std::stoi(value());
    else if (a == "--to")
      to = std::stoi(value());
    else if (a == "--period-us")
      period_us = std::stoi(value());
    else if (a == "--out")
      out = value();
    else if (a == "--no-remember")
      remember = false;
    else {
      std::fprintf(stderr,
                   "usage: probe_first_steps --mode eager|hotpath [--cache DIR] [--steps N] "
                   "[--from S] [--to S] [--period-us US] [--no-remember] --out FILE\n");
      return 2;
    }
  }
  if ((mode != "eager" && mode != "hotpath") || out.empty() || from < 2 || to < from ||
      steps < to || period_us < 10) {
    std::fprintf(stderr,
                 "probe_first_steps: --mode eager or hotpath, --out, 2 <= --from <= --to <= "
                 "--steps and --period-us >= 10 are required\n");
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "probe_first_steps: needs a CUDA device\n");
    return 2;
  }
  torch::manual_seed(0);
  bench::Mlp m;
  if (mode == "hotpath") {
    hotpath::Config c;
    c.threshold = 10;
    c.fuse = true;
    c.cache_dir = cache;
    c.log_level = hotpath::LogLevel::Warn;
    c.remember = remember;
    hotpath::enable_hot_path_detection(c);
  }
  std::vector<int> captured;  // the steps in which a capture happened
  int captures = 0;
  probe::Samples& samples = probe::samples();
  // Timed as bench_breakeven times them: CUDA events around each step, one wait at the end.
  const std::vector<double> ms = bench::time_iterations(
      steps,
      [&](int i) {
        if (i + 1 == from) {
          // The loop's thread, autograd's (started with step 1's backward pass) and the threads
          // that keep the process's name (hotpath's workers, started at enable). The driver's
          // own threads are left alone.
          const std::string self = probe::thread_name(std::to_string(getpid()));
          probe::start_sampling(probe::threads_named({self, "pt_autograd"}), period_us);
          samples.on = true;
        }
        samples.current_tag = i + 1;
        m.step();
      },
      nullptr,
      [&](int i) {
        if (i + 1 == to) probe::stop_sampling();
        if (mode == "hotpath") {
          const int now = hotpath::stats().last().fusion.replay_captures;
          if (now > captures) captured.push_back(i + 1);
          captures = now;
        }
      });
  probe::stop_sampling();
  if (mode == "hotpath") hotpath::disable_hot_path_detection();
  probe::write_samples(out, 0, std::min(samples.count.load(), probe::kMaxSamples), true);
  {
    std::ofstream f(out, std::ios::app);
    for (const int s : captured) f << "captured " << s << "\n";
  }
  for (int s = 1; s <= steps; ++s)
    std::printf("step %d %.3f ms\n", s, ms[static_cast<std::size_t>(s - 1)]);
  return 0;
}
