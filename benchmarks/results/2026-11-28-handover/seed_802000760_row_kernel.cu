// hotpath fused row kernel: 2 ops over f32[5, 1] cpu
//   mul_.Scalar _log_softmax
#include "hotpath_runtime.cuh"

typedef int idx_t;

extern "C" __global__ void __launch_bounds__(256) hp_mul__log_softmax_f710ad64(
    float* __restrict__ t0,
    const float s1,
    float* __restrict__ t2,
    const idx_t kNumel,
    const int vector_ok) {
  const int lane = threadIdx.x & 31;
  const idx_t first_row = static_cast<idx_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const idx_t row_step = static_cast<idx_t>(gridDim.x) * (blockDim.x / 32);
  const idx_t kCols = 1;
  const idx_t kRows = kNumel / kCols;
  constexpr int kPer = 1;
  for (idx_t row = first_row; row < kRows; row += row_step) {
    const idx_t base = row * kCols;
    float x5_r[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const idx_t c = lane + 32 * j;
      x5_r[j] = c < kCols ? hp::to_float(t0[base + c]) : 0.0f;
    }
    // pass 1
    float r0_acc = hp::neg_inf();
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const idx_t c = lane + 32 * j;
      if (c >= kCols) break;
      const float x5 = x5_r[j];
      const float v0 = (x5 * s1);
      r0_acc = fmaxf(r0_acc, v0);
    }
    const float r0 = hp::warp_max(r0_acc);
    // pass 2
    float r1_acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const idx_t c = lane + 32 * j;
      if (c >= kCols) break;
      const float x5 = x5_r[j];
      const float v0 = (x5 * s1);
      const float v1_exp = expf(v0 - r0);
      r1_acc += v1_exp;
    }
    const float r1 = hp::warp_sum(r1_acc);
    // stores
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const idx_t c = lane + 32 * j;
      if (c >= kCols) break;
      const float x5 = x5_r[j];
      const float v0 = (x5 * s1);
      const float v1_exp = expf(v0 - r0);
      const float v1 = (v0 - r0 - logf(r1));
      t0[base + c] = hp::from_float<float>(v0);
      t2[base + c] = hp::from_float<float>(v1);
    }
  }
}
