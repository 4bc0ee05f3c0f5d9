// The fuzzer's programs (program.h).
#include "program.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "cuda_rms_on_cpu.h"

namespace fuzz {

const char* const kNames[] = {
    "add.Tensor",     "sub.Tensor",   "mul.Tensor",    "div.Tensor",  "add.Scalar",  "mul.Scalar",
    "div.Scalar",     "rsub",         "neg",           "exp",         "log(abs+1)",  "sqrt(abs)",
    "rsqrt(abs+eps)", "sigmoid",      "tanh",          "relu",        "silu",        "gelu",
    "gelu(tanh)",     "pow 2",        "clamp",         "masked_fill", "where",       "lerp",
    "addcmul",        "sum(-1)",      "mean(-1)",      "softmax",     "log_softmax", "sum(0)",
    "transpose",      "slice step 2", "narrow",        "to fp16",     "to bf16",     "to fp32",
    "mul_",           "add_",         "sum lead(0,1)", "stack",       "cat",         "layer_norm",
    "cross_entropy",  "rms_norm",     "linear",        "t_",          "resize_"};
static_assert(sizeof kNames / sizeof kNames[0] == static_cast<std::size_t>(K::Count),
              "a name for every kind of op");

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

Handover handover_points(const Program& p) {
  // Hot after two iterations, the plan's first runs from the third (index 2) on stand-ins.
  Handover h;
  const std::uint64_t r = p.seed * 0x9e3779b97f4a7c15ULL;
  h.all = std::min(p.iterations - 2, 3 + static_cast<int>((r >> 20) % 4));
  if (h.all < 2) {
    h.all = -1;
    return h;
  }
  h.first = std::min(h.all - 1, 2 + static_cast<int>((r >> 40) % 3));
  if (h.first < 2 || p.ops.empty()) {
    h.first = -1;
    return h;
  }
  h.op = static_cast<std::size_t>((r >> 8) % p.ops.size());
  return h;
}

std::vector<Action> action_points(const Program& p) {
  std::vector<Action> out;
  if (p.iterations < 5 || p.ops.empty()) return out;
  std::mt19937_64 r(p.seed ^ 0xac71043ULL);
  const int n = 1 + static_cast<int>(r() % 4);
  for (int k = 0; k < n; ++k) {
    Action a;
    a.iteration = 3 + static_cast<int>(r() % static_cast<std::uint64_t>(p.iterations - 4));
    a.op = static_cast<std::size_t>(r() % p.ops.size());
    // Trials and rebases most often, as the governor asks; a revert rarely.
    const std::uint64_t pick = r() % 20;
    a.kind = pick < 7    ? Action::kMask
             : pick < 10 ? Action::kAllOff
             : pick < 14 ? Action::kAllOn
             : pick < 16 ? Action::kNoReplay
             : pick < 17 ? Action::kNoStandIn
             : pick < 19 ? Action::kKeepStandIn
                         : Action::kRevert;
    a.bits = r();
    out.push_back(a);
  }
  std::stable_sort(out.begin(), out.end(), [](const Action& a, const Action& b) {
    return a.iteration != b.iteration ? a.iteration < b.iteration : a.op < b.op;
  });
  // A reverted plan is asked nothing more: a revert only ends the list.
  for (std::size_t k = 0; k + 1 < out.size(); ++k)
    if (out[k].kind == Action::kRevert) out[k].kind = Action::kAllOn;
  return out;
}

const char* action_name(Action::Kind k) {
  static const char* const names[] = {"groups",      "all-off",       "all-on", "no-replay",
                                      "no-stand-in", "keep-stand-in", "revert"};
  return names[static_cast<int>(k)];
}

void apply(const Program& p, std::vector<torch::Tensor>& v, int iteration,
           const std::function<void(std::size_t)>& after_op) {
  const double f = 1.0 + 0.125 * iteration;  // scalars change every iteration
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const FOp& o = p.ops[k];
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
      case K::SumLeading: {
        if (a.dim() != 2 || a.size(0) < 2 || a.size(0) % 2 != 0)
          throw std::invalid_argument("sum lead: needs a 2-D value of even rows");
        auto t = a.reshape({2, a.size(0) / 2, a.size(1)});
        r = (t * o.s + t).sum(std::vector<std::int64_t>{0, 1}, true).squeeze(0);
        break;
      }
      case K::Stack:
        r = torch::stack({a, b}, static_cast<std::int64_t>(o.s));
        break;
      case K::Cat:
        r = torch::cat({a, b}, static_cast<std::int64_t>(o.s));
        break;
      case K::LayerNorm: {
        if (a.dim() < 1 || !a.is_floating_point())
          throw std::invalid_argument("layer_norm: needs a floating value of a dimension or more");
        const std::int64_t n = a.size(-1);
        // A weight and bias of the normalized size, made from other values (a parameter's
        // gradient reaches them), in the input's dtype, as a module's are.
        auto param = [&](const torch::Tensor& t, double base) {
          return (t.reshape(-1).narrow(0, 0, n) * 0.5 + base).to(a.scalar_type());
        };
        r = torch::layer_norm(a, {n}, param(b, 1.0), param(c, 0.0), 1e-5);
        break;
      }
      case K::RmsNorm: {
        if (a.dim() < 1 || !a.is_floating_point())
          throw std::invalid_argument("rms_norm: needs a floating value of a dimension or more");
        const std::int64_t n = a.size(-1);
        const auto w = (b.reshape(-1).narrow(0, 0, n) * 0.5 + 1).to(a.scalar_type());
        // On the CPU with --cuda-rms: the op CUDA runs (cuda_rms_on_cpu.h).
        r = a.is_cpu() && cuda_rms_on_cpu() ? std::get<0>(at::_fused_rms_norm(a, {n}, w, 1e-6))
                                            : torch::rms_norm(a, {n}, w, 1e-6);
        break;
      }
      case K::Linear: {
        if (a.dim() != 2 || !a.is_floating_point())
          throw std::invalid_argument("linear: needs a 2-D floating value");
        const std::int64_t rows = a.size(0);
        r = torch::linear(a, a * 0.125,
                          (b.reshape(-1).narrow(0, 0, rows) * 0.5).to(a.scalar_type()));
        break;
      }
      case K::CrossEntropy: {
        if (a.dim() != 2 || a.size(1) < 2 || !a.is_floating_point())
          throw std::invalid_argument(
              "cross_entropy: needs 2-D floating logits of 2 classes or more");
        const std::int64_t rows = a.size(0), classes = a.size(1);
        const torch::Tensor& from = b.dim() == 2 && b.size(0) == rows ? b : a;
        r = torch::nn::functional::cross_entropy(a, from.detach().argmax(1).remainder(classes));
        break;
      }
      case K::TransposeInPlace: {
        if (a.dim() != 2 || !a.is_floating_point())
          throw std::invalid_argument("t_: needs a 2-D floating value");
        auto h = a * s;
        h.t_();
        r = h * h + h * 0.5;
        break;
      }
      case K::ResizeInPlace: {
        if (a.dim() < 1 || a.numel() == 0 || !a.is_floating_point())
          throw std::invalid_argument("resize_: needs a floating value of an element or more");
        auto h = (a * s).detach();
        const std::int64_t n = h.numel();
        if (n % 2 == 0 && n > 2)
          h.resize_({2, n / 2});
        else
          h.resize_({n});
        r = h * h + h * 0.5;
        break;
      }
      default:
        break;
    }
    v.push_back(r);
    if (after_op) after_op(k);
  }
}

namespace {

// Appends `o` to `p` where ATen runs it on the program's values (it throws otherwise).
void append_if_valid(Program& p, const FOp& o, const std::vector<torch::Tensor>& inputs) {
  Program trial = p;
  trial.ops.push_back(o);
  std::vector<torch::Tensor> w = inputs;
  try {
    apply(trial, w, 0);
    p.ops.push_back(o);
  } catch (const std::exception&) {
    // not a valid op on these operands
  }
}

}  // namespace

Program generate(std::uint64_t seed, torch::Device d, bool layers, bool layouts) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Program p;
  p.seed = seed;
  p.layers = layers;
  p.layouts = layouts;
  p.inputs = 1 + pick(3);
  p.backward = pick(3) == 0;
  const auto inputs = make_inputs(p, d, false);
  p.values = static_cast<int>(inputs.size());
  std::vector<torch::Tensor> v = inputs;
  const int want = 2 + pick(9);
  for (int tries = 0; static_cast<int>(p.ops.size()) < want && tries < 60; ++tries) {
    FOp o;
    o.kind = static_cast<K>(pick(static_cast<int>(K::SumLeading)));  // the kinds drawn here
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
  // A third of the programs end with a sum over leading dimensions, from a generator of its own.
  std::mt19937_64 extra(seed ^ 0x3c6ef372fe94f82bULL);
  if (extra() % 3 == 0) {
    FOp o;
    o.kind = K::SumLeading;
    const int n = static_cast<int>(v.size());
    o.a = std::max(0, n - 1 - static_cast<int>(extra() % 3));
    o.s = 0.5 + 0.25 * static_cast<double>(extra() % 7);
    append_if_valid(p, o, inputs);  // not where the value has odd rows
  }
  // A quarter end with a stack or cat of the latest value and the latest other one of its shape
  // (or itself), from a generator of their own.
  std::mt19937_64 put(seed ^ 0x5851f42d4c957f2dULL);
  if (put() % 4 == 0 && !v.empty()) {
    FOp o;
    o.kind = put() % 2 == 0 ? K::Stack : K::Cat;
    const int n = static_cast<int>(v.size());
    o.a = n - 1;
    o.b = o.a;
    for (int k = n - 2; k >= 0; --k) {
      if (v[static_cast<std::size_t>(k)].sizes() == v.back().sizes()) {
        o.b = k;
        break;
      }
    }
    const std::int64_t rank = v.back().dim() + (o.kind == K::Stack ? 1 : 0);
    o.c = o.a;
    o.s = rank > 0 ? static_cast<double>(put() % static_cast<std::uint64_t>(rank)) : 0.0;
    append_if_valid(p, o, inputs);  // not to a 0-dim value
  }
  // --layouts: a recent value's layout changed in place, then read (where the value allows).
  if (layouts && !v.empty()) {
    std::mt19937_64 r(seed ^ 0x4f1bbcdcbfa53e0bULL);
    FOp o;
    o.kind = r() % 2 == 0 ? K::TransposeInPlace : K::ResizeInPlace;
    const int n = static_cast<int>(p.values + p.ops.size());
    o.a = std::max(0, n - 1 - static_cast<int>(r() % 3));
    o.s = 0.5 + 0.25 * static_cast<double>(r() % 7);
    append_if_valid(p, o, inputs);
  }
  // --layers: a layer norm or a cross entropy of a recent value, then an rms norm or a linear
  // layer, each from a generator of its own (`salt`; they need values of the right shapes: where
  // none is, nothing is appended); `own_c`: the third operand drawn too, else the second's.
  auto append_layer = [&](std::uint64_t salt, K first, K second, bool own_c) {
    std::mt19937_64 r(seed ^ salt);
    FOp o;
    o.kind = r() % 2 == 0 ? first : second;
    const int n = static_cast<int>(p.values + p.ops.size());
    o.a = std::max(0, n - 1 - static_cast<int>(r() % 3));
    o.b = static_cast<int>(r() % static_cast<std::uint64_t>(n));
    o.c = own_c ? static_cast<int>(r() % static_cast<std::uint64_t>(n)) : o.b;
    o.s = 1.0;
    append_if_valid(p, o, inputs);
  };
  if (layers && !v.empty()) {
    append_layer(0x2545f4914f6cdd1dULL, K::LayerNorm, K::CrossEntropy, true);
    append_layer(0x9b05688c2b3e6c1fULL, K::RmsNorm, K::Linear, false);
  }
  return p;
}

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

}  // namespace fuzz
