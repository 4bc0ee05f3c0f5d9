// What one thread that enabled hotpath owns: its recorder, the executor of its plans, and the
// governor that times them.
#pragma once

#include <memory>

#include "exec/executor.h"
#include "policy/governor.h"
#include "trace/recorder.h"

namespace hotpath::detail {

struct Session {
  explicit Session(const Config& config)
      : recorder(config), executor(recorder, config), governor(executor, config) {
    recorder.set_hot_listener([this](HotTrace&& t) {
      const std::uint64_t sig = t.signature;
      executor.on_hot(std::move(t), governor.remembered(sig));
    });
    recorder.set_iteration_listener([this](const IterationEvent& e) { governor.on_iteration(e); });
    recorder.set_instant_hot([this](std::uint64_t sig) {
      const auto d = governor.remembered(sig);
      return d.has_value() && d->compile;
    });
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void configure(const Config& config) {
    recorder.configure(config);
    executor.configure(config);
    governor.configure(config);
  }
  // An iteration boundary (step(), Iteration scope) before the next op.
  void boundary() {
    executor.on_boundary();
    governor.stamp(recorder.next_index());
  }

  Recorder recorder;
  Executor executor;
  Governor governor;
};

// The calling thread's session (kept after disable), or nullptr. For tests and tools.
std::shared_ptr<Session> thread_session();

}  // namespace hotpath::detail
