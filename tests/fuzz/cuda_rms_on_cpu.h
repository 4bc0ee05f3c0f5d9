// CUDA's rms_norm on the CPU, for fuzz_programs --cuda-rms: LibTorch runs rms_norm on a CUDA
// tensor as one op of two outputs, aten::_fused_rms_norm (out, rstd), whose rstd autograd saves
// for aten::_fused_rms_norm_backward; on the CPU it decomposes into pow, mean, add, rsqrt and
// mul before hotpath sees it. Registering CPU kernels for both ops (written with ATen ops, rstd
// as ATen's CUDA kernel computes it on each of its two paths) lets the CPU rounds meet the ops as
// the GPU does: their groups, their kernels' source (compiled by NVRTC) and the data flow around
// them, with plans that run ATen's kernels.
#pragma once

namespace fuzz {

// Registers the CPU kernels (once; idempotent). The fuzzer then calls at::_fused_rms_norm
// itself on the CPU (program.cpp, K::RmsNorm).
void register_cuda_rms_on_cpu();
// Whether the programs call at::_fused_rms_norm on the CPU (set by fuzz_programs --cuda-rms).
bool& cuda_rms_on_cpu();

}  // namespace fuzz
