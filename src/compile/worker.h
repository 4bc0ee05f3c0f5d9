// Background threads that compile kernels, so that the training loop keeps running eagerly while
// NVRTC works. Each worker runs its jobs in submission order: instance() builds plans, side()
// the interpreter kernel, which takes seconds to compile where no prebuilt copy fits and must not
// hold up the plans behind it, ahead() the kernels of signatures not hot yet. All stop as the
// process's main thread exits (stop()).
#pragma once

#include <pthread.h>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

namespace hotpath::detail {

class CompileWorker {
 public:
  static CompileWorker& instance();  // plans
  static CompileWorker& side();      // the interpreter kernel, beside the plans
  // Kernels compiled before their signature is hot (exec/ahead.h): beside the plans, so that a
  // plan is built (and the interpreter stands in) while such a compile runs.
  static CompileWorker& ahead();
  void submit(std::function<void()> job);
  // Starts the thread now if it has not started (submit starts it otherwise): creating it costs
  // the caller a fraction of a millisecond, which the training loop should not pay at a hot step.
  void start();
  // Blocks until every job submitted so far has finished (tests, shutdown).
  void drain();
  // No job waits and none runs (a test's gate asks whether more can come: compile/kernel_gate.h).
  bool idle();
  // Drops the jobs not started, waits for the one running and ends the thread; later jobs are
  // dropped. Both workers stop when the process's main thread exits, before any static object
  // is destroyed: a job still running then would otherwise go on among destroyed objects (the
  // workers' own destructors run only after those constructed after them, in the job among
  // them).
  void stop();
  ~CompileWorker();

 private:
  CompileWorker() = default;
  void run();
  static void* entry(void* self);
  void start_locked();
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false;
  bool stop_ = false;
  pthread_t thread_{};
  bool started_ = false;
  bool stopped_ = false;  // stop(): no thread, jobs dropped
};

}  // namespace hotpath::detail
