// The thread that issues a replay's CUDA graphs for the training loop (Config::replay_launcher).
//
// A graph launch costs the loop's thread 4-6 us where the driver's code and data have left the
// caches, as they have in a training loop between two launches (1.3 us back to back:
// benchmarks/results/2026-11-27-launch-cache.md), a kernel node's new parameters 0.4 us more. A
// replay hands each segment's launch to this thread instead and goes on with the next op; the
// thread issues them in the order they came, on the stream each names.
//
// Order: a launch is issued after every launch submitted before it. Whoever issues other work on
// the stream, or reads or frees memory a submitted launch uses, calls drain() first: it returns
// once everything submitted has been issued (the GPU may still be running it, as after any launch
// on the loop's own thread). The caller keeps what a launch reads alive until done() passes its
// ticket. One submitter at a time (a replay's calls are under its executor's lock).
//
// Errors: an issue that throws stops the launches after it (they are not issued); submit() and
// drain() throw hotpath::Error with its message from then on.
//
// The thread spins for a while after its last launch (a replayed step's next segment comes within
// tens of microseconds), then sleeps until the next submit wakes it. The queue is a ring of
// kSlots that the submitter and the thread hand over with two counters, each on a cache line of
// its own, so that the two threads share as few lines as they can.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace hotpath::detail {

// The CPUs the calling thread may run on (its affinity mask: a launcher thread started from it
// shares them); 1 where the mask cannot be read. With one, a launcher's spinning would take the
// CPU from the loop it works for.
int usable_cpus();

class ReplayLauncher {
 public:
  // `start`: run first on the new thread (the device made current there); its error is the
  // launcher's first. `spin_us`: how long the thread spins for the next launch before it sleeps.
  explicit ReplayLauncher(std::function<void()> start, double spin_us = kSpinUs);
  ~ReplayLauncher();  // issues what is submitted (errors dropped), then ends the thread
  ReplayLauncher(const ReplayLauncher&) = delete;
  ReplayLauncher& operator=(const ReplayLauncher&) = delete;

  // Queues `issue` after everything submitted so far (waiting for a free slot if all kSlots are
  // taken); its ticket (1, 2, ...).
  std::uint64_t submit(std::function<void()> issue);
  // Returns once every submitted issue has run; throws the first error one threw.
  void drain();
  // Tickets issued so far (every ticket up to it has run, or been dropped after an error).
  std::uint64_t done() const { return done_.value.load(std::memory_order_acquire); }
  std::uint64_t submitted() const { return own_.submitted; }
  // The thread's time in issues so far (the host time the loop's thread no longer spends), us.
  double busy_us() const {
    return static_cast<double>(thread_counts_.busy_ns.load(std::memory_order_relaxed)) * 1e-3;
  }
  // Times the thread went to sleep for want of work, and times drain() waited for it.
  std::int64_t sleeps() const { return thread_counts_.sleeps.load(std::memory_order_relaxed); }
  std::int64_t waits() const { return own_.waits; }

  static constexpr double kSpinUs = 500;
  static constexpr std::size_t kSlots = 64;

 private:
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> value{0};
  };
  // A slot to a cache line of its own: the thread empties one while the submitter fills the next.
  struct alignas(64) Slot {
    std::function<void()> issue;
  };
  void run(std::function<void()> start);
  void fail(std::string why);
  [[noreturn]] void throw_error();
  void wait_done(std::uint64_t ticket);  // until done() reaches it

  // Written by the submitter only.
  struct alignas(64) Submitter {
    std::uint64_t submitted = 0;  // its copy of queued_
    std::int64_t waits = 0;
  } own_;
  std::array<Slot, kSlots> slots_;  // ticket t in slots_[(t - 1) % kSlots]
  Counter queued_;                  // tickets submitted (the thread reads it)
  Counter done_;                    // tickets issued (the submitter reads it)
  // Written by the thread only (besides done_).
  struct alignas(64) Thread {
    std::atomic<std::int64_t> busy_ns{0};
    std::atomic<std::int64_t> sleeps{0};
  } thread_counts_;
  // Read by both, written rarely.
  struct alignas(64) Flags {
    std::atomic<bool> sleeping{false};
    std::atomic<bool> stopping{false};
    std::atomic<bool> failed{false};
  } flags_;
  const double spin_us_;
  std::mutex mu_;  // sleeping and waking, and error_
  std::condition_variable cv_;
  std::string error_;  // under mu_; the first
  std::thread thread_;
};

}  // namespace hotpath::detail
