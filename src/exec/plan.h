// The plan for a hot signature: per op of the iteration, its guard and what to do with it (run
// eagerly, defer into a fused group, or launch the group), and per group its compiled kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel.h"
#include "dispatch/op_record.h"
#include "driver/cuda_driver.h"
#include "exec/output_slot.h"
#include "exec/plan_prior.h"
#include "fusion/partition.h"
#include "ir/graph.h"

namespace hotpath::detail {

class Replay;  // exec/replay.h

// The buffers a plan keeps for its temporaries, at most (PlanOp::slotted): enough for the small
// ones, whose allocation through the dispatcher costs more host time than their kernels; large
// ones come from the caching allocator like eager's (the LM at T1024 held 3.7x eager's peak when
// every temporary had a buffer of its own).
constexpr std::int64_t kSlotBudgetBytes = std::int64_t{256} << 20;

struct PlanOp {
  std::uint64_t input_key = 0;            // operator + input metadata + non-scalar arguments
  std::uint64_t key = 0;                  // ... + output metadata (OpRecord::key)
  std::string_view op_name, op_overload;  // the dispatcher's strings (OpRecord::name)
  bool grad_enabled = true;               // recorded with grad mode on (a forward op)
  std::uint64_t args_key = 0;             // OpRecord::args_key: the input key less the metadata
  std::vector<ValueRef> refs;        // per recorded input: relative producer, or -(k+1) outside
  std::vector<std::uint64_t> metas;  // per recorded input: TensorInput::meta_key
  int group = -1;                    // fusion group, or -1 (eager)
  bool launch = false;               // the group's last member: its kernel runs here
  int batch = -1;                    // the last op of a batch's groups: the batch launches here
  std::vector<TensorMeta> outs;      // the outputs a deferred op must return (native_layer_norm: 3)
  std::int32_t out_alias = -1;       // ... or the argument it returns (in-place; one output)
  // Per output: the trace saw it die within the iteration (a temporary). A GPU group's deferred
  // op returns a temporary on its slot's buffer, the same each iteration (exec/output_slot.h),
  // where `slotted`: the plan's smallest temporaries, up to kSlotBudgetBytes in all (a slot's
  // buffer is held from one iteration to the next, where the allocator would reuse the memory).
  std::vector<bool> temporary, slotted;
  mutable std::vector<c10::intrusive_ptr<OutputSlot>> slots;  // under the executor's lock
};

// Whether the interpreter stands in for a plan's groups while their kernels compile
// (Plan::requested_stand_in): on trial (every fourth iteration eager), on, or off.
enum class StandIn { kTrial, kOn, kOff };
// A trial's first iterations all run the stand-in: they pay for the switch from eager, and the
// governor leaves as many out of its judgement (Governor::kSwitchIterations); a plan whose
// kernels come from the cache has them loaded by then and is never tried.
constexpr std::int64_t kStandInOnTurns = 4;
// After them, of every kStandInCycle iterations of the trial the last runs the groups eagerly:
// the eager side the stand-in is judged against. (Every other iteration, the trial cost the
// iterations it ran eagerly where the interpreter was the faster, as it mostly is: on an H200
// the MLP's step took 0.49 ms on it against 0.6-0.9 ms in the eager turns, and a compile of
// 25-30 ms ended before the noisy eager side had shown anything.)
constexpr std::int64_t kStandInCycle = 4;

// A group's own kernel, as the compile worker publishes it (PlanGroup::state).
enum KernelState : int { kCompiling = 0, kLoaded = 1, kFailed = 2 };

struct PlanGroup {
  std::string name;
  std::vector<int> ops;  // trace indices of the members
  bool gpu = false;
  KernelSpec spec;  // gpu only
  std::string cache_key;
  // Per kernel argument: a tensor the group makes that died inside the recorded iteration and that
  // no op outside the group reads; the kernel skips it even when a C++ temporary still holds it.
  // cone[i]: the members (positions) that compute it, to restore it exactly if it is needed.
  std::vector<bool> speculative;
  std::vector<std::vector<int>> cone;
  // The group's own kernel. The compile worker fills these, then publishes `state` (release);
  // nobody reads them before they acquire a state other than kCompiling. Until then the
  // interpreter runs the group (KernelSpec::program), or its ops run eagerly if it cannot.
  std::shared_ptr<std::atomic<int>> state = std::make_shared<std::atomic<int>>(kCompiling);
  double compile_ms = 0;
  bool from_cache = false;
  std::string error;                   // why the kernel is not used (compile or load failure)
  std::shared_ptr<CudaModule> module;  // shared by groups with the same kernel
  // Partial sums and counters of a kernel that sums across blocks (KernelSpec::workspace_floats).
  at::Tensor workspace;
  // Training thread only.
  bool eager_only = false;  // a launch failed: its ops run eagerly from now on
  std::int64_t launches = 0;
  std::int64_t interpreted = 0;  // of the launches, those of the interpreter
  std::int64_t eager_runs = 0;   // materialised instead (CPU, hazards, divergence)
  // Verification (Config::verify): fused outputs against eager on the same inputs.
  std::int64_t checks = 0;
  double max_rel_error = 0;
  std::int64_t verify_failures = 0;  // launches with an output beyond verify_tolerance
  std::string first_failure;         // the log line of the first one
  // The governor's choice (applied at an iteration start); inactive groups run eagerly.
  bool active = true;
  bool active_default = true;  // from a remembered verdict: a known loser group starts inactive
};

struct Plan {
  std::uint64_t signature = 0;
  std::string hex;
  std::vector<PlanOp> ops;
  // The operator names of the iteration's forward passes' first ops, in order (a GAN's step has
  // three): how a plain-eager block counts iterations it cannot see (Session::start_plain_block).
  std::vector<std::string> pass_starts;
  std::vector<PlanGroup> groups;
  // Groups with one kernel that launch together, at the last op of the last one (see
  // plan_batches in exec/planner.cpp).
  std::vector<std::vector<int>> batches;
  int device_index = -1;
  int arch = 0;
  int sm_count = 0;
  // Set by the worker once the plan is built: it may run from the next iteration start, its
  // groups on the interpreter until their kernels are loaded.
  std::atomic<bool> ready{false};
  // Set before ready if the interpreter was loaded by then, else at an iteration start that arms
  // the plan once it is (training thread, executor's lock); nullptr: not (yet) available.
  std::shared_ptr<CudaModule> interpreter;
  // Set by the worker once every group's kernel is loaded or has failed; then compile_ms and
  // from_cache may be read.
  std::atomic<bool> compiled{false};
  double compile_ms = 0;  // worker wall time for all groups
  int from_cache = 0;
  // Training thread, under the executor's lock.
  std::int64_t first_fused_iteration = -1;
  std::int64_t fused_iterations = 0;
  std::int64_t divergences = 0;
  std::string last_divergence;  // FusionStats::last_divergence
  std::int64_t restored = 0;    // skipped values computed after all because someone needed them
  double stall_ms = 0;          // the training thread waited: module loads, wait_for_compilation
  // The governor's decisions. Requests take effect at the next iteration start.
  std::vector<bool> requested_active;
  std::int64_t requested_epoch = 0;
  std::int64_t epoch = 0;  // configuration of the groups' activity in force
  bool reverted = false;
  // Whether the interpreter stands in for kernels still compiling in the armed iteration (else
  // their groups run eagerly meanwhile). On trial at first: after kStandInOnTurns iterations on it
  // (kernels from the cache are loaded by then), every fourth iteration runs those groups eagerly,
  // so that the governor judges the stand-in against eager timed beside it; it turns the
  // stand-in off where it is slower on that evidence, and keeps it on where it is not. Why, if
  // off.
  bool stand_in = true;
  StandIn requested_stand_in = StandIn::kTrial;  // under the executor's lock; at iteration starts
  std::int64_t stand_in_turns = 0;               // iterations armed while on trial
  std::string stand_in_off, stand_in_kept;       // FusionStats'
  // At an iteration start: whether the interpreter stands in during it.
  void take_stand_in_turn() {
    stand_in = requested_stand_in == StandIn::kOn ||
               (requested_stand_in == StandIn::kTrial &&
                (stand_in_turns < kStandInOnTurns ||
                 (stand_in_turns - kStandInOnTurns) % kStandInCycle != kStandInCycle - 1));
    if (requested_stand_in == StandIn::kTrial) ++stand_in_turns;
  }
  // At an iteration start, after take_stand_in_turn: whether no group can run in it and some
  // wait for kernels still compiling (the stand-in off, or the trial's eager turn). Such an
  // iteration is not armed (Executor::try_arm).
  bool only_waits() const {
    bool waits = false;
    for (const PlanGroup& g : groups) {
      if (!g.active || g.eager_only) continue;
      if (!g.gpu) return false;  // a CPU group's ATen ops are its fused run
      const int state = g.state->load(std::memory_order_acquire);
      if (state == kLoaded) return false;
      if (g.spec.interpretable() && interpreter != nullptr && (stand_in || state == kFailed))
        return false;
      waits = waits || state == kCompiling;
    }
    return waits;
  }
  // CUDA graph replay (exec/replay.h, Config::replay), under the executor's lock: the capture
  // (or the one being made), iterations in a row that ran the plan whole (a capture waits for
  // kReplayAfter), captures tried, replayed iterations that left the plan, and why replay is
  // off, if it is.
  std::shared_ptr<Replay> replay;
  std::int64_t steady = 0;
  // Inputs from outside the iteration (op, input) seen to move in a replay: the next capture
  // reads copies of them (kReplayRelearns captures at most).
  std::set<std::pair<std::size_t, std::size_t>> replay_moved;
  int replay_attempts = 0;
  int replay_divergences = 0;
  std::string replay_off;
  std::string requested_replay_off;  // the governor's (Executor::no_replay), at iteration starts
  std::int64_t replayed = 0, replay_rescued = 0, replay_pool_bytes = 0;  // of earlier captures
  std::int64_t replay_pool_small_bytes = 0;                              // ... the last one's
  std::int64_t replay_repointed = 0;                                     // ... likewise
  std::int64_t replay_launcher_launches = 0;                             // ... likewise
  double replay_launcher_ms = 0;                                         // ... likewise
  std::int64_t replay_premade_outputs = 0;                               // ... likewise
  int replay_captures = 0;  // ... how many ended, and their host time (Replay::capture_ms)
  double replay_capture_ms = 0;
  std::int64_t replay_capture_segments = 0;  // ... the last one's new allocator segments
  bool counted = false;  // in the executor's count of plans that may run (set before ready)
  std::string reason;
  std::string remembered;  // "known winner ..." / "known loser ..." from an earlier run
  // Built before its signature was seen, from the trace an earlier run kept
  // (Config::prepare_known, exec/prepared.cpp).
  bool prepared = false;
  // An earlier run kept it, replayed as CUDA graphs: captured after kReplayAfterKnown.
  bool replay_kept_before = false;
  // ... and said what its capture cost: no capture until the governor lets it go ahead
  // (Executor::release_replay), once the run is ahead of eager by about that much.
  bool replay_held = false;
  // ... and how large its graphs' memory pool was (PlanPrior::replay_pool_bytes and
  // replay_pool_small_bytes; 0: not known).
  std::int64_t replay_pool_hint = 0, replay_pool_small_hint = 0;
  // Kept for logs and tests.
  std::shared_ptr<const Graph> graph;
  Partition partition;
};

}  // namespace hotpath::detail
