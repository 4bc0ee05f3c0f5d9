// The only code that touches the c10 dispatcher. A boxed fallback on DispatchKey::Fake (free in
// LibTorch 2.11 and below autograd) sees every top-level op of a thread whose TLS includes the
// key: forward ops, backward ops on the autograd engine's threads (which inherit the TLS), and
// the optimizer's ops. Nested ops that kernels call are not seen: the key is excluded while an
// op runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hotpath::detail {

class OpSink;  // dispatch/op_call.h

// Registers the fallback (once, process-wide) and routes the calling thread's ops, and those of
// autograd threads working for it, to `session`: one OpSink::on_op call per op. Throws
// hotpath::Error if the key is taken.
void attach_current_thread(std::shared_ptr<OpSink> session);
// Stops intercepting on the calling thread; the fallback is removed with the last thread.
void detach_current_thread();
bool current_thread_attached();
// Hides the calling thread's ops (and autograd work they start, which inherits the TLS) from the
// fallback; returns whether they were hidden already, for resume_current_thread.
bool pause_current_thread();
void resume_current_thread(bool was_paused);
// Takes the hook out of the calling (owner) thread's dispatch for `seconds`: its ops, and the
// autograd work they start, run plain eager and cost nothing, until a sampled RecordFunction
// callback sees the time is up and puts the hook back; the session is then told
// (OpCall::back_from_aside) with the next op.
void stand_aside_current_thread(double seconds);
bool standing_aside();
// Whether the calling thread is evaluating a backward pass (autograd runs CPU passes on the
// thread that called backward(), each node under a guard that restores the thread-local state
// after it: hotpath switches its hook in and out only outside them).
bool in_backward_pass();

// Plain-eager blocks (the governor's baseline: the loop with no hook at all). In a training loop
// found at its forward passes: the hook is out of the owner thread's dispatch for `iterations`
// iterations, counted in one of two ways (src/dispatch/plain_block.cpp):
// - by the iteration marker (mark_operator on the iteration's first operator): only that
//   operator's calls are seen, each by one small kernel; the block ends at the call that starts
//   the iteration after it, `marks_per_iteration` calls after the block's start. The loop runs
//   as it does without hotpath but for those few calls.
// - by an unsampled thread-local RecordFunction callback, which sees every op (a few hundred
//   nanoseconds each, which the block's times then include) and reads grad mode and the op's
//   name: an iteration starts at its first forward pass (an op with grad mode on after ops with
//   grad mode off, named as the pass's first op in `pass_starts`). With `by_marks` and no count
//   yet, the callback counts the block's first two iterations while the marker counts its calls
//   in them; where both iterations saw the same number, the callback goes and the marker counts
//   the rest of the block: `on_marks(count, iterations left)` says so as the third starts, and
//   the block's samples start there.
// The block starts at the first pass of an iteration, whose first op has run. As each later
// iteration of the block starts, `on_tick` runs; as the iteration after them starts, `on_end`
// runs (told how the block was counted: a block the marker ended has still to be checked to
// have ended at an iteration start; one it miscounted, a marked call where no iteration starts,
// ends at its next call in a forward pass), all on the owner thread, and the hook is back from the
// next op, before which the sink hears of it (OpCall::back_from_plain). False when another block is
// running in the process.
enum class PlainEnd { Counted, Marked, Miscounted };
struct PlainBlockSpec {
  std::vector<std::string> pass_starts;
  int iterations = 0;
  bool by_marks = false;                 // the iteration's first operator is marked
  std::int64_t marks_per_iteration = 0;  // known from an earlier block, or 0
  std::function<void()> on_tick;
  std::function<void(PlainEnd)> on_end;
  std::function<void(std::int64_t marks_per_iteration, int iterations_left)> on_marks;
};
bool start_plain_block(PlainBlockSpec spec);

// The iteration marker: counts, on the calling (owner) thread, the calls of operator
// `name`.`overload` (those the loop makes and those kernels make, fused by a plan or not) with a
// boxed kernel on kMarkKey (dispatch/hook_key.h), through which every other operator falls at no
// cost. Unavailable where another library holds the key; Fresh when this call registered the
// kernel (the op running now was not counted).
enum class Marker { Unavailable, Fresh, Counting };
Marker mark_operator(const std::string& name, const std::string& overload);
std::int64_t marks_seen();  // marked calls on the calling thread so far

// In a loop marked with step(): the session counts the block itself; this only takes the hook
// out of (false) or puts it back into (true) the owner thread's dispatch.
void hook_current_thread(bool on);
// Ends a block started by start_plain_block on this thread early, without calling its on_end
// (a Pause began in it); the hook is back. False when none runs.
bool cancel_plain_block();

}  // namespace hotpath::detail
