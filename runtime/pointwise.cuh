// fp32 element functions of fused kernels, written to match ATen's CUDA kernels.
#pragma once

#include "types.cuh"

namespace hp {

// `x` rounded as a tensor of the dtype `rounding` names is: 0 fp32, 1 fp16, 2 bf16.
__device__ __forceinline__ float round_as(float x, float rounding) {
  return rounding == 1.0f ? round_to<half>(x) : rounding == 2.0f ? round_to<bfloat16>(x) : x;
}

__device__ __forceinline__ float neg(float x) { return -x; }
__device__ __forceinline__ float reciprocal(float x) { return 1.0f / x; }
__device__ __forceinline__ float square(float x) { return x * x; }
__device__ __forceinline__ float relu(float x) { return x <= 0.0f ? 0.0f : x; }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float silu_backward(float dy, float x) {
  const float s = 1.0f / (1.0f + expf(-x));
  return dy * s * (1.0f + x * (1.0f - s));
}

__device__ __forceinline__ float gelu_erf(float x) {
  constexpr float kAlpha = 0.70710678118654752440f;  // 1/sqrt(2)
  return x * 0.5f * (1.0f + erff(x * kAlpha));
}

// The tanh forms keep ATen's order of operations ((x * x) * x, then kKappa times it): another
// order rounds differently in fp32, and a bf16 result then lands a unit apart now and then.
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kBeta = 0.79788456080286535588f;  // sqrt(2/pi)
  constexpr float kKappa = 0.044715f;
  const float x_cube = x * x * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ __forceinline__ float gelu_erf_backward(float dy, float x) {
  constexpr float kBeta = 0.39894228040143267794f;  // 1/sqrt(2*pi)
  constexpr float kAlpha = 0.70710678118654752440f;
  const float cdf = 0.5f * (1.0f + erff(x * kAlpha));
  const float pdf = expf(-0.5f * x * x) * kBeta;
  return dy * (cdf + x * pdf);
}

__device__ __forceinline__ float gelu_tanh_backward(float dy, float x) {
  constexpr float kBeta = 0.79788456080286535588f;
  constexpr float kKappa = 0.044715f;
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  const float t = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + t;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.0f - t * t;
  const float inner_derivative = kBeta * (1.0f + 3.0f * kKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

__device__ __forceinline__ float softplus(float x, float beta, float threshold) {
  return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}

__device__ __forceinline__ float softplus_backward(float dy, float x, float beta, float threshold) {
  const float z = expf(x * beta);
  return x * beta > threshold ? dy : dy * z / (z + 1.0f);
}

// ATen computes these in the tensor's dtype (scalar_t arithmetic in BinaryMiscBackwardOpsKernels.cu
// and PointwiseOpsKernel.cu): for fp16 and bf16 each intermediate result is rounded to it (`r` as
// round_as; the final rounding is the store's).
__device__ __forceinline__ float sigmoid_backward(float dy, float y, float r) {
  if (r == 0.0f) return dy * (1.0f - y) * y;
  return round_as(dy * round_as(1.0f - y, r), r) * y;
}
__device__ __forceinline__ float tanh_backward(float dy, float y, float r) {
  if (r == 0.0f) return dy * (1.0f - y * y);
  return dy * round_as(1.0f - round_as(y * y, r), r);
}
// mse_loss_backward: alpha * (self - target) * grad, alpha (2/numel or 2) in the dtype too.
__device__ __forceinline__ float mse_backward(float grad, float self, float target, float alpha,
                                              float r) {
  if (r == 0.0f) return alpha * (self - target) * grad;
  return round_as(round_as(alpha, r) * round_as(self - target, r), r) * grad;
}

// ATen's addcmul and addcdiv (DeviceAddCmulCdiv.cuh, pointwise_op_impl): explicit fused
// multiply-adds, the product or quotient of the tensors first.
__device__ __forceinline__ float addcmul(float input, float t1, float t2, float alpha) {
  return alpha == 1.0f ? fmaf(t1, t2, input) : fmaf(alpha, t1 * t2, input);
}
__device__ __forceinline__ float addcdiv(float input, float t1, float t2, float alpha) {
  return alpha == 1.0f ? input + t1 / t2 : fmaf(alpha, t1 / t2, input);
}

// ATen's clamp: a NaN stays NaN (fmaxf and fminf alone would return the bound).
__device__ __forceinline__ float clamp_min(float x, float lo) {
  return isnan(x) ? x : fmaxf(x, lo);
}
__device__ __forceinline__ float clamp_max(float x, float hi) {
  return isnan(x) ? x : fminf(x, hi);
}

// ATen's lerp: two formulas, chosen by the weight, for accuracy at both ends.
__device__ __forceinline__ float lerp(float self, float end, float w) {
  return fabsf(w) < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

// ATen special-cases these exponents in pow(Tensor, Scalar), and computes x^3 and x^-2 in the
// tensor's own dtype (base * base * base on an fp16 or bf16 scalar_t): the square of an fp16 or
// bf16 tensor is rounded to it first (`rounding`, as round_as).
__device__ __forceinline__ float pow(float x, float e, float rounding) {
  if (e == 2.0f) return x * x;
  if (e == 3.0f) return round_as(x * x, rounding) * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == -0.5f) return rsqrtf(x);
  if (e == -1.0f) return 1.0f / x;
  if (e == -2.0f) return 1.0f / round_as(x * x, rounding);
  if (e == 1.0f) return x;
  return powf(x, e);
}

}  // namespace hp
