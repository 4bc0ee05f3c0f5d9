#include "compile/worker.h"

#include <exception>

#include "common/error.h"
#include "common/log.h"

namespace hotpath::detail {

CompileWorker& CompileWorker::instance() {
  static CompileWorker worker;
  return worker;
}

void CompileWorker::submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  jobs_.push_back(std::move(job));
  cv_.notify_one();
}

void CompileWorker::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

void CompileWorker::run() {
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

CompileWorker::~CompileWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    jobs_.clear();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace hotpath::detail
