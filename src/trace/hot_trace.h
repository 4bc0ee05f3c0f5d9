// A hot signature's iteration as the recorder hands it on (to ir/ and exec/).
#pragma once

#include <cstdint>
#include <vector>

#include "dispatch/op_record.h"

namespace hotpath::detail {

// The ops of one iteration with data flow made relative to it: an input's producer >= 0 is the
// index of the op (in this trace) that made it; < 0 is an outside tensor, -(k+1) for the k-th
// distinct one in order of first use.
struct HotTrace {
  std::uint64_t signature = 0;
  std::int64_t iteration = 0;  // the iteration (1-based) whose ops these are
  // Not hot yet: it has repeated Config::compile_ahead times, and its kernels may compile ahead
  // of need (Recorder::set_ahead_listener).
  bool ahead = false;
  std::vector<OpRecord> ops;
};

}  // namespace hotpath::detail
