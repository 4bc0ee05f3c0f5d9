#pragma once

#include <cstdint>
#include <string>

#include "common/hash.h"  // short_hex: the form signatures take in logs
#include "trace/op_ring.h"

namespace hotpath::detail {

// Signature of the iteration made of ops [first, last) (global indices) held in `ops`, whose
// element 0 has global index `base`. Combines each op's key with its data flow, expressed
// relative to the iteration: "output o of the op k places into this iteration" or "the n-th
// distinct outside tensor", so the same loop gives the same signature every iteration and run.
std::uint64_t iteration_signature(const OpRing& ops, std::int64_t base, std::int64_t first,
                                  std::int64_t last);

}  // namespace hotpath::detail
