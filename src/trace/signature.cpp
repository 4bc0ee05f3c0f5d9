#include "trace/signature.h"

#include <cstdio>

#include <c10/util/flat_hash_map.h>

#include "common/hash.h"

namespace hotpath::detail {

std::uint64_t iteration_signature(const OpRing& ops, std::int64_t base, std::int64_t first,
                                  std::int64_t last) {
  std::uint64_t h = hash_combine(0x686f7470617468ULL, static_cast<std::uint64_t>(last - first));
  // (producer, output) -> ordinal; kept between calls so that hashing allocates nothing
  thread_local OutsideOrdinals outside;
  outside.clear();
  for (std::int64_t i = first; i < last; ++i) {
    const OpRecord& op = ops[static_cast<std::size_t>(i - base)];
    h = hash_combine(h, op.key);
    for (const TensorInput& in : op.inputs) {
      if (!in.meta.defined) {
        h = hash_combine(h, 0x55);
      } else if (in.ref.producer >= first) {
        h = hash_combine(h, 0x11);
        h = hash_combine(h, static_cast<std::uint64_t>(in.ref.producer - first));
        h = hash_combine(h, static_cast<std::uint64_t>(in.ref.output));
      } else {
        const auto it = outside.emplace(in.ref, static_cast<std::int64_t>(outside.size())).first;
        h = hash_combine(h, 0x22);
        h = hash_combine(h, static_cast<std::uint64_t>(it->second));
      }
    }
  }
  return h;
}

}  // namespace hotpath::detail
