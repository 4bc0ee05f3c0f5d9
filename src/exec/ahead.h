// Kernels compiled ahead of need (Config::compile_ahead). A signature that has repeated a few
// times, not hot yet, has its plan worked out on the plans' worker from the trace of that
// iteration, and the plan's kernels compiled into the kernel cache; nothing else of that plan is
// kept. When the signature turns hot, its plan is built from the hot trace as ever and finds its
// kernels in the cache (loaded in milliseconds) instead of waiting for NVRTC while stand-ins run
// the loop at eager's pace. The plan's cache keys are its kernels' sources, so a plan that comes
// out differently at hot only misses the cache. The compile stops between NVRTC programs when a
// hot plan of another signature waits for the worker (`cancelled`).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

#include "compile/kernel_cache.h"
#include "driver/cuda_driver.h"
#include "hotpath/hotpath.h"
#include "trace/hot_trace.h"

namespace hotpath::detail {

struct AheadResult {
  std::size_t kernels = 0;   // the plan's distinct kernels
  std::size_t compiled = 0;  // compiled by NVRTC now (the others were in the cache already)
  std::size_t failed = 0;    // NVRTC failed (the plan compiles them again and says why)
  bool cancelled = false;    // stopped short for a hot plan (the rest compile with that plan)
  double ms = 0;             // wall time
};

// On the calling thread (the plans' worker). `device`: the GPU's facts, else asked of the driver.
AheadResult compile_ahead(const HotTrace& trace, const Config& config, const KernelCache& cache,
                          const std::optional<DeviceInfo>& device,
                          std::function<bool()> cancelled = {});

}  // namespace hotpath::detail
