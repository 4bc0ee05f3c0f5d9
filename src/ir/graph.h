// The IR of a hot iteration: values (tensors with dtype, shape, strides, device) and nodes (ops
// with their non-tensor arguments; scalars are run-time parameters). Built from a HotTrace; prints
// itself in a canonical text form that does not depend on addresses or run-time scalar values and
// serves as the cache key of everything compiled from it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "trace/hot_trace.h"

namespace hotpath::detail {

struct Value {
  int id = 0;
  TensorMeta meta;
  int producer = -1;  // node index, or -1 for a tensor from outside the iteration
  int output = 0;     // which output of the producer
  int outside = -1;   // ordinal among outside tensors (producer == -1)
  // Values that are versions of one tensor (an in-place op's result is a new version of its
  // argument) share `tensor`: the id of the first version. Versions share its layout too: an op
  // that changes a tensor's layout in place (resize_, t_, unsqueeze_, as_strided_, ...) starts a
  // tensor of its own, as a view would (a kernel indexes each tensor by one layout).
  int tensor = 0;
};

struct NodeInput {
  int value = -1;    // -1: an undefined (None) tensor argument
  int argument = 0;  // schema position
  bool written = false;
};

struct Node {
  int index = 0;         // position in the iteration
  std::string name;      // "aten::add_"
  std::string overload;  // "Tensor"
  std::vector<NodeInput> inputs;
  std::vector<int> outputs;             // value ids
  std::vector<std::int32_t> out_alias;  // per output: the argument it aliases, or -1
  std::vector<c10::IValue> args;        // non-tensor arguments by schema position (tensors: None)
  std::uint64_t scalar_mask = 0;        // bit i: args[i] is a run-time Scalar
  bool is_scalar_arg(int a) const { return a < 64 && ((scalar_mask >> a) & 1ULL); }
  std::uint64_t input_key = 0;  // the guard for this op (see OpRecord)
  bool mutates() const;
  // "add_.Tensor"-style short name without the namespace (made once by from_trace: the
  // partitioner and codegen ask for it many times per node).
  const std::string& short_name() const { return short_name_; }
  std::string short_name_;
  // Input value of schema argument `argument`, or -1.
  int input_at(int argument) const;
};

class Graph {
 public:
  static Graph from_trace(const HotTrace& trace);

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Value& value(int id) const { return values_[static_cast<std::size_t>(id)]; }
  const Node& node(int index) const { return nodes_[static_cast<std::size_t>(index)]; }
  // Nodes that read value `id`, ascending.
  const std::vector<int>& readers(int id) const { return readers_[static_cast<std::size_t>(id)]; }

  std::string to_text() const;  // canonical form
  std::uint64_t hash() const;   // of the canonical form

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> readers_;
};

std::ostream& operator<<(std::ostream& os, const Graph& g);
// "f32[256, 1024]{1024, 1}" (strides only when not contiguous), "+off" when offset != 0.
std::string format_meta(const TensorMeta& m);
const char* dtype_name(c10::ScalarType t);
// Dense in row-major order (dimensions of size 1 may have any stride), whatever the offset.
bool dense(const TensorMeta& m);
// ... and from offset 0.
bool is_contiguous(const TensorMeta& m);
// The same dtype, device, sizes, strides and offset: one kernel indexes both alike.
bool same_layout(const TensorMeta& a, const TensorMeta& b);

}  // namespace hotpath::detail
