#include "exec/replay_launcher.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "common/error.h"

namespace hotpath::detail {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

ReplayLauncher::ReplayLauncher(std::function<void()> start, double spin_us) : spin_us_(spin_us) {
  thread_ = std::thread([this, s = std::move(start)]() mutable { run(std::move(s)); });
}

ReplayLauncher::~ReplayLauncher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    flags_.stopping.store(true, std::memory_order_seq_cst);
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ReplayLauncher::fail(std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) error_ = std::move(why);
  flags_.failed.store(true, std::memory_order_release);
}

void ReplayLauncher::throw_error() {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why = error_;
  }
  HOTPATH_FAIL("a replayed CUDA graph could not be issued (the replay's launcher thread): ", why);
}

void ReplayLauncher::run(std::function<void()> start) {
  if (start) {
    try {
      start();
    } catch (const std::exception& e) {
      fail(concat("the launcher thread could not start: ", e.what()));
    }
  }
  const auto spin_ns = static_cast<std::int64_t>(spin_us_ * 1e3);
  std::uint64_t next = 1;  // the ticket to issue next
  for (;;) {
    if (queued_.value.load(std::memory_order_acquire) < next) {
      // The next launch of a replayed step comes within tens of microseconds: wait for it
      // spinning (a sleeping thread takes longer to wake than a launch takes to issue).
      const std::int64_t until = now_ns() + spin_ns;
      while (queued_.value.load(std::memory_order_acquire) < next &&
             !flags_.stopping.load(std::memory_order_acquire) && now_ns() < until)
        cpu_relax();
      if (queued_.value.load(std::memory_order_acquire) < next) {
        // Asleep: a submit that comes after `flags_.sleeping` is set sees it and wakes the thread;
        // one that came before is seen here (both sides' stores and loads are sequentially
        // consistent).
        std::unique_lock<std::mutex> lock(mu_);
        flags_.sleeping.store(true, std::memory_order_seq_cst);
        if (queued_.value.load(std::memory_order_seq_cst) < next &&
            !flags_.stopping.load(std::memory_order_seq_cst)) {
          thread_counts_.sleeps.fetch_add(1, std::memory_order_relaxed);
          cv_.wait(lock, [&] {
            return queued_.value.load(std::memory_order_seq_cst) >= next ||
                   flags_.stopping.load(std::memory_order_seq_cst);
          });
        }
        flags_.sleeping.store(false, std::memory_order_relaxed);
        if (queued_.value.load(std::memory_order_acquire) < next) return;  // stopping, all issued
      }
      continue;
    }
    std::function<void()>& issue = slots_[(next - 1) % kSlots].issue;
    const std::int64_t t0 = now_ns();
    if (!flags_.failed.load(std::memory_order_acquire)) {
      try {
        issue();
      } catch (const std::exception& e) {
        fail(e.what());
      }
    }
    // What it captured goes before its ticket is done, timed with it: a job may be there only to
    // let go of what it holds (Replay::let_go).
    issue = nullptr;
    thread_counts_.busy_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    done_.value.store(next, std::memory_order_release);
    ++next;
  }
}

std::uint64_t ReplayLauncher::submit(std::function<void()> issue) {
  if (flags_.failed.load(std::memory_order_acquire)) throw_error();
  const std::uint64_t ticket = own_.submitted + 1;
  if (ticket > kSlots) wait_done(ticket - kSlots);  // its slot's last issue has run
  slots_[(ticket - 1) % kSlots].issue = std::move(issue);
  queued_.value.store(ticket, std::memory_order_seq_cst);
  own_.submitted = ticket;
  if (flags_.sleeping.load(std::memory_order_seq_cst)) {
    { std::lock_guard<std::mutex> lock(mu_); }  // the thread is in its wait, or sees the ticket
    cv_.notify_one();
  }
  return ticket;
}

void ReplayLauncher::wait_done(std::uint64_t ticket) {
  if (done() >= ticket) return;
  ++own_.waits;
  int spins = 0;
  while (done() < ticket) {
    if (++spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a launch that takes long (the driver's queue is full)
    }
  }
}

void ReplayLauncher::drain() {
  wait_done(own_.submitted);
  if (flags_.failed.load(std::memory_order_acquire)) throw_error();
}

}  // namespace hotpath::detail
