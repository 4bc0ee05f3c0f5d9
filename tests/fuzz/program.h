// The fuzzer's programs: what one is (a seed, random inputs, a list of ops over earlier values),
// how it is made from its seed, and how it runs on ATen (fuzz_programs.cpp judges the runs).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace fuzz {

// One op of a program: its kind, operands (indices of earlier values), a scalar.
enum class K {
  AddT,
  SubT,
  MulT,
  DivT,
  AddS,
  MulS,
  DivS,
  RSub,
  Neg,
  Exp,
  LogAbs1,
  SqrtAbs,
  RsqrtAbsEps,
  Sigmoid,
  Tanh,
  Relu,
  Silu,
  Gelu,
  GeluTanh,
  Pow2,
  Clamp,
  MaskedFill,
  Where,
  Lerp,
  Addcmul,
  SumLast,
  MeanLast,
  Softmax,
  LogSoftmax,
  SumFirst,
  Transpose,
  SliceStep,
  Narrow,
  ToHalf,
  ToBF16,
  ToFloat,
  MulInPlace,
  AddInPlace,
  // Not drawn with the others (that would change every seed's program): appended to a third of
  // the programs from a generator of its own. A 2-D value of even rows read as [2, R/2, C] and
  // summed over both leading dimensions (a Linear's bias gradient: a column kernel over R rows).
  SumLeading,
  // Also appended from a generator of their own, to a quarter of the programs: the latest value
  // and one of the same shape (`b`) put together along dimension `s` (a stack: the new one;
  // cat: an existing one): stored by the kernel that computes them.
  Stack,
  Cat,
  // A layer's ops, appended only to the programs of fuzz_programs --layers (so that no other
  // seed's program changes), each program one of the first two and one of the last two where
  // its values allow, each from a generator of its own: layer norm over the last dimension, its
  // weight and bias made from other values (their first C elements, in its dtype); cross entropy
  // of a 2-D value's rows (mean), its targets a row-wise argmax of another value (or its own)
  // taken modulo the classes; rms norm over the last dimension (its weight made as layer
  // norm's); a linear layer of a 2-D value with itself as the weight and a bias made from
  // another value (x @ x^T / 8 + bias: a matrix product that hotpath leaves to ATen, its bias's
  // gradient a column sum).
  LayerNorm,
  CrossEntropy,
  RmsNorm,
  Linear,
  // A value's layout changed in place, appended only to the programs of fuzz_programs --layouts
  // (so that no other seed's program changes), from a generator of its own: a recent value times
  // `s`, transposed in place (t_, a 2-D value) or resized in place to as many elements in
  // another shape (resize_, of a detached copy: autograd refuses to resize), then read by
  // pointwise ops (h * h + h / 2), which a kernel fuses and must index by the new layout.
  TransposeInPlace,
  ResizeInPlace,
  Count
};
// The ops' names, by kind (Program::text).
extern const char* const kNames[static_cast<int>(K::Count)];

struct FOp {
  K kind;
  int a = 0, b = 0, c = 0;
  double s = 1.0;
};

struct Program {
  std::uint64_t seed = 0;
  int inputs = 0;  // random inputs; the mask (and an empty tensor) follow them
  int values = 0;  // tensors before the first op: its operands index from there
  std::vector<FOp> ops;
  bool backward = false;
  int iterations = 6;  // how many times the loop runs it (fuzz_programs --iterations)
  // Its kernels held back and let in part-way (fuzz_programs --handover; see Handover).
  bool handover = false;
  // What the governor may ask of its plans, asked at points drawn from the seed (--actions; see
  // Action).
  bool actions = false;
  // A layer's ops appended (fuzz_programs --layers; see K::LayerNorm).
  bool layers = false;
  // A layout changed in place appended (fuzz_programs --layouts; see K::TransposeInPlace).
  bool layouts = false;
  std::string text() const {
    std::ostringstream os;
    os << "seed " << seed << ", " << inputs << " inputs" << (backward ? ", backward + SGD" : "")
       << ", " << iterations << " iterations" << (handover ? ", kernels handed over" : "")
       << (actions ? ", governor actions" : "") << (layers ? ", layer ops" : "")
       << (layouts ? ", in-place layouts" : "") << ":";
    for (std::size_t i = 0; i < ops.size(); ++i)
      os << " v" << values + static_cast<int>(i) << "=" << kNames[static_cast<int>(ops[i].kind)]
         << "(v" << ops[i].a << ",v" << ops[i].b << ",v" << ops[i].c << ")";
    return os.str();
  }
};

// The inputs of a program, made from its seed: shapes with broadcastable dims, a one-element
// and sometimes an empty tensor, transposed and sliced layouts, NaN/Inf, fp16/bf16, a bool mask.
std::vector<torch::Tensor> make_inputs(const Program& p, torch::Device d, bool grad);
// Runs the program's ops on `v` (inputs first), appending each result; `after_op`, where set, is
// called with each op's index once it has run. Throws what ATen throws.
void apply(const Program& p, std::vector<torch::Tensor>& v, int iteration,
           const std::function<void(std::size_t)>& after_op = nullptr);
// Where a run with its kernels held (Program::handover, compile/kernel_gate.h) lets them in,
// drawn from the seed: the first group's kernel after op `op` of iteration `first` (while the
// iteration's fused groups are pending), every other one after iteration `all`, so that at least
// one iteration runs on them all. `first` is -1 where the program runs too few iterations for
// a partial handover; `all` is -1 where it runs too few for any.
struct Handover {
  int first = -1;
  std::size_t op = 0;
  int all = -1;
};
Handover handover_points(const Program& p);
// One thing the governor may ask of every plan of the run (policy/plan_control.h), asked after op
// `op` of iteration `iteration`; the executor takes it up at the next iteration start, as it
// does the governor's. kMask: a random set of groups fused (from `bits`), the rest eager (a
// trial); kAllOff: every group eager (a rebase); kAllOn: every group fused again; kNoReplay: CUDA
// graph replay let go; kNoStandIn / kKeepStandIn: the interpreter's stand-in let go, or kept;
// kRevert: the plan reverted to eager for good (only ever the last action).
struct Action {
  enum Kind { kMask, kAllOff, kAllOn, kNoReplay, kNoStandIn, kKeepStandIn, kRevert };
  int iteration = 0;
  std::size_t op = 0;
  Kind kind = kMask;
  std::uint64_t bits = 0;
};
// Up to four actions, in the order they come, from iteration 3 to the one before the last (none
// where the program runs fewer than 5 iterations).
std::vector<Action> action_points(const Program& p);
const char* action_name(Action::Kind k);
// A random program of the seed's (ops that are invalid on their operands are skipped).
Program generate(std::uint64_t seed, torch::Device d, bool layers = false, bool layouts = false);
// The program with each value's shape, dtype and strides (--show).
void show_program(const Program& p, torch::Device d);

}  // namespace fuzz
