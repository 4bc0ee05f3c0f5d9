#include "dispatch/dispatch_hook.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "dispatch/input_keys.h"
#include "dispatch/op_call.h"
#include "dispatch/op_facts.h"
#include "dispatch/plain_block.h"

namespace hotpath::detail {
namespace {

// Autograd threads inherit the caller's ThreadLocalDebugInfo; this kind carries the owner. (Not
// constexpr: LibTorch 2.15 declares the kinds as static const members.)
const c10::DebugInfoKind kOwnerKind = c10::DebugInfoKind::PRODUCER_INFO;

struct OwnerInfo : c10::DebugInfoBase {
  explicit OwnerInfo(std::shared_ptr<OpSink> s) : session(std::move(s)) {}
  std::shared_ptr<OpSink> session;
};

struct ThreadOwner {
  std::shared_ptr<OpSink> session;
  std::shared_ptr<OwnerInfo> info;
  ~ThreadOwner();
};
thread_local ThreadOwner tls_owner;

// Standing aside (stand_aside_current_thread): the owner thread's state.
// A backward pass that autograd runs on this thread (CPU tensors) evaluates each node under a
// guard that restores the thread-local state (dispatch keys, RecordFunction callbacks) it had
// before: what is switched inside the pass does not last. So hotpath stands aside, and comes
// back, only at ops outside backward passes (in_backward_pass); the wake-up callback goes once an
// op outside them has met the hook; an op that meets the hook while it stands aside (a guard put
// it back) takes it out again.
struct Aside {
  bool active = false;      // the hook is out of the thread's dispatch
  bool returned = false;    // put back by the callback; the session has not been told yet
  bool confirming = false;  // put back; the callback stays until an op outside backward sees it
  std::chrono::steady_clock::time_point wake_at;
  std::optional<at::CallbackHandle> callback;
};
thread_local Aside tls_aside;

thread_local HostLaps* tls_host_laps = nullptr;

// About one op in this many runs the wake-up check while standing aside.
constexpr double kWakeSampling = 1e-3;

std::mutex registration_mu;
std::optional<c10::RegistrationHandleRAII> registration;
int attached_threads = 0;

// The fallback goes with the last thread that used it.
void release_thread_locked() {
  if (--attached_threads == 0) {
    release_marks();
    registration.reset();
  }
}

}  // namespace

namespace {

const OpInfo& op_info(const c10::OperatorHandle& op) {
  thread_local ska::flat_hash_map<const c10::FunctionSchema*, OpInfo> cache;
  const c10::FunctionSchema& schema = op.schema();
  // Looked up first: an emplace would build (and drop) an OpInfo for every op.
  if (const auto found = cache.find(&schema); found != cache.end()) return found->second;
  OpInfo info;
  info.name_hash = hash_combine(hash_string(schema.name()), hash_string(schema.overload_name()));
  for (const auto& a : schema.arguments()) {
    const std::size_t i = info.scalar_argument.size();
    info.scalar_argument.push_back(is_scalar_type(a.type()));
    info.position_argument.push_back(is_position_argument(schema, a));
    info.positional = info.positional || info.position_argument.back();
    if (info.scalar_argument.back() && i < 64) info.scalar_mask |= 1ULL << i;
  }
  info.written = written_arguments(schema);
  for (const auto& r : schema.returns()) {
    std::int32_t alias = -1;
    if (r.alias_info() != nullptr && r.alias_info()->isWrite()) {  // in-place / out=, not views
      for (std::size_t i = 0; i < schema.arguments().size(); ++i) {
        const auto* ai = schema.arguments()[i].alias_info();
        if (ai != nullptr && ai->beforeSets() == r.alias_info()->beforeSets()) {
          alias = static_cast<std::int32_t>(i);
          break;
        }
      }
    }
    info.return_alias.push_back(alias);
  }
  return cache.emplace(&schema, std::move(info)).first->second;
}

OpSink* current_session() {
  if (tls_owner.session) return tls_owner.session.get();
  // An autograd (or other) thread running work for an owner thread.
  if (auto* info = dynamic_cast<OwnerInfo*>(c10::ThreadLocalDebugInfo::get(kOwnerKind))) {
    return info->session.get();
  }
  return nullptr;
}

std::unique_ptr<at::ObserverContext> wake_check(const at::RecordFunction&) {
  // Runs on any thread that inherited the callback (autograd's too): only the owner acts, and
  // outside backward passes.
  if (tls_aside.active && tls_owner.session && !in_backward_pass() &&
      std::chrono::steady_clock::now() >= tls_aside.wake_at) {
    tls_aside.active = false;
    tls_aside.returned = true;
    tls_aside.confirming = true;
    c10::impl::tls_set_dispatch_key_included(kHookKey, true);
  }
  return nullptr;
}

void drop_wake_callback() {
  if (tls_aside.callback) at::removeCallback(*tls_aside.callback);
  tls_aside.callback.reset();
}

// The op's output tensors (a list's in order) into `outputs`, their metadata hashed onto `h`
// (unless `hash` is false: `h` comes back as it was); with a record (and the operator's facts),
// kept in it too.
std::uint64_t hash_outputs(std::uint64_t h, const OpInfo* info, const torch::jit::Stack& stack,
                           std::size_t nret, OpRecord* rec, TensorPtrs& outputs, bool hash = true) {
  for_each_returned(stack, nret, [&](const at::TensorBase& t, std::ptrdiff_t i) {
    TensorMeta* m = nullptr;
    if (rec != nullptr) {
      m = &rec->outputs.emplace_back();
      rec->output_alias.push_back(
          info != nullptr && i >= 0 ? info->return_alias[static_cast<std::size_t>(i)] : -1);
    }
    if (hash || m != nullptr) h = hash_meta(h, m, t);
    outputs.push_back(&t);
  });
  return h;
}

void hotpath_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                      torch::jit::Stack* stack) {
  const c10::DispatchKeySet below(c10::DispatchKeySet::FULL_AFTER, kHookKey);
  // Kernels call other ops; the trace wants only the op the loop asked for.
  c10::impl::ExcludeDispatchKeyGuard no_nesting(kHookKey);
  OpSink* session = current_session();
  if (session == nullptr) {
    op.redispatchBoxed(keys & below, stack);
    return;
  }
  const bool owner = static_cast<bool>(tls_owner.session);
  bool back_from_plain = false, back_from_aside = false;
  if (owner) {
    if (tls_aside.active) {  // standing aside, put back by a backward pass's guard: out again
      c10::impl::tls_set_dispatch_key_included(kHookKey, false);
      op.redispatchBoxed(keys & below, stack);
      return;
    }
    back_from_plain = take_plain_return();
    if (tls_aside.returned) {
      tls_aside.returned = false;
      back_from_aside = true;
    }
    if (tls_aside.confirming && !in_backward_pass()) {
      tls_aside.confirming = false;  // back for good: later passes start with it in
      drop_wake_callback();
    }
  }
  // Config::host_profile: this op's laps, ended by the code below (dispatch/host_laps.h); when
  // it is off nothing is set up (the hook runs for every op).
  std::optional<HostLaps> laps;
  struct Timing {
    HostLaps* laps = nullptr;
    ~Timing() {
      if (laps != nullptr) current_host_laps() = nullptr;
    }
  } timing;
  if (session->profiling_host()) {
    laps.emplace();
    timing.laps = &*laps;
    current_host_laps() = timing.laps;
  }
  const OpInfo& info = op_info(op);
  const auto& schema = op.schema();
  const std::size_t nargs = schema.arguments().size();
  if (session->fast_lane_open() && !back_from_plain && !back_from_aside) {
    // A replayed iteration: guarded against its capture with no record built. A step's tail:
    // only whether the op reads or writes a parameter (FastInputs::hashed).
    thread_local FastInputs fast;
    fast.clear();
    fast.hashed = session->fast_lane_guards();
    if (fast.hashed) {
      FastSink sink{fast};
      fast.args_key = walk_inputs(info, *stack, nargs, sink).args;
    } else {
      ParamSink sink{fast};
      walk_inputs(info, *stack, nargs, sink);
    }
    fast.name_key = info.name_hash;
    fast.positional = info.positional;
    fast.grad_enabled = c10::GradMode::is_enabled();
    host_lap(kRecordPart);
    if (session->fast_op(op, keys & below, stack, fast, owner)) {
      if (laps) {
        laps->lap(kOtherPart);
        session->add_host(*laps);
      }
      return;
    }
  }
  // The record to fill: one the recorder handed back for reuse (see OpRing::push_back).
  thread_local std::unique_ptr<OpRecord> spare;
  std::unique_ptr<OpRecord> owned = std::move(spare);
  if (owned) {
    owned->clear();
  } else {
    owned = std::make_unique<OpRecord>();
  }
  OpRecord& rec = *owned;
  rec.name = schema.name();
  rec.overload = schema.overload_name();
  rec.name_key = info.name_hash;
  TensorPtrs inputs;
  {
    RecordInputs sink{rec, inputs};
    const InputKeys k = walk_inputs(info, *stack, nargs, sink);
    rec.input_key = k.input;
    rec.args_key = k.args;
    const auto args = torch::jit::last(*stack, nargs);
    rec.args.reserve(nargs);
    for (std::size_t i = 0; i < nargs; ++i) {
      // Lists of numbers are kept (a reduction's dims); lists that may hold tensors are not, nor
      // objects (a collective's process group: a record must not keep it alive).
      const c10::IValue& a = args[i];
      const bool holds_tensors =
          a.isTensor() || a.isTensorList() || a.isOptionalTensorList() ||
          (a.isList() && !a.isIntList() && !a.isDoubleList() && !a.isBoolList());
      rec.args.push_back(holds_tensors || a.isObject() || a.isCapsule() ? c10::IValue() : args[i]);
    }
  }
  rec.scalar_mask = info.scalar_mask;
  rec.grad_enabled = c10::GradMode::is_enabled();

  OpCall call(op, keys & below, stack, info, owned, inputs);
  host_lap(kRecordPart);
  call.owner = owner;
  call.back_from_plain = back_from_plain;
  call.back_from_aside = back_from_aside;
  session->on_op(call);
  spare = std::move(owned);
  if (laps) {
    laps->lap(kOtherPart);
    session->add_host(*laps);
  }
}

// Probes the key for the calling thread (not attached yet) and registers the fallback.
void register_fallback_locked() {
  auto& dispatcher = c10::Dispatcher::singleton();
  const bool foreign = !registration && dispatcher.hasBackendFallbackForDispatchKey(kHookKey);
  // Switched on by hotpath itself when the thread inherited an attached thread's state.
  const bool ours = dynamic_cast<OwnerInfo*>(c10::ThreadLocalDebugInfo::get(kOwnerKind)) != nullptr;
  const bool included = c10::impl::tls_is_dispatch_key_included(kHookKey) && !ours;
  if (const std::string why = hook_key_conflict(foreign, included); !why.empty()) HOTPATH_FAIL(why);
  if (registration) return;
  registration.emplace(dispatcher.registerFallback(
      kHookKey, c10::KernelFunction::makeFromBoxedFunction<&hotpath_fallback>(),
      "hotpath op hook"));
}

void detach_locked() {
  c10::impl::tls_set_dispatch_key_included(kHookKey, false);
  drop_wake_callback();
  tls_aside = Aside{};
  clear_param_storages();
  stop_plain_count();
  unmark_current_thread();
  if (tls_owner.info) {
    // Our entry is on top unless the caller pushed debug info since enabling and is still in
    // that scope; then it stays, inert (it holds a session nobody feeds from this thread).
    if (dynamic_cast<OwnerInfo*>(c10::ThreadLocalDebugInfo::get(kOwnerKind)) ==
        tls_owner.info.get()) {
      try {
        c10::ThreadLocalDebugInfo::_pop(kOwnerKind);
      } catch (const std::exception&) {
      }
    }
  }
  tls_owner.info.reset();
  tls_owner.session.reset();
  release_thread_locked();
}

ThreadOwner::~ThreadOwner() {
  if (!session) return;
  std::lock_guard<std::mutex> lock(registration_mu);
  release_thread_locked();
}

}  // namespace

HostLaps*& current_host_laps() { return tls_host_laps; }

const TensorPtrs& OpCall::finish() {
  OpRecord& rec = *record_;
  outputs_.clear();
  const std::uint64_t h =
      hash_outputs(rec.input_key, &info_, *stack, op.schema().returns().size(), &rec, outputs_);
  rec.key = rec.planned_key != 0 ? rec.planned_key : h;
  if (rec.planned_key != 0 && !rec.output_alias.empty()) rec.output_alias[0] = rec.planned_alias;
  return outputs_;
}

std::uint64_t fast_outputs(std::uint64_t input_key, const c10::OperatorHandle& op,
                           const torch::jit::Stack& stack, TensorPtrs& outputs, bool hash) {
  return hash_outputs(input_key, nullptr, stack, op.schema().returns().size(), nullptr, outputs,
                      hash);
}

std::string hook_key_conflict(bool foreign_fallback, bool included_by_others) {
  const std::string key = c10::toString(kHookKey);
  if (foreign_fallback) {
    return concat("hotpath intercepts ATen ops through a boxed fallback on dispatch key '", key,
                  "', but another fallback is registered on it in this process (another library, "
                  "or LibTorch ",
                  TORCH_VERSION,
                  " itself: a C++ FakeTensor mode uses that key). hotpath does not take over "
                  "someone else's key; it is tested on LibTorch 2.11 and 2.15, where the key is "
                  "free. Leave the other tool out of this process, or use a LibTorch where the "
                  "key is free.");
  }
  if (included_by_others) {
    return concat("dispatch key '", key,
                  "' is already switched on in this thread's dispatch by someone else (a "
                  "FakeTensor mode, or another tool that uses the key): hotpath would intercept "
                  "ops meant for it. Enable hotpath outside that mode, or on another thread.");
  }
  return {};
}

void attach_current_thread(std::shared_ptr<OpSink> session) {
  std::lock_guard<std::mutex> lock(registration_mu);
  if (tls_owner.session) {
    if (tls_owner.session == session) return;
    detach_locked();
  }
  register_fallback_locked();
  prepare_marks();
  ++attached_threads;
  tls_owner.session = session;
  tls_owner.info = std::make_shared<OwnerInfo>(std::move(session));
  c10::ThreadLocalDebugInfo::_push(kOwnerKind, tls_owner.info);
  c10::impl::tls_set_dispatch_key_included(kHookKey, true);
}

void detach_current_thread() {
  std::lock_guard<std::mutex> lock(registration_mu);
  if (!tls_owner.session) return;
  detach_locked();
}

bool current_thread_attached() { return static_cast<bool>(tls_owner.session); }

void stand_aside_current_thread(double seconds) {
  if (!tls_owner.session) return;
  c10::impl::tls_set_dispatch_key_included(kHookKey, false);
  tls_aside.active = true;
  tls_aside.returned = false;
  tls_aside.confirming = false;
  tls_aside.wake_at = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(seconds));
  if (!tls_aside.callback) {
    tls_aside.callback = at::addThreadLocalCallback(at::RecordFunctionCallback(&wake_check)
                                                        .samplingProb(kWakeSampling)
                                                        .scopes({at::RecordScope::FUNCTION}));
  }
}

bool standing_aside() { return tls_aside.active; }

bool in_backward_pass() { return torch::autograd::get_current_graph_task_id() >= 0; }

void hook_current_thread(bool on) {
  if (tls_owner.session) c10::impl::tls_set_dispatch_key_included(kHookKey, on);
}

bool pause_current_thread() {
  const bool was = c10::impl::tls_is_dispatch_key_excluded(kHookKey);
  c10::impl::tls_set_dispatch_key_excluded(kHookKey, true);
  pause_marks(true);
  return was;
}

void resume_current_thread(bool was_paused) {
  c10::impl::tls_set_dispatch_key_excluded(kHookKey, was_paused);
  pause_marks(was_paused);
}

}  // namespace hotpath::detail
