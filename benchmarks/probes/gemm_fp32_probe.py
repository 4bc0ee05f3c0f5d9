"""fp32 matrix products of the transformer LM (issue #17) on the GPU machine: cuBLAS (fp32, what
eager runs) against three-pass TF32 ("3xTF32": each operand split into a TF32 high part and a
TF32 remainder, hi*hi + hi*lo + lo*hi accumulated in fp32), the way to use tensor cores at about
fp32's accuracy. Two 3xTF32 kernels: Triton's tl.dot(input_precision="tf32x3") and a CUDA C++
kernel on mma.sync (compiled by NVRTC through CuPy, as hotpath's kernels are). Each product's
error is measured against fp64 on the same inputs, beside cuBLAS fp32's own.

  python3 benchmarks/probes/gemm_fp32_probe.py [--tokens 1024,4096] [--reps 50]

Prints one row per shape: ms (median, CUDA events) and relative Frobenius error against fp64.
"""
import argparse
import math
import sys

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None
try:
    import cupy
except ImportError:  # pragma: no cover
    cupy = None

MMA_SRC = r"""
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
  unsigned b, s;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(x));
  const float r = x - __uint_as_float(b);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(s) : "f"(r));
  big = b;
  small = s;
}
__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// C[M,N] = A[M,K] B[K,N]. A_K: A(m,k) at A[m*lda + k], else A[k*lda + m]. B_K: B(k,n) at
// B[n*ldb + k], else B[k*ldb + n]. grid (ceil(N/128), ceil(M/128), batch).
template <bool A_K, bool B_K>
__global__ void __launch_bounds__(256) gemm(const float* __restrict__ A,
                                            const float* __restrict__ B, float* __restrict__ C,
                                            int M, int N, int K, long long lda, long long ldb,
                                            long long ldc, long long sA, long long sB,
                                            long long sC) {
  constexpr int BM = 128, BN = 128, BK = 32, ST = 3;
  constexpr int AS = A_K ? BM * (BK + 4) : BK * (BM + 8);
  constexpr int BS = B_K ? BN * (BK + 4) : BK * (BN + 8);
  extern __shared__ float4 smem4[];
  float* As = reinterpret_cast<float*>(smem4);
  float* Bs = As + ST * AS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  A += blockIdx.z * sA;
  B += blockIdx.z * sB;
  C += blockIdx.z * sC;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  const int KT = (K + BK - 1) / BK;
  auto load = [&](int stage, int kt) {
    const int k0 = kt * BK;
    float* as = As + stage * AS;
    float* bs = Bs + stage * BS;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int idx = tid + c * 256;
      if (A_K) {
        const int r = idx >> 3, kc = (idx & 7) * 4;
        const bool ok = m0 + r < M && k0 + kc < K;
        cp_async16(as + r * (BK + 4) + kc, ok ? A + (long long)(m0 + r) * lda + k0 + kc : A, ok);
      } else {
        const int kr = idx >> 5, mc = (idx & 31) * 4;
        const bool ok = k0 + kr < K && m0 + mc < M;
        cp_async16(as + kr * (BM + 8) + mc, ok ? A + (long long)(k0 + kr) * lda + m0 + mc : A, ok);
      }
      if (B_K) {
        const int r = idx >> 3, kc = (idx & 7) * 4;
        const bool ok = n0 + r < N && k0 + kc < K;
        cp_async16(bs + r * (BK + 4) + kc, ok ? B + (long long)(n0 + r) * ldb + k0 + kc : B, ok);
      } else {
        const int kr = idx >> 5, nc = (idx & 31) * 4;
        const bool ok = k0 + kr < K && n0 + nc < N;
        cp_async16(bs + kr * (BN + 8) + nc, ok ? B + (long long)(k0 + kr) * ldb + n0 + nc : B, ok);
      }
    }
  };
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < KT) load(s, s);
    cp_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<ST - 2>();
    __syncthreads();
    if (kt + ST - 1 < KT) load((kt + ST - 1) % ST, kt + ST - 1);
    cp_commit();
    const float* as = As + (kt % ST) * AS;
    const float* bs = Bs + (kt % ST) * BS;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      unsigned bb[4][2], bl[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int n = wn + nt * 8 + g;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int k = kk + t + 4 * h;
          const float v = B_K ? bs[n * (BK + 4) + k] : bs[k * (BN + 8) + n];
          split(v, bb[nt][h], bl[nt][h]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        unsigned ab[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = wm + mt * 16 + g + 8 * (e & 1);
          const int k = kk + t + 4 * (e >> 1);
          const float v = A_K ? as[r * (BK + 4) + k] : as[k * (BM + 8) + r];
          split(v, ab[e], al[e]);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          mma(acc[mt][nt], al, bb[nt]);
          mma(acc[mt][nt], ab, bl[nt]);
          mma(acc[mt][nt], ab, bb[nt]);
        }
      }
    }
  }
  cp_wait<0>();
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + wm + mt * 16 + g + 8 * (e >> 1);
        const int c = n0 + wn + nt * 8 + 2 * t + (e & 1);
        if (r < M && c < N) C[(long long)r * ldc + c] = acc[mt][nt][e];
      }
}
"""

if triton is not None:

    @triton.jit
    def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
            BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, PREC: tl.constexpr):
        pid = tl.program_id(0)
        pid_b = tl.program_id(1)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = GROUP * npn
        gid = pid // width
        first = gid * GROUP
        gs = min(npm - first, GROUP)
        pid_m = first + (pid % width) % gs
        pid_n = (pid % width) // gs
        offs_m = (pid_m * BM + tl.arange(0, BM)) % M
        offs_n = (pid_n * BN + tl.arange(0, BN)) % N
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + pid_b * M * K + offs_m[:, None] * sam + offs_k[None, :] * sak
        b_ptrs = b_ptr + pid_b * K * N + offs_k[:, None] * sbk + offs_n[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PREC)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        c_ptrs = c_ptr + pid_b * M * N + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    TRITON_CONFIGS = [
        dict(BM=128, BN=128, BK=32, num_warps=8, num_stages=3),
        dict(BM=128, BN=256, BK=32, num_warps=8, num_stages=3),
        dict(BM=128, BN=64, BK=32, num_warps=4, num_stages=4),
        dict(BM=64, BN=128, BK=32, num_warps=4, num_stages=4),
    ]


def triton_mm(a, b, c, prec, cfg):
    batch, M, K = a.shape
    N = b.shape[2]
    grid = (triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, cfg["BN"]), batch)
    # a, b are batched views with contiguous batches; strides within a matrix are free.
    _mm[grid](a, b, c, M, N, K, a.stride(1), a.stride(2), b.stride(1), b.stride(2), c.stride(1),
              c.stride(2), BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP=8, PREC=prec,
              num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def bench(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    # Ten products between two events, so that a busy host (a build beside the probe) cannot
    # leave the GPU waiting inside the timed span.
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 10)
    times.sort()
    return times[len(times) // 2]


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1024,4096")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gemm_fp32_probe: needs a CUDA GPU (it times cuBLAS, Triton and an NVRTC kernel on it)",
              file=sys.stderr)
        return 2
    torch.manual_seed(0)
    dev = "cuda"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__ if triton else 'none'}, cupy {cupy.__version__ if cupy else 'none'}")
    mma = None
    if cupy is not None:
        mod = cupy.RawModule(code=MMA_SRC, options=("--std=c++17", "-arch=sm_90"),
                             name_expressions=[f"gemm<{a},{b}>" for a in ("true", "false")
                                               for b in ("true", "false")])
        mma = {(a, b): mod.get_function(f"gemm<{'true' if a else 'false'},{'true' if b else 'false'}>")
               for a in (True, False) for b in (True, False)}
        for f in mma.values():
            f.max_dynamic_shared_size_bytes = 3 * 2 * 128 * 40 * 4

    def run_mma(a, b, c, a_k, b_k, M, N, K, batch):
        # a: A as stored, b: B as stored (see the kernel's comment), c: [batch, M, N]
        lda = K if a_k else M
        ldb = K if b_k else N
        f = mma[(a_k, b_k)]
        smem = 3 * ((128 * 36 if a_k else 32 * 136) + (128 * 36 if b_k else 32 * 136)) * 4
        f(((N + 127) // 128, (M + 127) // 128, batch), (256,),
          (a.data_ptr(), b.data_ptr(), c.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K),
           cupy.int64(lda), cupy.int64(ldb), cupy.int64(N), cupy.int64(M * K), cupy.int64(K * N),
           cupy.int64(M * N)), shared_mem=smem)

    print(f"{'shape':38} {'cuBLAS fp32':>12} {'tf32x1':>8} {'triton x3':>10} {'mma x3':>8} "
          f"{'speedup':>8} | err fp32 / x3 triton / x3 mma / x1")
    tot = {"fp32": 0.0, "tri": 0.0, "mma": 0.0}
    for tokens in [int(x) for x in args.tokens.split(",")]:
        T = tokens // 4
        shapes = []
        for (n_out, k_in) in [(2304, 768), (768, 768), (3072, 768), (768, 3072), (10000, 768)]:
            shapes.append((f"fwd  x@W^T {tokens}x{n_out}x{k_in}", 1, tokens, n_out, k_in, True, True))
            shapes.append((f"dX   dY@W  {tokens}x{k_in}x{n_out}", 1, tokens, k_in, n_out, True, False))
            shapes.append((f"dW   dY^T@X {n_out}x{k_in}x{tokens}", 1, n_out, k_in, tokens, False, False))
        shapes.append((f"attn q@k^T 48x{T}x{T}x64", 48, T, T, 64, True, True))
        shapes.append((f"attn p@v   48x{T}x64x{T}", 48, T, 64, T, True, False))
        shapes.append((f"attn dP^T@dO 48x{T}x64x{T}", 48, T, 64, T, False, False))
        for (name, batch, M, N, K, a_k, b_k) in shapes:
            # stored operands
            a_st = torch.randn(batch, M, K, device=dev) if a_k else torch.randn(batch, K, M, device=dev)
            b_st = torch.randn(batch, N, K, device=dev) if b_k else torch.randn(batch, K, N, device=dev)
            a = a_st if a_k else a_st.transpose(1, 2)
            b = b_st.transpose(1, 2) if b_k else b_st
            ref = torch.bmm(a.double(), b.double())
            torch.backends.cuda.matmul.allow_tf32 = False
            c32 = torch.bmm(a, b)
            t32 = bench(lambda: torch.bmm(a, b), args.reps)
            torch.backends.cuda.matmul.allow_tf32 = True
            c1 = torch.bmm(a, b)
            t1 = bench(lambda: torch.bmm(a, b), args.reps)
            torch.backends.cuda.matmul.allow_tf32 = False
            ttri, etri = float("nan"), float("nan")
            if triton is not None:
                c = torch.empty(batch, M, N, device=dev)
                best = None
                for cfg in TRITON_CONFIGS:
                    try:
                        tm = bench(lambda: triton_mm(a, b, c, "tf32x3", cfg), max(10, args.reps // 3))
                    except Exception as ex:  # a config that does not fit
                        print("  triton config", cfg, "failed:", str(ex).splitlines()[0][:100])
                        continue
                    if best is None or tm < best[0]:
                        best = (tm, cfg)
                ttri = bench(lambda: triton_mm(a, b, c, "tf32x3", best[1]), args.reps)
                c.fill_(float("nan"))
                triton_mm(a, b, c, "tf32x3", best[1])
                etri = rel(c, ref)
            tmma, emma = float("nan"), float("nan")
            if mma is not None:
                c = torch.empty(batch, M, N, device=dev)
                c.fill_(float("nan"))
                run_mma(a_st, b_st, c, a_k, b_k, M, N, K, batch)
                torch.cuda.synchronize()
                emma = rel(c, ref)
                tmma = bench(lambda: run_mma(a_st, b_st, c, a_k, b_k, M, N, K, batch), args.reps)
            best3 = min(x for x in (ttri, tmma) if not math.isnan(x))
            tot["fp32"] += t32
            tot["tri"] += ttri
            tot["mma"] += tmma
            print(f"{name:38} {t32:12.4f} {t1:8.4f} {ttri:10.4f} {tmma:8.4f} {t32 / best3:7.2f}x | "
                  f"{rel(c32, ref):.1e} / {etri:.1e} / {emma:.1e} / {rel(c1, ref):.1e}", flush=True)
    print(f"sum of the shapes' medians: cuBLAS fp32 {tot['fp32']:.3f} ms, triton tf32x3 "
          f"{tot['tri']:.3f} ms ({tot['fp32'] / tot['tri']:.2f}x), mma 3xtf32 {tot['mma']:.3f} ms "
          f"({tot['fp32'] / tot['mma']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
