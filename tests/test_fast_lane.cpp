// The recorder's side of the replay fast lane (Recorder::commit_fast, note_replayed): ops of a
// replayed iteration leave light records, and the executor's word says whose iteration it was.
// The fast lane itself needs CUDA graphs (test_replay.cpp runs it on whole loops); here the
// recorder is fed as the session feeds it, on CPU tensors, in a loop marked with step().
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "trace/recorder.h"

using hotpath::detail::IterationEvent;
using hotpath::detail::OpRecord;
using hotpath::detail::Recorder;
using hotpath::detail::ValueRef;

namespace {

using Tensors = std::vector<const at::TensorBase*>;

// An op as the hook records it and the session commits it (its key stands for its operator and
// metadata). Returns the values the recorder found for its inputs.
std::vector<ValueRef> full_op(Recorder& r, std::uint64_t key, const Tensors& in,
                              const Tensors& out) {
  auto rec = std::make_unique<OpRecord>();
  rec->name = "aten::fake";
  rec->key = rec->input_key = rec->name_key = key;
  rec->grad_enabled = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    rec->inputs.emplace_back();
    rec->inputs.back().meta.defined = true;
  }
  r.resolve_inputs(*rec, in);
  std::vector<ValueRef> refs;
  for (const auto& i : rec->inputs) refs.push_back(i.ref);
  r.commit(rec, out);
  return refs;
}

void fast_op(Recorder& r, std::uint64_t key) {
  Recorder::FastOp f;
  f.name = "aten::fake";
  f.key = f.name_key = key;
  f.grad_enabled = false;
  r.commit_fast(f);
}

const hotpath::SignatureStats* find(const hotpath::Stats& s, std::uint64_t id) {
  for (const auto& sig : s.signatures)
    if (sig.id == id) return &sig;
  return nullptr;
}

}  // namespace

TEST_CASE("a replayed iteration's light records are counted by the executor's word",
          "[fast_lane]") {
  hotpath::Config c;
  c.threshold = 2;
  Recorder r(c);
  std::vector<std::uint64_t> hot;
  std::vector<IterationEvent> events;
  r.set_hot_listener([&](hotpath::detail::HotTrace&& t) { hot.push_back(t.signature); });
  r.set_iteration_listener([&](const IterationEvent& e) { events.push_back(e); });

  const at::Tensor x = torch::ones({2});  // from outside the loop
  // One iteration: y = a(x), z = b(y), w = c(z); each with fresh outputs. `how` per op: 'f' full
  // record, 'l' the fast lane. Returns where the iteration started and the refs of c's input.
  auto iteration = [&](const char* how) {
    const std::int64_t first = r.position().next_op;
    const at::Tensor y = torch::empty({2}), z = torch::empty({2}), w = torch::empty({2});
    const std::uint64_t keys[3] = {11, 22, 33};
    const Tensors ins[3] = {{&x}, {&y}, {&z}};
    const Tensors outs[3] = {{&y}, {&z}, {&w}};
    std::vector<ValueRef> c_input;
    for (int k = 0; k < 3; ++k) {
      if (how[k] == 'l') {
        fast_op(r, keys[k]);
      } else {
        const auto refs = full_op(r, keys[k], ins[k], outs[k]);
        if (k == 2) c_input = refs;
      }
    }
    return std::make_pair(first, c_input);
  };

  r.mark_step();
  for (int i = 0; i < 3; ++i) {
    iteration("fff");
    r.mark_step();
  }
  auto st = r.snapshot();
  REQUIRE(st.signatures.size() == 1);
  const std::uint64_t sig = st.signatures[0].id;
  CHECK(st.signatures[0].count == 3);
  CHECK(hot == std::vector<std::uint64_t>{sig});

  SECTION("replayed to its end: an iteration of the plan's signature") {
    const auto [first, unused] = iteration("fll");
    r.note_replayed(first, 3, sig, /*left=*/false);
    r.mark_step();
    st = r.snapshot();
    CHECK(st.signatures.size() == 1);
    CHECK(find(st, sig)->count == 4);
    CHECK(events.back().signature == sig);
    CHECK(events.back().first == first);
    CHECK(events.back().count == 4);
    // The ops after it are recorded and hashed as ever.
    iteration("fff");
    r.mark_step();
    CHECK(find(r.snapshot(), sig)->count == 5);
  }
  SECTION("a light op's outputs are not mapped: a later recorded op reads them from outside") {
    // The replay's own table names them for its guards (exec/replay_values.h).
    const auto [first, c_input] = iteration("flf");
    REQUIRE(c_input.size() == 1);
    CHECK(c_input[0].producer < first);  // z, which the light second op returned
    r.note_replayed(first, 3, sig, false);
    r.mark_step();
    CHECK(find(r.snapshot(), sig)->count == 4);
    // A full iteration after it maps its values again.
    const auto [next, next_input] = iteration("fff");
    REQUIRE(next_input.size() == 1);
    CHECK(next_input[0] == ValueRef{next + 1, 0});
  }
  SECTION("one the executor did not speak of is dropped") {
    const std::int64_t unassigned = st.ops_unassigned;
    const std::size_t seen = events.size();
    iteration("fll");
    r.mark_step();
    st = r.snapshot();
    CHECK(find(st, sig)->count == 3);
    CHECK(st.ops_unassigned == unassigned + 3);
    CHECK(events.size() == seen);
  }
  SECTION("one the executor spoke of elsewhere is dropped") {
    const auto [first, unused] = iteration("fll");
    r.note_replayed(first + 1, 3, sig, false);
    r.mark_step();
    CHECK(find(r.snapshot(), sig)->count == 3);
  }
  SECTION("one that left the plan is a sample of the plan, not an iteration of its signature") {
    const auto [first, unused] = iteration("fll");
    r.note_replayed(first, 3, sig, /*left=*/true);
    r.mark_step();
    st = r.snapshot();
    CHECK(find(st, sig)->count == 3);
    REQUIRE_FALSE(events.empty());
    CHECK(events.back().signature == sig);
    CHECK(events.back().first == first);
    CHECK(events.back().count == 3);
  }
  SECTION("a signature first counted from light records turns hot only with a recorded one") {
    const std::uint64_t other = 0x5eed;
    for (int i = 0; i < 3; ++i) {
      const auto [first, unused] = iteration("fll");
      r.note_replayed(first, 3, other, false);
      r.mark_step();
    }
    st = r.snapshot();
    REQUIRE(find(st, other) != nullptr);
    CHECK(find(st, other)->count == 3);
    CHECK_FALSE(find(st, other)->hot);  // its trace would have no inputs or arguments
    CHECK(hot == std::vector<std::uint64_t>{sig});
  }
}
