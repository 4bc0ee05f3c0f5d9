// 16-byte vector loads and stores for contiguous, aligned tensors.
#pragma once

#include "types.cuh"

namespace hp {

template <typename T, int N>
struct __align__(sizeof(T) * N) Vec {
  T v[N];
};

template <int N, typename T, typename I>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p, I vec_index) {
  return reinterpret_cast<const Vec<T, N>*>(p)[vec_index];
}

template <int N, typename T, typename I>
__device__ __forceinline__ void store_vec(T* p, I vec_index, const Vec<T, N>& v) {
  reinterpret_cast<Vec<T, N>*>(p)[vec_index] = v;
}

}  // namespace hp
