// A fingerprint of a span of bytes, for replay's capture (src/exec/replay_checks.cpp): an input
// that an op's schema says it only reads is fingerprinted before and after the op's own run, on
// the GPU, and the two compared once at the capture's end. (Copying its bytes to pinned host
// memory instead cost the MLP step's capture 2.2-2.5 ms of its 5.3-5.8, mostly pinning fresh
// host memory.)
//
// Every 8 bytes (the last word zero-padded) are read as one word, xored with a constant times its
// place, put through a bijective 64-bit mix (splitmix64's finaliser), and the mixes are summed
// modulo 2^64 into *out, which must hold 0 before the launch. A sum does not depend on the order
// in which the blocks add theirs; one word that changes changes the sum, always (its term takes
// another value, the others stay); several that change leave it as it was with a chance of about
// 2^-64. Byte loads: the span may start anywhere.
#pragma once

namespace hp {

__device__ __forceinline__ unsigned long long fingerprint_mix(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace hp

// Any grid and block (a multiple of 32 threads): a grid-stride loop over the words.
extern "C" __global__ void hotpath_fingerprint(const unsigned char* bytes, unsigned long long n,
                                               unsigned long long* out) {
  const unsigned long long words = (n + 7) / 8;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long sum = 0;
  for (unsigned long long w = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       w < words; w += stride) {
    const unsigned long long at = w * 8;
    unsigned long long v = 0;
    for (int b = 0; b < 8; ++b)
      if (at + b < n) v |= static_cast<unsigned long long>(bytes[at + b]) << (8 * b);
    sum += hp::fingerprint_mix(v ^ (w * 0x9e3779b97f4a7c15ULL));
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd(out, sum);
}
