// What the dispatcher hook records for one top-level op: the hook fills in the op, its arguments
// and its tensors' metadata; the recorder (trace/) adds the data flow between ops; a plan that ran
// the op marks it (planned_key).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>
#include <c10/util/accumulate.h>
#include <c10/util/flat_hash_map.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"

namespace hotpath::detail {

struct TensorMeta {
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device{c10::kCPU};
  c10::SmallVector<std::int64_t, 5> sizes;
  c10::SmallVector<std::int64_t, 5> strides;
  std::int64_t storage_offset = 0;
  std::int64_t numel() const { return c10::multiply_integers(sizes); }
};

// Where a tensor input came from. producer >= 0: the global index of the op whose output it is;
// producer < 0: a tensor no recorded op produced (a parameter, an input batch), numbered by the
// recorder the first time it is seen.
struct ValueRef {
  std::int64_t producer = 0;
  std::int32_t output = 0;
  bool operator==(const ValueRef& o) const { return producer == o.producer && output == o.output; }
};

// Hash of a ValueRef, for maps keyed by the value itself (a value's identity is the pair: a hash
// of it is no identity; two producers' indices can hash alike).
struct ValueRefHash {
  std::size_t operator()(const ValueRef& r) const {
    return static_cast<std::size_t>(
        hash_combine(static_cast<std::uint64_t>(r.producer), static_cast<std::uint64_t>(r.output)));
  }
};

// The distinct values from outside an iteration, numbered in the order they are first read:
// how a signature, a hot trace and a plan's guard name them.
using OutsideOrdinals = ska::flat_hash_map<ValueRef, std::int64_t, ValueRefHash>;

struct TensorInput {
  std::int32_t argument = 0;  // position in the schema's argument list
  bool written = false;       // the schema marks the argument as mutated (Tensor(a!))
  TensorMeta meta;
  ValueRef ref;
  std::uint64_t meta_key = 0;  // the metadata's own hash, as OpRecord::input_key includes it
};

// The scalar fields come first and the record starts a cache line, so that a light record (a
// fast-lane op's: Recorder::commit_fast, OpRing::push_light) touches its first two lines only; a
// record is about 1 KB, most of it the inline buffers after them.
struct alignas(64) OpRecord {
  std::string_view name;      // e.g. "aten::addmm"; owned by the dispatcher's operator table
  std::string_view overload;  // e.g. "out", or empty
  // Hash of everything structural except data flow: operator, tensor metadata, non-scalar
  // arguments (ints, bools, lists, dtypes, ...), output metadata. Scalar values are left out.
  std::uint64_t key = 0;
  std::uint64_t name_key = 0;   // operator name and overload alone
  std::uint64_t input_key = 0;  // like key, without the outputs: what a guard can check up front
  // Like input_key, with each tensor input only marked where it is (its metadata is in
  // TensorInput::meta_key): a replayed op's guard checks metadata only where identity does not.
  std::uint64_t args_key = 0;
  std::uint64_t scalar_mask = 0;  // bit i: argument i is a Scalar (a run-time parameter)
  // Set by the executor when a plan ran the op's recorded in-place twin instead (autograd asked
  // for add only because deferred ops held its buffer; see Executor::in_place_twin): the op is
  // recorded as the plan has it, so that the iteration keeps the plan's signature.
  std::uint64_t planned_key = 0;
  std::int32_t planned_alias = -1;
  // What autograd makes of the op: grad mode was on, and an input is a leaf that requires grad
  // (a parameter, read by a forward pass). Backward and optimizer ops run with grad mode off.
  bool grad_enabled = true;
  bool reads_param = false;
  // It writes a parameter in place (an optimizer's update; a gradient is no parameter).
  bool writes_param = false;
  // Kept by the recorder for an op of a replayed iteration or a step's tail that took the fast
  // lane (Recorder::commit_fast): its operator, key and grad mode only; no inputs, arguments or
  // outputs. An iteration with such records is never hashed or traced from them.
  bool light = false;

  c10::SmallVector<TensorInput, 3> inputs;  // inline: no allocation per op for most ops
  // Every schema argument that is not a tensor (tensors are left as None): structural values
  // (ints, strings, lists) and run-time scalars.
  c10::SmallVector<c10::IValue, 6> args;
  c10::SmallVector<TensorMeta, 1> outputs;
  // Per output: the argument it aliases (in-place and out= ops return their argument), or -1.
  c10::SmallVector<std::int32_t, 1> output_alias;
  // Filled only in a HotTrace: per output, whether anything still held it when the iteration
  // ended (values that die inside the iteration need not be written by a fused kernel).
  std::vector<bool> output_alive;

  // The scalar fields as a new record has them; the buffers are left as they are (a record whose
  // buffers are known to be empty: OpRing::push_light).
  void clear_fields() {
    name = {};
    overload = {};
    key = name_key = input_key = args_key = scalar_mask = planned_key = 0;
    planned_alias = -1;
    grad_enabled = true;
    reads_param = false;
    writes_param = false;
    light = false;
  }
  // Empty again for another op; the inline buffers stay.
  void clear() {
    clear_fields();
    inputs.clear();
    args.clear();
    outputs.clear();
    output_alias.clear();
    output_alive.clear();
  }
};

// Per tensor input of `rec`: 1 where the schema marks it written.
inline c10::SmallVector<std::uint8_t, 8> written_flags(const OpRecord& rec) {
  c10::SmallVector<std::uint8_t, 8> written;
  for (const TensorInput& in : rec.inputs) written.push_back(in.written ? 1 : 0);
  return written;
}

// "aten::add_.Tensor", for logs.
inline std::string full_name(std::string_view name, std::string_view overload) {
  std::string s(name);
  if (!overload.empty()) s.append(".").append(overload);
  return s;
}

}  // namespace hotpath::detail
