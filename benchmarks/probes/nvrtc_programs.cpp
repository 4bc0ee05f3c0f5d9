// Probe (issue "An honest governor": break-even <= 20 steps after hot with a cold cache): what a
// cold plan's NVRTC compile costs with which options, and whether programs compiled on several
// threads at once finish sooner. The kernels are those of the planner's warm-up trace (a GPU
// step with every kind of group, exec/planner_warm_up.cpp) as a plan generates them, and four
// copies of its smallest one (an mse_loss), each set timed as one program (as KernelBuilder
// compiles a plan's cache misses) and as one program a kernel on 1, 2 and N threads. Needs no
// GPU; the numbers are the host's.
//   cmake --build BUILD --target probe_nvrtc_programs
//   BUILD/benchmarks/probe_nvrtc_programs [ARCH]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "codegen/kernel.h"
#include "compile/kernel_builder.h"
#include "compile/nvrtc.h"
#include "exec/plan.h"
#include "exec/planner.h"

namespace {

using namespace hotpath::detail;

// One NVRTC program of `source` with the runtime headers; its wall time in ms. Throws with
// NVRTC's log on failure.
double compile_ms(const std::string& source, int arch, const std::vector<std::string>& options) {
  const auto t0 = std::chrono::steady_clock::now();
  nvrtc_compile(source, "probe", arch, runtime_headers(), "", options);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kRepeats = 7;

void time_set(const char* what, const std::vector<KernelJob>& jobs, int arch) {
  std::vector<const KernelJob*> ptrs;
  for (const KernelJob& j : jobs) ptrs.push_back(&j);
  const std::string together = program_source(ptrs);
  const std::string sm = "--gpu-architecture=sm_" + std::to_string(arch);
  const std::vector<std::pair<const char*, std::vector<std::string>>> variants = {
      {"-lineinfo", {sm, "--std=c++17", "-default-device", "-lineinfo"}},
      {"(neither)", {sm, "--std=c++17", "-default-device"}},
      {"-minimal -lineinfo", {sm, "--std=c++17", "-default-device", "-minimal", "-lineinfo"}},
      {"-minimal", {sm, "--std=c++17", "-default-device", "-minimal"}},
  };
  std::printf("== %s: %zu kernel(s)\n", what, jobs.size());
  for (const auto& [name, options] : variants) {
    std::vector<double> t;
    for (int r = 0; r < kRepeats; ++r) t.push_back(compile_ms(together, arch, options));
    std::printf("one program, %-20s median %6.1f ms\n", name, median(t));
  }
  const unsigned n = static_cast<unsigned>(jobs.size());
  for (const unsigned threads : {1u, 2u, n}) {
    for (const std::size_t v : {std::size_t{0}, variants.size() - 1}) {
      std::vector<double> t;
      for (int r = 0; r < kRepeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::atomic<std::size_t> next{0};
        std::vector<std::thread> pool;
        for (unsigned i = 0; i < threads; ++i)
          pool.emplace_back([&] {
            for (std::size_t k; (k = next++) < jobs.size();)
              compile_ms(jobs[k].source, arch, variants[v].second);
          });
        for (std::thread& th : pool) th.join();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count());
      }
      std::printf("a program a kernel on %u thread(s), %-10s median %6.1f ms wall\n", threads,
                  variants[v].first, median(t));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int arch = argc > 1 ? std::atoi(argv[1]) : 90;
  if (arch <= 0) {
    std::fprintf(stderr, "usage: probe_nvrtc_programs [ARCH, as 90 for sm_90]\n");
    return 2;
  }
  const HotTrace trace = planner_warm_up_trace();
  Plan plan;
  plan.hex = "probe";
  analyse_plan(plan, trace, std::nullopt, hotpath::Config{}, DeviceInfo{132, arch});
  const std::vector<KernelJob> jobs = kernel_jobs(plan);
  if (jobs.empty()) {
    std::fprintf(stderr, "the warm-up trace's plan has no kernels\n");
    return 1;
  }
  // NVRTC's first compile in the process, not timed.
  compile_ms("extern \"C\" __global__ void probe_start(float* p) { p[0] = 1; }\n", arch,
             {"--gpu-architecture=sm_" + std::to_string(arch)});
  time_set("the planner's warm-up trace", jobs, arch);
  // Four copies of its smallest kernel, each under a name of its own.
  const auto smallest = std::min_element(
      jobs.begin(), jobs.end(),
      [](const auto& a, const auto& b) { return a.source.size() < b.source.size(); });
  std::vector<KernelJob> small;
  for (int i = 0; i < 4; ++i) {
    KernelJob j = *smallest;
    const std::string name = j.name + "_" + std::to_string(i);
    for (std::size_t at = j.source.find(j.name); at != std::string::npos;
         at = j.source.find(j.name, at + name.size()))
      j.source.replace(at, j.name.size(), name);
    j.name = name;
    small.push_back(std::move(j));
  }
  time_set("four copies of its smallest kernel", small, arch);
  return 0;
}
