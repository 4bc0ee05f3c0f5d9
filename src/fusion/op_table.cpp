#include "fusion/op_table.h"

#include <cstdio>
#include <unordered_map>

namespace hotpath::detail {
namespace {

using Strs = std::vector<std::string>;
using Emit = std::function<std::string(const Strs&, const Strs&, const Node&, const Graph&)>;

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

struct Table {
  std::unordered_map<std::string, PointwiseOp> ops;

  void add(const std::string& key, std::vector<int> tensors, std::vector<int> scalars, Emit emit,
           int writes = -1, std::function<std::string(const Node&)> check = ok) {
    ops[key] = PointwiseOp{std::move(tensors), std::move(scalars), writes, std::move(check),
                           std::move(emit)};
  }
  // name and name_ (in place on argument 0) with the same math.
  void both(const std::string& name, const std::string& overload, std::vector<int> tensors,
            std::vector<int> scalars, const Emit& emit,
            std::function<std::string(const Node&)> check = ok) {
    const std::string suffix = overload.empty() ? "" : "." + overload;
    add(name + suffix, tensors, scalars, emit, -1, check);
    add(name + "_" + suffix, tensors, scalars, emit, 0, check);
  }
  void unary(const std::string& name, const std::string& fn) {
    both(name, "", {0}, {}, [fn](const Strs& t, const Strs&, const Node&, const Graph&) {
      return fn + "(" + t[0] + ")";
    });
  }

  Table() {
    auto bin = [](const char* op) {
      return [op](const Strs& t, const Strs&, const Node&, const Graph&) {
        return "(" + t[0] + " " + op + " " + t[1] + ")";
      };
    };
    both("add", "Tensor", {0, 1}, {2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + t[0] + " + " + s[0] + " * " + t[1] + ")";
    });
    both("add", "Scalar", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + t[0] + " + " + s[0] + " * " + s[1] + ")";
    });
    both("sub", "Tensor", {0, 1}, {2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + t[0] + " - " + s[0] + " * " + t[1] + ")";
    });
    both("sub", "Scalar", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + t[0] + " - " + s[0] + " * " + s[1] + ")";
    });
    add("rsub.Scalar", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + s[0] + " - " + s[1] + " * " + t[0] + ")";
    });
    both("mul", "Tensor", {0, 1}, {}, bin("*"));
    both("mul", "Scalar", {0}, {1}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "(" + t[0] + " * " + s[0] + ")";
    });
    both("div", "Tensor", {0, 1}, {}, bin("/"));
    // ATen's CUDA kernel multiplies by the reciprocal of a scalar divisor.
    both("div", "Scalar", {0}, {1}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
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
    both(
        "gelu", "", {0}, {},
        [](const Strs& t, const Strs&, const Node& n, const Graph&) {
          return (gelu_mode(n, 1) == "tanh" ? "hp::gelu_tanh(" : "hp::gelu_erf(") + t[0] + ")";
        },
        check_gelu(1));
    add(
        "gelu_backward", {0, 1}, {},
        [](const Strs& t, const Strs&, const Node& n, const Graph&) {
          return (gelu_mode(n, 2) == "tanh" ? "hp::gelu_tanh_backward("
                                            : "hp::gelu_erf_backward(") +
                 t[0] + ", " + t[1] + ")";
        },
        -1, check_gelu(2));
    add("threshold_backward", {0, 1}, {2},
        [](const Strs& t, const Strs& s, const Node&, const Graph&) {
          return "(" + t[1] + " <= " + s[0] + " ? 0.0f : " + t[0] + ")";
        });
    add("sigmoid_backward", {0, 1}, {}, [](const Strs& t, const Strs&, const Node&, const Graph&) {
      return "(" + t[0] + " * (1.0f - " + t[1] + ") * " + t[1] + ")";
    });
    add("tanh_backward", {0, 1}, {}, [](const Strs& t, const Strs&, const Node&, const Graph&) {
      return "(" + t[0] + " * (1.0f - " + t[1] + " * " + t[1] + "))";
    });
    add("silu_backward", {0, 1}, {}, [](const Strs& t, const Strs&, const Node&, const Graph&) {
      return "hp::silu_backward(" + t[0] + ", " + t[1] + ")";
    });
    add("softplus", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      return "hp::softplus(" + t[0] + ", " + s[0] + ", " + s[1] + ")";
    });
    add("softplus_backward", {0, 1}, {2, 3},
        [](const Strs& t, const Strs& s, const Node&, const Graph&) {
          return "hp::softplus_backward(" + t[0] + ", " + t[1] + ", " + s[0] + ", " + s[1] + ")";
        });
    both("addcmul", "", {0, 1, 2}, {3},
         [](const Strs& t, const Strs& s, const Node&, const Graph&) {
           return "(" + t[0] + " + " + s[0] + " * " + t[1] + " * " + t[2] + ")";
         });
    both("addcdiv", "", {0, 1, 2}, {3},
         [](const Strs& t, const Strs& s, const Node&, const Graph&) {
           return "(" + t[0] + " + " + s[0] + " * (" + t[1] + " / " + t[2] + "))";
         });
    both("lerp", "Scalar", {0, 1}, {2},
         [](const Strs& t, const Strs& s, const Node&, const Graph&) {
           return "hp::lerp(" + t[0] + ", " + t[1] + ", " + s[0] + ")";
         });
    both("lerp", "Tensor", {0, 1, 2}, {},
         [](const Strs& t, const Strs&, const Node&, const Graph&) {
           return "hp::lerp(" + t[0] + ", " + t[1] + ", " + t[2] + ")";
         });
    both("pow", "Tensor_Scalar", {0}, {1},
         [](const Strs& t, const Strs& s, const Node&, const Graph&) {
           return "hp::pow(" + t[0] + ", " + s[0] + ")";
         });
    // clamp(self, Scalar? min, Scalar? max): a None bound is structural (part of the signature).
    // A None scalar operand reaches the emitter as an empty name.
    both("clamp", "", {0}, {1, 2}, [](const Strs& t, const Strs& s, const Node&, const Graph&) {
      std::string e = t[0];
      if (!s[0].empty()) e = "fmaxf(" + e + ", " + s[0] + ")";
      if (!s[1].empty()) e = "fminf(" + e + ", " + s[1] + ")";
      return e;
    });
    add("where.self", {0, 1, 2}, {}, [](const Strs& t, const Strs&, const Node&, const Graph&) {
      return "(" + t[0] + " != 0.0f ? " + t[1] + " : " + t[2] + ")";
    });
    add(
        "mse_loss_backward", {0, 1, 2}, {},
        [](const Strs& t, const Strs&, const Node& n, const Graph& g) {
          // reduction: 0 none, 1 mean, 2 sum; ATen scales by 2/numel for mean.
          const double numel = static_cast<double>(g.value(n.input_at(1)).meta.numel());
          const double norm = n.args[3].toInt() == 1 ? 2.0 / numel : 2.0;
          return "((" + t[1] + " - " + t[2] + ") * " + hp_float(norm) + " * " + t[0] + ")";
        },
        -1,
        [](const Node& n) -> std::string {
          const auto r = n.args[3].isInt() ? n.args[3].toInt() : -1;
          return r >= 0 && r <= 2 ? "" : "mse_loss reduction " + std::to_string(r);
        });
    add("_to_copy", {0}, {}, [](const Strs& t, const Strs&, const Node&, const Graph&) {
      return t[0];  // the cast happens at the store
    });
    add(
        "copy_", {1}, {},
        [](const Strs& t, const Strs&, const Node&, const Graph&) { return t[0]; }, 0);
    add(
        "fill_.Scalar", {}, {1},
        [](const Strs&, const Strs& s, const Node&, const Graph&) { return s[0]; }, 0);
    add(
        "zero_", {}, {},
        [](const Strs&, const Strs&, const Node&, const Graph&) { return std::string("0.0f"); }, 0);
  }

  static std::string hp_float(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9ef", v);
    return buf;
  }
};

}  // namespace

const PointwiseOp* find_pointwise(const Node& n) {
  static const Table table;
  const auto it = table.ops.find(n.short_name());
  return it == table.ops.end() ? nullptr : &it->second;
}

}  // namespace hotpath::detail
