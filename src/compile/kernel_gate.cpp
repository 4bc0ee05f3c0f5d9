#include "compile/kernel_gate.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "common/log.h"
#include "compile/worker.h"

namespace hotpath::detail {
namespace {

struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool holding = false;
  long allowed = 0;    // groups the test has let go since holding began
  long published = 0;  // groups that went through while holding (let go or timed out)
  int waiting = 0;
};

Gate& gate() {
  static Gate* g = new Gate();  // used by the worker up to the process's exit: never destroyed
  return *g;
}

std::atomic<bool> held{false};

}  // namespace

void hold_kernels(bool on) {
  Gate& g = gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.holding = on;
    g.allowed = g.published;
    held.store(on, std::memory_order_relaxed);
  }
  g.cv.notify_all();
}

int release_held_kernels(int n) {
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  if (!g.holding || n <= 0) return 0;
  const long before = g.published;
  const long target = g.allowed = std::max(g.allowed, g.published) + n;
  g.cv.notify_all();
  const auto until = std::chrono::steady_clock::now() + kGateTimeout;
  // Polled: whether the worker is idle is the worker's to say, under its own lock.
  while (g.published < target && std::chrono::steady_clock::now() < until) {
    if (g.waiting == 0) {
      lock.unlock();
      const bool idle = CompileWorker::instance().idle();
      lock.lock();
      if (idle && g.waiting == 0) break;
    }
    g.cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  // What was let go and did not come stays let go only while the test waits for it.
  if (g.allowed > g.published) g.allowed = g.published;
  return static_cast<int>(g.published - before);
}

void publish_through_gate(const std::function<void()>& publish) {
  if (!held.load(std::memory_order_relaxed)) {
    publish();
    return;
  }
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  ++g.waiting;
  g.cv.notify_all();
  const bool let_go =
      g.cv.wait_for(lock, kGateTimeout, [&] { return !g.holding || g.published < g.allowed; });
  --g.waiting;
  if (!let_go)
    log_warn(
        "hotpath: a held kernel was published after the gate's timeout (a test that holds "
        "kernels did not let them go)");
  publish();
  if (g.holding) ++g.published;
  g.cv.notify_all();
}

}  // namespace hotpath::detail
