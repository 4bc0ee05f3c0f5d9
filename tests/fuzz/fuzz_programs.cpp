// A random-program fuzzer: small programs of pointwise chains with broadcasting, mixed dtypes
// (fp32/fp16/bf16, bool masks), non-contiguous, transposed and sliced operands, views and
// in-place ops on them, one-element and empty tensors, NaN and Inf, the reductions hotpath fuses
// (sums and means over the last dimension, softmax, log_softmax, sums over the first of two),
// autograd through them and an SGD step whose learning rate changes every iteration. Each program
// runs several iterations with hotpath (hot after 2, step() markers) and without, on the same
// inputs; a disagreement is shrunk (ops removed one at a time while it still disagrees) and
// printed with its seed.
//
//   fuzz_programs [--device cpu|cuda] [--programs N] [--seconds S] [--seed S] [--compile-kernels]
//                 [--replay FILE] [--csv FILE] [--show] [--self-test]
//
// --show prints each program's values (shape, dtype, strides) and, with --compile-kernels, the
// source of every kernel its plans generate: `--seed S --programs 1 --show --compile-kernels`
// looks at one.
//
// On the CPU, plans run ATen's kernels (Config::fuse_cpu): results must be bitwise equal, and
// --compile-kernels has NVRTC compile every kernel the plans generate. On a GPU the kernels run,
// and results must agree within 1e-4 (fp32) or 2e-2 (fp16/bf16) of the largest magnitude, with
// NaN and Inf exactly where eager has them. A program beyond that is run again with every launch
// verified against eager on its own inputs (one launch beyond Config::verify's tolerance is a
// disagreement), and then judged by its own noise floor: eager again with its fp32 inputs moved
// by about a rounding error (1e-7); hotpath agrees if it moves no result more than 10 times as
// far (as tests/diff/train_diff does for training runs). Such programs (an SGD step through
// rsqrt or a division near zero) are counted apart. --replay runs the programs of a file of seeds
// (the regressions kept in tests/fuzz/regressions.txt) before the random ones. Exit status 1 when a
// program disagrees, 2 for a bad argument.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "compile/nvrtc.h"
#include "hotpath/hotpath.h"
#include "session/session.h"

namespace {

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
  Count
};
const char* const kNames[] = {
    "add.Tensor",     "sub.Tensor",   "mul.Tensor", "div.Tensor",  "add.Scalar",  "mul.Scalar",
    "div.Scalar",     "rsub",         "neg",        "exp",         "log(abs+1)",  "sqrt(abs)",
    "rsqrt(abs+eps)", "sigmoid",      "tanh",       "relu",        "silu",        "gelu",
    "gelu(tanh)",     "pow 2",        "clamp",      "masked_fill", "where",       "lerp",
    "addcmul",        "sum(-1)",      "mean(-1)",   "softmax",     "log_softmax", "sum(0)",
    "transpose",      "slice step 2", "narrow",     "to fp16",     "to bf16",     "to fp32",
    "mul_",           "add_"};

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
  std::string text() const {
    std::ostringstream os;
    os << "seed " << seed << ", " << inputs << " inputs" << (backward ? ", backward + SGD" : "")
       << ":";
    for (std::size_t i = 0; i < ops.size(); ++i)
      os << " v" << values + static_cast<int>(i) << "=" << kNames[static_cast<int>(ops[i].kind)]
         << "(v" << ops[i].a << ",v" << ops[i].b << ",v" << ops[i].c << ")";
    return os.str();
  }
};

// The inputs of a program, made from its seed: shapes with broadcastable dims, a one-element
// and sometimes an empty tensor, transposed and sliced layouts, NaN/Inf, fp16/bf16, a bool mask.
std::vector<torch::Tensor> make_inputs(const Program& p, torch::Device d, bool grad) {
  std::mt19937_64 rng(p.seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::int64_t R = 1 + pick(9), C = 1 + pick(40);
  auto g = at::detail::createCPUGenerator(p.seed);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < p.inputs; ++i) {
    torch::Tensor t;
    switch (pick(8)) {
      case 0:
        t = torch::randn({C}, torch::Generator(g));
        break;  // a row
      case 1:
        t = torch::randn({R, 1}, torch::Generator(g));
        break;  // a column
      case 2:
        t = torch::randn({}, torch::Generator(g));
        break;  // one element
      case 3:
        t = torch::randn({C, R}, torch::Generator(g)).t();
        break;  // transposed
      case 4:
        t = torch::randn({R, 2 * C + 1}, torch::Generator(g)).slice(1, 1, 2 * C + 1, 2);
        break;
      case 5:
        t = torch::randn({R + 1, C}, torch::Generator(g)).slice(0, 1);
        break;  // offset
      default:
        t = torch::randn({R, C}, torch::Generator(g));
    }
    if (pick(10) == 0)
      t = t.contiguous().view(-1).index_fill(0, torch::tensor({0}), NAN).view(t.sizes());
    if (pick(12) == 0 && t.numel() > 1)
      t = t.contiguous().view(-1).index_fill(0, torch::tensor({1}), INFINITY).view(t.sizes());
    const int dt = pick(6);
    if (dt == 0) t = t.to(torch::kHalf);
    if (dt == 1) t = t.to(torch::kBFloat16);
    t = t.to(d);
    if (grad && t.is_floating_point()) t = t.detach().requires_grad_(true);
    in.push_back(t);
  }
  in.push_back((torch::rand({R, C}, torch::Generator(g)) < 0.3).to(d));              // a mask, last
  if (pick(16) == 0) in.push_back(torch::randn({0, C}, torch::Generator(g)).to(d));  // empty
  return in;
}

// Runs the program's ops on `v` (inputs first), appending each result. Throws what ATen throws.
void apply(const Program& p, std::vector<torch::Tensor>& v, int iteration) {
  const double f = 1.0 + 0.125 * iteration;  // scalars change every iteration
  for (const FOp& o : p.ops) {
    const torch::Tensor& a = v.at(o.a);
    const torch::Tensor& b = v.at(o.b);
    const torch::Tensor& c = v.at(o.c);
    const double s = o.s * f;
    torch::Tensor r;
    switch (o.kind) {
      case K::AddT:
        r = a.add(b, s);
        break;
      case K::SubT:
        r = a.sub(b);
        break;
      case K::MulT:
        r = a * b;
        break;
      case K::DivT:
        r = a / (b.abs() + 0.5);
        break;
      case K::AddS:
        r = a + s;
        break;
      case K::MulS:
        r = a * s;
        break;
      case K::DivS:
        r = a / s;
        break;
      case K::RSub:
        r = torch::rsub(a, s);
        break;
      case K::Neg:
        r = -a;
        break;
      case K::Exp:
        r = (a * 0.25).exp();
        break;
      case K::LogAbs1:
        r = (a.abs() + 1).log();
        break;
      case K::SqrtAbs:
        r = a.abs().sqrt();
        break;
      case K::RsqrtAbsEps:
        r = (a.abs() + 1e-3).rsqrt();
        break;
      case K::Sigmoid:
        r = a.sigmoid();
        break;
      case K::Tanh:
        r = a.tanh();
        break;
      case K::Relu:
        r = a.relu();
        break;
      case K::Silu:
        r = torch::silu(a);
        break;
      case K::Gelu:
        r = torch::gelu(a);
        break;
      case K::GeluTanh:
        r = torch::gelu(a, "tanh");
        break;
      case K::Pow2:
        r = a.pow(2);
        break;
      case K::Clamp:
        r = a.clamp(-s, s);
        break;
      case K::MaskedFill:
        r = a.masked_fill(b.to(torch::kBool), s);
        break;
      case K::Where:
        r = torch::where(c.to(torch::kBool), a, b);
        break;
      case K::Lerp:
        r = torch::lerp(a, b, 0.25 * s);
        break;
      case K::Addcmul:
        r = torch::addcmul(a, b, c, 0.5 * s);
        break;
      case K::SumLast:
        r = a.sum(-1, true);
        break;
      case K::MeanLast:
        r = a.mean(-1, true);
        break;
      case K::Softmax:
        r = torch::softmax(a, -1);
        break;
      case K::LogSoftmax:
        r = torch::log_softmax(a, -1);
        break;
      case K::SumFirst:
        r = a.sum(0);
        break;
      case K::Transpose:
        r = a.dim() >= 2 ? a.transpose(0, 1) : a;
        break;
      case K::SliceStep:
        r = a.dim() >= 1 ? a.slice(-1, 0, a.size(-1), 2) : a;
        break;
      case K::Narrow:
        r = a.dim() >= 1 && a.size(0) > 1 ? a.narrow(0, 1, a.size(0) - 1) : a;
        break;
      case K::ToHalf:
        r = a.to(torch::kHalf);
        break;
      case K::ToBF16:
        r = a.to(torch::kBFloat16);
        break;
      case K::ToFloat:
        r = a.to(torch::kFloat);
        break;
      case K::MulInPlace:
        r = a.clone();
        r.mul_(s);
        break;  // in place on a new value
      case K::AddInPlace:
        r = a.clone();
        r.slice(-1, 0, r.size(-1), 2).add_(b.sum() * 0.01);
        break;
      default:
        break;
    }
    v.push_back(r);
  }
}

Program generate(std::uint64_t seed, torch::Device d) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Program p;
  p.seed = seed;
  p.inputs = 1 + pick(3);
  p.backward = pick(3) == 0;
  const auto inputs = make_inputs(p, d, false);
  p.values = static_cast<int>(inputs.size());
  std::vector<torch::Tensor> v = inputs;
  const int want = 2 + pick(9);
  for (int tries = 0; static_cast<int>(p.ops.size()) < want && tries < 60; ++tries) {
    FOp o;
    o.kind = static_cast<K>(pick(static_cast<int>(K::Count)));
    const int n = static_cast<int>(v.size());
    // Mostly the latest values: chains, not scattered ops.
    auto operand = [&] { return pick(3) == 0 ? pick(n) : std::max(0, n - 1 - pick(3)); };
    o.a = operand();
    o.b = operand();
    o.c = pick(n);
    o.s = 0.5 + 0.25 * pick(7);
    Program trial = p;
    trial.ops.push_back(o);
    std::vector<torch::Tensor> w = inputs;
    try {
      apply(trial, w, 0);
    } catch (const std::exception&) {
      continue;  // not a valid op on these operands
    }
    p.ops.push_back(o);
    v = std::move(w);
  }
  return p;
}

struct Outcome {
  std::vector<torch::Tensor> values;  // outputs of the last iteration and the inputs after SGD
  bool threw = false;
  std::string error;
};

constexpr int kIterations = 6;

// `perturb` > 0: each fp32 input is first multiplied by (1 + perturb * noise), noise drawn from
// the program's seed: the same program with its inputs moved by about a rounding error.
Outcome run(const Program& p, torch::Device d, bool hot, const hotpath::Config& c,
            double perturb = 0) {
  Outcome o;
  auto in = make_inputs(p, d, p.backward);
  if (perturb > 0) {
    torch::NoGradGuard no_grad;
    auto g = at::detail::createCPUGenerator(p.seed ^ 0x5eedULL);
    for (auto& t : in)
      if (t.scalar_type() == torch::kFloat && t.numel() > 0)
        t.mul_((1 + perturb * torch::randn(t.sizes(), torch::Generator(g))).to(d));
  }
  hotpath::disable_hot_path_detection();
  if (hot) hotpath::enable_hot_path_detection(c);
  try {
    for (int i = 0; i < kIterations; ++i) {
      std::vector<torch::Tensor> v = in;
      apply(p, v, i);
      if (p.backward) {
        torch::Tensor loss = torch::zeros({}, torch::TensorOptions(d));
        for (std::size_t k = in.size(); k < v.size(); ++k)
          if (v[k].is_floating_point() && v[k].requires_grad())
            loss = loss + v[k].to(torch::kFloat).nan_to_num(0, 0, 0).sum() * 0.01;
        if (loss.requires_grad()) loss.backward();
        torch::NoGradGuard no_grad;
        for (auto& t : in) {
          if (!t.requires_grad() || !t.grad().defined()) continue;
          t.sub_(t.grad().nan_to_num(0, 0, 0) * (0.01 / (1 + i)));
          t.mutable_grad().reset();
        }
      }
      hotpath::step();
      if (hot && i == 2 && d.is_cuda()) hotpath::wait_for_compilation();
      if (i == kIterations - 1) {
        for (std::size_t k = in.size(); k < v.size(); ++k)
          o.values.push_back(v[k].detach().cpu().clone());
      }
    }
    for (auto& t : in) o.values.push_back(t.detach().cpu().clone());
  } catch (const std::exception& e) {
    o.threw = true;
    o.error = e.what();
  }
  hotpath::disable_hot_path_detection();
  return o;
}

// A relative change of the fp32 inputs of about one rounding error; a result hotpath moves by
// at most kNoiseFactor times as much as this moves eager's is within the program's noise.
constexpr double kPerturbation = 1e-7;
constexpr double kNoiseFactor = 10;

// Per value: the largest difference between eager and eager on perturbed inputs, over the
// elements finite in both; infinite where the perturbation moves a NaN or an Inf.
std::vector<double> noise_floor(const Outcome& eager, const Outcome& perturbed) {
  std::vector<double> floor;
  if (eager.threw || perturbed.threw || eager.values.size() != perturbed.values.size())
    return floor;
  for (std::size_t i = 0; i < eager.values.size(); ++i) {
    const auto x = perturbed.values[i].to(torch::kDouble), y = eager.values[i].to(torch::kDouble);
    if (x.sizes() != y.sizes() || !torch::equal(x.isfinite(), y.isfinite())) {
      floor.push_back(INFINITY);
      continue;
    }
    const auto fin = y.isfinite();
    floor.push_back(fin.any().item<bool>() ? (x - y).abs().masked_select(fin).max().item<double>()
                                           : 0.0);
  }
  return floor;
}

// Empty when the two runs agree, else where they do not. `floor` (per value, from noise_floor)
// widens the tolerance to kNoiseFactor times the program's own noise.
std::string compare(const Outcome& eager, const Outcome& fused, bool exact,
                    const std::vector<double>& floor = {}) {
  if (eager.threw != fused.threw)
    return "eager " + std::string(eager.threw ? "threw: " + eager.error : "ran") + ", hotpath " +
           (fused.threw ? "threw: " + fused.error : "ran");
  if (eager.values.size() != fused.values.size()) return "different numbers of values";
  for (std::size_t i = 0; i < eager.values.size(); ++i) {
    const auto& a = fused.values[i];
    const auto& b = eager.values[i];
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
      return "value " + std::to_string(i) + ": another shape or dtype";
    if (a.numel() == 0) continue;
    const double noise = i < floor.size() ? floor[i] : 0.0;
    if (std::isinf(noise)) continue;  // eager's own NaN and Inf move with its inputs
    if (exact) {
      if (!torch::equal(a.isnan(), b.isnan()) ||
          !torch::equal(a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0)))
        return "value " + std::to_string(i) + " differs (bitwise)";
      continue;
    }
    const auto x = a.to(torch::kDouble), y = b.to(torch::kDouble);
    if (!torch::equal(x.isnan(), y.isnan()) || !torch::equal(x.isinf(), y.isinf()) ||
        !torch::equal(x.isinf() * x.sign(), y.isinf() * y.sign()))
      return "value " + std::to_string(i) +
             ": NaN or Inf where eager has none (or none where it has)";
    const auto fin = y.isfinite();
    if (!fin.any().item<bool>()) continue;
    const double diff = (x - y).abs().masked_select(fin).max().item<double>();
    const double scale = std::max(y.abs().masked_select(fin).max().item<double>(), 1.0);
    const double tol = b.scalar_type() == torch::kFloat ? 1e-4 : 2e-2;
    if (diff > std::max(tol * scale, kNoiseFactor * noise)) {
      std::ostringstream os;
      os << "value " << i << " " << b.sizes() << " " << b.scalar_type() << ": max |diff| " << diff
         << " over scale " << scale;
      if (!floor.empty()) os << " (eager on perturbed inputs: " << noise << ")";
      return os.str();
    }
  }
  return {};
}

struct Verdict {
  std::string why;     // empty: hotpath agrees with eager
  bool noise = false;  // agrees only within the program's own noise floor
};

// Runs `p` with and without hotpath. On a GPU, a result beyond the fixed tolerance is looked at
// twice more: every kernel launch against eager on the launch's own inputs (a launch that
// differs is a disagreement), then eager on inputs moved by a rounding error (a program whose
// results move that much, as ones dividing by a value near zero do, is judged by its own noise).
Verdict judge(const Program& p, torch::Device d, const hotpath::Config& c, bool exact) {
  const Outcome eager = run(p, d, false, c);
  const Outcome fused = run(p, d, true, c);
  Verdict v{compare(eager, fused, exact)};
  if (v.why.empty() || exact) return v;
  hotpath::Config verify = c;
  verify.verify = true;
  run(p, d, true, verify);
  const hotpath::Stats verified = hotpath::stats();
  for (const auto& sig : verified.signatures) {
    for (const auto& g : sig.fusion.groups) {
      if (g.verify_failures == 0) continue;
      std::ostringstream os;
      os << v.why << "; group " << g.name << ": " << g.verify_failures
         << " launch(es) differ from eager on their own inputs (max relative error "
         << g.max_rel_error << ")";
      v.why = os.str();
      return v;
    }
  }
  const std::string within =
      compare(eager, fused, exact, noise_floor(eager, run(p, d, false, c, kPerturbation)));
  if (within.empty()) return Verdict{{}, true};
  // Every launch within tolerance, yet the result beyond the noise: the groups that differed
  // from eager at all, to look at first.
  std::ostringstream os;
  os << within << "; every launch within tolerance, largest relative errors:";
  for (const auto& sig : verified.signatures)
    for (const auto& g : sig.fusion.groups)
      if (g.max_rel_error > 0) os << " " << g.name << " " << g.max_rel_error;
  v.why = os.str();
  return v;
}

// Removes ops (and the values only they made) one at a time while the program still
// disagrees: what is left is kept as a regression.
Program shrink(Program p, const std::function<bool(const Program&)>& fails) {
  for (bool again = true; again;) {
    again = false;
    for (std::size_t i = p.ops.size(); i-- > 0;) {
      Program q = p;
      const int removed = q.values + static_cast<int>(i);
      q.ops.erase(q.ops.begin() + static_cast<std::ptrdiff_t>(i));
      bool ok = true;
      for (std::size_t k = i; k < q.ops.size(); ++k) {
        for (int* x : {&q.ops[k].a, &q.ops[k].b, &q.ops[k].c}) {
          if (*x == removed) ok = false;
          if (*x > removed) --*x;
        }
      }
      if (ok && fails(q)) {
        p = q;
        again = true;
      }
    }
  }
  return p;
}

// The program with each value's shape, dtype and strides (--show).
void show_program(const Program& p, torch::Device d) {
  std::vector<torch::Tensor> v = make_inputs(p, d, false);
  apply(p, v, 0);
  std::printf("%s\n", p.text().c_str());
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::ostringstream os;
    os << "  v" << i << (static_cast<int>(i) < p.values ? " (input)" : "") << " " << v[i].sizes()
       << " " << v[i].scalar_type() << " strides " << v[i].strides() << " offset "
       << v[i].storage_offset();
    std::printf("%s\n", os.str().c_str());
  }
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "fuzz_programs: %s\n(see tests/fuzz/fuzz_programs.cpp)\n", why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  torch::Device d = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::kCPU;
  long programs = 200;
  double seconds = 0;
  std::uint64_t seed = 1;
  bool compile_kernels = false, show = false;
  std::string replay, csv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") {
      const auto v = value();
      if (v != "cpu" && v != "cuda") usage("--device is cpu or cuda");
      d = torch::Device(v == "cuda" ? torch::kCUDA : torch::kCPU);
    } else if (a == "--programs") {
      programs = std::atol(value().c_str());
      if (programs < 0) usage("--programs needs a count");
    } else if (a == "--seconds") {
      seconds = std::atof(value().c_str());
    } else if (a == "--seed") {
      seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "--compile-kernels") {
      compile_kernels = true;
    } else if (a == "--show") {
      show = true;
    } else if (a == "--replay") {
      replay = value();
    } else if (a == "--csv") {
      csv = value();
    } else if (a == "--self-test") {
      // The shrinker keeps exactly what a disagreement needs: here, any program with an exp
      // of an exp is taken to disagree.
      Program p = generate(7, torch::kCPU);
      p.ops.push_back({K::Exp, p.inputs - 1, 0, 0, 1.0});
      p.ops.push_back({K::MulS, p.values + static_cast<int>(p.ops.size()) - 1, 0, 0, 2.0});
      p.ops.push_back({K::Exp, p.values + static_cast<int>(p.ops.size()) - 2, 0, 0, 1.0});
      auto fails = [](const Program& q) {
        for (const FOp& o : q.ops)
          if (o.kind == K::Exp && o.a >= q.values &&
              q.ops[static_cast<std::size_t>(o.a - q.values)].kind == K::Exp)
            return true;
        return false;
      };
      if (!fails(p)) usage("self-test: the planted program does not fail");
      const Program small = shrink(p, fails);
      std::printf("self-test: %zu ops shrunk to %zu: %s\n", p.ops.size(), small.ops.size(),
                  small.text().c_str());
      // The noise floor widens the tolerance to 10x eager's own movement, no further, and a
      // NaN that moves with eager's inputs is not held against hotpath.
      auto outcome = [](std::vector<double> v) {
        Outcome o;
        o.values.push_back(torch::tensor(v, torch::kFloat));
        return o;
      };
      const Outcome e = outcome({1.0, 2.0}), moved = outcome({1.0, 2.001});
      const auto floor = noise_floor(e, moved);
      const bool noise_ok = floor.size() == 1 && std::abs(floor[0] - 0.001) < 1e-6 &&
                            !compare(e, outcome({1.0, 2.005}), false).empty() &&
                            compare(e, outcome({1.0, 2.005}), false, floor).empty() &&
                            !compare(e, outcome({1.0, 2.02}), false, floor).empty() &&
                            std::isinf(noise_floor(e, outcome({1.0, NAN}))[0]);
      std::printf("self-test: noise floor %s\n", noise_ok ? "ok" : "WRONG");
      return small.ops.size() == 2 && fails(small) && noise_ok ? 0 : 1;
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  hotpath::Config c;
  c.threshold = 2;
  c.fuse_cpu = !d.is_cuda();
  c.verify = false;
  c.remember = false;
  c.stand_aside = false;
  c.revert_window = 1000000;  // correctness, not speed
  c.log_level = hotpath::LogLevel::Error;
  const bool exact = !d.is_cuda();

  std::vector<std::uint64_t> seeds;
  if (!replay.empty()) {
    std::ifstream f(replay);
    if (!f) usage("cannot read " + replay);
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      seeds.push_back(std::strtoull(line.c_str(), nullptr, 10));
    }
  }
  const std::size_t replayed = seeds.size();
  for (long k = 0; k < programs; ++k) seeds.push_back(seed + static_cast<std::uint64_t>(k));

  const auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> compiled;
  long ran = 0, fused_programs = 0, disagreements = 0, kernels = 0, refused = 0, within_noise = 0;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    if (seconds > 0 && k >= replayed &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
      break;
    const Program p = generate(seeds[k], d);
    if (p.ops.empty()) continue;
    const Verdict verdict = judge(p, d, c, exact);
    ++ran;
    if (show) show_program(p, d);
    const hotpath::Stats st = hotpath::stats();
    bool any_group = false;
    for (const auto& sig : st.signatures) any_group = any_group || sig.fusion.fused_iterations > 0;
    fused_programs += any_group ? 1 : 0;
    if (compile_kernels) {
      auto session = hotpath::detail::thread_session();
      for (const auto& sig : st.signatures) {
        const auto plan = session ? session->executor.plan(sig.id) : nullptr;
        if (!plan || !plan->graph) continue;
        for (const auto& grp : plan->partition.groups) {
          hotpath::detail::KernelSpec spec;
          try {
            spec = hotpath::detail::generate_kernel(*plan->graph, grp);
          } catch (const hotpath::Error& e) {
            // The executor runs such a group eagerly (build() logs it): a lost fusion, not a
            // wrong result; counted so that the partitioner's checks can catch up.
            if (refused++ < 5)
              std::printf("codegen refuses group %s of %s: %s\n", grp.name.c_str(),
                          p.text().c_str(), e.what());
            continue;
          }
          if (show) std::printf("kernel of group %s:\n%s\n", grp.name.c_str(), spec.source.c_str());
          if (!compiled.insert(spec.source).second) continue;
          try {
            hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                           hotpath::detail::runtime_headers(), "");
            ++kernels;
          } catch (const std::exception& e) {
            ++disagreements;
            std::printf("NVRTC REJECTS a kernel of %s:\n%s\n", p.text().c_str(), e.what());
          }
        }
      }
    }
    if (verdict.noise) {
      ++within_noise;
      std::printf("within its noise floor: %s\n", p.text().c_str());
    }
    if (verdict.why.empty()) continue;
    ++disagreements;
    const Program small =
        shrink(p, [&](const Program& q) { return !judge(q, d, c, exact).why.empty(); });
    std::printf("DISAGREES: %s\n  %s\n  shrunk: %s\n", p.text().c_str(), verdict.why.c_str(),
                small.text().c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "fuzz_programs: %ld program(s) on %s (%zu replayed), %ld with fused iterations, %ld "
      "disagreement(s), %ld within their noise floor only, %ld group(s) codegen refused%s, "
      "%.1f s\n",
      ran, d.str().c_str(), replayed, fused_programs, disagreements, within_noise, refused,
      compile_kernels
          ? (", " + std::to_string(kernels) + " distinct kernels compiled by NVRTC").c_str()
          : "",
      secs);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "device,programs,replayed,fused_programs,disagreements,codegen_refused,kernels_compiled,"
         "seconds,within_noise\n"
      << d.str() << "," << ran << "," << replayed << "," << fused_programs << "," << disagreements
      << "," << refused << "," << kernels << "," << secs << "," << within_noise << "\n";
  }
  return disagreements == 0 ? 0 : 1;
}
