// The fixed part of the interpreter kernel (codegen/interpreter.cpp generates the rest: one case
// per op form of the op table). Each thread takes kE elements of a tile, so that every
// instruction is decoded once for kE elements; registers live in per-thread local memory, laid
// out so that a warp's accesses coalesce.
#pragma once

#include "hotpath_runtime.cuh"
#include "program.cuh"

namespace hp {

template <int kE, typename T>
__device__ __forceinline__ void load_tile(const void* ptr, bool single, long long base,
                                          long long numel, float* r) {
  const T* t = static_cast<const T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * blockDim.x;
    r[e] = i < numel ? to_float(t[single ? 0 : i]) : 0.0f;
  }
}

template <int kE, typename T>
__device__ __forceinline__ void store_tile(void* ptr, long long base, long long numel,
                                           const float* r) {
  T* t = static_cast<T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * blockDim.x;
    if (i < numel) t[i] = from_float<T>(r[e]);
  }
}

// The program's loads into their registers, for the tile at `base`.
template <int kE>
__device__ __forceinline__ void load_registers(const Program& p, long long base, float (*r)[kE]) {
  for (int k = 0; k < p.loads; ++k) {
    const int slot = p.load_slot[k];
    float* d = r[p.load_reg[k]];
    switch (p.type[slot]) {
      case kF16:
        load_tile<kE, half>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      case kBF16:
        load_tile<kE, bfloat16>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      case kBool:
        load_tile<kE, bool>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      default:
        load_tile<kE, float>(p.ptr[slot], p.single[slot], base, p.numel, d);
    }
  }
}

// An instruction's result rounded to the dtype it names.
template <int kE>
__device__ __forceinline__ void round_result(unsigned char type, float* d) {
  if (type == kF16) {
    for (int e = 0; e < kE; ++e) d[e] = round_to<half>(d[e]);
  } else if (type == kBF16) {
    for (int e = 0; e < kE; ++e) d[e] = round_to<bfloat16>(d[e]);
  }
}

// The program's stores from their registers (a slot nobody reads has no pointer).
template <int kE>
__device__ __forceinline__ void store_registers(const Program& p, long long base, float (*r)[kE]) {
  for (int k = 0; k < p.stores; ++k) {
    const int slot = p.store_slot[k];
    if (p.ptr[slot] == nullptr) continue;
    const float* v = r[p.store_reg[k]];
    switch (p.type[slot]) {
      case kF16:
        store_tile<kE, half>(p.ptr[slot], base, p.numel, v);
        break;
      case kBF16:
        store_tile<kE, bfloat16>(p.ptr[slot], base, p.numel, v);
        break;
      default:
        store_tile<kE, float>(p.ptr[slot], base, p.numel, v);
    }
  }
}

}  // namespace hp
