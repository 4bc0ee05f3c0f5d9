// The recorder's ring of op records (trace/op_ring.h): records are reused in place, and a light
// record (a fast-lane op's) comes out with its fields cleared and its buffers empty whatever its
// slot held before, including across the ring's growth.
#include "dispatch/op_record.h"
#include "trace/op_ring.h"

// After LibTorch's headers: c10's logging defines a CHECK of its own.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

using hotpath::detail::OpRecord;
using hotpath::detail::OpRing;

namespace {

// A record as the hook fills one: every buffer and field set.
std::unique_ptr<OpRecord> full_record(std::int64_t n) {
  auto rec = std::make_unique<OpRecord>();
  rec->name = "aten::add";
  rec->overload = "Tensor";
  rec->key = rec->name_key = rec->input_key = static_cast<std::uint64_t>(n) + 1;
  rec->scalar_mask = 4;
  rec->planned_key = 9;
  rec->planned_alias = 0;
  rec->grad_enabled = false;
  rec->reads_param = rec->writes_param = true;
  rec->inputs.emplace_back();
  rec->inputs.back().meta.sizes = {2, 3};
  rec->args.push_back(c10::IValue(n));
  rec->outputs.emplace_back();
  rec->output_alias.push_back(-1);
  rec->output_alive.push_back(true);
  return rec;
}

void check_light(const OpRecord& r) {
  CHECK(r.light);
  CHECK(r.name.empty());
  CHECK(r.overload.empty());
  CHECK(r.key == 0);
  CHECK(r.name_key == 0);
  CHECK(r.input_key == 0);
  CHECK(r.scalar_mask == 0);
  CHECK(r.planned_key == 0);
  CHECK(r.planned_alias == -1);
  CHECK(r.grad_enabled);
  CHECK_FALSE(r.reads_param);
  CHECK_FALSE(r.writes_param);
  CHECK(r.inputs.empty());
  CHECK(r.args.empty());
  CHECK(r.outputs.empty());
  CHECK(r.output_alias.empty());
  CHECK(r.output_alive.empty());
}

}  // namespace

TEST_CASE("a light record comes out cleared whatever its slot held", "[op_ring]") {
  OpRing ring;
  // Full records in 40 slots, then 100 light ones: the ring grows past 64 slots while it holds
  // both kinds, and its first slots are reused by light records after full ones.
  for (std::int64_t i = 0; i < 40; ++i) {
    auto rec = full_record(i);
    ring.push_back(rec);
    CHECK(rec == nullptr);  // a new slot hands nothing back
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) {
      OpRecord& r = ring.push_light();
      check_light(r);
      // The fast lane fills the fields it keeps; the next use of the slot clears them.
      r.name = "aten::mul";
      r.key = 77;
      r.grad_enabled = false;
      r.reads_param = true;
    }
    while (ring.size() > 20) ring.pop_front();
    // Full records again in slots that held light ones: the record handed back is a light one,
    // buffers empty, for the hook to fill.
    for (std::int64_t i = 0; i < 30; ++i) {
      auto rec = full_record(i);
      ring.push_back(rec);
      if (rec != nullptr && rec->light) CHECK(rec->inputs.empty());
    }
    while (ring.size() > 10) ring.pop_front();
  }
  // What the ring holds, oldest first, is what was pushed last: the 10 newest full records.
  REQUIRE(ring.size() == 10);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    CHECK_FALSE(ring[i].light);
    CHECK(ring[i].key == 21 + i);
    CHECK(ring[i].inputs.size() == 1);
  }
}
