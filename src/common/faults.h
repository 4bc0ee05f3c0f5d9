// Faults injected on purpose, to test that hotpath survives them (HOTPATH_FAULTS, read when
// detection is enabled): a comma-separated list of
//   nvrtc   every NVRTC compile fails            -> the group runs on the interpreter or eagerly
//   launch  every kernel launch fails            -> the group runs eagerly from then on
//   oom     every deferred output's allocation throws CUDA's out-of-memory error
//                                                -> that iteration finishes eagerly
//   slow    a plan's first group costs 2 ms more each time it runs fused (a spin kernel on its
//           stream; a sleep for CPU plans)       -> the governor turns it off (or the plan)
//   slow:MS the same with MS milliseconds (enough to make a whole plan lose)
//   marks   the iteration marker's learned count is one too many (dispatch/plain_block.cpp)
//                                                -> the block is dropped, the next one counts
//                                                   with RecordFunction
//   late:MS every kernel NVRTC compiles is published MS milliseconds late
//                                                -> the interpreter stands in longer (its trial)
// Nothing else reads it: a production run never pays for more than one relaxed load.
#pragma once

#include <atomic>
#include <string>

namespace hotpath::detail {

enum Fault : unsigned {
  kFaultNvrtc = 1,
  kFaultLaunch = 2,
  kFaultOom = 4,
  kFaultSlow = 8,
  kFaultMarks = 16,
  kFaultLate = 32
};

// What the "slow" fault adds to each fused run of a plan's first group, unless it says.
constexpr double kSlowFaultMs = 2.0;

// Parses HOTPATH_FAULTS (throws hotpath::Error naming an unknown fault) and arms the faults.
void arm_faults_from_env();
unsigned armed_faults();
double slow_fault_ms();  // what the armed "slow" fault adds
double late_fault_ms();  // how late the armed "late" fault publishes a compiled kernel
inline bool fault_armed(Fault f) { return (armed_faults() & f) != 0; }

}  // namespace hotpath::detail
