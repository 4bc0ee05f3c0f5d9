// Whether a test that needs a GPU can run here; without one it says so (the GPU machine runs
// these tests through benchmarks/gpu_check.sh) and the test returns.
#pragma once

#include <torch/cuda.h>

#include <catch2/catch.hpp>

namespace hotpath_test {

inline bool have_gpu() {
  if (torch::cuda::is_available()) return true;
  WARN("no CUDA device: this test runs on the GPU machine (benchmarks/gpu_check.sh)");
  return false;
}

}  // namespace hotpath_test
