#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "trace/step_detector.h"

using hotpath::detail::StepDetector;

namespace {

// An op as the detector sees it: a name, grad mode, whether it reads a parameter, whether it
// writes one (the optimizer's update).
struct Op {
  std::uint64_t name;
  bool grad = true;
  bool param = false;
  bool update = false;
};
Op fwd(std::uint64_t name, bool param = false) { return {name, true, param, false}; }
Op bwd(std::uint64_t name) { return {name, false, false, false}; }  // backward, no_grad
Op upd(std::uint64_t name) { return {name, false, true, true}; }    // p.addcdiv_(...) under no_grad

struct Stream {
  std::vector<Op> ops;
  void add(const std::vector<Op>& more) { ops.insert(ops.end(), more.begin(), more.end()); }
  std::int64_t size() const { return static_cast<std::int64_t>(ops.size()); }
};

// A training step of a small model: the batch's preparation (grad mode on, nothing requiring
// grad), a forward pass over two identical layers, the loss, backward, clipping and an
// optimizer's per-parameter chains, and a host sync on the loss.
std::vector<Op> step_ops(int data_ops) {
  std::vector<Op> s;
  for (int i = 0; i < data_ops; ++i) s.push_back(fwd(90));  // slices, stack, normalize, to()
  for (int layer = 0; layer < 2; ++layer) {
    s.push_back(fwd(1, true));  // t(weight)
    s.push_back(fwd(2, true));  // addmm
    s.push_back(fwd(3));        // gelu
  }
  s.push_back(fwd(4));  // loss
  for (int i = 0; i < 10; ++i) s.push_back(bwd(50 + i % 3));
  for (int p = 0; p < 4; ++p)
    for (int k = 0; k < 9; ++k) s.push_back(k < 8 ? bwd(70 + k) : upd(78));  // AdamW per parameter
  s.push_back(fwd(99));  // loss.item(): reads the loss, no leaf
  return s;
}

// D(real) + backward; G(noise) and D(fake.detach()) + backward + D's optimizer; D(fake) for G +
// backward + G's optimizer; an item() when `log`.
std::vector<Op> gan_step(bool log) {
  std::vector<Op> s{fwd(90), fwd(10, true), fwd(11, true), fwd(12)};
  for (int i = 0; i < 5; ++i) s.push_back(bwd(60));
  s.insert(s.end(), {fwd(91), fwd(20, true), fwd(21, true), fwd(10, true), fwd(11, true), fwd(12)});
  for (int i = 0; i < 5; ++i) s.push_back(bwd(61));
  for (int i = 0; i < 8; ++i) s.push_back(i < 7 ? bwd(70) : upd(72));  // D's optimizer
  s.insert(s.end(), {fwd(10, true), fwd(11, true), fwd(13)});
  for (int i = 0; i < 7; ++i) s.push_back(bwd(62));
  for (int i = 0; i < 8; ++i) s.push_back(i < 7 ? bwd(71) : upd(73));  // G's optimizer
  if (log) s.push_back(fwd(99));
  return s;
}

std::vector<std::int64_t> feed_all(StepDetector& d, const Stream& s,
                                   std::vector<int>* anchors = nullptr) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops[static_cast<std::size_t>(i)];
    if (d.feed(i, op.name, op.grad, op.param, op.update, out) && anchors)
      anchors->push_back(static_cast<int>(i));
  }
  return out;
}

}  // namespace

TEST_CASE("steps are cut where each forward pass starts, within three steps", "[steps]") {
  Stream s;
  std::vector<std::int64_t> starts;
  for (int i = 0; i < 6; ++i) {
    // The first step's data preparation comes before anything is known; later ones vary.
    starts.push_back(s.size() + (i == 0 ? 3 : 1 + i % 3));
    s.add(step_ops(i == 0 ? 3 : 1 + i % 3));
  }
  StepDetector d;
  std::vector<int> anchors;
  const auto b = feed_all(d, s, &anchors);
  CHECK(d.locked());
  CHECK(d.period() == 1);
  // One anchor per step: at its first parameter read (the identical second layer, the item()
  // after the step and the data preparation never anchor).
  REQUIRE(anchors.size() == 6);
  for (std::size_t i = 0; i < anchors.size(); ++i) CHECK(anchors[i] == starts[i]);
  // Every step but the one in progress is an iteration, each starting at a forward pass; the
  // ops before the first one belong to none.
  REQUIRE(b.size() == 5);
  for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == starts[i + 1]);
  CHECK(d.history_start() == starts[0]);
}

TEST_CASE("the first iteration is known at the third forward pass", "[steps]") {
  Stream s;
  for (int i = 0; i < 2; ++i) s.add(step_ops(2));
  const std::int64_t third = s.size() + 2;
  s.add(step_ops(2));
  StepDetector d;
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops[static_cast<std::size_t>(i)];
    d.feed(i, op.name, op.grad, op.param, op.update, out);
    if (i < third) CHECK(out.empty());
    if (i == third) {
      CHECK(d.locked());
      // Steps 1 and 2 close as the third starts: it starts with this op.
      REQUIRE(out.size() == 2);
      CHECK(out.back() == third);
    }
  }
}

TEST_CASE("a GAN's step is its three forward/backward passes", "[steps]") {
  Stream s;
  std::vector<std::int64_t> starts;
  for (int i = 0; i < 7; ++i) {
    starts.push_back(s.size() + 1);
    s.add(gan_step(i % 2 == 0));
  }
  StepDetector d;
  const auto b = feed_all(d, s);
  CHECK(d.period() == 3);
  REQUIRE(b.size() == 6);
  for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == starts[i + 1]);
}

TEST_CASE("a step found again from the middle of a step keeps the phase it had", "[steps]") {
  // hotpath looked away (stood aside) and looks again from the generator's pass of a step: a
  // fresh search would cut G, D(real), D(fake), another signature for the same step.
  Stream first;
  for (int i = 0; i < 5; ++i) first.add(gan_step(false));
  StepDetector before;
  feed_all(before, first);
  REQUIRE(before.period() == 3);
  REQUIRE(before.known().size() == 1);

  const std::vector<Op> step = gan_step(false);
  const std::int64_t g_pass = 28;  // the third pass's first op in a step of gan_step(false)
  REQUIRE(step[static_cast<std::size_t>(g_pass)].name == 10);
  REQUIRE(step[static_cast<std::size_t>(g_pass - 1)].grad == false);
  Stream resumed;
  resumed.ops.assign(step.begin() + g_pass, step.end());
  std::vector<std::int64_t> starts;
  for (int i = 0; i < 6; ++i) {
    starts.push_back(resumed.size() + 1);  // after the data op, at D(real)
    resumed.add(step);
  }
  StepDetector again(before.known());
  const auto b = feed_all(again, resumed);
  CHECK(again.period() == 3);
  REQUIRE(!b.empty());
  for (std::int64_t x : b) CHECK(std::find(starts.begin(), starts.end(), x) != starts.end());
  CHECK(again.known().size() == 1);

  // Without the memory the same stream is cut at the generator's pass.
  StepDetector fresh;
  const auto c = feed_all(fresh, resumed);
  REQUIRE(!c.empty());
  CHECK(std::find(starts.begin(), starts.end(), c.front()) == starts.end());
}

TEST_CASE("evaluation under no_grad and logging do not move the boundary", "[steps]") {
  Stream s;
  std::vector<std::int64_t> starts;
  for (int i = 0; i < 12; ++i) {
    starts.push_back(s.size() + 2);
    s.add(step_ops(2));
    if (i % 4 == 3) {  // an evaluation pass: a forward under NoGradGuard, then a print
      for (int k = 0; k < 7; ++k) s.add({Op{static_cast<std::uint64_t>(1 + k % 3), false, true}});
      s.add({fwd(99), fwd(98)});
    }
  }
  StepDetector d;
  const auto b = feed_all(d, s);
  CHECK(d.period() == 1);
  CHECK(d.losses() == 0);
  REQUIRE(b.size() == 11);
  for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == starts[i + 1]);
}

TEST_CASE("a loop that changes its step is searched again and found again", "[steps]") {
  Stream s;
  for (int i = 0; i < 5; ++i) s.add(step_ops(1));
  // Fine-tuning another model: its forward starts with other ops.
  auto other = [] {
    std::vector<Op> o{fwd(90), fwd(30, true), fwd(31, true), fwd(32)};
    for (int i = 0; i < 6; ++i) o.push_back(bwd(80));
    o.push_back(upd(81));  // its optimizer
    return o;
  };
  const std::int64_t change = s.size() + 1;
  std::vector<std::int64_t> later;
  for (int i = 0; i < 6; ++i) {
    later.push_back(s.size() + 1);
    s.add(other());
  }
  StepDetector d;
  const auto b = feed_all(d, s);
  CHECK(d.losses() == 1);
  CHECK(d.locked());
  CHECK(d.period() == 1);
  CHECK(d.history_start() >= change);
  // The new step is cut at its forward passes again.
  CHECK(b.back() == later.back());
}

TEST_CASE("gradient accumulation's micro-batches are one step with the update", "[steps]") {
  // Four micro-batches, a forward and backward each, then clipping and the optimizer: the
  // micro-batches look alike, but a step ends with the update.
  auto micro = [](bool last) {
    std::vector<Op> m{fwd(90), fwd(1, true), fwd(2, true), fwd(3)};
    for (int i = 0; i < 6; ++i) m.push_back(bwd(50));
    if (last) {
      for (int i = 0; i < 4; ++i) m.push_back(bwd(60));  // clip_grad_norm_
      for (int p = 0; p < 3; ++p) m.push_back(upd(70));  // the update of each parameter
    }
    return m;
  };
  Stream s;
  std::vector<std::int64_t> starts;
  for (int i = 0; i < 6; ++i) {
    starts.push_back(s.size() + 1);
    for (int k = 0; k < 4; ++k) s.add(micro(k == 3));
  }
  StepDetector d;
  const auto b = feed_all(d, s);
  CHECK(d.period() == 4);
  REQUIRE(!b.empty());
  for (std::int64_t x : b) CHECK(std::find(starts.begin(), starts.end(), x) != starts.end());
  CHECK(b.back() == starts.back());
}

TEST_CASE("a loop that never updates a parameter is cut once no update came", "[steps]") {
  // Forward and backward alone (a benchmark of both): kMaxSegments + 1 passes show no update,
  // then each pass is a step.
  Stream s;
  for (int i = 0; i < 14; ++i) {
    s.add({fwd(90), fwd(1, true), fwd(2, true), fwd(3)});
    for (int k = 0; k < 5; ++k) s.add({bwd(50)});
  }
  StepDetector d;
  std::vector<std::int64_t> b;
  int anchors = 0, first_cut_at = -1;
  for (std::int64_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops[static_cast<std::size_t>(i)];
    if (d.feed(i, op.name, op.grad, op.param, op.update, b)) ++anchors;
    if (!b.empty() && first_cut_at < 0) first_cut_at = anchors;
  }
  CHECK(d.period() == 1);
  // Cut when the (kMaxSegments + 2)-th pass starts: kMaxSegments + 1 have closed without an
  // update; then every pass before it is an iteration.
  CHECK(first_cut_at == StepDetector::kMaxSegments + 2);
  CHECK(b.size() == 13);
}

TEST_CASE("a loop that never trains has no anchors", "[steps]") {
  Stream s;
  for (int i = 0; i < 20; ++i) s.add({Op{1, false, true}, Op{2, false, false}, fwd(3)});
  StepDetector d;
  const auto b = feed_all(d, s);
  CHECK(b.empty());
  CHECK(d.anchors() == 0);
  CHECK_FALSE(d.locked());
}
