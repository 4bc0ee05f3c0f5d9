// The ops a fused kernel can run, and how each one computes one element. Everything here works on
// fp32 values in registers (fp16/bf16 are loaded and stored, math is fp32), like ATen's opmath.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace hotpath::detail {

struct PointwiseOp {
  std::vector<int> tensors;  // schema positions of the tensor operands, in emitter order
  std::vector<int> scalars;  // schema positions of the Scalar operands, in emitter order
  int writes = -1;           // in-place: the argument that receives the result
  // Empty when the op's non-tensor arguments are supported, else why not.
  std::function<std::string(const Node&)> check;
  // One C++ expression for one element, from operand expressions `t` and scalar names `s`.
  std::function<std::string(const std::vector<std::string>& t, const std::vector<std::string>& s,
                            const Node& n, const Graph& g)>
      emit;
};

// nullptr when the op is not fusable.
const PointwiseOp* find_pointwise(const Node& n);

}  // namespace hotpath::detail
