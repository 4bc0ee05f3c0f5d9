// Config::host_profile: where an intercepted op's host time goes. The hook starts the laps of
// the op it is handling on its thread; code below it (the session, the executor) ends a part
// with host_lap(part), which adds the time since the last lap to that part. When the op is not
// timed host_lap is one thread-local read.
#pragma once

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

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

// The laps' clock. A lap's own clock read lands in the part it ends, so the profile is only as
// honest as the read is cheap: on the GPU machine's hosts a steady_clock read costs 30-45 ns (six
// an op were a fifth of the hook's measured cost), the processor's time-stamp counter 15-20 ns.
// Ticks: the time-stamp counter where it runs at a constant rate (x86-64 with an invariant TSC),
// else steady_clock's nanoseconds.
extern const bool host_ticks_tsc;
inline std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline std::int64_t host_ticks() {
#if defined(__x86_64__)
  if (host_ticks_tsc) return static_cast<std::int64_t>(__rdtsc());
#endif
  return steady_ns();
}
// Nanoseconds in `ticks`: the time-stamp counter's rate measured against steady_clock since the
// library loaded (the first call waits until 5 ms have passed since then, if they have not).
double host_ticks_to_ns(std::int64_t ticks);

struct HostLaps {
  std::int64_t last = host_ticks();
  std::int64_t ticks[kHostParts] = {};
  void lap(HostPart p) {
    const std::int64_t now = host_ticks();
    ticks[p] += now - last;
    last = now;
  }
};

// The laps of the op the calling thread's hook is timing, or nullptr.
HostLaps*& current_host_laps();

inline void host_lap(HostPart p) {
  if (HostLaps* l = current_host_laps()) l->lap(p);
}

}  // namespace hotpath::detail
