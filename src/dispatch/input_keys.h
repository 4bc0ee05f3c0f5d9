// How the hook keys an op by its arguments (dispatch/dispatch_hook.cpp): the walk over an op's
// arguments that makes a record's input key and arguments key (OpRecord::input_key, args_key) and
// each tensor input's metadata key (TensorInput::meta_key), and the fast lane's lighter walks.
// Internal to the dispatch module: its templates are shared by the hook's paths.
#pragma once

#include <ATen/core/TensorBase.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/hash.h"
#include "dispatch/op_call.h"
#include "dispatch/op_record.h"

namespace hotpath::detail {

// Per-operator facts that do not change between calls (OpCall::finish reads them too).
struct OpInfo {
  std::uint64_t name_hash = 0;
  std::vector<bool> scalar_argument;       // Scalar/float arguments: values are run-time parameters
  std::vector<bool> position_argument;     // is_position_argument (op_facts.h)
  std::vector<bool> written;               // written_arguments (op_facts.h)
  std::vector<std::int32_t> return_alias;  // per return: the argument it writes and returns, or -1
  std::uint64_t scalar_mask = 0;
  bool positional = false;  // some argument is a position (is_position_argument)
};

// The parameters' storages this thread has read (leaves that require grad), to see an update
// through an alias (input_keys.cpp): noted as the walk meets a parameter, asked where it meets a
// written argument that is none.
void note_param_storage(const c10::Storage& s);
bool param_storage(const c10::StorageImpl* s);
void clear_param_storages();

// Where a tensor input's own key starts (TensorInput::meta_key).
inline constexpr std::uint64_t kMetaSeed = 0x6d657461;

// Hashes a tensor's metadata; fills `m` with it unless it is null (the fast lane keeps none).
inline std::uint64_t hash_meta(std::uint64_t h, TensorMeta* m, const at::TensorBase& t) {
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

// Where hash_input puts the tensors it meets: a record's inputs (RecordInputs: both keys, each
// tensor's metadata kept with its own key), or a replayed op's on the fast lane (FastSink: the
// arguments' key only, no metadata: the executor checks a tensor's metadata where its identity
// does not settle it, Executor::fast_replay). A step's tail on the fast lane needs only to know
// whether the op reads or writes a parameter (ParamSink: nothing hashed or kept).
struct RecordInputs {
  static constexpr bool kInputKey = true, kArgsKey = true;
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
  void meta_key(std::uint64_t m) { rec.inputs.back().meta_key = m; }
};
struct FastSink {
  static constexpr bool kInputKey = false, kArgsKey = true;
  FastInputs& in;
  bool& reads_param() { return in.reads_param; }
  bool& writes_param() { return in.writes_param; }
  TensorMeta* add(const at::TensorBase& t, std::int32_t /*arg*/, bool written) {
    in.tensors.push_back(&t);
    in.written.push_back(written ? 1 : 0);
    return nullptr;
  }
  void meta_key(std::uint64_t /*m*/) {}
};
struct ParamSink {
  static constexpr bool kInputKey = false, kArgsKey = false;
  FastInputs& in;
  bool& reads_param() { return in.reads_param; }
  bool& writes_param() { return in.writes_param; }
  TensorMeta* add(const at::TensorBase& /*t*/, std::int32_t /*arg*/, bool /*written*/) {
    return nullptr;
  }
  void meta_key(std::uint64_t /*m*/) {}
};

// An op's two keys as its arguments are walked: `input` (OpRecord::input_key: everything, each
// tensor by its metadata's own key) and `args` (OpRecord::args_key: the same with each tensor a
// mark of its place only).
struct InputKeys {
  std::uint64_t input = 0, args = 0;
};
inline constexpr std::uint64_t kTensorMark = 0x7e;

template <class Sink>
void mix_key(InputKeys& k, std::uint64_t v) {
  if constexpr (Sink::kInputKey) k.input = hash_combine(k.input, v);
  if constexpr (Sink::kArgsKey) k.args = hash_combine(k.args, v);
}

template <class Sink>
void hash_input(InputKeys& k, const c10::IValue& v, std::int32_t arg, bool scalar, bool position,
                bool written, Sink& sink) {
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
    TensorMeta* m = sink.add(t, arg, written);
    mix_key<Sink>(k, kTensorMark);
    if constexpr (Sink::kInputKey) {
      const std::uint64_t mk = hash_meta(kMetaSeed, m, t);
      sink.meta_key(mk);
      k.input = hash_combine(k.input, mk);
    }
    return;
  }
  if constexpr (!Sink::kInputKey && !Sink::kArgsKey) {
    if (v.isList()) {  // a list of tensors may hold a parameter
      for (const c10::IValue& e : v.toListRef()) hash_input(k, e, arg, false, false, written, sink);
    }
    return;
  }
  if (scalar && (v.isScalar() || v.isNone())) {
    // The value is a run-time argument; only its kind is structural.
    mix_key<Sink>(k, 0x5c00 + static_cast<std::uint64_t>(v.isNone()     ? 0
                                                         : v.isDouble() ? 1
                                                         : v.isInt()    ? 2
                                                                        : 3));
    return;
  }
  if (v.isList()) {
    const auto list = v.toListRef();
    mix_key<Sink>(k, 0x1157 + list.size());
    for (const c10::IValue& e : list) hash_input(k, e, arg, false, false, written, sink);
    return;
  }
  if (position && (v.isInt() || v.isSymInt() || v.isNone())) {
    mix_key<Sink>(k, v.isNone() ? 0x9050 : 0x9051);
  } else if (v.isInt()) {
    mix_key<Sink>(k, static_cast<std::uint64_t>(v.toInt()));
  } else if (v.isBool()) {
    mix_key<Sink>(k, v.toBool() ? 0xb1 : 0xb0);
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    mix_key<Sink>(k, bits);
  } else if (v.isNone()) {
    mix_key<Sink>(k, 0x404e);
  } else if (v.isString()) {
    mix_key<Sink>(k, hash_string(v.toStringRef()));
  } else if (v.isDevice()) {
    const auto d = v.toDevice();
    mix_key<Sink>(
        k, static_cast<std::uint64_t>(d.type()) * 256 + static_cast<std::uint64_t>(d.index() + 1));
  } else if (v.isSymInt()) {
    mix_key<Sink>(k, static_cast<std::uint64_t>(v.toSymInt().guard_int(__FILE__, __LINE__)));
  } else {
    // Generators, objects, ...: their identity is not structural; their kind is.
    mix_key<Sink>(k, 0x7a90 + static_cast<std::uint64_t>(v.tagKind().size()));
  }
}

// An op's arguments walked into `sink`, both keys starting from the operator's name.
template <class Sink>
InputKeys walk_inputs(const OpInfo& info, const torch::jit::Stack& stack, std::size_t nargs,
                      Sink& sink) {
  InputKeys k{info.name_hash, info.name_hash};
  const auto args = torch::jit::last(stack, nargs);
  for (std::size_t i = 0; i < nargs; ++i) {
    hash_input(k, args[i], static_cast<std::int32_t>(i), info.scalar_argument[i],
               info.position_argument[i], info.written[i], sink);
  }
  return k;
}

}  // namespace hotpath::detail
