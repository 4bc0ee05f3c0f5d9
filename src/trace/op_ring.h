// The recorder's window of recent ops: a ring of OpRecords whose records are reused, so that
// recording an op allocates nothing once the ring has grown to the loop's iteration length
// (a deque allocates a node per record of this size and frees it again on pop_front), and
// moves no record's contents (a record is about 1 KB, most of it inline vectors).
#pragma once

#include <cstddef>
#include <cstdint>
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
    const std::size_t at = (head_ + size_) & mask_;
    std::swap(slots_[at], rec);
    filled_[at] = 1;
    ++size_;
  }
  // Appends a light record (Recorder::commit_fast) in the next slot, fields cleared and buffers
  // empty, to be filled in place. The slot's record is reused: where a full record (push_back)
  // left it, its buffers are emptied; otherwise they are empty already and only its first cache
  // lines are touched (the ring of a long step is cold: a full clear cost the fast lane a miss
  // for every buffer).
  OpRecord& push_light() {
    if (size_ == slots_.size()) grow();
    const std::size_t at = (head_ + size_) & mask_;
    std::unique_ptr<OpRecord>& slot = slots_[at];
    if (!slot) {
      slot = std::make_unique<OpRecord>();
    } else if (filled_[at] != 0) {
      slot->clear();
    } else {
      slot->clear_fields();
    }
    filled_[at] = 0;
    slot->light = true;
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
    const std::size_t n = slots_.empty() ? 64 : 2 * slots_.size();
    std::vector<std::unique_ptr<OpRecord>> bigger(n);
    std::vector<std::uint8_t> filled(n, 0);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & mask_]);
      filled[i] = filled_[(head_ + i) & mask_];
    }
    slots_.swap(bigger);
    filled_.swap(filled);
    head_ = 0;
    mask_ = slots_.size() - 1;
  }

  std::vector<std::unique_ptr<OpRecord>> slots_;  // a power of two in size
  // Per slot: its record was filled by push_back (its buffers may hold something).
  std::vector<std::uint8_t> filled_;
  std::size_t head_ = 0, size_ = 0, mask_ = 0;
};

}  // namespace hotpath::detail
