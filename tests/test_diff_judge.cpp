// train_diff's judging (tests/diff/judge.h): the step rule, the whole-run rule and the verdict
// that a run which took a branch of training no reference had taken yet is "chaotic" only when
// every step alone was within its noise floor.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/diff/judge.h"

using hotpath_diff::StepJudge;
using hotpath_diff::Verdict;

namespace {

// Steps whose references' deviations are `noise[i]` (loss and state alike) and hotpath's `hot[i]`.
StepJudge judged(const std::vector<double>& noise, const std::vector<double>& hot,
                 bool exact = false) {
  StepJudge j;
  j.exact = exact;
  for (std::size_t i = 0; i < noise.size(); ++i)
    j.step(static_cast<int>(i), noise[i], noise[i], hot[i], hot[i]);
  return j;
}

}  // namespace

TEST_CASE("a run within ten times the references' deviation so far passes", "[train_diff]") {
  const StepJudge j = judged({1e-6, 2e-6, 4e-6, 8e-6}, {5e-6, 1e-5, 3e-5, 7e-5});
  CHECK(j.pass);
  CHECK(j.within_whole_run());
  CHECK(hotpath_diff::verdict(j, nullptr) == Verdict::Pass);
  CHECK(j.worst < 1.0);
  CHECK(j.worst_step == 3);  // 7e-5 against 8e-5 + the floors: the closest step
}

TEST_CASE("a branch taken before any reference took it fails the step rule, not the whole run",
          "[train_diff]") {
  // hotpath jumps at step 2 to where a reference jumps only at step 4 (cuDNN flipping a
  // max-pool's choice between two eager runs shows alike on the GPU).
  const StepJudge j =
      judged({1e-6, 1e-6, 1e-6, 1e-6, 2e-2, 2e-2}, {1e-6, 1e-6, 2e-2, 2e-2, 2e-2, 2e-2});
  CHECK_FALSE(j.pass);
  CHECK(j.worst_step == 2);
  CHECK(j.within_whole_run());

  StepJudge resynced = judged({1e-6, 1e-6, 1e-6}, {2e-6, 3e-6, 5e-6});
  REQUIRE(resynced.pass);
  CHECK(hotpath_diff::verdict(j, &resynced) == Verdict::Chaotic);

  // Without the second run, or with a step of it beyond its own floor: a failure.
  CHECK(hotpath_diff::verdict(j, nullptr) == Verdict::Fail);
  resynced = judged({1e-6, 1e-6, 1e-6}, {2e-6, 1e-3, 5e-6});
  REQUIRE_FALSE(resynced.pass);
  CHECK(hotpath_diff::verdict(j, &resynced) == Verdict::Fail);
}

TEST_CASE(
    "a deviation beyond the references' reach over the whole run fails whatever each step "
    "did",
    "[train_diff]") {
  const StepJudge j = judged({1e-6, 1e-6, 1e-4, 1e-4}, {1e-6, 5e-3, 5e-3, 5e-3});
  CHECK_FALSE(j.pass);
  CHECK_FALSE(j.within_whole_run());  // 5e-3 against 10 x 1e-4
  const StepJudge resynced = judged({1e-6, 1e-6}, {1e-6, 1e-6});
  CHECK(hotpath_diff::verdict(j, &resynced) == Verdict::Fail);
}

TEST_CASE("NaN where eager has a number fails, and stays failed", "[train_diff]") {
  const StepJudge j = judged({1e-6, 1e-6, 1e-6}, {1e-6, NAN, 1e-6});
  CHECK_FALSE(j.pass);
  CHECK(std::isnan(j.hot_state));
  CHECK_FALSE(j.within_whole_run());
  const StepJudge resynced = judged({1e-6}, {1e-6});
  CHECK(hotpath_diff::verdict(j, &resynced) == Verdict::Fail);
}

TEST_CASE("exact judging takes no deviation and no second chance", "[train_diff]") {
  const StepJudge same = judged({1e-6, 1e-6}, {0, 0}, true);
  CHECK(same.pass);
  const StepJudge off = judged({1e-3, 1e-3}, {0, 1e-12}, true);
  CHECK_FALSE(off.pass);
  const StepJudge resynced = judged({1e-6}, {0}, true);
  CHECK(hotpath_diff::verdict(off, &resynced) == Verdict::Fail);
}
