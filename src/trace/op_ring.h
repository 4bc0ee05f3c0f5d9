// The recorder's window of recent ops: a ring of OpRecords whose records are reused, so that
// recording an op allocates nothing once the ring has grown to the loop's iteration length
// (a deque allocates a node per record of this size and frees it again on pop_front), and
// moves no record's contents (a record is about 1 KB, most of it inline vectors).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "dispatch/op_record.h"

namespace hotpath::detail {

class OpRing {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // i-th record from the oldest.
  const OpRecord& operator[](std::size_t i) const { return *slots_[(head_ + i) & mask_]; }
  OpRecord& operator[](std::size_t i) { return *slots_[(head_ + i) & mask_]; }

  // Takes `rec` and hands back in it a record that left the ring earlier (its buffers to fill
  // again for another op), or nullptr: the ring moves pointers, never a record's contents.
  void push_back(std::unique_ptr<OpRecord>& rec) {
    if (size_ == slots_.size()) grow();
    std::swap(slots_[(head_ + size_) & mask_], rec);
    ++size_;
  }
  // Appends the record the next slot holds (made if it has none), to be filled in place: for
  // records the recorder writes itself (Recorder::commit_fast).
  OpRecord& push_blank() {
    if (size_ == slots_.size()) grow();
    std::unique_ptr<OpRecord>& slot = slots_[(head_ + size_) & mask_];
    if (!slot) slot = std::make_unique<OpRecord>();
    ++size_;
    return *slot;
  }
  // The slot keeps its record (and its buffers) until a later push_back takes it out.
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }

 private:
  void grow() {
    std::vector<std::unique_ptr<OpRecord>> bigger(slots_.empty() ? 64 : 2 * slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i)
      bigger[i] = std::move(slots_[(head_ + i) & mask_]);
    slots_.swap(bigger);
    head_ = 0;
    mask_ = slots_.size() - 1;
  }

  std::vector<std::unique_ptr<OpRecord>> slots_;  // a power of two in size
  std::size_t head_ = 0, size_ = 0, mask_ = 0;
};

}  // namespace hotpath::detail
