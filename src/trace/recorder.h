// Per-thread iteration recorder: resolves data flow between ops, cuts the op stream into
// iterations (explicit markers, or the period detector), hashes each iteration into a signature
// and counts signatures until they turn hot. The dispatcher hook of the owning thread and of the
// autograd threads working for it feed one Recorder; a mutex orders them.
#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/flat_hash_map.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hotpath/hotpath.h"
#include "trace/hot_trace.h"
#include "trace/op_ring.h"
#include "trace/period_detector.h"
#include "trace/step_detector.h"

namespace hotpath::detail {

// Where the op stream stands, for the executor that decides whether to run a plan.
struct StreamPosition {
  std::int64_t next_op = 0;          // global index of the next op
  std::int64_t expected_start = -1;  // where the next iteration is expected to start, if known
  std::int64_t iterations = 0;       // completed iterations
  std::uint64_t last_signature = 0;
  // The signature the next iteration is expected to have: the one that followed the last
  // iteration's signature the last time it occurred (a loop that alternates two paths), else
  // the last one.
  std::uint64_t predicted_signature = 0;
};

// An iteration the recorder closed, for the governor.
struct IterationEvent {
  std::uint64_t signature = 0;
  // Global op indices: the iteration is [first, end); its signature and plan cover [first,
  // core_end), the ops after it (a step's tail: host syncs, logging, the next batch's data
  // preparation) run eagerly.
  std::int64_t first = 0, end = 0, core_end = 0;
  std::int64_t count = 0;  // this signature's iterations so far, this one included
  bool hot = false;
  // The op at which it was cut: its end in a marked loop; in an auto-detected one, where the
  // detector found it, which for the first iterations is after several more have run (they are
  // cut together, once the step or period is known).
  std::int64_t closed_at = 0;
};

class Recorder {
 public:
  using HotListener = std::function<void(HotTrace&&)>;
  using IterationListener = std::function<void(const IterationEvent&)>;
  using InstantHot = std::function<bool(std::uint64_t)>;
  explicit Recorder(const Config& config);

  // Called (outside the recorder's lock) with the trace of an iteration whose signature just
  // turned hot.
  void set_hot_listener(HotListener listener);
  // Called (outside the lock) for every iteration closed.
  void set_iteration_listener(IterationListener listener);
  // Asked when a signature is first seen: true makes it hot at once (a known winner).
  void set_instant_hot(InstantHot predicate);
  // Called (outside the lock, before the iteration listener) with the trace of an iteration
  // whose signature has just repeated Config::compile_ahead times in a row, once per signature,
  // before it is hot (HotTrace::ahead set): its plan's kernels can compile while the loop runs on
  // towards the threshold. In a row: a signature seen once an epoch (its last, smaller batch, an
  // evaluation) does not get there.
  void set_ahead_listener(HotListener listener);

  // Lock-free, for the hook: the global index of the next op, and where an iteration is
  // expected to start in an auto-detected loop (-1: not known).
  std::int64_t next_index() const { return next_atomic_.load(std::memory_order_relaxed); }
  std::int64_t boundary_due() const { return due_atomic_.load(std::memory_order_relaxed); }
  // Where the next iteration is expected to start in either mode (-1: not known), lock-free:
  // a plan can only be armed when next_index() equals it.
  std::int64_t expected_start() const { return start_atomic_.load(std::memory_order_relaxed); }

  void configure(const Config& config);

  // Before the op runs: fills in where each tensor input came from (`tensors[i]` is the tensor
  // of rec.inputs[i]) and, in an auto-detected training loop, whether an iteration starts with
  // this op (then the previous one is closed first, and expected_start() is this op; the
  // listeners hear of it when the op is committed).
  void resolve_inputs(OpRecord& rec, c10::ArrayRef<const at::TensorBase*> tensors);
  // After the op ran: registers its outputs and appends it to the current iteration. `rec`
  // comes back holding a record to fill for a later op (see OpRing::push_back), or nullptr.
  void commit(std::unique_ptr<OpRecord>& rec, c10::ArrayRef<const at::TensorBase*> outputs);

  // The replay fast lane (OpSink::fast_op), where no record is built: after an op ran, what the
  // step detector reads of it and the key its plan has for it, kept as a light record
  // (OpRecord::light). Its outputs are not mapped: a replayed iteration's guards look values up
  // in the replay's own table (exec/replay_values.h), and a later op that reads one through
  // resolve_inputs finds it as a value from outside (an iteration left part-way finishes
  // eagerly; a signature is never counted from light records).
  // `tail`: an op of a step's tail, after a plan's iteration completed (Executor::in_tail), not
  // of a replayed iteration: nothing reads its key (its walk hashed only the name;
  // FastInputs::hashed). An iteration whose core (its ops up to its last one with grad mode off)
  // turns out to hold one is dropped, not hashed.
  struct FastOp {
    std::string_view name, overload;
    std::uint64_t key = 0, name_key = 0;
    bool grad_enabled = true, reads_param = false, writes_param = false;
    bool tail = false;
  };
  void commit_fast(const FastOp& op);
  // Whether iterations are found by the step detector, so that each has a tail (ops after its
  // core that no plan covers): what lets a step's tail take the light lane.
  bool cuts_tails() const;
  // The executor's word on the replayed iteration of `signature` that started at global op
  // `first`, its plan `ops` long: it ran to its end, or left the plan part-way (`left`). An
  // iteration with light records is counted by it, not hashed.
  void note_replayed(std::int64_t first, std::int64_t ops, std::uint64_t signature, bool left);

  void mark_step();
  void begin_scope();
  void end_scope();

  Stats snapshot() const;
  StreamPosition position() const;

  // For deciding whether the loop has a period at all (policy/stand_aside.h).
  struct Progress {
    bool training = false;        // cut at forward passes
    std::int64_t anchors = 0;     // forward passes seen
    std::int64_t iterations = 0;  // iterations cut
    std::int64_t ops_without_iteration = 0;
  };
  Progress progress() const;
  // Ops were not seen for a while (the session stood aside): the iteration in progress is
  // incomplete and is dropped, as is the one the first boundary after the gap closes; the
  // detectors start again.
  void gap();
  // A plain-eager block ended (dispatch/dispatch_hook.h): the iteration in progress is
  // incomplete and dropped (as gap), but the step detector keeps its lock: the block ended as
  // an iteration started, whose first op was not seen.
  void resume_after_block();
  // Whether plain-eager blocks can count this loop's iterations: a training loop found at its
  // forward passes, or a loop marked with step().
  bool plain_blocks_possible() const;
  bool marked() const;

 private:
  using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  // A weak reference keeps the TensorImpl's address from being reused while it is mapped.
  struct Live {
    WeakTensor tensor;
    ValueRef ref;
  };
  void commit_locked(std::unique_ptr<OpRecord>& rec, c10::ArrayRef<const at::TensorBase*> outputs);
  void register_outputs(std::int64_t index, c10::ArrayRef<const at::TensorBase*> outputs);
  // After op `index` joined the ring: boundaries found after it (marked loops, period detector).
  void after_op(std::int64_t index, std::uint64_t key, std::uint64_t name_key);
  ValueRef ref_of(const at::TensorBase& t);  // a tensor's value, mapped if new
  // close_iteration's part for an iteration with light records.
  void close_replayed(std::int64_t end, std::int64_t core_end);
  HotTrace make_trace(std::uint64_t signature, std::int64_t first, std::int64_t end) const;
  void close_iteration(std::int64_t end);  // [seg_start_, end) is one iteration
  // The step detector, before an op runs.
  void detect_steps(std::uint64_t name_key, bool grad_enabled, bool reads_param, bool writes_param);
  void resolve_locked(OpRecord& rec, c10::ArrayRef<const at::TensorBase*> tensors);
  void drop_pending(std::int64_t upto);         // ops [seg_start_, upto) belong to no iteration
  void start_iteration_at(std::int64_t first);  // releases the records before `first`
  void use_explicit_boundaries();
  void count(std::uint64_t signature, std::int64_t first, std::int64_t core_end, std::int64_t end);
  void track(const at::TensorBase& t, ValueRef ref);  // maps a tensor not mapped yet
  void sweep();           // unmaps a few tensors that died, each op: no pause, no burst of frees
  void notify_hot();      // hands collected hot traces and closed iterations to the listeners;
                          // called without the lock
  void publish_locked();  // refreshes the lock-free positions
  std::int64_t expected_start_locked() const;

  mutable std::mutex mu_;
  Config config_;
  BoundaryMode mode_ = BoundaryMode::None;
  int scope_depth_ = 0;
  bool uses_scopes_ = false;

  // Looked up for every tensor of every op: an open-addressing map.
  ska::flat_hash_map<const c10::TensorImpl*, Live> values_;
  // Each key of values_ once, in the order sweep() visits them (from sweep_head_).
  std::vector<const c10::TensorImpl*> sweep_;
  std::size_t sweep_head_ = 0;
  std::int64_t outside_ids_ = 0;

  OpRing ops_;  // ops_[0] has global index base_
  std::int64_t base_ = 0;
  std::int64_t next_ = 0;       // global index of the next op
  std::int64_t seg_start_ = 0;  // first op of the current iteration
  // Auto mode: training loops (an op with grad mode on read a tensor requiring grad) are cut by
  // the step detector at forward passes; loops that never train by the period detector.
  std::unique_ptr<PeriodDetector> detector_;
  std::unique_ptr<StepDetector> steps_;
  bool training_ = false;
  std::int64_t start_here_ = -1;  // the op the step detector found an iteration to start with
  int passes_per_step_ = 0;       // of the last step found (kept while standing aside)
  std::int64_t anchors_ = 0;      // forward passes seen, in all
  std::vector<std::int64_t> boundaries_;                        // scratch
  std::unordered_map<std::uint64_t, std::uint64_t> successor_;  // signature -> the next one

  std::vector<SignatureStats> signatures_;
  std::unordered_map<std::uint64_t, std::size_t> index_;
  std::int64_t iterations_ = 0;
  std::int64_t ops_unassigned_ = 0;
  std::int64_t ops_tail_lane_ = 0;
  std::uint64_t last_signature_ = 0;
  std::int64_t in_a_row_ = 0;  // iterations of last_signature_ in a row, the last one included
  bool warned_unbounded_ = false;
  bool after_gap_ = false;  // the next iteration closed is incomplete: dropped
  // The period detector counts iterations only after this many ops without training.
  static constexpr std::int64_t kTrainingGrace = 16384;
  std::int64_t looking_since_ = 0;
  std::int64_t last_closed_ = 0;  // where the last iteration closed (or was dropped)

  // The last op kept as a light record (-1: none), and the executor's word on the last replayed
  // iteration (note_replayed).
  std::int64_t last_light_ = -1;
  std::int64_t tail_first_ = -1;  // the first light record of a step's tail (FastOp::tail)
  struct Replayed {
    std::int64_t first = -1, ops = 0;
    std::uint64_t signature = 0;
    bool left = false;
  } replayed_;

  HotListener hot_listener_;
  HotListener ahead_listener_;
  std::unordered_set<std::uint64_t> ahead_sent_;  // signatures whose ahead trace was made
  IterationListener iteration_listener_;
  InstantHot instant_hot_;
  std::vector<HotTrace> hot_traces_;    // collected under the lock, delivered after it
  std::vector<IterationEvent> closed_;  // likewise
  std::atomic<std::int64_t> next_atomic_{0};
  std::atomic<std::int64_t> due_atomic_{-1};
  std::atomic<std::int64_t> start_atomic_{-1};
};

}  // namespace hotpath::detail
