// The fixed part of the interpreter kernel (codegen/interpreter.cpp generates the rest: one case
// per op form of the op table). Each thread takes kE elements of a tile, so that every
// instruction is decoded once for kE elements. Registers live in shared memory (the program's
// `regs` of them, dynamic shared memory of the launch): local memory spilled to L2 for groups of
// many values (an AdamW update), and the interpreter was bound by that traffic, not by DRAM.
#pragma once

#include "hotpath_runtime.cuh"
#include "program.cuh"

namespace hp {

// One register of one thread: its kE elements, kS floats apart (kS: the block's threads), so
// that a warp's accesses fall into distinct banks.
template <int kS>
struct Reg {
  float* p;
  __device__ __forceinline__ float& operator[](int e) const { return p[e * kS]; }
};

// Register `k` of the calling thread in the register file `file` (this thread's first float).
template <int kE, int kS>
__device__ __forceinline__ Reg<kS> reg(float* file, int k) {
  return Reg<kS>{file + k * kE * kS};
}

template <int kE, int kS, typename T>
__device__ __forceinline__ void load_tile(const void* ptr, bool single, long long base,
                                          long long numel, Reg<kS> r) {
  const T* t = static_cast<const T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * kS;
    r[e] = i < numel ? to_float(t[single ? 0 : i]) : 0.0f;
  }
}

template <int kE, int kS, typename T>
__device__ __forceinline__ void store_tile(void* ptr, long long base, long long numel, Reg<kS> r) {
  T* t = static_cast<T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * kS;
    if (i < numel) t[i] = from_float<T>(r[e]);
  }
}

// The program's loads into their registers, for the tile at `base`.
template <int kE, int kS>
__device__ __forceinline__ void load_registers(const Program& p, long long base, float* file) {
  for (int k = 0; k < p.loads; ++k) {
    const int slot = p.load_slot[k];
    const Reg<kS> d = reg<kE, kS>(file, p.load_reg[k]);
    switch (p.type[slot]) {
      case kF16:
        load_tile<kE, kS, half>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      case kBF16:
        load_tile<kE, kS, bfloat16>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      case kBool:
        load_tile<kE, kS, bool>(p.ptr[slot], p.single[slot], base, p.numel, d);
        break;
      default:
        load_tile<kE, kS, float>(p.ptr[slot], p.single[slot], base, p.numel, d);
    }
  }
}

// An instruction's result rounded to the dtype it names.
template <int kE, int kS>
__device__ __forceinline__ void round_result(unsigned char type, Reg<kS> d) {
  if (type == kF16) {
    for (int e = 0; e < kE; ++e) d[e] = round_to<half>(d[e]);
  } else if (type == kBF16) {
    for (int e = 0; e < kE; ++e) d[e] = round_to<bfloat16>(d[e]);
  }
}

// The program's stores from their registers (a slot nobody reads has no pointer).
template <int kE, int kS>
__device__ __forceinline__ void store_registers(const Program& p, long long base, float* file) {
  for (int k = 0; k < p.stores; ++k) {
    const int slot = p.store_slot[k];
    if (p.ptr[slot] == nullptr) continue;
    const Reg<kS> v = reg<kE, kS>(file, p.store_reg[k]);
    switch (p.type[slot]) {
      case kF16:
        store_tile<kE, kS, half>(p.ptr[slot], base, p.numel, v);
        break;
      case kBF16:
        store_tile<kE, kS, bfloat16>(p.ptr[slot], base, p.numel, v);
        break;
      default:
        store_tile<kE, kS, float>(p.ptr[slot], base, p.numel, v);
    }
  }
}

}  // namespace hp
