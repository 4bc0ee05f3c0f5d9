// Storage types of fused kernels and their fp32 conversions. NVRTC compiles these without any
// CUDA header (no cuda_fp16.h): fp16 and bf16 are 16-bit structs converted with PTX.
#pragma once

namespace hp {

struct __align__(2) half {
  unsigned short x;
};
struct __align__(2) bfloat16 {
  unsigned short x;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bool v) { return v ? 1.0f : 0.0f; }
__device__ __forceinline__ float to_float(half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
__device__ __forceinline__ float to_float(bfloat16 v) {
  return __uint_as_float(static_cast<unsigned int>(v.x) << 16);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ half from_float<half>(float v) {
  half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(v));
  return h;
}
template <>
__device__ __forceinline__ bfloat16 from_float<bfloat16>(float v) {
  bfloat16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(v));
  return h;
}

// Rounds an fp32 intermediate the way eager would have stored it.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}
// An fp32 op's result as eager's own kernel stores it: the product it may end in is rounded
// there, not contracted with a later op's add into one FMA (add.rn is never contracted; adding
// -0 changes no value, signed zeros and NaN included). Contracted, a row kernel that recomputes
// x * s in each pass computed the row maximum's x * s - max as the product's rounding residual,
// not the 0 eager gets (log_softmax of a one-column row: +-1.2e-7).
template <>
__device__ __forceinline__ float round_to<float>(float v) {
  return __fadd_rn(v, -0.0f);
}

}  // namespace hp
