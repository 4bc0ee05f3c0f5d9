// The only code that touches the c10 dispatcher. A boxed fallback on DispatchKey::Fake (free in
// LibTorch 2.11 and below autograd) sees every top-level op of a thread whose TLS includes the
// key: forward ops, backward ops on the autograd engine's threads (which inherit the TLS), and
// the optimizer's ops. Nested ops that kernels call are not seen: the key is excluded while an
// op runs.
#pragma once

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

// Plain-eager blocks (the governor's baseline: the loop with no hook at all). In a training loop
// found at its forward passes: takes the hook out of the owner thread's dispatch while an
// unsampled thread-local RecordFunction callback, which reads nothing but grad mode and the op's
// name, counts `iterations` iterations by their forward passes (an op with grad mode on after
// ops with grad mode off, named as the pass's first op in `pass_starts`; the block starts at the
// first pass of an iteration, whose first op has run); as each later iteration of the block
// starts, `on_tick` runs; as the iteration after them starts, `on_end` runs (both on the owner
// thread) and the hook is back from the next op, before which the sink hears of it
// (OpCall::back_from_plain). False when another block is running in the process.
bool start_plain_block(const std::vector<std::string>& pass_starts, int iterations,
                       std::function<void()> on_tick, std::function<void()> on_end);
// In a loop marked with step(): the session counts the block itself; this only takes the hook
// out of (false) or puts it back into (true) the owner thread's dispatch.
void hook_current_thread(bool on);
// Ends a block started by start_plain_block on this thread early, without calling its on_end
// (a Pause began in it); the hook is back. False when none runs.
bool cancel_plain_block();

}  // namespace hotpath::detail
