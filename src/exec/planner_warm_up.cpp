// The planner's code run once on a made-up trace, on the compile worker at enable time: the
// first plan a process builds ran about twice as slow as the same analysis run again (0.9 ms
// against 0.4 ms for the MLP+AdamW plan on this project's 2-core build machine), paying for code
// that had never run (pages, the dynamic linker's first calls, caches). A known winner waits for
// its plan: every millisecond of it is a step of the loop run eagerly under the hook. (On an
// H200's host the known winner's MLP plan took 1.7-1.8 ms; with this and cache keys that hash the
// runtime headers once, 1.0 ms.)
#include <string>
#include <tuple>
#include <vector>

#include "exec/planner.h"

namespace hotpath::detail {
namespace {

TensorMeta gpu_meta(std::vector<std::int64_t> sizes) {
  TensorMeta m;
  m.defined = true;
  m.dtype = c10::ScalarType::Float;
  m.device = c10::Device(c10::kCUDA, 0);
  m.sizes.assign(sizes.begin(), sizes.end());
  m.strides.assign(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) m.strides[d - 1] = m.strides[d] * sizes[d];
  return m;
}

// One op of the made-up trace: its inputs (argument, written, sizes, producer: an op of the trace,
// or < 0 a tensor from outside), its other arguments (tensors as None) with the scalar ones
// marked, its output.
struct Op {
  const char* name;
  const char* overload;
  std::vector<std::tuple<std::int32_t, bool, std::vector<std::int64_t>, std::int64_t>> inputs;
  std::vector<c10::IValue> args;
  std::uint64_t scalars;
  std::vector<std::int64_t> out;
  std::int32_t alias;
  bool alive;
  bool grad;
};

OpRecord record(const Op& op) {
  OpRecord r;
  r.name = op.name;
  r.overload = op.overload;
  for (const auto& [argument, written, sizes, producer] : op.inputs)
    r.inputs.push_back(TensorInput{argument, written, gpu_meta(sizes), ValueRef{producer, 0}});
  for (const c10::IValue& a : op.args) r.args.push_back(a);
  r.scalar_mask = op.scalars;
  r.grad_enabled = op.grad;
  r.outputs.push_back(gpu_meta(op.out));
  r.output_alias.push_back(op.alias);
  r.output_alive.push_back(op.alive);
  return r;
}

// AdamW's update of one parameter (p, its gradient, exp_avg, exp_avg_sq: outside tensors), as
// LibTorch's optimizer records it; `at` is the index of its first op in the trace. Every op has
// the parameter's sizes and runs with grad mode off; `alias` 0 writes its first input in place.
void adamw(std::vector<Op>& ops, std::int64_t p, std::int64_t grad, std::int64_t m, std::int64_t v,
           std::vector<std::int64_t> sizes) {
  const auto at = static_cast<std::int64_t>(ops.size());
  const c10::IValue none;
  const auto f = [](double x) { return c10::IValue(x); };
  const auto in = [&](std::int32_t argument, bool written, std::int64_t producer) {
    return std::make_tuple(argument, written, sizes, producer);
  };
  const auto add = [&](const char* name, const char* overload, decltype(Op::inputs) inputs,
                       std::vector<c10::IValue> args, std::uint64_t scalars, std::int32_t alias,
                       bool alive) {
    ops.push_back(
        {name, overload, std::move(inputs), std::move(args), scalars, sizes, alias, alive, false});
  };
  add("aten::mul_", "Scalar", {in(0, true, p)}, {none, f(0.99)}, 0b10, 0, true);
  add("aten::mul_", "Scalar", {in(0, true, m)}, {none, f(0.9)}, 0b10, 0, true);
  add("aten::add_", "Tensor", {in(0, true, at + 1), in(1, false, grad)}, {none, none, f(0.1)},
      0b100, 0, true);
  add("aten::mul_", "Scalar", {in(0, true, v)}, {none, f(0.999)}, 0b10, 0, true);
  add("aten::addcmul_", "", {in(0, true, at + 3), in(1, false, grad), in(2, false, grad)},
      {none, none, none, f(0.001)}, 0b1000, 0, true);
  add("aten::sqrt", "", {in(0, false, at + 4)}, {none}, 0, -1, false);
  add("aten::div", "Scalar", {in(0, false, at + 5)}, {none, f(0.03)}, 0b10, -1, false);
  add("aten::add_", "Scalar", {in(0, true, at + 6)}, {none, f(1e-8), c10::IValue(1)}, 0b110, 0,
      false);
  add("aten::addcdiv_", "", {in(0, true, at), in(1, false, at + 2), in(2, false, at + 7)},
      {none, none, none, f(-0.001)}, 0b1000, 0, true);
}

}  // namespace

HotTrace planner_warm_up_trace() {
  // A small training step: a forward pass (pointwise, a row op, a loss to one value), its
  // backward (pointwise, a sum over columns), and AdamW's update of two parameters of one size (a
  // batch: the kernel's multi entry).
  const c10::IValue none;
  std::vector<Op> ops;
  const std::vector<std::int64_t> act{64, 256}, row{256}, par{256, 256};
  ops.push_back({"aten::mul",
                 "Tensor",
                 {{0, false, act, -1}, {1, false, row, -2}},
                 {none, none},
                 0,
                 act,
                 -1,
                 false,
                 true});
  ops.push_back({"aten::gelu",
                 "",
                 {{0, false, act, 0}},
                 {none, c10::IValue(std::string("none"))},
                 0,
                 act,
                 -1,
                 false,
                 true});
  ops.push_back({"aten::_softmax",
                 "",
                 {{0, false, act, 1}},
                 {none, c10::IValue(1), c10::IValue(false)},
                 0,
                 act,
                 -1,
                 true,
                 true});
  ops.push_back({"aten::mse_loss",
                 "",
                 {{0, false, act, 2}, {1, false, act, -3}},
                 {none, none, c10::IValue(1)},
                 0,
                 {},
                 -1,
                 true,
                 true});
  ops.push_back({"aten::mse_loss_backward",
                 "",
                 {{0, false, {}, -4}, {1, false, act, 2}, {2, false, act, -3}},
                 {none, none, none, c10::IValue(1)},
                 0,
                 act,
                 -1,
                 false,
                 false});
  ops.push_back({"aten::gelu_backward",
                 "",
                 {{0, false, act, 4}, {1, false, act, 0}},
                 {none, none, c10::IValue(std::string("none"))},
                 0,
                 act,
                 -1,
                 false,
                 false});
  ops.push_back({"aten::sum",
                 "dim_IntList",
                 {{0, false, act, 5}},
                 {none, c10::IValue(std::vector<std::int64_t>{0}), c10::IValue(true), none},
                 0,
                 {1, 256},
                 -1,
                 true,
                 false});
  adamw(ops, -5, -6, -7, -8, par);
  adamw(ops, -9, -10, -11, -12, par);
  HotTrace trace;
  trace.iteration = 1;
  for (const Op& op : ops) trace.ops.push_back(record(op));
  return trace;
}

std::size_t warm_up_planner(int arch) {
  Plan plan;
  plan.hex = "warm-up";
  analyse_plan(plan, planner_warm_up_trace(), std::nullopt, Config{}, DeviceInfo{132, arch});
  return plan.groups.size();
}

}  // namespace hotpath::detail
