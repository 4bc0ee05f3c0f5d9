// A buffer that a deferred op's new output gets again in each iteration: the fused kernels of a
// plan make the same temporaries every iteration (an optimizer's sqrt and quotient, a loss's
// gradient), and asking the caching allocator for each, through the dispatcher, costs the host
// more than the op itself does once it is deferred.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>

#include "dispatch/op_record.h"

namespace hotpath::detail {

// A tensor of `dtype` on `storage` (its device's dispatch key), with these sizes, strides and
// storage offset: how a deferred op's output, a replay's placeholder or a view of a shadow is made
// on memory that is already there.
at::Tensor tensor_on(c10::Storage storage, c10::ScalarType dtype, c10::IntArrayRef sizes,
                     c10::IntArrayRef strides, std::int64_t offset = 0);

// Gives `placeholder` (a deferred op's output) the data of `result` (the op's eager result). Its
// storage is replaced only when nothing else shares it: autograd saves an op's output (softmax,
// sigmoid, ...) as a second tensor on the same storage, which must see the data.
void adopt_result(const at::Tensor& placeholder, const at::Tensor& result);

class OutputSlot : public c10::intrusive_ptr_target {
 public:
  // A tensor of `m` (sizes, strides, dtype, device) on the slot's buffer when no tensor holds
  // that buffer any more; else (the loop kept the last one) a tensor from at::empty_strided.
  // `slot` is made on first use, with a buffer from the device's allocator. The contents are
  // undefined, as at::empty's. A slot serves the stream that was current when it was made; on
  // another stream a new slot replaces it (the allocator orders reuse by stream; a slot cannot).
  static at::Tensor make(c10::intrusive_ptr<OutputSlot>& slot, const TensorMeta& m);

 private:
  static void release(void* ctx);
  at::Tensor wrap(const TensorMeta& m);
  at::DataPtr block_;
  std::size_t nbytes_ = 0;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(c10::kCPU)};
  std::atomic<bool> in_use_{false};
};

}  // namespace hotpath::detail
