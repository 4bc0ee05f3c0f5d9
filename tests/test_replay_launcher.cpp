// The thread that issues a replay's graph launches (exec/replay_launcher.h): order, waiting for
// it, errors, sleeping and waking, and what it issues before it ends. No GPU: the issues here are
// plain functions.
#include <sched.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/replay_launcher.h"
#include "hotpath/error.h"

using hotpath::detail::ReplayLauncher;
using hotpath::detail::usable_cpus;

namespace {

std::string error_of(ReplayLauncher& l) {
  try {
    l.drain();
  } catch (const hotpath::Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("the launcher issues in submission order on a thread of its own", "[launcher]") {
  std::thread::id started_on;
  ReplayLauncher l([&] { started_on = std::this_thread::get_id(); });
  std::vector<int> order;  // written by the launcher's thread only, read after drain()
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t ticket = l.submit([&order, &threads, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
    CHECK(ticket == static_cast<std::uint64_t>(i + 1));
  }
  l.drain();
  CHECK(l.done() == 200);
  CHECK(l.submitted() == 200);
  REQUIRE(order.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  for (const auto& t : threads) CHECK(t == started_on);  // after its start, on its thread
  CHECK(started_on != std::this_thread::get_id());
}

TEST_CASE("drain waits for an issue that is still running", "[launcher]") {
  ReplayLauncher l(nullptr);
  std::atomic<bool> finished{false};
  l.submit([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    finished.store(true);
  });
  l.drain();
  CHECK(finished.load());
  CHECK(l.waits() == 1);
  // Its time on the thread is counted (at least the sleep).
  CHECK(l.busy_us() >= 29000.0);
  l.drain();  // nothing pending: returns at once, no wait counted
  CHECK(l.waits() == 1);
}

TEST_CASE("an issue that throws stops the ones after it, and every later call says why",
          "[launcher]") {
  ReplayLauncher l(nullptr);
  std::atomic<int> ran{0};
  l.submit([&] { ++ran; });
  l.submit([] { throw std::runtime_error("cudaGraphLaunch failed: an illegal address"); });
  l.submit([&] { ++ran; });  // dropped: issued after a failed launch it would read garbage
  const std::string why = error_of(l);
  CHECK(why.find("cudaGraphLaunch failed: an illegal address") != std::string::npos);
  CHECK(why.find("launcher thread") != std::string::npos);
  CHECK(ran.load() == 1);
  CHECK(l.done() == 3);
  CHECK_THROWS_AS(l.submit([] {}), hotpath::Error);
  CHECK(error_of(l) == why);
}

TEST_CASE("a start that fails is the launcher's first error", "[launcher]") {
  ReplayLauncher l([] { throw std::runtime_error("cudaSetDevice(3) failed: invalid device"); });
  std::atomic<int> ran{0};
  l.submit([&] { ++ran; });
  const std::string why = error_of(l);
  CHECK(why.find("could not start") != std::string::npos);
  CHECK(why.find("cudaSetDevice(3)") != std::string::npos);
  CHECK(ran.load() == 0);
}

TEST_CASE("the launcher sleeps when no launch comes and a submit wakes it", "[launcher]") {
  ReplayLauncher l(nullptr, /*spin_us=*/50);
  std::atomic<int> ran{0};
  l.submit([&] { ++ran; });
  l.drain();
  // Well past its spin: asleep (it says so once it has gone to sleep).
  auto sleeps_reach = [&](std::int64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (l.sleeps() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return l.sleeps() >= n;
  };
  REQUIRE(sleeps_reach(1));
  const std::int64_t asleep = l.sleeps();
  for (int i = 0; i < 3; ++i) l.submit([&] { ++ran; });
  l.drain();
  CHECK(ran.load() == 4);           // woken for them
  CHECK(sleeps_reach(asleep + 1));  // and asleep again after its spin
}

TEST_CASE("a launcher that ends issues what it was handed first", "[launcher]") {
  std::atomic<int> ran{0};
  {
    ReplayLauncher l(nullptr);
    for (int i = 0; i < 5; ++i) {
      l.submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ++ran;
      });
    }
  }
  CHECK(ran.load() == 5);
}

TEST_CASE("the CPUs a launcher would share with the loop are the thread's affinity mask",
          "[launcher]") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  CHECK(usable_cpus() == CPU_COUNT(&all));
  // Pinned to one CPU (as a job scheduler may start a rank): a launcher would take it from the
  // loop, so replay keeps its launches on the loop's thread.
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const int pinned = usable_cpus();
  REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(pinned == 1);
  CHECK(usable_cpus() == CPU_COUNT(&all));
}
