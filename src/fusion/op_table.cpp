#include "fusion/op_table.h"

#include <c10/core/ScalarType.h>

#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

namespace hotpath::detail {
namespace {

using Strs = std::vector<std::string>;
using Emit = PointwiseOp::Emit;

std::string ok(const Node&) { return {}; }

std::string gelu_mode(const Node& n, int arg) {
  if (static_cast<std::size_t>(arg) >= n.args.size() || !n.args[arg].isString()) return "tanh";
  return n.args[arg].toStringRef();
}

std::function<std::string(const Node&)> check_gelu(int arg) {
  return [arg](const Node& n) -> std::string {
    const std::string m = gelu_mode(n, arg);
    return m == "none" || m == "tanh" ? "" : "gelu approximate='" + m + "'";
  };
}

// Forms of an op that ATen computes in the tensor's own dtype: the output's dtype picks one, and
// its emitter passes hp::round_as's code for it.
const std::vector<std::string> kDtypeForms = {"f32", "f16", "bf16"};
std::string dtype_form(const Node& n, const Graph& g) {
  const auto dt = g.value(n.outputs[0]).meta.dtype;
  return dt == c10::ScalarType::Half ? "f16" : dt == c10::ScalarType::BFloat16 ? "bf16" : "f32";
}
std::string rounding_code(const std::string& form) {
  return form == "f16" ? "1.0f" : form == "bf16" ? "2.0f" : "0.0f";
}

struct Table {
  std::unordered_map<std::string, PointwiseOp> ops;

  PointwiseOp& add(const std::string& key, std::vector<int> tensors, std::vector<int> scalars,
                   Emit emit, int writes = -1, std::function<std::string(const Node&)> check = ok) {
    PointwiseOp& op = ops[key];
    op = PointwiseOp{};
    op.tensors = std::move(tensors);
    op.scalars = std::move(scalars);
    op.writes = writes;
    op.check = std::move(check);
    op.emit = std::move(emit);
    return op;
  }
  // name and name_ (in place on argument 0) with the same math.
  void both(const std::string& name, const std::string& overload, std::vector<int> tensors,
            std::vector<int> scalars, const Emit& emit,
            std::function<std::string(const Node&)> check = ok,
            const std::vector<std::string>& variants = {""},
            const std::function<std::string(const Node&, const Graph&)>& variant = {}) {
    const std::string suffix = overload.empty() ? "" : "." + overload;
    for (int w : {-1, 0}) {
      PointwiseOp& op = add(name + (w < 0 ? "" : "_") + suffix, tensors, scalars, emit, w, check);
      op.variants = variants;
      op.variant = variant;
    }
  }
  void unary(const std::string& name, const std::string& fn) {
    both(name, "", {0}, {}, [fn](const Strs& t, const Strs&, const Strs&, const std::string&) {
      return fn + "(" + t[0] + ")";
    });
  }

  Table() {
    auto bin = [](const char* op) {
      return [op](const Strs& t, const Strs&, const Strs&, const std::string&) {
        return "(" + t[0] + " " + op + " " + t[1] + ")";
      };
    };
    // self op alpha * other: `other` a tensor (Tensor overloads) or a scalar (Scalar overloads).
    auto scaled = [](const char* op, bool tensor_other) {
      return [op, tensor_other](const Strs& t, const Strs& s, const Strs&, const std::string&) {
        return "(" + t[0] + " " + op + " " + s[0] + " * " + (tensor_other ? t[1] : s[1]) + ")";
      };
    };
    both("add", "Tensor", {0, 1}, {2}, scaled("+", true));
    both("add", "Scalar", {0}, {1, 2}, scaled("+", false));
    both("sub", "Tensor", {0, 1}, {2}, scaled("-", true));
    both("sub", "Scalar", {0}, {1, 2}, scaled("-", false));
    add("rsub.Scalar", {0}, {1, 2},
        [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
          return "(" + s[0] + " - " + s[1] + " * " + t[0] + ")";
        });
    both("mul", "Tensor", {0, 1}, {}, bin("*"));
    both("mul", "Scalar", {0}, {1},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "(" + t[0] + " * " + s[0] + ")";
         });
    both("div", "Tensor", {0, 1}, {}, bin("/"));
    // ATen's CUDA kernel multiplies by the reciprocal of a scalar divisor.
    both("div", "Scalar", {0}, {1},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "(" + t[0] + " * (1.0f / " + s[0] + "))";
         });
    unary("neg", "hp::neg");
    unary("reciprocal", "hp::reciprocal");
    unary("exp", "expf");
    unary("log", "logf");
    unary("log1p", "log1pf");
    unary("sqrt", "sqrtf");
    unary("rsqrt", "rsqrtf");
    unary("abs", "fabsf");
    unary("sigmoid", "hp::sigmoid");
    unary("tanh", "tanhf");
    unary("relu", "hp::relu");
    unary("silu", "hp::silu");
    unary("square", "hp::square");
    auto gelu_variant = [](int arg) {
      return [arg](const Node& n, const Graph&) {
        return gelu_mode(n, arg) == "tanh" ? "tanh" : "erf";
      };
    };
    both(
        "gelu", "", {0}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string& v) {
          return "hp::gelu_" + v + "(" + t[0] + ")";
        },
        check_gelu(1), {"erf", "tanh"}, gelu_variant(1));
    {
      PointwiseOp& op = add(
          "gelu_backward", {0, 1}, {},
          [](const Strs& t, const Strs&, const Strs&, const std::string& v) {
            return "hp::gelu_" + v + "_backward(" + t[0] + ", " + t[1] + ")";
          },
          -1, check_gelu(2));
      op.variants = {"erf", "tanh"};
      op.variant = gelu_variant(2);
    }
    add("threshold_backward", {0, 1}, {2},
        [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
          return "(" + t[1] + " <= " + s[0] + " ? 0.0f : " + t[0] + ")";
        });
    // ATen computes these in the tensor's dtype (scalar_t arithmetic): an fp16 or bf16 tensor's
    // intermediate results are rounded to it (hp::round_as): a form per dtype.
    add("sigmoid_backward", {0, 1}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string& v) {
          return "hp::sigmoid_backward(" + t[0] + ", " + t[1] + ", " + rounding_code(v) + ")";
        })
        .per_dtype();
    add("tanh_backward", {0, 1}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string& v) {
          return "hp::tanh_backward(" + t[0] + ", " + t[1] + ", " + rounding_code(v) + ")";
        })
        .per_dtype();
    add("silu_backward", {0, 1}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string&) {
          return "hp::silu_backward(" + t[0] + ", " + t[1] + ")";
        });
    add("softplus", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
      return "hp::softplus(" + t[0] + ", " + s[0] + ", " + s[1] + ")";
    });
    add("softplus_backward", {0, 1}, {2, 3},
        [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
          return "hp::softplus_backward(" + t[0] + ", " + t[1] + ", " + s[0] + ", " + s[1] + ")";
        });
    both("addcmul", "", {0, 1, 2}, {3},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "hp::addcmul(" + t[0] + ", " + t[1] + ", " + t[2] + ", " + s[0] + ")";
         });
    both("addcdiv", "", {0, 1, 2}, {3},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "hp::addcdiv(" + t[0] + ", " + t[1] + ", " + t[2] + ", " + s[0] + ")";
         });
    both("lerp", "Scalar", {0, 1}, {2},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "hp::lerp(" + t[0] + ", " + t[1] + ", " + s[0] + ")";
         });
    both("lerp", "Tensor", {0, 1, 2}, {},
         [](const Strs& t, const Strs&, const Strs&, const std::string&) {
           return "hp::lerp(" + t[0] + ", " + t[1] + ", " + t[2] + ")";
         });
    // x^3 and x^-2 square in the tensor's dtype: a form per dtype.
    both(
        "pow", "Tensor_Scalar", {0}, {1},
        [](const Strs& t, const Strs& s, const Strs&, const std::string& v) {
          return "hp::pow(" + t[0] + ", " + s[0] + ", " + rounding_code(v) + ")";
        },
        ok, kDtypeForms, dtype_form);
    // clamp(self, Scalar? min, Scalar? max): a None bound is structural (part of the signature).
    // A None scalar operand reaches the emitter as an empty name.
    both(
        "clamp", "", {0}, {1, 2},
        [](const Strs& t, const Strs& s, const Strs&, const std::string& v) {
          std::string e = t[0];
          if (v != "max") e = "hp::clamp_min(" + e + ", " + s[0] + ")";
          if (v != "min") e = "hp::clamp_max(" + e + ", " + s[1] + ")";
          return e;
        },
        [](const Node& n) -> std::string {
          return n.args[1].isNone() && n.args[2].isNone() ? "clamp without bounds" : "";
        },
        {"min", "max", "minmax"},
        [](const Node& n, const Graph&) {
          return n.args[2].isNone() ? "min" : n.args[1].isNone() ? "max" : "minmax";
        });
    // masked_fill(self, mask, value): the value where the mask (bool) is set.
    both("masked_fill", "Scalar", {0, 1}, {2},
         [](const Strs& t, const Strs& s, const Strs&, const std::string&) {
           return "(" + t[1] + " != 0.0f ? " + s[0] + " : " + t[0] + ")";
         });
    add("where.self", {0, 1, 2}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string&) {
          return "(" + t[0] + " != 0.0f ? " + t[1] + " : " + t[2] + ")";
        });
    {
      PointwiseOp& op = add(
          "mse_loss_backward", {0, 1, 2}, {},
          [](const Strs& t, const Strs&, const Strs& imm, const std::string& v) {
            return "hp::mse_backward(" + t[0] + ", " + t[1] + ", " + t[2] + ", " + imm[0] + ", " +
                   rounding_code(v) + ")";
          },
          -1,
          [](const Node& n) -> std::string {
            const auto r = n.args[3].isInt() ? n.args[3].toInt() : -1;
            return r >= 0 && r <= 2 ? "" : "mse_loss reduction " + std::to_string(r);
          });
      op.per_dtype();        // in scalar_t, as sigmoid_backward
      op.alone_pays = true;  // ATen: zeros_like(input), then mse_loss_backward_out into it
      // reduction: 0 none, 1 mean, 2 sum; ATen scales by 2/numel for mean.
      op.immediates = [](const Node& n, const Graph& g) {
        const double numel = static_cast<double>(g.value(n.input_at(1)).meta.numel());
        return std::vector<double>{n.args[3].toInt() == 1 ? 2.0 / numel : 2.0};
      };
    }
    add("_to_copy", {0}, {}, [](const Strs& t, const Strs&, const Strs&, const std::string&) {
      return t[0];  // the cast happens at the store
    }).casts = true;
    add(
        "copy_", {1}, {},
        [](const Strs& t, const Strs&, const Strs&, const std::string&) { return t[0]; }, 0)
        .casts = true;
    add(
        "fill_.Scalar", {}, {1},
        [](const Strs&, const Strs& s, const Strs&, const std::string&) { return s[0]; }, 0);
    add(
        "zero_", {}, {},
        [](const Strs&, const Strs&, const Strs&, const std::string&) {
          return std::string("0.0f");
        },
        0);
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

bool float_type(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::Half ||
         t == c10::ScalarType::BFloat16;
}

std::vector<c10::ScalarType> operand_rounding(const Graph& g, const Node& n,
                                              const PointwiseOp& op) {
  std::vector<c10::ScalarType> round(op.tensors.size(), c10::ScalarType::Float);
  if (op.casts) return round;
  std::optional<c10::ScalarType> dims, zero_dims;  // promoted floating dtypes of each kind
  for (int a : op.tensors) {
    const int v = n.input_at(a);
    if (v < 0) continue;
    const TensorMeta& m = g.value(v).meta;
    if (!float_type(m.dtype)) continue;  // a bool mask or condition takes no part
    auto& slot = m.sizes.empty() ? zero_dims : dims;
    slot = slot ? c10::promoteTypes(*slot, m.dtype) : m.dtype;
  }
  const auto common = dims ? dims : zero_dims;
  if (!common || *common == c10::ScalarType::Float) return round;  // fp16/bf16 are exact in fp32
  for (std::size_t k = 0; k < op.tensors.size(); ++k) {
    const int v = n.input_at(op.tensors[k]);
    if (v < 0) continue;
    const auto dt = g.value(v).meta.dtype;
    if (float_type(dt) && dt != *common) round[k] = *common;
  }
  return round;
}

PointwiseOp& PointwiseOp::per_dtype() {
  variants = kDtypeForms;
  variant = dtype_form;
  return *this;
}

const PointwiseOp* find_pointwise(const Node& n) {
  const auto it = table().ops.find(n.short_name());
  return it == table().ops.end() ? nullptr : &it->second;
}

const RowOp* find_row_op(const Node& n) {
  using K = RowOp::Kind;
  static const std::unordered_map<std::string, RowOp> ops = {
      {"sum.dim_IntList", {K::Sum, {0}, true}},
      {"mean.dim", {K::Mean, {0}, true}},
      {"_softmax", {K::Softmax, {0}, false}},
      {"_log_softmax", {K::LogSoftmax, {0}, false}},
      {"_softmax_backward_data", {K::SoftmaxBackward, {0, 1}, false}},
      {"_log_softmax_backward_data", {K::LogSoftmaxBackward, {0, 1}, false}},
      {"native_layer_norm", {K::LayerNorm, {0}, false, 3}},
      {"_fused_rms_norm", {K::RmsNorm, {0}, false, 2}},
      {"native_layer_norm_backward", {K::LayerNormBackward, {0, 1}, false, 3}},
      {"_fused_rms_norm_backward", {K::RmsNormBackward, {0, 1}, false, 2}},
      {"nll_loss_backward", {K::NllLossBackward, {1}, false, 1}},
      {"nll_loss_forward", {K::NllLoss, {0}, false, 2}},
  };
  const auto it = ops.find(n.short_name());
  return it == ops.end() ? nullptr : &it->second;
}

namespace {

// What nll_loss's forward and backward share: scores `m` as [N, C], then (from schema position
// `target` on) target, weight, reduction and ignore_index.
std::string nll_check(const Graph& g, const Node& n, const TensorMeta& m, int target) {
  if (m.sizes.size() != 2) return "not a batch of rows of class scores";
  if (m.sizes[1] >= kMaxClasses) return "too many classes";
  const int v = n.input_at(target);
  if (v < 0) return "undefined target";
  const TensorMeta& t = g.value(v).meta;
  if (t.dtype != c10::ScalarType::Long || t.sizes.size() != 1 || t.sizes[0] != m.sizes[0])
    return "target is not one int64 class index per row";
  if (n.input_at(target + 1) >= 0) return "class weights";
  const auto& reduction = n.args[static_cast<std::size_t>(target + 2)];
  if (!reduction.isInt() || reduction.toInt() < 0 || reduction.toInt() > 2)
    return "unknown reduction";
  if (!n.args[static_cast<std::size_t>(target + 3)].isInt())
    return "ignore_index is not an integer";
  return {};
}

}  // namespace

std::string row_op_check(const Graph& g, const Node& n) {
  const RowOp* op = find_row_op(n);
  if (op == nullptr) return "not a row op";
  const int in = n.input_at(op->tensors[0]);
  if (in < 0) return "undefined operand";
  const TensorMeta& m = g.value(in).meta;
  const auto rank = static_cast<std::int64_t>(m.sizes.size());
  if (rank == 0) return "a 0-dim operand";
  auto last = [&](std::int64_t d) { return d == rank - 1 || d == -1; };
  if (op->kind == RowOp::Kind::LayerNorm || op->kind == RowOp::Kind::RmsNorm) {
    // native_layer_norm(input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
    // _fused_rms_norm(input, int[] normalized_shape, Tensor? weight, float? eps)
    const bool layer = op->kind == RowOp::Kind::LayerNorm;
    const auto& shape = n.args[1];
    if (!shape.isIntList() || shape.toIntList().size() != 1 ||
        shape.toIntList().get(0) != m.sizes.back())
      return "normalizes other than the last dimension";
    if (!n.args[layer ? 4 : 3].isDouble()) return "eps is not a number (the default eps)";
    for (int a : layer ? std::vector<int>{2, 3} : std::vector<int>{2}) {
      const int v = n.input_at(a);
      if (v < 0) continue;
      const TensorMeta& w = g.value(v).meta;
      if (w.sizes.size() != 1 || w.sizes[0] != m.sizes.back() || w.dtype != m.dtype)
        return "weight or bias of another shape or dtype";
    }
  } else if (op->norm_backward()) {
    // native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
    //                            bool[3] output_mask)
    // _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, bool[2] mask)
    const bool layer = op->kind == RowOp::Kind::LayerNormBackward;
    const auto& shape = n.args[2];
    if (!shape.isIntList() || shape.toIntList().size() != 1 ||
        shape.toIntList().get(0) != m.sizes.back())
      return "normalizes other than the last dimension";
    const auto& mask = n.args[layer ? 7 : 5];
    if (!mask.isBoolList()) return "output_mask is not a list of bools";
    // The input's gradient may be left out (a norm on the model's input), not the others.
    const auto asked = mask.toBoolList();
    for (std::size_t k = 1; k < asked.size(); ++k)
      if (!asked.get(k)) return "a weight or bias gradient is not asked for (output_mask)";
    const RowOp::NormBackwardArgs a = op->norm_args();
    for (int p : {a.weight, a.bias}) {
      if (p < 0) continue;
      const int v = n.input_at(p);
      if (v < 0) return layer ? "no weight or no bias" : "no weight";
      const TensorMeta& w = g.value(v).meta;
      if (w.sizes.size() != 1 || w.sizes[0] != m.sizes.back())
        return "weight or bias of another shape";
    }
    // The statistics of the forward: one value per row, [..., 1].
    std::vector<std::int64_t> rows(m.sizes.begin(), m.sizes.end());
    rows.back() = 1;
    for (int p : {a.mean, a.rstd}) {
      if (p < 0) continue;
      const int v = n.input_at(p);
      if (v < 0) return "undefined mean or rstd";
      const TensorMeta& s = g.value(v).meta;
      if (std::vector<std::int64_t>(s.sizes.begin(), s.sizes.end()) != rows)
        return "mean or rstd not of shape [..., 1]";
    }
  } else if (op->kind == RowOp::Kind::NllLoss) {
    // nll_loss_forward(self, target, weight, int reduction, int ignore_index)
    if (std::string why = nll_check(g, n, m, 1); !why.empty()) return why;
    if (n.args[3].toInt() == 0) return "reduction none";
  } else if (op->kind == RowOp::Kind::NllLossBackward) {
    // nll_loss_backward(grad_output, self, target, weight, int reduction, int ignore_index,
    //                   total_weight)
    if (std::string why = nll_check(g, n, m, 2); !why.empty()) return why;
    const int grad = n.input_at(0), total = n.input_at(6);
    if (grad < 0 || total < 0) return "undefined grad_output or total_weight";
    const std::int64_t grads = g.value(grad).meta.numel();
    if (g.value(grad).meta.dtype != m.dtype || g.value(grad).meta.device != m.device)
      return "grad_output of another dtype or device";
    if (g.value(total).meta.numel() != 1 || grads != (n.args[4].toInt() == 0 ? m.sizes[0] : 1))
      return "grad_output or total_weight of another shape";
  } else if (op->keeps_row) {
    // sum/mean(self, int[1]? dim, bool keepdim, *, ScalarType? dtype)
    const auto& dim = n.args[1];
    if (!dim.isIntList() || dim.toIntList().size() != 1 || !last(dim.toIntList().get(0)))
      return "reduces other than the last dimension";
    if (n.args.size() > 3 && !n.args[3].isNone()) return "a dtype argument";
  } else {
    // _softmax(self, int dim, bool half_to_float) and the backward ops (..., int dim, dtype)
    const auto& dim = n.args[op->tensors.size()];
    if (!dim.isInt() || !last(dim.toInt())) return "reduces other than the last dimension";
    if (op->kind == RowOp::Kind::Softmax || op->kind == RowOp::Kind::LogSoftmax) {
      if (n.args[2].isBool() && n.args[2].toBool()) return "half_to_float";
    }
  }
  for (int t : op->tensors) {
    const int v = n.input_at(t);
    if (v < 0) return "undefined operand";
    const TensorMeta& tm = g.value(v).meta;
    if (tm.sizes != m.sizes) return "operands of different shapes";
  }
  return {};
}

bool is_column_sum(const Graph& g, const Node& n) {
  if (n.short_name() != "sum.dim_IntList" || n.args.size() < 2) return false;
  const int in = n.input_at(0);
  if (in < 0) return false;
  const auto rank = static_cast<std::int64_t>(g.value(in).meta.sizes.size());
  if (rank < 2) return false;
  const auto& dim = n.args[1];
  if (!dim.isIntList()) return false;
  // Every dimension but the last, each once (a Linear's bias gradient over [B, T, C]: [0, 1]).
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  const auto dims = dim.toIntList();
  if (static_cast<std::int64_t>(dims.size()) != rank - 1) return false;
  for (const std::int64_t d : dims) {
    const std::int64_t k = d < 0 ? d + rank : d;
    if (k < 0 || k >= rank - 1 || seen[static_cast<std::size_t>(k)]) return false;
    seen[static_cast<std::size_t>(k)] = true;
  }
  return true;
}

std::string column_sum_check(const Graph& g, const Node& n) {
  if (!is_column_sum(g, n)) return "not a sum over every dimension but the last";
  if (n.args.size() > 3 && !n.args[3].isNone()) return "a dtype argument";
  const TensorMeta& m = g.value(n.input_at(0)).meta;
  if (!float_type(m.dtype)) return "operand is not fp32/fp16/bf16";
  if (n.outputs.size() != 1 || n.out_alias[0] >= 0) return "unexpected outputs";
  const TensorMeta& o = g.value(n.outputs[0]).meta;
  if (!o.defined || o.dtype != m.dtype || o.numel() != m.sizes.back() || o.numel() == 0 ||
      !is_contiguous(o))
    return "output is not one contiguous value per column";
  return {};
}

bool is_total_reduction(const Node& n) {
  if (n.short_name() != "mse_loss" || n.args.size() < 3 || !n.args[2].isInt()) return false;
  const auto r = n.args[2].toInt();
  return r == 1 || r == 2;  // mean, sum (0, none, is pointwise)
}

std::string total_reduction_check(const Graph& g, const Node& n) {
  if (!is_total_reduction(n)) return "not a reduction to one value";
  const int a = n.input_at(0), b = n.input_at(1);
  if (a < 0 || b < 0) return "undefined operand";
  const TensorMeta& x = g.value(a).meta;
  const TensorMeta& y = g.value(b).meta;
  if (x.sizes != y.sizes || x.dtype != y.dtype || x.device != y.device)
    return "operands of different shapes, dtypes or devices";
  if (!float_type(x.dtype)) return "operand is not fp32/fp16/bf16";
  if (!is_contiguous(x) || !is_contiguous(y)) return "operand is not contiguous";
  if (x.numel() == 0) return "empty";
  if (n.outputs.size() != 1 || n.out_alias[0] >= 0) return "unexpected outputs";
  const TensorMeta& o = g.value(n.outputs[0]).meta;
  if (!o.defined || o.numel() != 1 || o.dtype != x.dtype) return "output is not one value";
  return {};
}

std::string float_literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9ef", v);
  return buf;
}

const std::vector<OpForm>& op_forms() {
  static const std::vector<OpForm> forms = [] {
    std::map<std::string, const PointwiseOp*> sorted;
    for (const auto& [key, op] : table().ops) sorted.emplace(key, &op);
    std::vector<OpForm> f;
    for (const auto& [key, op] : sorted) {
      for (const std::string& v : op->variants) f.push_back(OpForm{key, v, op});
    }
    return f;
  }();
  return forms;
}

int op_form_index(const Graph& g, const Node& n) {
  const PointwiseOp* op = find_pointwise(n);
  if (op == nullptr) return -1;
  const std::string key = n.short_name();
  const std::string v = op->variant ? op->variant(n, g) : std::string();
  const auto& forms = op_forms();
  for (std::size_t i = 0; i < forms.size(); ++i) {
    if (forms[i].key == key && forms[i].variant == v) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace hotpath::detail
