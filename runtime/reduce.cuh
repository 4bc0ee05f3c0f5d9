// Block-wide reductions of row kernels: every thread of the block gets the result. `smem` holds
// 32 floats; consecutive calls may share it.
#pragma once

namespace hp {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* smem) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // the previous reduction's readers are done with smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? smem[lane] : (kMax ? neg_inf() : 0.0f);
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  return smem[0];
}

__device__ __forceinline__ float block_sum(float v, float* smem) {
  return block_reduce<false>(v, smem);
}
__device__ __forceinline__ float block_max(float v, float* smem) {
  return block_reduce<true>(v, smem);
}

}  // namespace hp
