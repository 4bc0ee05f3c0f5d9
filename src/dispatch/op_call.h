// One op the hook intercepted, as the thread's OpSink gets it: the hook's single call per op.
// The hook has filled in the record's op, arguments and input metadata; the sink decides what
// happens (record it, let a plan run it, or run it eagerly) and completes the record.
#pragma once

#include <ATen/core/TensorBase.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <memory>

#include "dispatch/host_laps.h"
#include "dispatch/op_record.h"

namespace hotpath::detail {

using TensorPtrs = c10::SmallVector<const at::TensorBase*, 8>;

struct OpInfo;  // the hook's per-operator facts (dispatch_hook.cpp)

class OpCall {
 public:
  OpCall(const c10::OperatorHandle& op, c10::DispatchKeySet below, torch::jit::Stack* stack,
         const OpInfo& info, std::unique_ptr<OpRecord>& record, TensorPtrs& inputs)
      : op(op), below(below), stack(stack), info_(info), record_(record), inputs_(inputs) {}

  const c10::OperatorHandle& op;
  const c10::DispatchKeySet below;  // the keys under the hook's, to run the op eagerly with
  torch::jit::Stack* const stack;

  // On the thread that enabled hotpath (not an autograd thread working for it).
  bool owner = false;
  // The hook is back in the owner thread's dispatch since the last op: after a plain-eager block
  // (start_plain_block) or after standing aside (stand_aside_current_thread).
  bool back_from_plain = false;
  bool back_from_aside = false;

  OpRecord& record() { return *record_; }
  // The record itself, for a recorder that keeps it (and may hand another back for reuse).
  std::unique_ptr<OpRecord>& owned_record() { return record_; }
  // The op's input tensors, in record().inputs order.
  const TensorPtrs& inputs() const { return inputs_; }
  // Runs the op below the hook: its outputs are on the stack.
  void run_eager() {
    host_lap(kOtherPart);
    op.redispatchBoxed(below, stack);
    host_lap(kBelowPart);
  }
  // After the op ran (eagerly or by a plan, its outputs on the stack): adds the outputs'
  // metadata to the record and completes its key; returns the output tensors.
  const TensorPtrs& finish();

 private:
  const OpInfo& info_;
  std::unique_ptr<OpRecord>& record_;
  TensorPtrs& inputs_;
  TensorPtrs outputs_;
};

// Where an attached thread's ops go (the session). Called on the owner thread and on autograd
// threads working for it, with the hook's key excluded.
class OpSink {
 public:
  virtual ~OpSink() = default;
  virtual void on_op(OpCall& call) = 0;

  // Config::host_profile: the hook times each op's parts (host_laps.h) and adds them up, over
  // every thread working for the owner.
  struct HostCounters {
    std::int64_t ops = 0;
    std::int64_t ns[kHostParts] = {};
  };
  void profile_host(bool on) { profile_.store(on, std::memory_order_relaxed); }
  bool profiling_host() const { return profile_.load(std::memory_order_relaxed); }
  void add_host(const HostLaps& laps) {
    host_ops_.fetch_add(1, std::memory_order_relaxed);
    for (int p = 0; p < kHostParts; ++p)
      host_ns_[p].fetch_add(laps.ns[p], std::memory_order_relaxed);
  }
  HostCounters host_counters() const {
    HostCounters c;
    c.ops = host_ops_.load(std::memory_order_relaxed);
    for (int p = 0; p < kHostParts; ++p) c.ns[p] = host_ns_[p].load(std::memory_order_relaxed);
    return c;
  }

 private:
  std::atomic<bool> profile_{false};
  std::atomic<std::int64_t> host_ops_{0};
  std::atomic<std::int64_t> host_ns_[kHostParts] = {};
};

}  // namespace hotpath::detail
