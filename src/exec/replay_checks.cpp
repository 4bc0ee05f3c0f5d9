// A capture's check of the inputs an op's schema says it only reads (exec/replay.h): a graph reads
// a moving input through a copy, so an op that wrote such an input in place would write the copy
// in each replay while the loop's tensor kept its captured value. The captured iteration keeps
// each such input's fingerprint (runtime/fingerprint.cuh) before and after the op's own run, and
// end_capture compares them after one wait; where the device has no fingerprint kernel, its bytes
// in pinned host memory (memcpy only: no ATen kernel whose first load would cost the capture tens
// of ms).
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "codegen/interpreter.h"
#include "common/error.h"
#include "common/log.h"
#include "driver/cuda_driver.h"
#include "exec/replay.h"

namespace hotpath::detail {
namespace {

// Fingerprint slots (8 bytes each) to a tensor of prints_.
constexpr std::int64_t kPrintSlots = 64;
// At most this many blocks a fingerprint: a grid-stride loop covers the rest.
constexpr std::int64_t kPrintBlocks = 1024;

// A tensor's elements as bytes, in order, copied into pinned host memory on the current stream.
at::Tensor host_bytes(const at::Tensor& bytes) {
  at::Tensor host =
      at::empty({bytes.numel()}, bytes.options().device(at::kCPU).pinned_memory(true));
  host.copy_(bytes, /*non_blocking=*/true);
  return host;
}

}  // namespace

at::Tensor element_bytes(const at::Tensor& t) {
  // contiguous() keeps a one-element tensor as it is, whatever its stride (a slice with a step
  // leaves one of 2), and viewing it as bytes wants a stride of 1: such a tensor is copied.
  at::Tensor flat = t.contiguous().reshape({-1});
  if (flat.stride(0) != 1) flat = flat.clone(at::MemoryFormat::Contiguous);
  return flat.view(at::kByte);
}

std::int64_t Replay::keep_bytes(const at::Tensor& t, at::Tensor& host, bool fingerprint) {
  const at::Tensor bytes = element_bytes(t);
  const std::shared_ptr<const CudaModule> kernel =
      fingerprint ? fingerprint_kernel(device_) : nullptr;
  if (!kernel) {
    host = host_bytes(bytes);
    return -1;
  }
  const std::int64_t slot = prints_used_++;
  if (static_cast<std::size_t>(slot / kPrintSlots) >= prints_.size())
    prints_.push_back(
        at::empty({kPrintSlots}, at::TensorOptions().dtype(at::kLong).device(c10::Device(
                                     c10::kCUDA, static_cast<c10::DeviceIndex>(device_)))));
  auto* out = static_cast<unsigned long long*>(
                  prints_[static_cast<std::size_t>(slot / kPrintSlots)].data_ptr()) +
              slot % kPrintSlots;
  const c10::cuda::CUDAStream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  const cudaError_t e = cudaMemsetAsync(out, 0, sizeof *out, stream.stream());
  HOTPATH_CHECK(e == cudaSuccess, "clearing a fingerprint's slot failed: ", cudaGetErrorString(e));
  const auto* data = static_cast<const unsigned char*>(bytes.const_data_ptr());
  auto n = static_cast<unsigned long long>(bytes.numel());
  const auto words = static_cast<std::int64_t>((n + 7) / 8);
  const auto blocks = static_cast<unsigned>(std::clamp<std::int64_t>(
      (words + kFingerprintBlock - 1) / kFingerprintBlock, 1, kPrintBlocks));
  void* params[] = {&data, &n, &out};
  kernel->launch(blocks, kFingerprintBlock, stream.stream(), params);
  return slot;
}

void Replay::check_read_only() {
  if (read_only_.empty()) return;
  AddElapsed checks(cost_.checks_ms), wait(cost_.wait_ms);
  const c10::cuda::CUDAStream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  std::vector<unsigned long long> prints(static_cast<std::size_t>(prints_used_));
  for (std::size_t b = 0; b < prints_.size(); ++b) {
    const std::size_t first = b * static_cast<std::size_t>(kPrintSlots);
    const std::size_t n = std::min(prints.size() - first, static_cast<std::size_t>(kPrintSlots));
    const cudaError_t e =
        cudaMemcpyAsync(prints.data() + first, prints_[b].const_data_ptr(), n * sizeof prints[0],
                        cudaMemcpyDeviceToHost, stream.stream());
    HOTPATH_CHECK(e == cudaSuccess,
                  "copying the fingerprints to the host failed: ", cudaGetErrorString(e));
  }
  // The capture's one wait: for the fingerprints (or copies), on the stream the iteration ran on.
  stream.synchronize();
  for (const ReadOnly& r : read_only_) {
    const bool same =
        r.before_print >= 0
            ? r.after_print >= 0 && prints[static_cast<std::size_t>(r.before_print)] ==
                                        prints[static_cast<std::size_t>(r.after_print)]
            : r.before.numel() == r.after.numel() &&
                  std::memcmp(r.before.const_data_ptr(), r.after.const_data_ptr(),
                              static_cast<std::size_t>(r.before.numel())) == 0;
    if (same) continue;
    HOTPATH_FAIL("op ", r.index, " (", r.op, ") wrote its input ", r.k,
                 " in place, which its schema says it only reads: a replay would write a copy "
                 "of it");
  }
  read_only_.clear();
  prints_.clear();
  prints_used_ = 0;
}

}  // namespace hotpath::detail
