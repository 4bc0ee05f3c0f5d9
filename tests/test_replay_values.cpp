// The guard's table of a replayed iteration's values (exec/replay_values.h): it must give the
// answers the recorder gives for the same ops (a value's latest producer, values from outside
// numbered in the order first read), on CPU tensors.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <vector>

#include "exec/replay_values.h"

using hotpath::detail::ReplayValues;
using hotpath::detail::ValueRef;

namespace {

constexpr std::int64_t kStart = 1000;  // the iteration's first op, as the recorder counts

ValueRef outside(std::int64_t k) { return ValueRef{-(k + 1), 0}; }

bool reads(ReplayValues& v, ValueRef want, const at::Tensor& t) {
  ValueRef got{-99, -99};
  const bool ok = v.matches(want, t, got);
  if (ok && want.producer >= 0) CHECK(got == ValueRef{kStart + want.producer, want.output});
  if (ok && want.producer < 0) CHECK(got.producer < kStart);
  return ok;
}

}  // namespace

TEST_CASE("a replayed iteration's values: each op's outputs by identity", "[replay_values]") {
  ReplayValues v;
  v.begin(kStart);
  const at::Tensor w = torch::randn({3}), x = torch::randn({3});
  const at::Tensor a = torch::randn({3}), b = torch::randn({3});
  REQUIRE(reads(v, outside(0), w));
  REQUIRE(reads(v, outside(1), x));
  v.returned(0, {&a, &b});

  CHECK(reads(v, ValueRef{0, 0}, a));
  CHECK(reads(v, ValueRef{0, 1}, b));
  CHECK_FALSE(reads(v, ValueRef{0, 1}, a));            // another output of the same op
  CHECK_FALSE(reads(v, ValueRef{1, 0}, a));            // an op that returned nothing yet
  CHECK_FALSE(reads(v, ValueRef{0, 0}, w));            // a value from outside
  CHECK_FALSE(reads(v, outside(2), a));                // an output is no value from outside
  CHECK_FALSE(reads(v, ValueRef{0, 0}, a.view({3})));  // a view is another tensor

  SECTION("an op that returns a tensor again (in place) is its producer from then on") {
    v.returned(1, {&a});
    CHECK(reads(v, ValueRef{1, 0}, a));
    CHECK_FALSE(reads(v, ValueRef{0, 0}, a));
    v.returned(2, {&w});  // a value from outside, written in place
    CHECK(reads(v, ValueRef{2, 0}, w));
    CHECK_FALSE(reads(v, outside(0), w));
  }
  SECTION("an undefined output keeps its place") {
    const at::Tensor none;
    v.returned(1, {&none, &x});
    CHECK(reads(v, ValueRef{1, 1}, x));
    CHECK_FALSE(reads(v, ValueRef{1, 0}, x));
  }
  SECTION("the next iteration starts anew: the last one's outputs come from outside") {
    v.begin(kStart);
    CHECK_FALSE(reads(v, ValueRef{0, 0}, a));
    CHECK(reads(v, outside(0), a));
  }
}

TEST_CASE("a replayed iteration's values from outside are numbered as first read",
          "[replay_values]") {
  ReplayValues v;
  v.begin(kStart);
  const at::Tensor w = torch::randn({3}), x = torch::randn({3});
  CHECK_FALSE(reads(v, outside(1), w));  // the first one read is number 0
  REQUIRE(reads(v, outside(0), w));
  CHECK(reads(v, outside(0), w));        // the same tensor, the same number
  CHECK_FALSE(reads(v, outside(0), x));  // number 0 is w's
  CHECK_FALSE(reads(v, outside(1), w));  // w is number 0
  CHECK(reads(v, outside(1), x));
  // A refused read numbered nothing: the next new tensor still gets number 2.
  const at::Tensor y = torch::randn({3}), z = torch::randn({3});
  CHECK_FALSE(reads(v, outside(3), y));
  // Asking what a read would answer numbers nothing either.
  CHECK(v.would_match(outside(2), z));
  CHECK_FALSE(v.would_match(outside(3), z));
  CHECK(reads(v, outside(2), y));
  CHECK_FALSE(v.would_match(outside(2), z));
  CHECK(v.would_match(outside(3), z));
}

TEST_CASE("a replayed iteration's output that died cannot be impersonated", "[replay_values]") {
  // The table keeps each tensor's TensorImpl from being freed until the next iteration: no
  // tensor made after one died can come at its address and pass for it.
  ReplayValues v;
  v.begin(kStart);
  const c10::TensorImpl* dead = nullptr;
  {
    const at::Tensor t = torch::randn({3});
    dead = t.unsafeGetTensorImpl();
    v.returned(0, {&t});
  }
  std::vector<at::Tensor> later;
  for (int i = 0; i < 64; ++i) {
    later.push_back(torch::randn({3}));
    CHECK(later.back().unsafeGetTensorImpl() != dead);
    CHECK_FALSE(reads(v, ValueRef{0, 0}, later.back()));
  }
  SECTION("the next iteration hands the references over, to be let go of elsewhere") {
    const at::Tensor x = torch::randn({3});
    REQUIRE(reads(v, outside(0), x));
    std::vector<ReplayValues::Kept> kept = v.begin(kStart);
    REQUIRE(kept.size() == 2);  // the dead output and x, in the order noted
    CHECK(kept[0].expired());
    CHECK(kept[0]._unsafe_get_target() == dead);
    CHECK_FALSE(kept[1].expired());
    CHECK(kept[1]._unsafe_get_target() == x.unsafeGetTensorImpl());
    CHECK(v.begin(kStart).empty());  // the table holds none of them any more
    // Until they are let go of, the dead one's address is still taken.
    for (int i = 0; i < 64; ++i) CHECK(torch::randn({3}).unsafeGetTensorImpl() != dead);
  }
}

TEST_CASE("a replayed iteration's values: whose metadata the table vouches for",
          "[replay_values]") {
  // The fast lane compares an input's metadata with the plan's unless the table vouches for it:
  // a tensor handed out as the capture's output (or a view's), until an op writes it.
  ReplayValues v;
  v.begin(kStart);
  const at::Tensor w = torch::randn({3}), a = torch::randn({3}), b = torch::randn({3});
  auto trusted = [&](ValueRef want, const at::Tensor& t) {
    ValueRef got;
    bool vouched = true;
    REQUIRE(v.matches(want, t, got, &vouched));
    return vouched;
  };
  CHECK_FALSE(trusted(outside(0), w));  // from outside: always compared
  v.returned(0, {&a}, true);
  v.returned(1, {&b}, false);  // run below the hook: compared
  CHECK(trusted(ValueRef{0, 0}, a));
  CHECK_FALSE(trusted(ValueRef{1, 0}, b));

  SECTION("a write ends it (t_ and set_data are writes of their argument)") {
    v.written(a);
    CHECK_FALSE(trusted(ValueRef{0, 0}, a));
    v.written(w);  // a tensor the table vouches nothing for: nothing changes
    CHECK_FALSE(trusted(outside(0), w));
  }
  SECTION("returned again by an op that is not vouched for (in place): compared") {
    v.returned(2, {&a}, false);
    CHECK_FALSE(trusted(ValueRef{2, 0}, a));
  }
  SECTION("a refused read says nothing is vouched for") {
    ValueRef got;
    bool vouched = true;
    CHECK_FALSE(v.matches(ValueRef{1, 0}, a, got, &vouched));
    CHECK_FALSE(vouched);
  }
  SECTION("the next iteration: what was vouched for comes from outside, compared") {
    v.begin(kStart);
    CHECK_FALSE(trusted(outside(0), a));
  }
}
