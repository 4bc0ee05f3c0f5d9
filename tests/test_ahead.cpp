// Kernels compiled ahead of hot (Config::compile_ahead, exec/ahead.h): which iteration the
// recorder hands on, the kernel builder stopping between programs, and a plan that finds the
// kernels compiled ahead in the cache. NVRTC runs without a GPU.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "compile/kernel_builder.h"
#include "compile/kernel_cache.h"
#include "exec/ahead.h"
#include "exec/planner.h"
#include "hotpath/hotpath.h"
#include "session/session.h"
#include "temp_dir.h"

using namespace hotpath::detail;

TEST_CASE("a signature is handed on for its kernels once, after compile_ahead iterations",
          "[fusion][ahead]") {
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({4, 8});
  // {compile_ahead, the iteration handed on (0: none)} with a threshold of 6.
  const std::vector<std::pair<int, std::int64_t>> cases = {{3, 3}, {2, 2}, {1, 1},
                                                           {0, 0}, {6, 0}, {9, 0}};
  for (const auto& [ahead, expected] : cases) {
    CAPTURE(ahead);
    hotpath::disable_hot_path_detection();
    hotpath::Config c;
    c.threshold = 6;
    c.compile_ahead = ahead;
    hotpath::enable_hot_path_detection(c);
    std::vector<HotTrace> handed;
    thread_session()->recorder.set_ahead_listener(
        [&](HotTrace&& t) { handed.push_back(std::move(t)); });
    for (int i = 1; i <= 9; ++i) {
      CAPTURE(i);
      auto out = (a * b).relu().sum();
      hotpath::step();
      const bool before = expected == 0 || i < expected;
      CHECK(handed.size() == (before ? 0u : 1u));
      CHECK(hotpath::stats().hot_signatures() == (i >= 6 ? 1 : 0));
    }
    if (expected > 0) {
      REQUIRE(handed.size() == 1);
      CHECK(handed[0].ahead);
      CHECK(handed[0].iteration == expected);
      CHECK(handed[0].signature == hotpath::stats().signatures.at(0).id);
      CHECK(handed[0].ops.size() == 3);
    }
    hotpath::disable_hot_path_detection();
  }
}

TEST_CASE("signatures that do not repeat in a row are not compiled ahead", "[fusion][ahead]") {
  // Two steps that take turns (A B A B ...), and a third seen every fourth iteration (a last,
  // smaller batch): each reaches three iterations long before the threshold, none in a row.
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({4, 8});
  const auto c = torch::randn({3, 8});
  hotpath::disable_hot_path_detection();
  hotpath::Config config;
  config.threshold = 20;
  config.compile_ahead = 3;
  hotpath::enable_hot_path_detection(config);
  std::vector<std::uint64_t> handed;
  thread_session()->recorder.set_ahead_listener(
      [&](HotTrace&& t) { handed.push_back(t.signature); });
  for (int i = 0; i < 16; ++i) {
    auto out = i % 4 == 3 ? (c * c).sum() : i % 2 == 0 ? (a * b).relu().sum() : (a + b).sum();
    hotpath::step();
  }
  CHECK(handed.empty());
  // Then one of them three times in a row: handed on once.
  for (int i = 0; i < 3; ++i) {
    auto out = (a + b).sum();
    hotpath::step();
  }
  CHECK(handed.size() == 1);
  hotpath::disable_hot_path_detection();
}

namespace {

// Distinct small kernels, as generated ones look (the runtime header, a helper of one name).
std::vector<KernelJob> small_jobs(std::size_t n) {
  std::vector<KernelJob> jobs;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = "k_ahead_" + std::to_string(i);
    const std::string source =
        "#include \"hotpath_runtime.cuh\"\n__device__ float f(float v) { return v * " +
        std::to_string(i + 2) + ".0f; }\nextern \"C\" __global__ void " + name +
        "(float* x) { x[threadIdx.x] = f(x[threadIdx.x]); }\n";
    jobs.push_back(KernelJob{source, name, kernel_cache_key(source, 90)});
  }
  return jobs;
}

}  // namespace

TEST_CASE("a cancelled build compiles no program after the one it was in", "[fusion][nvrtc]") {
  const hotpath_test::TempDir tmp("hotpath-cancel-test");
  const KernelCache cache(tmp.path());
  const std::vector<KernelJob> jobs = small_jobs(kProgramKernels + 1);  // two programs
  SECTION("cancelled from the start: nothing compiles") {
    KernelBuilder b(jobs, 90, runtime_headers(), cache, [] { return true; });
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      CAPTURE(k);
      CHECK(b.wait(k).error == KernelBuilder::kNotCompiled);
      CHECK_FALSE(cache.load(jobs[k].key).has_value());
    }
    CHECK(b.programs() == 0);
    CHECK(b.was_cancelled());
  }
  SECTION(
      "cancelled after the first program was taken: that one finishes, the second never "
      "starts") {
    std::atomic<int> asked{0};
    KernelBuilder b(jobs, 90, runtime_headers(), cache, [&] { return asked++ > 0; });
    for (std::size_t k = 0; k < kProgramKernels; ++k) {
      CAPTURE(k);
      CHECK(b.wait(k).error.empty());
      CHECK(cache.load(jobs[k].key).has_value());
    }
    CHECK(b.wait(kProgramKernels).error == KernelBuilder::kNotCompiled);
    CHECK_FALSE(cache.load(jobs[kProgramKernels].key).has_value());
    CHECK(b.programs() == 1);
    CHECK(b.was_cancelled());
  }
  SECTION("never cancelled: both programs") {
    KernelBuilder b(jobs, 90, runtime_headers(), cache, [] { return false; });
    for (std::size_t k = 0; k < jobs.size(); ++k) CHECK(b.wait(k).error.empty());
    CHECK(b.programs() == 2);
    CHECK_FALSE(b.was_cancelled());
  }
}

TEST_CASE("kernels compiled ahead are in the cache for the plan built at hot",
          "[fusion][ahead][nvrtc]") {
  const hotpath_test::TempDir tmp("hotpath-ahead-test");
  const KernelCache cache(tmp.path());
  const DeviceInfo device{132, 90};
  const hotpath::Config config;
  // A GPU step with every kind of group (the planner's warm-up trace), and its plan's kernels as
  // the plan at hot will ask for them: some may be prebuilt with hotpath (AdamW's update).
  const HotTrace trace = planner_warm_up_trace();
  Plan plan;
  plan.hex = "test";
  analyse_plan(plan, trace, std::nullopt, config, device);
  const std::vector<KernelJob> jobs = kernel_jobs(plan);
  std::size_t misses = 0;
  for (const KernelJob& j : jobs) misses += cache.load(j.key).has_value() ? 0 : 1;
  CHECK(misses >= 3);
  const AheadResult first = compile_ahead(trace, config, cache, device);
  CHECK(first.kernels == jobs.size());
  CHECK(first.compiled == misses);
  CHECK(first.failed == 0);
  CHECK_FALSE(first.cancelled);
  CHECK(first.ms > 0);
  // The plan at hot: every kernel is a cache hit, nothing for NVRTC.
  KernelBuilder at_hot(jobs, 90, runtime_headers(), cache);
  CHECK(at_hot.compiled() == 0);
  for (std::size_t k = 0; k < jobs.size(); ++k) CHECK(at_hot.wait(k).from_cache);
  // Asked again: nothing left to compile.
  const AheadResult again = compile_ahead(trace, config, cache, device);
  CHECK(again.kernels == first.kernels);
  CHECK(again.compiled == 0);
  // Cancelled before it began (a hot plan waits for the worker): no plan is even worked out.
  const hotpath_test::TempDir other("hotpath-ahead-cancelled");
  const AheadResult cancelled =
      compile_ahead(trace, config, KernelCache(other.path()), device, [] { return true; });
  CHECK(cancelled.cancelled);
  CHECK(cancelled.kernels == 0);
  CHECK(cancelled.compiled == 0);
}

TEST_CASE("the report says how many of a plan's kernels compiled ahead of hot", "[ahead][report]") {
  hotpath::SignatureReport r;
  r.hex = "0a1b2c3d";
  r.hot_at_iteration = 10;
  r.first_fused_iteration = 12;
  r.kernels = 4;
  r.kernels_from_cache = 4;
  r.kernels_ahead = 3;
  CHECK_THAT(hotpath::format_report(r),
             Catch::Contains("4 kernel(s), 0.0 ms compiling on the worker (4 from the cache, 3 "
                             "compiled ahead of hot), training thread waited 0.0 ms"));
  r.kernels_ahead = 0;
  CHECK_THAT(hotpath::format_report(r), Catch::Contains("(4 from the cache), training thread"));
}
