// What the dispatcher hook records for one top-level op.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace hotpath::detail {

struct TensorMeta {
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device{c10::kCPU};
  c10::SmallVector<std::int64_t, 5> sizes;
  c10::SmallVector<std::int64_t, 5> strides;
  std::int64_t storage_offset = 0;
};

// Where a tensor input came from. producer >= 0: the global index of the op whose output it is;
// producer < 0: a tensor no recorded op produced (a parameter, an input batch), numbered by the
// recorder the first time it is seen.
struct ValueRef {
  std::int64_t producer = 0;
  std::int32_t output = 0;
};

struct TensorInput {
  std::int32_t argument = 0;  // position in the schema's argument list
  TensorMeta meta;
  ValueRef ref;
};

struct OpRecord {
  std::string_view name;      // e.g. "aten::addmm"; owned by the dispatcher's operator table
  std::string_view overload;  // e.g. "out", or empty
  // Hash of everything structural except data flow: operator, tensor metadata, non-scalar
  // arguments (ints, bools, lists, dtypes, ...), output metadata. Scalar values are left out.
  std::uint64_t key = 0;
  std::uint64_t name_key = 0;  // operator name and overload alone
  std::vector<TensorInput> inputs;
  std::vector<c10::Scalar> scalars;  // run-time scalar arguments, in schema order
  std::vector<TensorMeta> outputs;
};

}  // namespace hotpath::detail
