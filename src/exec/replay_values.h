// Which tensor is which in a replayed iteration (Config::replay, exec/replay.h): the guards of its
// ops ask this table, not the recorder, whose map of values a replayed op no longer updates (it
// cost the fast lane a locked hash-map update for every output and a lookup for every input).
//
// Each op's outputs are noted as it returns them. An input the plan expects from output o of op j
// of the iteration must be that very tensor; one it expects from outside the iteration must be no
// output of the iteration so far, and the same tensor wherever the plan has the same outside value
// (they are numbered in the order the iteration first reads them, as the recorder numbers them).
// These are the recorder's answers for the same ops: a tensor's latest producer is the op that
// returned it last, and an in-place op returns the tensor it wrote.
//
// Which values' metadata is known without looking (`trusted`): a tensor the replay handed out
// as a capture's output, or a view's output whose metadata follows from checked inputs and
// arguments (Executor::fast_replay), until an op writes it (a metadata change, t_ or set_data,
// is a write of the argument). Any other value's metadata is checked against the plan's.
//
// The table holds weak references: a tensor that dies keeps its TensorImpl's memory until the
// table lets go of it, so no other tensor can come at its address and pass for it.
#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/flat_hash_map.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dispatch/op_record.h"

namespace hotpath::detail {

class ReplayValues {
 public:
  using Kept = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  // A new iteration, its first op the recorder's op `iter_start`. Returns the last iteration's
  // references (see below), for the caller to let go of where it likes (Replay::let_go: on the
  // launcher's thread); the table no longer names those tensors.
  std::vector<Kept> begin(std::int64_t iter_start);
  // Input `t` where the plan expects `want` (a producer relative to the iteration's start, or
  // -(k+1): the iteration's k-th value from outside): whether it is that value. `got` is then the
  // recorder's name for it (an absolute producer, or one before the iteration for outside values).
  // `trusted`, if given: whether t's metadata is known to be the plan's (see above).
  bool matches(ValueRef want, const at::TensorBase& t, ValueRef& got, bool* trusted = nullptr);
  // What matches() would answer, changing nothing (for a divergence's log line).
  bool would_match(ValueRef want, const at::TensorBase& t) const;
  // Op `index` of the iteration returned these tensors (the tensors among its returns, in order;
  // an undefined one keeps its place); `trusted`: their metadata is the plan's.
  void returned(std::size_t index, c10::ArrayRef<const at::TensorBase*> outputs,
                bool trusted = false);
  // An op writes `t`: its metadata is checked from now on.
  void written(const at::TensorBase& t);

 private:
  // What the table knows of one tensor: the op that returned it last (relative to the
  // iteration's start; `returned` false: none has), and its number as a value from outside, or
  // -1. One entry a tensor, so that a lookup answers both.
  struct Entry {
    ValueRef latest;
    bool returned = false;
    bool trusted = false;
    std::int64_t outside = -1;
  };

  std::int64_t iter_start_ = 0;
  ska::flat_hash_map<const c10::TensorImpl*, Entry> values_;
  std::int64_t outside_count_ = 0;  // values from outside numbered so far
  std::vector<Kept> keep_;          // every tensor in the table, until the next iteration
};

}  // namespace hotpath::detail
