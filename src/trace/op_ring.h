// The recorder's window of recent ops: a ring of OpRecords whose slots are reused, so that
// recording an op allocates nothing once the ring has grown to the loop's iteration length
// (a deque allocates a node per record of this size and frees it again on pop_front).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "trace/op_record.h"

namespace hotpath::detail {

class OpRing {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // i-th record from the oldest.
  const OpRecord& operator[](std::size_t i) const { return slots_[(head_ + i) & mask_]; }
  OpRecord& operator[](std::size_t i) { return slots_[(head_ + i) & mask_]; }

  void push_back(OpRecord&& rec) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & mask_] = std::move(rec);
    ++size_;
  }
  // The slot keeps its record (and its buffers) until a later push_back overwrites it.
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }

 private:
  void grow() {
    std::vector<OpRecord> bigger(slots_.empty() ? 64 : 2 * slots_.size());
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
    mask_ = slots_.size() - 1;
  }

  std::vector<OpRecord> slots_;  // a power of two in size
  std::size_t head_ = 0, size_ = 0, mask_ = 0;
};

}  // namespace hotpath::detail
