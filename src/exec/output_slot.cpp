#include "exec/output_slot.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace hotpath::detail {

at::Tensor tensor_on(c10::Storage storage, c10::ScalarType dtype, c10::IntArrayRef sizes,
                     c10::IntArrayRef strides, std::int64_t offset) {
  const auto key = c10::computeDispatchKey(dtype, c10::kStrided, storage.device());
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

void adopt_result(const at::Tensor& p, const at::Tensor& r) {
  c10::TensorImpl* impl = p.unsafeGetTensorImpl();
  if (p.storage().use_count() == 1 && impl->allow_tensor_metadata_change() &&
      p.sizes() == r.sizes() && p.strides() == r.strides() && p.dtype() == r.dtype() &&
      p.device() == r.device()) {
    impl->set_storage_keep_dtype(r.storage());
    impl->set_storage_offset(r.storage_offset());
    return;
  }
  at::AutoDispatchBelowADInplaceOrView below;
  p.copy_(r);
}

void OutputSlot::release(void* ctx) {
  auto* slot = static_cast<OutputSlot*>(ctx);
  slot->in_use_.store(false, std::memory_order_release);
  c10::raw::intrusive_ptr::decref(slot);
}

at::Tensor OutputSlot::wrap(const TensorMeta& m) {
  // The storage's data pointer borrows the block; its deleter gives the slot back.
  c10::raw::intrusive_ptr::incref(this);
  in_use_.store(true, std::memory_order_relaxed);
  at::DataPtr borrowed(block_.get(), this, &OutputSlot::release, block_.device());
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes_,
                                                       std::move(borrowed),
                                                       /*allocator=*/nullptr, /*resizable=*/false);
  return tensor_on(c10::Storage(std::move(storage)), m.dtype, m.sizes, m.strides);
}

at::Tensor OutputSlot::make(c10::intrusive_ptr<OutputSlot>& slot, const TensorMeta& m) {
  const c10::Stream stream = c10::impl::VirtualGuardImpl(m.device.type()).getStream(m.device);
  if (!slot || slot->stream_ != stream) {
    // First use, or another stream: a new buffer (an old slot lives on while a tensor uses it).
    const c10::DeviceGuard device(m.device);  // the allocator serves the current device
    auto next = c10::make_intrusive<OutputSlot>();
    next->nbytes_ = at::detail::computeStorageNbytes(m.sizes, m.strides, c10::elementSize(m.dtype));
    next->block_ = c10::GetAllocator(m.device.type())->allocate(next->nbytes_);
    next->stream_ = stream;
    slot = std::move(next);
  } else if (slot->in_use_.load(std::memory_order_acquire)) {
    // The last iteration's tensor is still held (the loop kept it): as eager would.
    return at::empty_strided(m.sizes, m.strides,
                             at::TensorOptions().dtype(m.dtype).device(m.device));
  }
  return slot->wrap(m);
}

}  // namespace hotpath::detail
