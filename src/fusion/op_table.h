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
  // One C++ expression for one element, from operand expressions `t`, scalar names `s`,
  // immediate constants `imm` (see `immediates`) and the op's variant (see `variants`). The
  // expression depends on nothing else, so that the interpreter kernel can hold every form.
  using Emit = std::function<std::string(
      const std::vector<std::string>& t, const std::vector<std::string>& s,
      const std::vector<std::string>& imm, const std::string& variant)>;

  std::vector<int> tensors;  // schema positions of the tensor operands, in emitter order
  std::vector<int> scalars;  // schema positions of the Scalar operands, in emitter order
  int writes = -1;           // in-place: the argument that receives the result
  // Empty when the op's non-tensor arguments are supported, else why not.
  std::function<std::string(const Node&)> check;
  Emit emit;
  // Forms of the op chosen by non-tensor arguments (gelu's approximation, clamp's bounds):
  // every one it can take, and the one a node takes (unset: the only form, "").
  std::vector<std::string> variants{""};
  std::function<std::string(const Node&, const Graph&)> variant;
  // Constants that follow from the node's shapes (mse's 2/numel); unset: none.
  std::function<std::vector<double>(const Node&, const Graph&)> immediates;
  // Eager runs more than one kernel for it (mse_loss_backward: zeros_like's fill, then its own):
  // its kernel alone saves a launch, so it is a group even with nothing to fuse with.
  bool alone_pays = false;
  // A cast (_to_copy, copy_): its operand becomes the output's dtype at the store, with no
  // dtype of its own to compute in.
  bool casts = false;
  // Forms per output dtype (f32, f16, bf16) for an op ATen computes in the tensor's own dtype.
  PointwiseOp& per_dtype();
};

// nullptr when the op is not fusable.
const PointwiseOp* find_pointwise(const Node& n);

// The dtypes fused kernels store (math is fp32): fp32, fp16, bf16.
bool float_type(c10::ScalarType t);

// Per tensor operand of `n` (emitter order): the dtype eager rounds it to before the op, or
// Float for none. ATen computes an op in the result type of its operands (dimensioned tensors
// decide; zero-dim ones only when no dimensioned operand is floating) and casts each operand to
// it first: a half or fp32 zero-dim tensor times a bf16 tensor is multiplied as bf16.
std::vector<c10::ScalarType> operand_rounding(const Graph& g, const Node& n, const PointwiseOp& op);

// Reductions along the last dimension, fused with the pointwise ops around them (codegen/
// kernel.h, row kernels): one row per block, a block-wide sum or max per reduction.
struct RowOp {
  enum class Kind {
    Sum,
    Mean,
    Softmax,
    LogSoftmax,
    SoftmaxBackward,
    LogSoftmaxBackward,
    LayerNorm,  // native_layer_norm: (out, mean, rstd); weight and bias are rows for all rows
    RmsNorm,    // _fused_rms_norm: (out, rstd); the weight is a row for all rows
    // native_layer_norm_backward: (grad_input, grad_weight, grad_bias); _fused_rms_norm_backward:
    // (grad_input, grad_weight). grad_input reduces rows; the weight's and bias's gradients sum
    // over all rows: the row kernel gets a second kind of block for them (codegen/kernel.h).
    LayerNormBackward,
    RmsNormBackward,
    // nll_loss_backward over [N, C] (no class weights): -grad / total_weight (mean), -grad (sum)
    // or -grad[row] (none) at the row's target column, 0 elsewhere. No reduction: its value
    // needs the column index, which only a row kernel has.
    NllLossBackward,
    // nll_loss_forward over [N, C] (mean or sum, no class weights): (loss, total_weight), one
    // value each for all rows: per row the negated score at its target column, then a sum over
    // all rows across the blocks (the last block adds up the blocks' partial sums in order).
    NllLoss
  };
  Kind kind = Kind::Sum;
  std::vector<int> tensors;  // schema positions of the tensor operands (full rows)
  bool keeps_row = false;    // the output is one value per row (sum, mean), else a full row
  int outputs = 1;
  // It reduces its rows (every kind but nll_loss_backward).
  bool reduces() const { return kind != Kind::NllLossBackward; }
  // Its results need every row: complete only when the kernel ends (at most one per group).
  bool sums_all_rows() const { return norm_backward() || kind == Kind::NllLoss; }
  // Eager runs more than one kernel for it alone (a norm backward: the input's gradient, then
  // the weight's and bias's; nll_loss_backward: a fill, then the targets' column).
  bool alone_pays() const { return norm_backward() || kind == Kind::NllLossBackward; }
  bool norm_backward() const {
    return kind == Kind::LayerNormBackward || kind == Kind::RmsNormBackward;
  }
  // Schema positions of a norm backward's operands besides (grad_out, input): mean (-1 for rms),
  // rstd, weight, and bias (-1 for rms).
  struct NormBackwardArgs {
    int mean = -1, rstd = -1, weight = -1, bias = -1;
  };
  NormBackwardArgs norm_args() const {
    return kind == Kind::LayerNormBackward ? NormBackwardArgs{3, 4, 5, 6}
                                           : NormBackwardArgs{-1, 3, 4, -1};
  }
};

// Class indices a row kernel compares with its column index in fp32: exact below 2^24.
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 24;

// nullptr when `n` is not one of the row ops.
const RowOp* find_row_op(const Node& n);
// Empty when `n` (a row op) reduces its last dimension in a way a row kernel computes exactly
// like ATen, else why not.
std::string row_op_check(const Graph& g, const Node& n);

// A sum over every dimension but the last (a bias's gradient: sum.dim_IntList with dims [0] of a
// [N, C] tensor, [0, 1] of a Linear's [B, T, C] output, keepdim either way): a column kernel sums
// each column over the rows the leading dimensions make (codegen/kernel.h).
bool is_column_sum(const Graph& g, const Node& n);
// Empty when a column kernel computes `n` (a column sum), else why not.
std::string column_sum_check(const Graph& g, const Node& n);
// Column kernels walk at most this many rows with one block per 32 columns, which beats ATen's
// reduction for a batch of rows; taller sums are split into chunks of rows (at most 64 per
// column tile), whose sums the tile's last chunk adds up in order.
constexpr std::int64_t kMaxColumnRows = 4096;

// mse_loss with reduction mean or sum: the whole tensor reduces to one value, in a total kernel
// (codegen/kernel.h). ATen runs two kernels for it (the squared differences, then the mean).
bool is_total_reduction(const Node& n);
// Empty when a total kernel computes `n`, else why not.
std::string total_reduction_check(const Graph& g, const Node& n);

// stack and cat of values of one shape (RoPE's halves, heads put back together): no kernel of
// their own. The pointwise group that computes the values stores each one straight into its place
// in the result, which is index arithmetic: input k is the result's view with `strides` (over the
// domain, the inputs' shape; 0 where a dimension has size 1) from element `offsets[k]`.
bool is_sink(const Node& n);
// Empty when a pointwise kernel can store `n`'s inputs into its result, else why not.
std::string sink_check(const Graph& g, const Node& n);
struct SinkView {
  std::vector<std::int64_t> strides;
  std::vector<std::int64_t> offsets;  // per input, in order
};
SinkView sink_view(const Graph& g, const Node& n);
// A stack or cat takes at most this many values (a kernel stores each of them).
constexpr std::size_t kMaxSinkInputs = 16;

// Every (op, variant) of the table, in a fixed order: the interpreter kernel's opcodes.
struct OpForm {
  std::string key;  // Node::short_name()
  std::string variant;
  const PointwiseOp* op = nullptr;
};
const std::vector<OpForm>& op_forms();
// The position of a node's form in op_forms(), or -1 when the node is not fusable.
int op_form_index(const Graph& g, const Node& n);

// An fp32 literal that reads back as exactly `v` in float ("1.000000000e+00f").
std::string float_literal(double v);

}  // namespace hotpath::detail
