// What a verdict of an earlier run says about a signature's plan: policy/'s remembered Decision
// is one (it adds the timings that led to it); the planner reads only this.
#pragma once

#include <string>
#include <vector>

namespace hotpath::detail {

struct PlanPrior {
  bool compile = false;            // false: a known loser, stays eager
  std::vector<bool> groups;        // per fused group: keep it (winners only)
  std::vector<std::string> names;  // the groups' names then, to notice a plan that changed
  bool replay_kept = false;        // it ran as CUDA graphs when it was kept (winners only)
  // What its capture for replay cost beyond a fused iteration (ms; 0: not known). A later run
  // holds the capture back until the plan alone has saved about that much (policy/governor.h).
  double capture_ms = 0;
  // The private memory pool its CUDA graphs took (bytes; 0: not known). A later run's capture
  // grows its pool to that much before it starts (Replay::grow_pool: one large block, and the
  // small blocks' segments), instead of a cudaMalloc for each segment the shadows' allocations
  // would open during the capture.
  std::int64_t replay_pool_bytes = 0;
  // ... of it, the segments of the allocator's small blocks (1 MiB and less): 2 MiB each.
  std::int64_t replay_pool_small_bytes = 0;
  // Whether a later run holds the plan's capture (Plan::replay_held; the governor's hold).
  bool holds_capture() const { return compile && replay_kept && capture_ms > 0; }
  std::string reason;
};

}  // namespace hotpath::detail
