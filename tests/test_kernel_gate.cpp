// The gate a test holds a plan's kernels at (compile/kernel_gate.h, fuzz_programs --handover):
// held, the compile worker publishes nothing until it is let go; release_held_kernels(n) lets
// exactly n through and returns once they are published, also when the worker has not reached
// the gate yet; it returns at once when nothing is coming; and letting go of the hold lets
// everything through.
#include "compile/kernel_gate.h"
#include "compile/worker.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

using hotpath::detail::CompileWorker;
using hotpath::detail::hold_kernels;
using hotpath::detail::publish_through_gate;
using hotpath::detail::release_held_kernels;

namespace {

struct Held {
  Held() { hold_kernels(true); }
  ~Held() {
    hold_kernels(false);
    CompileWorker::instance().drain();
  }
};

// A plan's compile as the gate sees it: `groups` publications after `delay`.
void submit_groups(std::atomic<int>& published, int groups,
                   std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
  CompileWorker::instance().submit([&published, groups, delay] {
    std::this_thread::sleep_for(delay);
    for (int k = 0; k < groups; ++k) publish_through_gate([&published] { ++published; });
  });
}

}  // namespace

TEST_CASE("kernel gate: nothing held, a group publishes at once", "[kernel_gate]") {
  int published = 0;
  publish_through_gate([&] { ++published; });
  CHECK(published == 1);
  CHECK(release_held_kernels(1) == 0);  // nothing held: nothing to let go
}

TEST_CASE("kernel gate: held groups go one release at a time, then all", "[kernel_gate]") {
  std::atomic<int> published{0};
  {
    Held held;
    submit_groups(published, 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(published.load() == 0);
    // Each release returns once its group is in: the test's next step sees it.
    CHECK(release_held_kernels(1) == 1);
    CHECK(published.load() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(published.load() == 1);
    CHECK(release_held_kernels(1) == 1);
    CHECK(published.load() == 2);
  }
  // Let go: the last group goes.
  CHECK(published.load() == 3);
}

TEST_CASE("kernel gate: a release waits for a compile the worker has not finished",
          "[kernel_gate]") {
  std::atomic<int> published{0};
  Held held;
  submit_groups(published, 2, std::chrono::milliseconds(100));
  CHECK(release_held_kernels(1) == 1);
  CHECK(published.load() == 1);
  CHECK(release_held_kernels(5) == 1);  // one more came, and then the worker was idle
  CHECK(published.load() == 2);
}

TEST_CASE("kernel gate: with nothing coming a release returns at once and keeps no allowance",
          "[kernel_gate]") {
  std::atomic<int> published{0};
  Held held;
  CompileWorker::instance().drain();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(release_held_kernels(2) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  // The two let go for nothing do not let a later group through.
  submit_groups(published, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(published.load() == 0);
  CHECK(release_held_kernels(1) == 1);
  CHECK(published.load() == 1);
}
