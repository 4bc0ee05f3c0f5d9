// Runs plans. While an iteration matches a hot signature whose plan is ready, every op is
// guarded against the trace (operator, metadata, data flow); ops of a fused group return
// correctly shaped outputs without computing, and the group's kernel runs at its last member. On
// the first mismatch the pending groups are materialised by running their ops eagerly and the
// rest of the iteration runs eagerly: never a wrong result. On CPU tensors (Config::fuse_cpu)
// materialisation is the executor: the same path, with ATen's kernels.
//
// Its files: executor.cpp (arming, guards, deferred ops, divergence, materialisation, the
// governor's calls), kernels.cpp (NVRTC's start, the interpreter kernel, a plan's kernels through
// compile/), launch.cpp (a group's or a batch's launch), verify.cpp (Config::verify). Plans are
// made by exec/planner.h.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "compile/kernel_cache.h"
#include "dispatch/op_call.h"
#include "exec/ahead.h"
#include "exec/output_slot.h"
#include "exec/plan.h"
#include "exec/replay_values.h"
#include "hotpath/hotpath.h"
#include "trace/recorder.h"

namespace hotpath::detail {

// The largest error (see Executor::verify) a fused output of `dtype` may have against
// eager on the same inputs: 1e-5 for fp32, 1e-2 for fp16/bf16.
double verify_tolerance(c10::ScalarType dtype);

class Executor {
 public:
  Executor(Recorder& recorder, const Config& config);
  ~Executor();

  void configure(const Config& config);
  // A signature turned hot: build its plan and compile it in the background. `remembered`: the
  // verdict of an earlier run (a known loser is not compiled; a winner keeps its groups).
  void on_hot(HotTrace&& trace, const std::optional<PlanPrior>& remembered = std::nullopt);
  // A signature repeated Config::compile_ahead times in a row, not hot yet: its plan's kernels
  // compile into the kernel cache on a worker of their own (exec/ahead.h), once per signature,
  // unless it has a plan already, kernels are not compiled, or the cache has no directory to
  // keep them in. While a hot plan of another signature compiles, it stops between NVRTC
  // programs.
  void compile_ahead(HotTrace&& trace);
  // Config::prepare_known (exec/prepared.cpp): the plans of `winners` (known winners and their
  // verdicts, newest first) are built on the plans' worker from the traces earlier runs kept, so
  // that on_hot finds one ready where the loop's trace agrees with the kept one. Skipped for a
  // signature that has a plan or one being prepared, has no readable trace, or whose kernels
  // are not all in the cache.
  static constexpr std::size_t kPrepareAtMost = 4;
  void prepare_known(const std::vector<std::pair<std::uint64_t, PlanPrior>>& winners);

  // For the governor. Whether the iteration of `signature` that started at global op `first` ran
  // the whole plan (not merely waiting for every kernel), under which configuration of groups,
  // and whether every group ran as it will from now on (false while the interpreter or eager ops
  // stand in for kernels that are still compiling).
  struct RunInfo {
    bool fused = false;
    std::int64_t epoch = 0;
    bool final_tiers = true;
    std::uint64_t left_plan = 0;  // PlanControl::Run::left_plan and plan_ops
    std::int64_t plan_ops = 0;
    bool stand_in = false;  // PlanControl::Run::stand_in, waited and replayed
    bool waited = false;
    bool replayed = false;
    bool captured = false;  // PlanControl::Run::captured
  };
  RunInfo ran(std::uint64_t signature, std::int64_t first) const;
  // Which groups run fused from the next iteration start on (`reason`, if not empty, is what
  // stats() shows); returns the new configuration's epoch.
  std::int64_t set_active(std::uint64_t signature, const std::vector<bool>& active,
                          const std::string& reason = {});
  // The signature runs eagerly from the next iteration start on (its plan is kept, not rebuilt).
  void revert(std::uint64_t signature, const std::string& reason);
  // No interpreter for the plan's groups still compiling, from the next iteration start on: they
  // run eagerly until their own kernels are in (`reason`: why, for stats()).
  void no_stand_in(std::uint64_t signature, const std::string& reason);
  // The interpreter stands in for them in every iteration from the next start on (its trial
  // ends; `reason`: the evidence, for stats()).
  void keep_stand_in(std::uint64_t signature, const std::string& reason);
  // Replay is let go at the next iteration start, for the rest of the run (PlanControl's).
  void no_replay(std::uint64_t signature, const std::string& reason);
  // A capture held back (Plan::replay_held) may go ahead.
  void release_replay(std::uint64_t signature, const std::string& reason);
  // The training thread waited `ms` for compiles: charged to every plan not ready yet.
  std::vector<std::uint64_t> pending_plans() const;
  // A group of a live plan whose own kernel failed (or is still compiling) that the interpreter
  // runs instead: only then does wait_for_compilation wait for the interpreter kernel too.
  bool waits_on_interpreter() const;
  void add_stall(const std::vector<std::uint64_t>& signatures, double ms);
  // Before the op runs. Returns true when the plan ran the op (its outputs are on the stack).
  // When it runs the recorded twin of the op instead (see in_place_twin), `rec` is marked so
  // that the iteration is recorded as the plan's (OpRecord::planned_key).
  // `inputs`: the op's input tensors, in rec.inputs order.
  bool intercept(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack,
                 OpRecord& rec, const TensorPtrs& inputs);
  // The replay fast lane (OpSink::fast_op): an op of a replayed iteration, past its first, with
  // no record. Refused (kDeclined, nothing done) unless the full path would take it the same
  // way: the op the plan has next, its arguments (in.args_key), its inputs' data flow (by the
  // iteration's own table of values: exec/replay_values.h), their metadata where that table does
  // not vouch for it (PlanOp::metas), and where the capture had them. kHandled: its outputs are
  // on the stack, `key` the record key the plan has for it. kEager: run it below the hook (one
  // the host waits on), then hash its outputs onto `key` (the plan's input key) for its record
  // key. kView: a view without position arguments: run it below the hook; its outputs' metadata
  // follows from what was checked, and `key` is the plan's record key.
  enum class Fast { kDeclined, kHandled, kEager, kView };
  Fast fast_replay(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                   torch::jit::Stack* stack, const FastInputs& in, std::uint64_t& key);
  // After an op of a replayed iteration ran (or was handed its outputs): its outputs, which the
  // guards of later ops look up (exec/replay_values.h). After any other op, nothing to do.
  // `trusted`: a view's outputs after Fast::kView (their metadata is the plan's).
  void returned(c10::ArrayRef<const at::TensorBase*> outputs, bool trusted = false);
  // Whether an iteration is being replayed, its ops offered to the fast lane (lock-free, for the
  // hook; Config::replay_fast_lane).
  bool replaying() const { return replaying_.load(std::memory_order_relaxed); }
  // A step's tail (data preparation, host syncs, logging): a plan's iteration completed and no
  // op has gone the full way since (close_tail). Its ops that read no parameter, with grad mode
  // on, take the light lane (Session::fast_op): no record but a light one, no guard, and nothing
  // here but a skipped value one of them reads, computed first (tail_op). Lock-free, for the hook.
  bool in_tail() const { return tail_.load(std::memory_order_relaxed); }
  void close_tail() {  // a store only where open: every full-path op, on every thread, asks
    if (tail_.load(std::memory_order_relaxed)) tail_.store(false, std::memory_order_relaxed);
  }
  bool tail_op(torch::jit::Stack* stack, std::size_t nargs);
  // An explicit iteration boundary (step(), Iteration scope) is about to be recorded.
  void on_boundary();
  // Materialises anything pending (and computes skipped values still held) and disarms
  // (disable, standing aside). `keep_plan` (a Pause): the iteration goes on matching its plan
  // after the pause, the groups after it fused again; the paused ops are not in it.
  void flush(bool keep_plan = false);
  // Lets go of the device memory the plans keep between iterations (the buffers of their
  // temporaries, kernels' workspaces), made again on first use: disabled, hotpath holds none of
  // the loop's memory.
  void release_buffers();
  void fill_stats(Stats& s) const;
  // Whether the plan of `signature` may run or is being built (not reverted, with groups):
  // interception can pay in its iterations.
  bool plan_live(std::uint64_t signature) const;
  // The private memory pool of a plan's CUDA graphs: its capture's in use, else its last one's
  // (bytes; 0: none), and of it the segments of small blocks.
  std::pair<std::int64_t, std::int64_t> replay_pool(std::uint64_t signature) const;
  // The plan of a signature (nullptr if none), for tests and tools.
  std::shared_ptr<const Plan> plan(std::uint64_t signature) const;

 private:
  using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Deferred {
    c10::OperatorHandle op;
    c10::DispatchKeySet keys;
    int index = 0;  // position in the plan
    int group = -1;
    c10::SmallVector<c10::IValue, 6> args;  // inline: a deferred op allocates nothing here
    std::int32_t out_alias = -1;
    // An in-place op's output is its argument (held in args). New outputs are held weakly: as
    // in eager, only the program holds them (autograd accumulates a gradient in place only into
    // a buffer nobody else holds); expired when nobody does.
    c10::SmallVector<WeakTensor, 1> made;
    // Their storages, held weakly too: a second tensor on one can outlive the output's own
    // tensor and still read it. Autograd makes one where a node saves its own op's output
    // (SavedVariable keeps the output's tensor_data, a new TensorImpl on its storage, so as not
    // to hold its own node): _fused_rms_norm's rstd, which rms_norm returns to nobody. See
    // revive.
    c10::SmallVector<c10::weak_intrusive_ptr<c10::StorageImpl>, 1> stores;
    c10::SmallVector<at::Tensor, 1> revived;  // tensors revive made on such storages
    at::Tensor output(std::size_t k = 0) const {
      if (out_alias >= 0) return args[static_cast<std::size_t>(out_alias)].toTensor();
      return k < made.size() ? at::Tensor(made[k].lock()) : at::Tensor();
    }
    // The tensor a kernel parameter names: an output, an argument or an element of a list one.
    at::Tensor tensor(const KernelArg& a) const {
      if (a.output >= 0) return output(static_cast<std::size_t>(a.output));
      const c10::IValue& v = args[static_cast<std::size_t>(a.argument)];
      return a.element >= 0 ? v.toTensorList().get(static_cast<std::size_t>(a.element))
                            : v.toTensor();
    }
  };

  // One op of the members that compute a skipped value. Tensors made by earlier ops of the cone
  // are not held (they are slots), so that holding the cone keeps no skipped value alive.
  struct ConeOp {
    c10::OperatorHandle op;
    c10::DispatchKeySet keys;
    std::vector<c10::IValue> args;                  // cone-made tensors replaced by None
    std::vector<std::pair<std::size_t, int>> made;  // (argument, slot) for cone-made tensors
    std::vector<int> out_slots;  // the slots its results fill (not in-place), per output
  };
  // A tensor a kernel did not write (PlanGroup::speculative) and how to compute it if needed.
  struct Unwritten {
    explicit Unwritten(WeakTensor t) : target(std::move(t)) {}
    WeakTensor target;
    int target_slot = -1;
    int slots = 0;
    std::vector<ConeOp> cone;
    std::vector<std::pair<at::Tensor, std::uint32_t>> versions;  // inputs and their versions
    std::string group;
    std::shared_ptr<Plan> plan;
    std::int64_t epoch = 0;  // iteration it was skipped in
  };

  // NVRTC's first compile, on the enabling thread, once per process (see the definition).
  static void start_nvrtc(const KernelCache& cache);
  // The interpreter kernel for `device`: loaded (or compiled) once on the side worker, beside
  // the plans; until then, and where it cannot be had, nullptr.
  static void request_interpreter(int device, const KernelCache& cache);
  static std::shared_ptr<CudaModule> loaded_interpreter(int device);
  // An iteration of `plan` starting at op `first` in which nothing of it can run
  // (Plan::only_waits): not armed, recorded as the plan's iteration that waited.
  void waited_unarmed(Plan& plan, std::int64_t first);
  bool try_arm();
  void disarm();
  void uncount_if_reverted(Plan& plan);
  void apply_requests(Plan& plan);
  void speculate(const at::Tensor& t, const PlanGroup& g, std::size_t arg,
                 const std::vector<Deferred*>& members);
  // Computes skipped values that are still held: all, or those of earlier iterations.
  void restore_unwritten(bool all);
  // ... all of them when an op outside any plan reads one (its arguments are on `stack`).
  void restore_read(const torch::jit::Stack& stack, std::size_t nargs);
  static void run_eager(const std::vector<const Deferred*>& members,
                        std::map<const c10::TensorImpl*, at::Tensor>& remap);
  // A group's kernel arguments for one launch.
  struct LaunchArgs {
    std::vector<void*> ptrs;          // per argument: a tensor's data, nullptr: skipped
    std::vector<float> scalars;       // per argument: a scalar's value
    std::vector<at::Tensor> tensors;  // strong references for the launch
    long long numel64 = 0;
    int numel32 = 0;
    int vector_ok = 0;
    std::int64_t blocks = 0;
    float* partial = nullptr;  // the group's workspace (KernelSpec::workspace_floats)
    unsigned* done = nullptr;
    // Config::verify: copies of what the kernel overwrites, taken before it does.
    std::map<const c10::TensorImpl*, at::Tensor> verify_inputs;
  };
  void prepare_verify(const PlanGroup& g, LaunchArgs& l);
  void verify(PlanGroup& g, const std::vector<Deferred*>& members, LaunchArgs& l);
  // Whether `rec` (its input tensors `inputs`) is the op `p` the plan has next: its key (where
  // check_key) and its data flow; in a replayed iteration, by guard_replayed.
  bool guard(const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs, bool check_key);
  // The guard's data flow check: `ref(k)` is input k's value, `defined(k)` whether it is one.
  bool guard_flow(const PlanOp& p, std::size_t inputs, c10::function_ref<bool(std::size_t)> defined,
                  c10::function_ref<ValueRef(std::size_t)> ref);
  // The same check in a replayed iteration, against its own table of values (replay_values_,
  // not the recorder's). Where it passes, replay_refs_ holds the recorder's name for each input
  // (a default ValueRef where undefined), for Replay::replay_op.
  // `written`: per input, whether the op writes it (the table checks its metadata from then on);
  // `check_meta`: compare the metadata of inputs the table does not vouch for with the plan's
  // (the fast lane's; the full path compared the whole input key already).
  bool guard_replayed(const PlanOp& p, c10::ArrayRef<const at::TensorBase*> inputs,
                      c10::ArrayRef<std::uint8_t> written, bool check_meta);
  // Why guard refused an op of the planned name (for the divergence's log line).
  std::string mismatch(const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs) const;
  // The recorded in-place op to run instead of `rec` when autograd asked for its out-of-place
  // twin only because deferred ops hold its buffer (see the definition); nullptr otherwise.
  // Where it returns the twin, `rec` is rewritten as the plan's op (name, keys, alias).
  const c10::OperatorHandle* in_place_twin(const PlanOp& p, OpRecord& rec, const TensorPtrs& inputs,
                                           const torch::jit::Stack& stack, std::size_t index);
  // The armed iteration leaves the plan. `other`: its op was not the plan's (the guard refused it),
  // as opposed to one the plan's replay or launches could not go on with. Refused before the
  // plan did any of its work (before_any_work), it is another iteration that came where the
  // plan's was expected (an epoch's last, smaller batch): not counted against replay, and the
  // plan's run of steady iterations goes on.
  void diverge(const std::string& why, bool other = false);
  // Nothing of the armed iteration was fused, deferred, captured into a graph or handed out of
  // one yet (its ops so far ran eagerly: views of the weights ahead of the batch's first product).
  bool before_any_work() const;
  void defer(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack,
             const PlanOp& p, int index);
  std::vector<Deferred*> members_of(int group);
  void forget_group(int group);  // its deferred members ran (launched or materialised)
  void run_group(int group);
  // HOTPATH_FAULTS=slow (common/faults.h): after group 0 ran fused, kSlowFaultMs more.
  void slow_fault(int group) const;
  // The groups of a batch (Plan::batches) that have deferred work, in one launch of their
  // kernel's multi entry when all have it loaded, else one by one.
  void run_batch(int batch);
  // Launches these groups' deferred work: together through their kernel's multi entry where they
  // may, else one by one in order (run_batch's way).
  void run_together(const std::vector<int>& which);
  // The arguments of g's launch on its own kernel or (own_kernel false) the interpreter; false
  // when it cannot run fused (the members are materialised instead).
  bool fill(PlanGroup& g, const std::vector<Deferred*>& members, bool own_kernel, LaunchArgs& l);
  // After a launch: counts, verification (Config::verify), the first fused iteration.
  void finish(PlanGroup& g, const std::vector<Deferred*>& members, LaunchArgs& l, bool interpreted);
  bool launch(PlanGroup& g, const std::vector<Deferred*>& members);
  void launch_own(const PlanGroup& g, LaunchArgs& l);  // on g's own kernel (loaded); throws
  void* current_stream() const;  // the armed plan's device's current CUDA stream
  void materialize(const std::vector<Deferred*>& members);
  void materialize_all();
  // Before a deferred op's results are computed: an output whose own tensor is gone while its
  // storage lives (read through another tensor on it) gets a tensor on that storage again, so
  // that the kernel or the eager run writes it.
  void revive(Deferred& d) const;
  void complete_iteration();
  // CUDA graph replay (replay_run.cpp over exec/replay.h). At an iteration start: whether the
  // armed plan's iteration replays, is captured, or runs the plan as always (mode_).
  void arm_replay(Plan& plan);
  bool replay_eligible(const Plan& plan) const;
  // Where the capture of `plan`'s iteration may cut a stretch into graphs (uncut_runs).
  static std::vector<std::uint32_t> capture_runs(const Plan& plan);
  // In a capture, before op `index`: launches the pending groups if every one is complete (a
  // batch's, before its last group); whether nothing is pending now.
  bool flush_finished(std::size_t index);
  // An op of a replayed iteration (guarded): true when its outputs are on the stack.
  bool replay_step(const PlanOp& p, std::size_t index, const c10::OperatorHandle& op,
                   c10::DispatchKeySet keys, torch::jit::Stack* stack, const OpRecord& rec,
                   const TensorPtrs& inputs);
  // After a replayed op (cursor_ past it): the iteration has launched; its last op completes it.
  void replayed_op();
  // An op of the captured iteration that the plan runs eagerly: run here, then captured.
  void capture_eager(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack, std::size_t index);
  // A group of the captured iteration, launched on its kernel: captured too.
  // Launches the captured iteration made: a group's (one), or a batch's joint launch (joint; its
  // groups, their members and their launches' arguments, in order).
  void capture_launches(const std::vector<PlanGroup*>& groups,
                        const std::vector<const std::vector<Deferred*>*>& members,
                        const std::vector<const LaunchArgs*>& args, bool joint);
  // The armed iteration leaves the plan: what a replay left pending runs eagerly; a capture stops.
  // `another` (diverge): no failure of replay's; not counted, and a capture that had begun no
  // graph is dropped without using up an attempt (the next iterations observe and capture anew).
  void leave_replay(const std::string& why, bool another = false);
  // Lets a plan's capture go (what the program holds of it is copied out first); `why`, if not
  // empty, is why replay is off for good (stats()).
  void drop_replay(Plan& plan, const std::string& why);

  // NVRTC (or the cache) and module loads for a plan that build_plan (exec/planner.h) made:
  // touches nothing but the plan (it runs on the compile worker).
  static void compile(Plan& plan, const KernelCache& cache, bool kernels);

  Recorder& recorder_;
  mutable std::mutex mu_;
  Config config_;
  KernelCache cache_;
  std::map<std::uint64_t, std::shared_ptr<Plan>> plans_;
  // Plans prepared before their signatures were seen (prepare_known), until on_hot takes them.
  struct Prepared;
  std::map<std::uint64_t, std::shared_ptr<Prepared>> prepared_;
  // Under mu_, as `trace`'s signature turns hot: its prepared plan, made the executor's and
  // ready, where it is still `known` a winner and the plan is usable and its kept trace agrees
  // with `trace`; else nullptr. Either way the prepared entry is gone.
  std::shared_ptr<Plan> take_prepared(const HotTrace& trace, bool known);
  std::shared_ptr<std::atomic<int>> ready_plans_ = std::make_shared<std::atomic<int>>(0);
  // Compiles ahead of hot (compile_ahead), shared with the workers' jobs.
  struct AheadBook {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::uint64_t, AheadResult> results;  // per signature requested, final once done
    std::set<std::uint64_t> done;
    // Ahead jobs running: a plan of the same signature waits for its own before it compiles.
    std::set<std::uint64_t> running;
    // Hot signatures whose plan job has not finished compiling: an ahead job of another
    // signature stops for them.
    std::multiset<std::uint64_t> plans_waiting;
    // Every signature with a plan job: its ahead job, not started yet, is skipped.
    std::set<std::uint64_t> planned;
    bool other_waiting(std::uint64_t signature);
    // Blocks while the ahead job of `signature` runs; the milliseconds waited.
    double wait_for(std::uint64_t signature);
  };
  std::shared_ptr<AheadBook> ahead_ = std::make_shared<AheadBook>();

  std::shared_ptr<Plan> armed_;
  std::size_t cursor_ = 0;
  std::int64_t iter_start_ = 0;
  std::int64_t iteration_ = 0;         // iteration number (1-based) of the armed iteration
  OutsideOrdinals outside_;            // guard: outside tensors' ordinals
  ReplayValues replay_values_;         // guard of a replayed iteration: its values by identity
  std::vector<ValueRef> replay_refs_;  // ... the names its guard gave an op's inputs
  // The op of the replayed iteration whose outputs returned() notes next (-1: none); read
  // without the lock first, written under it.
  std::atomic<std::int64_t> returning_{-1};
  std::vector<Deferred> deferred_;
  std::vector<Unwritten> unwritten_;
  std::int64_t divergence_logs_ = 0;
  enum class Mode { kPlan, kObserve, kCapture, kReplay };
  Mode mode_ = Mode::kPlan;  // of the armed iteration
  void set_mode(Mode m) {
    mode_ = m;
    replaying_.store(m == Mode::kReplay && armed_ != nullptr && config_.replay_fast_lane,
                     std::memory_order_relaxed);
  }
  std::atomic<bool> replaying_{false};
  std::atomic<bool> tail_{false};  // in_tail()
  bool launched_ = false;          // the armed iteration has launched a kernel
  bool waited_ = false;      // ... a group ran eagerly, waiting for its kernel (no interpreter)
  bool stood_in_ = false;    // ... the interpreter ran a group whose kernel is still compiling
  bool tiers_final_ = true;  // ... no group stood in for a kernel still compiling
  struct Completed {
    std::uint64_t signature = 0;
    std::int64_t first = -1;
    std::int64_t epoch = 0;
    bool fused = false;  // launched, or had nothing to wait for (every group off)
    bool final_tiers = true;
    bool diverged = false;  // it left the plan part-way
    std::int64_t ops = 0;   // the plan's
    bool stood_in = false;
    bool waited = false;
    bool replayed = false;  // ran to its end as CUDA graphs
    bool captured = false;  // captured as CUDA graphs (exec/replay.h)
  };
  // The last iterations that ran their plan to the end or left it part-way (a ring).
  Completed completed_[8];
  std::size_t completed_next_ = 0;
};

}  // namespace hotpath::detail
