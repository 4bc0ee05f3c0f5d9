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
#include <torch/cuda.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "bench_support.h"
#include "crash_backtrace.h"

using namespace bench;

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
  const Options o{iters, elements, cache, trace, &out};
  if (run("chain")) bench_chain(o);
  if (run("mlp")) bench_mlp(o);
  if (only == "breakdown") bench_breakdown(o);
  if (run("rows")) bench_rows(o);
  if (run("verify")) bench_verify(o);
  return 0;
}
