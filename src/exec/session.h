// What one thread that enabled hotpath owns: its recorder and the executor of its plans.
#pragma once

#include <memory>

#include "exec/executor.h"
#include "trace/recorder.h"

namespace hotpath::detail {

struct Session {
  explicit Session(const Config& config) : recorder(config), executor(recorder, config) {
    recorder.set_hot_listener([this](HotTrace&& t) { executor.on_hot(std::move(t)); });
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Recorder recorder;
  Executor executor;
};

// The calling thread's session (kept after disable), or nullptr. For tests and tools.
std::shared_ptr<Session> thread_session();

}  // namespace hotpath::detail
