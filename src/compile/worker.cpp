#include "compile/worker.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <exception>

#include "common/error.h"
#include "common/log.h"

namespace hotpath::detail {
namespace {

// Made in each thread that submits to a worker or starts it; in the process's main thread its
// destruction, as the process exits, stops the workers: the main thread's thread-local objects
// are destroyed before any static one.
struct ExitGuard {
  ~ExitGuard() {
    if (getpid() != static_cast<pid_t>(syscall(SYS_gettid))) return;
    CompileWorker::instance().stop();
    CompileWorker::side().stop();
    CompileWorker::ahead().stop();
  }
};
thread_local ExitGuard exit_guard;

}  // namespace

CompileWorker& CompileWorker::instance() {
  static CompileWorker worker;
  return worker;
}

CompileWorker& CompileWorker::side() {
  static CompileWorker worker;
  return worker;
}

CompileWorker& CompileWorker::ahead() {
  static CompileWorker worker;
  return worker;
}

void* CompileWorker::entry(void* self) {
  static_cast<CompileWorker*>(self)->run();
  return nullptr;
}

void CompileWorker::start_locked() {
  (void)&exit_guard;  // made in this thread (see ExitGuard)
  if (started_ || stopped_) return;
  // NVRTC recurses deeply on long expressions; the default thread stack is not always enough.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t{256} << 20);
  const int rc = pthread_create(&thread_, &attr, &CompileWorker::entry, this);
  pthread_attr_destroy(&attr);
  HOTPATH_CHECK(rc == 0, "cannot start the compile thread (pthread_create: ", rc, ")");
  started_ = true;
}

void CompileWorker::start() {
  std::lock_guard<std::mutex> lock(mu_);
  start_locked();
}

void CompileWorker::submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return;  // the process is exiting
  start_locked();
  jobs_.push_back(std::move(job));
  cv_.notify_one();
}

void CompileWorker::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

bool CompileWorker::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.empty() && !busy_;
}

void CompileWorker::run() {
  // Compiles yield to the training thread where cores are short (a lower priority, nice 10).
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10) != 0)
    log_debug("hotpath: could not lower the compile thread's priority");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      log_warn(concat("hotpath: compile job failed: ", e.what()));
    }
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_cv_.notify_all();
  }
}

void CompileWorker::stop() {
  bool join = false;
  std::deque<std::function<void()>> dropped;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_ = true;
    dropped.swap(jobs_);
    cv_.notify_all();
    join = started_;
    started_ = false;
  }
  if (join) pthread_join(thread_, nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  idle_cv_.notify_all();  // drain() returns: nothing is left to run
}

CompileWorker::~CompileWorker() { stop(); }

}  // namespace hotpath::detail
