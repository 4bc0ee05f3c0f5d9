// A compile job still running when the process exits: it must not go on among destroyed static
// objects (a plan's or the interpreter kernel's compile takes up to seconds; a short program that
// enabled hotpath can end before it does). The job here uses a static object made after the
// worker started, as the interpreter's loading does, and is still asleep when main returns.
// CTest passes the run only if the job finished before that object was destroyed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <unistd.h>

#include "compile/worker.h"

namespace {

std::atomic<bool> witness_gone{false};  // trivially destroyed: readable to the end

struct Witness {
  ~Witness() { witness_gone.store(true); }
};

Witness& witness() {
  static Witness w;
  return w;
}

}  // namespace

int main() {
  using hotpath::detail::CompileWorker;
  auto* started = new std::atomic<bool>(false);  // the job reads it after main returns
  CompileWorker::side().submit([started] {
    witness();  // made now: after the worker, so destroyed before it
    started->store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // main returns meanwhile
    if (witness_gone.load()) {
      std::fprintf(stderr, "worker_exit: the job ran on after a static object was destroyed\n");
      std::fflush(stderr);
      _exit(3);
    }
    std::printf("worker_exit: the job finished before the process's static objects went\n");
    std::fflush(stdout);
  });
  while (!started->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}
