// Plain-eager blocks of an unmarked loop and the iteration marker that counts them
// (dispatch_hook.h, start_plain_block and mark_operator).
//
// The hook is out of the owner thread's dispatch during a block, so something else has to find
// where the block's iterations start. A RecordFunction callback sees every op, but its mere
// presence sends every dispatcher call (nested ones and the autograd engine's too) down the
// profiling path: on a 2742-op LM step that is several milliseconds, charged to plain eager. The
// marker sees one operator: a boxed kernel for the iteration's first operator on a key above
// autograd (kMarkKey), which every other operator falls through (the dispatcher masks
// fallthrough keys out before it dispatches). How many of that operator's calls an iteration
// makes (nested ones included) is learned from the RecordFunction count of a block's first two
// iterations, which runs beside it; the session then checks that a block the marker ended did end
// at an iteration start (Session::check_after_block).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/faults.h"
#include "common/log.h"
#include "dispatch/dispatch_hook.h"
#include "dispatch/hook_key.h"
#include "dispatch/plain_block.h"

namespace hotpath::detail {
namespace {

// More marked calls than this per iteration: the operator is too common to count cheaply.
constexpr std::int64_t kMaxMarksPerIteration = 64;

// One block at a time in the process. The RecordFunction count reads `active` and `off_seen` on
// autograd's threads too; the rest is the owner thread's.
struct PlainCount {
  std::atomic<bool> active{false};
  std::atomic<bool> off_seen{false};
  std::thread::id owner;
  int iterations = 0, seen = 0;
  std::vector<std::string> passes;  // first op of each forward pass of an iteration
  std::size_t next_pass = 0;
  std::function<void()> on_tick;
  std::function<void(PlainEnd)> on_end;
  std::function<void(std::int64_t, int)> on_marks;
  // The marker: learning (marks at the block's iteration starts, from the callback's count),
  // then counting (the mark that starts the next iteration).
  bool learn = false;
  std::vector<std::int64_t> learned;
  bool by_marks = false;
  bool drop_callback = false;  // learned: the marker's next call drops the callback
  bool miscounted = false;     // a counted call came with grad mode off: no iteration start
  std::int64_t per_iteration = 0, next_mark = 0;
};
PlainCount plain_count;
thread_local bool tls_block_here = false;  // the calling thread runs the block
thread_local bool tls_plain_returned = false;
thread_local std::optional<at::CallbackHandle> tls_plain_callback;
thread_local std::int64_t tls_marks = 0;
thread_local bool tls_marks_included = false;  // kMarkKey switched on here by mark_operator
// Puts the hook back where the thread's dispatch state was restored after the marker's end (the
// autograd engine restores the state it started with when a backward run on this thread ends).
std::optional<at::CallbackHandle> come_back_callback;  // global; owner thread only
constexpr double kComeBackSampling = 1e-2;

std::mutex marks_mu;
std::optional<c10::RegistrationHandleRAII> marks_fallthrough;  // once taken, kept
std::map<std::string, c10::RegistrationHandleRAII> marked;     // "name.overload"
bool marks_unavailable = false;

void drop_plain_callback() {
  if (tls_plain_callback) at::removeCallback(*tls_plain_callback);
  tls_plain_callback.reset();
}

void drop_come_back() {
  if (come_back_callback) at::removeCallback(*come_back_callback);
  come_back_callback.reset();
}

std::unique_ptr<at::ObserverContext> come_back(const at::RecordFunction&) {
  if (tls_plain_returned && !c10::impl::tls_is_dispatch_key_included(kHookKey))
    c10::impl::tls_set_dispatch_key_included(kHookKey, true);
  return nullptr;
}

// The hook is back in the thread's dispatch; the sink hears of it with the next op.
void hook_back() {
  c10::impl::tls_set_dispatch_key_included(kHookKey, true);
  tls_plain_returned = true;
}

// The block is over: the op running now is the iteration after it, and runs plain; the hook
// sees the next one. The marker puts the hook back itself once the op has run (else the ops it
// calls would be seen as the loop's); true then.
bool end_block(PlainEnd how) {
  PlainCount& p = plain_count;
  p.active.store(false, std::memory_order_relaxed);
  tls_block_here = false;
  p.on_end(how);
  if (how == PlainEnd::Counted) {
    hook_back();
    return false;
  }
  if (!come_back_callback) {
    come_back_callback = at::addGlobalCallback(at::RecordFunctionCallback(&come_back)
                                                   .samplingProb(kComeBackSampling)
                                                   .scopes({at::RecordScope::FUNCTION}));
  }
  return true;
}

// Another iteration of the block starts with the op running now; true when it is the one after
// the block and the marker ended it.
bool iteration_starts() {
  PlainCount& p = plain_count;
  if (++p.seen < p.iterations) {
    p.on_tick();
    return false;
  }
  return end_block(p.by_marks ? PlainEnd::Marked : PlainEnd::Counted);
}

// The learned count, where the block's first two iterations agree: the marker counts the rest.
void learned(std::int64_t mark_now) {
  PlainCount& p = plain_count;
  p.learn = false;
  const std::int64_t d1 = p.learned[1] - p.learned[0], d2 = mark_now - p.learned[1];
  const int left = p.iterations - 2;
  if (d1 != d2 || d1 <= 0 || d1 > kMaxMarksPerIteration || left < 2) {
    log_debug(concat("hotpath: the iteration marker saw ", d1, " then ", d2,
                     " calls per iteration: the block goes on with RecordFunction"));
    return;
  }
  // A test fault: the count is off by one, so the block ends away from an iteration start.
  const std::int64_t per = d1 + (fault_armed(kFaultMarks) ? 1 : 0);
  p.by_marks = true;
  p.drop_callback = true;
  p.per_iteration = per;
  p.next_mark = mark_now + per;
  p.iterations = left;
  p.seen = 0;
  p.on_marks(per, left);
}

std::unique_ptr<at::ObserverContext> count_plain(const at::RecordFunction& fn) {
  PlainCount& p = plain_count;
  if (!p.active.load(std::memory_order_relaxed)) return nullptr;
  if (!c10::GradMode::is_enabled()) {  // backward (on autograd's threads too), optimizer
    p.off_seen.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  if (p.by_marks || !p.off_seen.load(std::memory_order_relaxed) ||
      std::this_thread::get_id() != p.owner ||
      std::strcmp(fn.name(), p.passes[p.next_pass].c_str()) != 0)
    return nullptr;
  p.off_seen.store(false, std::memory_order_relaxed);
  const bool starts = p.next_pass == 0;
  p.next_pass = (p.next_pass + 1) % p.passes.size();
  if (!starts) return nullptr;
  if (p.learn) {
    // Callbacks run before the op's kernels: its own mark is still to come.
    const std::int64_t mark_now = tls_marks + 1;
    if (p.learned.size() == 1) {
      p.learned.push_back(mark_now);
    } else {
      learned(mark_now);
      if (p.by_marks) return nullptr;  // the block's samples start here
    }
  }
  iteration_starts();
  return nullptr;
}

void count_mark(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  ++tls_marks;
  PlainCount& p = plain_count;
  bool back = false;
  if (tls_block_here && p.by_marks) {
    if (p.drop_callback) {
      p.drop_callback = false;
      drop_plain_callback();
    }
    const bool forward = c10::GradMode::is_enabled();
    if (p.miscounted) {
      // The block ends at the next call in a forward pass, away from the autograd engine.
      if (forward) back = end_block(PlainEnd::Miscounted);
    } else if (tls_marks == p.next_mark) {
      if (forward) {
        p.next_mark += p.per_iteration;
        back = iteration_starts();
      } else {
        p.miscounted = true;  // iterations start in a forward pass
      }
    }
  }
  // The hook comes back once the op has run, or failed.
  struct Back {
    bool now;
    ~Back() {
      if (now) hook_back();
    }
  } after{back};
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kMarkKey), stack);
}

// The marker key's fallthrough, registered once (marks_mu held); false where the key is someone
// else's. Registering a fallback rebuilds every operator's dispatch table (2-3 ms), so it happens
// when a thread attaches, not in the loop.
bool marks_ready_locked() {
  if (marks_unavailable) return false;
  if (marks_fallthrough) return true;
  auto& dispatcher = c10::Dispatcher::singleton();
  // Someone else's key (another tool, or a test of ATen's): plain blocks count without it.
  if (dispatcher.hasBackendFallbackForDispatchKey(kMarkKey) ||
      (c10::impl::tls_is_dispatch_key_included(kMarkKey) && !tls_marks_included)) {
    marks_unavailable = true;
    log_info(concat("hotpath: dispatch key '", c10::toString(kMarkKey),
                    "' is in use by another library: plain-eager blocks count their iterations "
                    "with a RecordFunction callback (their times include its cost)"));
    return false;
  }
  marks_fallthrough.emplace(dispatcher.registerFallback(
      kMarkKey, c10::KernelFunction::makeFallthrough(), "hotpath iteration marker"));
  return true;
}

}  // namespace

bool start_plain_block(PlainBlockSpec spec) {
  PlainCount& p = plain_count;
  if (!current_thread_attached() || p.active.load() || tls_block_here || spec.pass_starts.empty())
    return false;
  p.owner = std::this_thread::get_id();
  p.iterations = spec.iterations;
  p.seen = 0;
  p.passes = std::move(spec.pass_starts);
  p.next_pass = 1 % p.passes.size();  // the first pass's first op has run
  p.on_tick = std::move(spec.on_tick);
  p.on_end = std::move(spec.on_end);
  p.on_marks = std::move(spec.on_marks);
  p.off_seen.store(false);
  p.learned.clear();
  p.drop_callback = false;
  p.miscounted = false;
  // The block's first op has run, and the marker counted it.
  p.by_marks = spec.by_marks && spec.marks_per_iteration > 0;
  p.learn = spec.by_marks && !p.by_marks && spec.iterations >= 4;
  if (p.by_marks) {
    p.per_iteration = spec.marks_per_iteration;
    p.next_mark = tls_marks + p.per_iteration;
  } else {
    if (p.learn) p.learned.push_back(tls_marks);
    tls_plain_callback = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&count_plain).scopes({at::RecordScope::FUNCTION}));
  }
  p.active.store(true);
  tls_block_here = true;
  c10::impl::tls_set_dispatch_key_included(kHookKey, false);
  return true;
}

bool stop_plain_count() {
  tls_plain_returned = false;
  drop_plain_callback();
  drop_come_back();
  if (!tls_block_here) return false;
  tls_block_here = false;
  plain_count.active.store(false);
  return true;
}

bool take_plain_return() {
  if (!tls_plain_returned) return false;
  tls_plain_returned = false;
  drop_plain_callback();
  drop_come_back();
  return true;
}

bool cancel_plain_block() {
  if (!stop_plain_count()) return false;
  c10::impl::tls_set_dispatch_key_included(kHookKey, true);
  return true;
}

void prepare_marks() {
  std::lock_guard<std::mutex> lock(marks_mu);
  marks_ready_locked();
}

Marker mark_operator(const std::string& name, const std::string& overload) {
  if (!current_thread_attached()) return Marker::Unavailable;
  std::lock_guard<std::mutex> lock(marks_mu);
  if (!marks_ready_locked()) return Marker::Unavailable;
  auto& dispatcher = c10::Dispatcher::singleton();
  if (!tls_marks_included) {
    c10::impl::tls_set_dispatch_key_included(kMarkKey, true);
    tls_marks_included = true;
  }
  const std::string key = overload.empty() ? name : name + "." + overload;
  if (marked.count(key) != 0) return Marker::Counting;
  const c10::OperatorName op_name(name, overload);
  if (!dispatcher.findOp(op_name)) return Marker::Unavailable;
  marked.emplace(key,
                 dispatcher.registerImpl(op_name, kMarkKey,
                                         c10::KernelFunction::makeFromBoxedFunction<&count_mark>(),
                                         std::nullopt, nullptr, "hotpath iteration marker"));
  return Marker::Fresh;
}

std::int64_t marks_seen() { return tls_marks; }

void pause_marks(bool paused) {
  if (tls_marks_included) c10::impl::tls_set_dispatch_key_excluded(kMarkKey, paused);
}

void unmark_current_thread() {
  if (!tls_marks_included) return;
  c10::impl::tls_set_dispatch_key_included(kMarkKey, false);
  c10::impl::tls_set_dispatch_key_excluded(kMarkKey, false);
  tls_marks_included = false;
}

void release_marks() {
  std::lock_guard<std::mutex> lock(marks_mu);
  marked.clear();
  // The fallthrough stays (it costs nothing): a thread that still had the key switched on (an
  // autograd thread finishing a backward) must find a kernel for it.
}

}  // namespace hotpath::detail
