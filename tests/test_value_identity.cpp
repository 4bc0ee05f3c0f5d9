// A value's identity in the data flow is its (producer, output) pair. Two producers' indices can
// hash alike (8181 and 8424 do, output 0, under hash_combine): a signature, a hot trace and a
// plan's guard that named values by such a hash took two values for one (a plan left every few
// iterations on a deep model, or two values merged in a plan's graph).
#include <memory>

#include "common/hash.h"
#include "dispatch/op_record.h"
#include "trace/op_ring.h"
#include "trace/signature.h"

// After LibTorch's headers: c10's logging defines a CHECK of its own.
#include <catch2/catch.hpp>

using hotpath::detail::hash_combine;
using hotpath::detail::OpRecord;
using hotpath::detail::OpRing;
using hotpath::detail::OutsideOrdinals;
using hotpath::detail::ValueRef;

namespace {

// An iteration of two ops at global indices 10000 and 10001, each reading one value from
// outside the iteration (made by the ops at `a` and `b`, output 0).
std::uint64_t signature_reading(std::int64_t a, std::int64_t b) {
  OpRing ring;
  for (std::int64_t producer : {a, b}) {
    auto rec = std::make_unique<OpRecord>();
    rec->key = 0x1234;
    rec->inputs.emplace_back();
    rec->inputs.back().meta.defined = true;
    rec->inputs.back().ref = ValueRef{producer, 0};
    ring.push_back(rec);
  }
  return hotpath::detail::iteration_signature(ring, 10000, 10000, 10002);
}

}  // namespace

TEST_CASE("two values whose producers hash alike are two values", "[signature]") {
  // The pair collides under the hash: it is no identity.
  REQUIRE(hash_combine(8181, 0) == hash_combine(8424, 0));
  OutsideOrdinals ordinals;
  ordinals.emplace(ValueRef{8181, 0}, 0);
  CHECK(ordinals.emplace(ValueRef{8424, 0}, 1).second);
  CHECK(ordinals.size() == 2);
  CHECK_FALSE(ordinals.emplace(ValueRef{8181, 0}, 2).second);  // the same value again
  // An op reading two values and one reading one value twice are different iterations; the same
  // data flow shifted in time is the same.
  CHECK(signature_reading(8181, 8424) != signature_reading(8181, 8181));
  CHECK(signature_reading(8181, 8424) == signature_reading(5, 7));
  CHECK(signature_reading(8424, 8424) == signature_reading(3, 3));
}
