// Config::host_profile: where an intercepted op's host time goes. The hook starts the laps of
// the op it is handling on its thread; code below it (the session, the executor) ends a part
// with host_lap(part), which adds the time since the last lap to that part. When the op is not
// timed host_lap is one thread-local read.
#pragma once

#include <chrono>
#include <cstdint>

namespace hotpath::detail {

enum HostPart : int {
  kRecordPart,  // the hook builds the op's record: metadata, hash
  kFlowPart,    // its data flow, the step detector
  kGuardPart,   // a plan's guard of the op, arming an iteration
  kDeferPart,   // deferring it into a fused group, or handing out its replayed output
  kLaunchPart,  // launching hotpath's kernels; a replay's graph nodes' parameters
  kCopyPart,    // a replay's copies of moving inputs into the buffers its graphs read
  kGraphPart,   // launching a replay's CUDA graphs
  kCommitPart,  // completing and keeping the record; what an iteration's end sets off
  kOtherPart,   // the rest of the hook's and the session's work
  kBelowPart,   // the op run below the hook (ATen's dispatch under it, its kernels)
  kHostParts
};

struct HostLaps {
  std::chrono::steady_clock::time_point last;
  std::int64_t ns[kHostParts] = {};
  void lap(HostPart p) {
    const auto now = std::chrono::steady_clock::now();
    ns[p] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
    last = now;
  }
};

// The laps of the op the calling thread's hook is timing, or nullptr.
HostLaps*& current_host_laps();

inline void host_lap(HostPart p) {
  if (HostLaps* l = current_host_laps()) l->lap(p);
}

}  // namespace hotpath::detail
