// A test's hand on when a plan's groups take their kernels (fuzz_programs and train_diff:
// --handover). In a cold start the groups run on the interpreter or as their eager ops while
// NVRTC compiles, and each takes its kernel whenever the worker has it, often in the middle of an
// iteration. Held, the worker waits before each group's kernel is published (Executor::compile)
// until a test lets it go, so that a test decides where in its loop the handover comes, and can
// repeat it.
//
// Nothing holds unless a test calls hold_kernels(true): a production run pays one relaxed load a
// group. A group held longer than kGateTimeout goes anyway (a test that never lets go must not
// hang the process at exit), with a warning.
#pragma once

#include <chrono>
#include <functional>

namespace hotpath::detail {

constexpr std::chrono::seconds kGateTimeout{120};

// On: from now on each group waits before its kernel is published. Off: every waiting group
// goes, and later ones do not wait.
void hold_kernels(bool on);

// Lets `n` more held groups take their kernels (in the order the worker reaches them) and waits
// until they have, or until no group waits and the compile worker is idle (no more can come), or
// kGateTimeout. Returns how many were published.
int release_held_kernels(int n);

// A test's hold for a scope: held from construction when `on`, let go by let_go() or at the
// scope's end whatever happens (else the next run's kernels would wait at the gate).
class HeldKernels {
 public:
  explicit HeldKernels(bool on) : on_(on) {
    if (on_) hold_kernels(true);
  }
  HeldKernels(const HeldKernels&) = delete;
  HeldKernels& operator=(const HeldKernels&) = delete;
  ~HeldKernels() { let_go(); }
  void let_go() {
    if (on_) hold_kernels(false);
    on_ = false;
  }
  bool on() const { return on_; }

 private:
  bool on_;
};

// The worker's side: runs `publish` (a group's state stored), once the gate lets the group go.
void publish_through_gate(const std::function<void()>& publish);

}  // namespace hotpath::detail
