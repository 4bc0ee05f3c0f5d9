// stack and cat as stores of a pointwise group (op_table.h): which nodes qualify, and where each
// input lands in the result.
#include <string>

#include "fusion/op_table.h"

namespace hotpath::detail {
namespace {

bool is_stack(const Node& n) { return n.short_name() == "stack"; }

// The dimension of the result that the inputs are stacked along or concatenated along, in
// [0, rank of the result), or -1 when the argument is missing or out of range.
std::int64_t sink_dim(const Graph& g, const Node& n) {
  if (n.args.size() < 2 || !n.args[1].isInt() || n.outputs.empty()) return -1;
  const auto rank = static_cast<std::int64_t>(g.value(n.outputs[0]).meta.sizes.size());
  std::int64_t d = n.args[1].toInt();
  if (d < 0) d += rank;
  return d >= 0 && d < rank ? d : -1;
}

}  // namespace

bool is_sink(const Node& n) { return is_stack(n) || n.short_name() == "cat"; }

std::string sink_check(const Graph& g, const Node& n) {
  if (!is_sink(n)) return "not a stack or cat";
  if (n.inputs.size() < 2) return "one input (a copy)";
  if (n.inputs.size() > kMaxSinkInputs) return "too many inputs";
  if (n.outputs.size() != 1 || n.out_alias[0] >= 0) return "unexpected outputs";
  const TensorMeta& o = g.value(n.outputs[0]).meta;
  if (!o.defined || !float_type(o.dtype)) return "output is not fp32/fp16/bf16";
  if (o.numel() == 0) return "empty";
  if (!is_contiguous(o)) return "output is not contiguous";
  const std::int64_t d = sink_dim(g, n);
  if (d < 0) return "dimension out of range";
  for (const NodeInput& in : n.inputs) {
    if (in.value < 0) return "undefined input";
    const TensorMeta& m = g.value(in.value).meta;
    if (m.sizes != g.value(n.inputs[0].value).meta.sizes) return "inputs of different shapes";
    if (m.dtype != o.dtype) return "an input of another dtype";
    if (m.device != o.device) return "inputs on several devices";
  }
  // The result has the inputs' shape with one more dimension (stack) or a dimension k times as
  // long (cat): anything else (cat's legacy skipping of empty 1-D inputs) is not this op.
  const auto& in = g.value(n.inputs[0].value).meta.sizes;
  const auto k = static_cast<std::int64_t>(n.inputs.size());
  std::vector<std::int64_t> want(in.begin(), in.end());
  if (is_stack(n)) {
    if (static_cast<std::size_t>(d) > want.size()) return "dimension out of range";
    want.insert(want.begin() + d, k);
  } else {
    if (static_cast<std::size_t>(d) >= want.size()) return "dimension out of range";
    want[static_cast<std::size_t>(d)] *= k;
  }
  if (std::vector<std::int64_t>(o.sizes.begin(), o.sizes.end()) != want)
    return "result shape is not the inputs' put together";
  return {};
}

SinkView sink_view(const Graph& g, const Node& n) {
  const TensorMeta& o = g.value(n.outputs[0]).meta;
  const auto& in = g.value(n.inputs[0].value).meta.sizes;
  const auto d = static_cast<std::size_t>(sink_dim(g, n));
  SinkView v;
  std::int64_t step = 0;  // elements between one input's place and the next one's
  for (std::size_t k = 0, od = 0; od < o.sizes.size(); ++od) {
    if (od == d) {
      step = is_stack(n) ? o.strides[od] : o.strides[od] * in[k];
      if (is_stack(n)) continue;  // a dimension the inputs do not have
    }
    v.strides.push_back(in[k] == 1 ? 0 : o.strides[od]);
    ++k;
  }
  for (std::size_t k = 0; k < n.inputs.size(); ++k)
    v.offsets.push_back(static_cast<std::int64_t>(k) * step);
  return v;
}

}  // namespace hotpath::detail
