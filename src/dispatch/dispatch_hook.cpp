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

// The storages of the parameters this thread's forward passes read (leaves that require grad), to
// see an update through an alias. Weak references: a storage that dies keeps its address taken,
// so a new one cannot be mistaken for it. Bounded: a program that keeps making models starts
// the set again.
thread_local ska::flat_hash_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>>
    tls_param_storages;
constexpr std::size_t kMaxParamStorages = 1 << 16;
void note_param_storage(const c10::Storage& s) {
  const c10::StorageImpl* key = s.unsafeGetStorageImpl();
  if (tls_param_storages.count(key)) return;
  if (tls_param_storages.size() >= kMaxParamStorages) tls_param_storages.clear();
  tls_param_storages.emplace(key, s.getWeakStorageImpl());
}
bool param_storage(const c10::StorageImpl* s) {
  const auto it = tls_param_storages.find(s);
  return it != tls_param_storages.end() && !it->second.expired();
}
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

// Per-operator facts that do not change between calls (OpCall::finish reads them too).
struct OpInfo {
  std::uint64_t name_hash = 0;
  std::vector<bool> scalar_argument;       // Scalar/float arguments: values are run-time parameters
  std::vector<bool> position_argument;     // is_position_argument (op_facts.h)
  std::vector<bool> written;               // written_arguments (op_facts.h)
  std::vector<std::int32_t> return_alias;  // per return: the argument it writes and returns, or -1
  std::uint64_t scalar_mask = 0;
};

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

// Hashes a tensor's metadata; fills `m` with it unless it is null (the fast lane keeps none).
std::uint64_t hash_meta(std::uint64_t h, TensorMeta* m, const at::TensorBase& t) {
  const bool defined = t.defined();
  if (m != nullptr) m->defined = defined;
  if (!defined) return hash_combine(h, 0x5a);
  const c10::ScalarType dtype = t.scalar_type();
  const c10::Device device = t.device();
  if (m != nullptr) {
    m->dtype = dtype;
    m->device = device;
  }
  h = hash_combine(h, static_cast<std::uint64_t>(dtype));
  h = hash_combine(h, static_cast<std::uint64_t>(device.type()) * 256 +
                          static_cast<std::uint64_t>(device.index() + 1));
  if (t.layout() != c10::kStrided)
    return hash_combine(h, 0x1000 + static_cast<std::uint64_t>(t.layout()));
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  if (m != nullptr) {
    m->sizes.assign(sizes.begin(), sizes.end());
    m->strides.assign(strides.begin(), strides.end());
    // The storage offset is kept but not hashed: kernels index from the data pointer, which
    // includes it, so a batch sliced from a larger tensor at another place each step is the same
    // op (alignment, which vector loads need, is checked at each launch).
    m->storage_offset = t.storage_offset();
  }
  h = hash_combine(h, sizes.size());
  for (auto s : sizes) h = hash_combine(h, static_cast<std::uint64_t>(s));
  for (auto s : strides) h = hash_combine(h, static_cast<std::uint64_t>(s));
  return h;
}

// Where hash_input puts the tensors it meets: a record's inputs (RecordInputs), or the fast
// lane's (FastInputs, no metadata kept). Both hash alike. A step's tail on the fast lane needs only
// to know whether the op reads or writes a parameter (ParamSink: nothing hashed or kept).
struct RecordInputs {
  static constexpr bool kHashes = true;
  OpRecord& rec;
  TensorPtrs& tensors;
  bool& reads_param() { return rec.reads_param; }
  bool& writes_param() { return rec.writes_param; }
  TensorMeta* add(const at::TensorBase& t, std::int32_t arg, bool written) {
    rec.inputs.emplace_back();
    rec.inputs.back().argument = arg;
    rec.inputs.back().written = written;
    tensors.push_back(&t);
    return &rec.inputs.back().meta;
  }
};
struct FastSink {
  static constexpr bool kHashes = true;
  FastInputs& in;
  bool& reads_param() { return in.reads_param; }
  bool& writes_param() { return in.writes_param; }
  TensorMeta* add(const at::TensorBase& t, std::int32_t /*arg*/, bool written) {
    in.tensors.push_back(&t);
    in.written.push_back(written ? 1 : 0);
    return nullptr;
  }
};
struct ParamSink {
  static constexpr bool kHashes = false;
  FastInputs& in;
  bool& reads_param() { return in.reads_param; }
  bool& writes_param() { return in.writes_param; }
};

template <class Sink>
std::uint64_t hash_input(std::uint64_t h, const c10::IValue& v, std::int32_t arg, bool scalar,
                         bool position, bool written, Sink& sink) {
  if (v.isTensor()) {
    // A leaf that requires grad: a parameter (a loss that requires grad is no leaf: its item()
    // or detach() after the optimizer step is not a forward pass).
    const at::TensorBase& t = v.toTensor();
    if (t.requires_grad() && t.is_leaf()) {
      sink.reads_param() = true;
      sink.writes_param() = sink.writes_param() || written;
      if (t.has_storage()) note_param_storage(t.storage());
    } else if (written && !sink.writes_param() && t.has_storage()) {
      // An optimizer may update a parameter through p.data() (LibTorch's SGD does): an alias
      // that does not require grad, on the parameter's storage.
      sink.writes_param() = param_storage(t.storage().unsafeGetStorageImpl());
    }
    if constexpr (!Sink::kHashes) {
      return h;
    } else {
      return hash_meta(hash_combine(h, 0x7e), sink.add(t, arg, written), t);
    }
  }
  if constexpr (!Sink::kHashes) {
    if (v.isList()) {  // a list of tensors may hold a parameter
      for (const c10::IValue& e : v.toListRef()) hash_input(h, e, arg, false, false, written, sink);
    }
    return h;
  }
  if (scalar && (v.isScalar() || v.isNone())) {
    // The value is a run-time argument; only its kind is structural.
    return hash_combine(h, 0x5c00 + static_cast<std::uint64_t>(v.isNone()     ? 0
                                                               : v.isDouble() ? 1
                                                               : v.isInt()    ? 2
                                                                              : 3));
  }
  if (v.isList()) {
    const auto list = v.toListRef();
    h = hash_combine(h, 0x1157 + list.size());
    for (const c10::IValue& e : list) h = hash_input(h, e, arg, false, false, written, sink);
    return h;
  }
  if (position && (v.isInt() || v.isSymInt() || v.isNone()))
    return hash_combine(h, v.isNone() ? 0x9050 : 0x9051);
  if (v.isInt()) return hash_combine(h, static_cast<std::uint64_t>(v.toInt()));
  if (v.isBool()) return hash_combine(h, v.toBool() ? 0xb1 : 0xb0);
  if (v.isDouble()) {
    const double d = v.toDouble();
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    return hash_combine(h, bits);
  }
  if (v.isNone()) return hash_combine(h, 0x404e);
  if (v.isString()) return hash_combine(h, hash_string(v.toStringRef()));
  if (v.isDevice()) {
    const auto d = v.toDevice();
    return hash_combine(
        h, static_cast<std::uint64_t>(d.type()) * 256 + static_cast<std::uint64_t>(d.index() + 1));
  }
  if (v.isSymInt())
    return hash_combine(h, static_cast<std::uint64_t>(v.toSymInt().guard_int(__FILE__, __LINE__)));
  // Generators, objects, ...: their identity is not structural; their kind is.
  return hash_combine(h, 0x7a90 + static_cast<std::uint64_t>(v.tagKind().size()));
}

// The fast lane's walk over an op's arguments (Sink: FastSink or ParamSink): their key, as a
// record's input_key would be where Sink hashes.
template <class Sink>
std::uint64_t walk_inputs(const OpInfo& info, const torch::jit::Stack& stack, std::size_t nargs,
                          FastInputs& fast) {
  Sink sink{fast};
  std::uint64_t h = info.name_hash;
  const auto args = torch::jit::last(stack, nargs);
  for (std::size_t i = 0; i < nargs; ++i) {
    h = hash_input(h, args[i], static_cast<std::int32_t>(i), info.scalar_argument[i],
                   info.position_argument[i], info.written[i], sink);
  }
  return h;
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
    fast.input_key = fast.hashed ? walk_inputs<FastSink>(info, *stack, nargs, fast)
                                 : walk_inputs<ParamSink>(info, *stack, nargs, fast);
    fast.name_key = info.name_hash;
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
  std::uint64_t h = info.name_hash;
  rec.name_key = info.name_hash;
  TensorPtrs inputs;
  {
    const auto args = torch::jit::last(*stack, nargs);
    rec.args.reserve(nargs);
    RecordInputs sink{rec, inputs};
    for (std::size_t i = 0; i < nargs; ++i) {
      h = hash_input(h, args[i], static_cast<std::int32_t>(i), info.scalar_argument[i],
                     info.position_argument[i], info.written[i], sink);
      // Lists of numbers are kept (a reduction's dims); lists that may hold tensors are not, nor
      // objects (a collective's process group: a record must not keep it alive).
      const c10::IValue& a = args[i];
      const bool holds_tensors =
          a.isTensor() || a.isTensorList() || a.isOptionalTensorList() ||
          (a.isList() && !a.isIntList() && !a.isDoubleList() && !a.isBoolList());
      rec.args.push_back(holds_tensors || a.isObject() || a.isCapsule() ? c10::IValue() : args[i]);
    }
  }
  rec.input_key = h;
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
  tls_param_storages.clear();
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
