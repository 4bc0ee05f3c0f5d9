// One op the hook intercepted, as the thread's OpSink gets it: the hook's single call per op.
// The hook has filled in the record's op, arguments and input metadata; the sink decides what
// happens (record it, let a plan run it, or run it eagerly) and completes the record.
#pragma once

#include <ATen/core/TensorBase.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstddef>
#include <memory>

#include "dispatch/host_laps.h"
#include "dispatch/op_record.h"

namespace hotpath::detail {

using TensorPtrs = c10::SmallVector<const at::TensorBase*, 8>;

struct OpInfo;  // the hook's per-operator facts (dispatch_hook.cpp)

// Calls f(tensor, i) for each tensor among an op's `nret` returns on `stack`, in order: `i` the
// return it is, or -1 for a tensor in a returned list (a list's in order). How an op's outputs
// are numbered, by the recorder and the replay's table of values alike.
template <class F>
void for_each_returned(const torch::jit::Stack& stack, std::size_t nret, F&& f) {
  const auto rets = torch::jit::last(stack, nret);
  for (std::size_t i = 0; i < nret; ++i) {
    const c10::IValue& r = rets[i];
    if (r.isTensor()) {
      f(r.toTensor(), static_cast<std::ptrdiff_t>(i));
    } else if (r.isList()) {
      for (const c10::IValue& e : r.toListRef())
        if (e.isTensor()) f(e.toTensor(), std::ptrdiff_t{-1});
    }
  }
}

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

// An op of a replayed iteration as the hook sees it on the fast lane (OpSink::fast_op): no
// record, only what guarding it against the capture needs. `args_key` is OpRecord::args_key of
// the same op (its arguments, each tensor by its place only); the tensors are in the order a
// record would list them, and their metadata is left to the guard (input_meta_key).
struct FastInputs {
  std::uint64_t args_key = 0;
  std::uint64_t name_key = 0;
  TensorPtrs tensors;
  c10::SmallVector<std::uint8_t, 8> written;  // per tensor: the schema marks it mutated
  bool grad_enabled = true;
  bool reads_param = false;
  bool writes_param = false;
  // Some argument is a position (a slice's start): a view's output metadata does not follow from
  // the arguments' key and its inputs' metadata alone.
  bool positional = false;
  // The inputs were listed and their arguments hashed (a replayed op is guarded by them); false:
  // a step's tail, where only the parameter flags were found (args_key 0, tensors empty).
  bool hashed = true;
  void clear() {
    hashed = true;
    args_key = name_key = 0;
    tensors.clear();
    written.clear();
    grad_enabled = true;
    reads_param = writes_param = false;
    positional = false;
  }
};

// A tensor input's own key: its metadata as OpRecord::input_key hashes it (TensorInput::meta_key).
std::uint64_t input_meta_key(const at::TensorBase& t);

// After an op of the fast lane ran: its output tensors, in the order OpCall::finish lists them;
// with `hash`, returns the key a record of it would get (OpRecord::key) from its input_key.
std::uint64_t fast_outputs(std::uint64_t input_key, const c10::OperatorHandle& op,
                           const torch::jit::Stack& stack, TensorPtrs& outputs, bool hash);

// Where an attached thread's ops go (the session). Called on the owner thread and on autograd
// threads working for it, with the hook's key excluded.
class OpSink {
 public:
  virtual ~OpSink() = default;
  virtual void on_op(OpCall& call) = 0;
  // While a replayed iteration is under way: the hook offers each op here first, with no record
  // built. True: the op was handled whole (its outputs are on the stack). False: nothing was done;
  // the op goes to on_op as any other. `owner`: on the thread that enabled hotpath.
  virtual bool fast_lane_open() const { return false; }
  // Whether the fast lane guards ops against a capture (a replayed iteration: inputs hashed and
  // listed) rather than taking a step's tail (parameter flags only; FastInputs::hashed).
  virtual bool fast_lane_guards() const { return false; }
  virtual bool fast_op(const c10::OperatorHandle& op, c10::DispatchKeySet below,
                       torch::jit::Stack* stack, const FastInputs& in, bool owner) {
    (void)op, (void)below, (void)stack, (void)in, (void)owner;
    return false;
  }

  // Config::host_profile: the hook times each op's parts (host_laps.h) and adds them up, over
  // every thread working for the owner.
  struct HostCounters {
    std::int64_t ops = 0;
    double ns[kHostParts] = {};
  };
  void profile_host(bool on) { profile_.store(on, std::memory_order_relaxed); }
  bool profiling_host() const { return profile_.load(std::memory_order_relaxed); }
  void add_host(const HostLaps& laps) {
    host_ops_.fetch_add(1, std::memory_order_relaxed);
    // An op has time in a few of the parts: an atomic add for each of those only (each costs
    // the timed loop what a clock read does).
    for (int p = 0; p < kHostParts; ++p)
      if (laps.ticks[p] != 0) host_ticks_[p].fetch_add(laps.ticks[p], std::memory_order_relaxed);
  }
  HostCounters host_counters() const {
    HostCounters c;
    c.ops = host_ops_.load(std::memory_order_relaxed);
    for (int p = 0; p < kHostParts; ++p)
      c.ns[p] = host_ticks_to_ns(host_ticks_[p].load(std::memory_order_relaxed));
    return c;
  }

 private:
  std::atomic<bool> profile_{false};
  std::atomic<std::int64_t> host_ops_{0};
  std::atomic<std::int64_t> host_ticks_[kHostParts] = {};
};

}  // namespace hotpath::detail
