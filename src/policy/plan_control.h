// What the governor sees of a signature's plan, and the two things it may ask of it. The session
// implements this over its executor, so policy/ reads a narrow view and includes nothing of exec/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hotpath::detail {

class PlanControl {
 public:
  // How one iteration ran.
  struct Run {
    bool fused = false;       // the plan ran it (some group fused)
    std::int64_t epoch = 0;   // the configuration of groups it ran with (set_active's)
    bool final_tiers = true;  // every group ran its final kernel (none waited for NVRTC)
    // The iteration started on the plan of this signature and left it part-way (finished
    // eagerly); 0 if it did not. Its ops differ from the plan's, so the recorder may have counted
    // it under another signature: where it has as many ops as the plan (the same step, one op's
    // inputs other than the plan's), its time is still what running with that plan cost.
    std::uint64_t left_plan = 0;
    std::int64_t plan_ops = 0;  // the ops of that plan
    // Of an iteration that waited for kernels still compiling (final_tiers false): the
    // interpreter stood in for some of them; some of them ran eagerly instead.
    bool stand_in = false;
    bool waited = false;
    bool replayed = false;  // it ran to its end as CUDA graphs (exec/replay.h)
    bool captured = false;  // it was captured as CUDA graphs (the capture's cost is in its time)
  };
  // The plan's fused groups, in order.
  struct Group {
    std::string name;
    bool active_default = true;  // false: a remembered loser that starts inactive
  };

  virtual ~PlanControl() = default;
  // The iteration of `signature` that started at global op `first` (or any iteration that
  // started there on a plan and left it: Run::left_plan).
  virtual Run ran(std::uint64_t signature, std::int64_t first) const = 0;
  // The plan's groups; nullopt while the signature has no plan.
  virtual std::optional<std::vector<Group>> groups(std::uint64_t signature) const = 0;
  // The private memory pool of the plan's CUDA graphs, of its capture in use or its last one
  // (bytes; 0 where it has none), and of it the segments of the allocator's small blocks.
  struct Pool {
    std::int64_t bytes = 0, small_bytes = 0;
  };
  virtual Pool replay_pool(std::uint64_t signature) const = 0;
  // Which groups run fused from the next iteration start on (`reason`, if not empty, is what
  // stats() shows); returns the new configuration's epoch.
  virtual std::int64_t set_active(std::uint64_t signature, const std::vector<bool>& active,
                                  const std::string& reason) = 0;
  // The signature runs eagerly from the next iteration start on.
  virtual void revert(std::uint64_t signature, const std::string& reason) = 0;
  // The interpreter's stand-in for groups still compiling starts on trial (every fourth
  // iteration runs them eagerly). Off: they run eagerly from the next iteration start on. Kept:
  // the interpreter runs them in every iteration from then on. `reason`: the evidence.
  virtual void no_stand_in(std::uint64_t signature, const std::string& reason) = 0;
  virtual void keep_stand_in(std::uint64_t signature, const std::string& reason) = 0;
  // CUDA graph replay of the plan is let go from the next iteration start on, for the rest of
  // the run (`reason`: the evidence, for stats()); the plan itself runs on.
  virtual void no_replay(std::uint64_t signature, const std::string& reason) = 0;
  // A capture for replay held back (an earlier run said what it costs: Plan::replay_held) goes
  // ahead from the next iteration start on (`reason`: why now, for the log).
  virtual void release_replay(std::uint64_t signature, const std::string& reason) = 0;
};

}  // namespace hotpath::detail
