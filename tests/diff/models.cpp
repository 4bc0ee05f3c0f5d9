#include "models.h"

#include <stdexcept>

#include "tests/fuzz/cuda_rms_on_cpu.h"
#include "models/dcgan.h"
#include "models/mnist_net.h"
#include "models/transformer_lm.h"
#include "tools/autocast_scope.h"

namespace hotpath_diff {

const std::vector<std::string>& variant_names() {
  static const std::vector<std::string> names = {"plain",       "batch_flip", "seq_grow",
                                                 "item_branch", "alternate",  "keep_across",
                                                 "eval",        "grad_accum", "fused_rms"};
  return names;
}

Variant parse_variant(const std::string& name) {
  const auto& n = variant_names();
  for (std::size_t i = 0; i < n.size(); ++i)
    if (n[i] == name) return static_cast<Variant>(i);
  throw std::invalid_argument("unknown variant '" + name + "'");
}

namespace {

using hotpath_tools::Autocast;  // bf16 autocast for the forward pass

// A data generator of its own per step: every trainer of a comparison sees the same batches,
// whatever the others draw.
torch::Generator step_generator(const Setup& s, int step) {
  auto g = at::detail::createCPUGenerator(s.seed * 1000003 + static_cast<std::uint64_t>(step));
  return torch::Generator(g);
}

double learning_rate(const Setup& s, int step) {
  const double base = s.optimizer == "adamw" ? 3e-3 : 0.05;
  // Warm-up, then cosine decay: a new value every step.
  const double warm = std::min(1.0, (step + 1) / 10.0);
  return base * warm * (0.55 + 0.45 * std::cos(3.14159265358979 * step / std::max(1, s.steps)));
}

torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w, bool fused) {
  if (fused) return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, w, 1e-5));
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w;
}

struct GptBlockImpl : torch::nn::Module {
  GptBlockImpl(std::int64_t d, std::int64_t heads, std::int64_t ff) : heads(heads) {
    n1 = register_parameter("n1", torch::ones({d}));
    n2 = register_parameter("n2", torch::ones({d}));
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d).bias(false)));
    proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
    gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(d, ff).bias(false)));
    up = register_module("up", torch::nn::Linear(torch::nn::LinearOptions(d, ff).bias(false)));
    down = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(ff, d).bias(false)));
  }
  // Rotary embedding on interleaved pairs, through strided slices, stack and flatten.
  static torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos,
                            const torch::Tensor& sin) {
    const auto hd = x.size(-1);
    const auto x1 = x.slice(-1, 0, hd, 2), x2 = x.slice(-1, 1, hd, 2);
    return torch::stack({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1).flatten(-2);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, bool gelu_path) {
    const auto B = x.size(0), T = x.size(1), d = x.size(2), hd = d / heads;
    auto parts = qkv(rms(x, n1, fused_rms)).chunk(3, -1);
    auto q = parts[0].view({B, T, heads, hd}).transpose(1, 2);
    auto k = parts[1].view({B, T, heads, hd}).transpose(1, 2);
    auto v = parts[2].view({B, T, heads, hd}).transpose(1, 2);
    q = rope(q, cos, sin);
    k = rope(k, cos, sin);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, d});
    auto h = x + proj(y);
    auto z = rms(h, n2, fused_rms);
    auto act = gelu_path ? torch::gelu(gate(z)) : torch::silu(gate(z));
    return h + down(act * up(z));
  }
  std::int64_t heads;
  bool fused_rms = false;  // Variant::FusedRms
  torch::Tensor n1, n2;
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(GptBlock);

struct GptImpl : torch::nn::Module {
  GptImpl(std::int64_t vocab, std::int64_t d, std::int64_t heads, std::int64_t layers,
          std::int64_t ff, std::int64_t ctx) {
    emb = register_module("emb", torch::nn::Embedding(vocab, d));
    for (std::int64_t l = 0; l < layers; ++l)
      blocks.push_back(register_module("block" + std::to_string(l), GptBlock(d, heads, ff)));
    nf = register_parameter("nf", torch::ones({d}));
    head =
        register_module("head", torch::nn::Linear(torch::nn::LinearOptions(d, vocab).bias(false)));
    const auto hd = d / heads;
    auto freqs = torch::pow(10000.0, -torch::arange(0, hd, 2, torch::kFloat) / double(hd));
    auto angles = torch::outer(torch::arange(ctx, torch::kFloat), freqs);
    cos = register_buffer("cos", angles.cos());
    sin = register_buffer("sin", angles.sin());
    mask = register_buffer("mask", torch::ones({ctx, ctx}, torch::kBool).triu(1));
  }
  torch::Tensor forward(const torch::Tensor& idx, const torch::Tensor& memory, bool gelu_path) {
    const auto T = idx.size(1);
    auto x = emb(idx);
    if (memory.defined()) x = x + 0.1 * memory;
    const auto c = cos.slice(0, 0, T), s = sin.slice(0, 0, T);
    const auto m = mask.slice(0, 0, T).slice(1, 0, T);
    for (auto& b : blocks) x = b->forward(x, c, s, m, gelu_path);
    last_hidden = x;
    return head(rms(x, nf, fused_rms));
  }
  torch::nn::Embedding emb{nullptr};
  std::vector<GptBlock> blocks;
  torch::Tensor nf, cos, sin, mask, last_hidden;
  bool fused_rms = false;  // Variant::FusedRms
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

class GptTrainer : public Trainer {
 public:
  explicit GptTrainer(const Setup& s) : Trainer(s) {
    vocab_ = 256;
    const std::int64_t d = s.small ? 32 : 64, heads = 4, ff = s.small ? 64 : 128;
    batch_ = s.small ? 4 : 8;
    seq_ = s.small ? 8 : 32;
    const std::int64_t ctx = s.small ? 32 : 128;
    torch::manual_seed(s.seed);
    model_ = Gpt(vocab_, d, heads, 2, ff, ctx);
    if (s.variant == Variant::FusedRms) {
      if (s.device.is_cpu()) fuzz::register_cuda_rms_on_cpu();
      model_->fused_rms = true;
      for (auto& b : model_->blocks) b->fused_rms = true;
    }
    model_->to(s.device);
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override {
    auto p = model_->parameters();
    for (auto& b : model_->buffers()) p.push_back(b);
    return p;
  }
  Batch batch(int step) override {
    std::int64_t B = batch_, T = seq_;
    if (setup_.variant == Variant::BatchFlip && (step / 25) % 2 == 1) B /= 2;
    if (setup_.variant == Variant::SeqGrow)
      T = std::min<std::int64_t>(seq_ + 4 * (step / 20), 4 * seq_);
    auto toks = torch::randint(0, vocab_, {B, T + 1}, step_generator(setup_, step), torch::kLong);
    toks = toks.to(setup_.device);
    return {toks.slice(1, 0, T).contiguous(), toks.slice(1, 1, T + 1).contiguous()};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override {
    return {b.x.size(0), b.x.size(1), vocab_};
  }

 protected:
  torch::Tensor forward(int step, const Batch& b) override {
    alt_ = setup_.variant == Variant::Alternate && step % 2 == 1;
    torch::Tensor memory;
    if (setup_.variant == Variant::KeepAcross && memory_.defined() &&
        memory_.size(0) == b.x.size(0))
      memory = memory_;
    return model_->forward(b.x, memory, alt_);
  }
  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    auto l = torch::nn::functional::cross_entropy(logits.reshape({-1, vocab_}), b.y.reshape({-1}));
    if (setup_.variant == Variant::Alternate && alt_) {
      // The other path adds a penalty on the hidden state: another op stream every other step.
      l = l + 1e-3 * model_->last_hidden.pow(2).mean();
    }
    if (setup_.variant == Variant::ItemBranch && l.item<double>() > branch_at_) {
      // A data-dependent branch: a label-smoothing-like term when the loss is high.
      l = l +
          0.01 *
              torch::log_softmax(logits.reshape({-1, vocab_}).to(torch::kFloat), -1).mean().neg();
    }
    return l;
  }
  void after_step(int step, const Batch& b) override {
    if (setup_.variant == Variant::KeepAcross) memory_ = model_->last_hidden.mean(1, true).detach();
    if (setup_.variant == Variant::ItemBranch) branch_at_ = 5.5 - 0.005 * step;
    if (setup_.variant == Variant::Eval && step % 7 == 6) {
      torch::NoGradGuard no_grad;
      model_->eval();
      auto logits = model_->forward(b.x, {}, false);
      eval_loss_ =
          torch::nn::functional::cross_entropy(logits.reshape({-1, vocab_}), b.y.reshape({-1}))
              .item<double>();
      model_->train();
    }
  }

 private:
  Gpt model_{nullptr};
  std::int64_t vocab_ = 0, batch_ = 0, seq_ = 0;
  torch::Tensor memory_;
  double branch_at_ = 5.5, eval_loss_ = 0;
  bool alt_ = false;
};

class MlpTrainer : public Trainer {
 public:
  explicit MlpTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    const std::int64_t d = s.small ? 16 : 64, h = s.small ? 32 : 256;
    model_ =
        torch::nn::Sequential(torch::nn::Linear(d, h), torch::nn::GELU(), torch::nn::Linear(h, d));
    model_->to(s.device);
    dim_ = d;
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override { return model_->parameters(); }
  Batch batch(int step) override {
    auto g = step_generator(setup_, step);
    auto x = torch::randn({32, dim_}, g).to(setup_.device);
    return {x, (x.flip(1) * 0.5).tanh()};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override { return b.y.sizes().vec(); }

 protected:
  torch::Tensor forward(int, const Batch& b) override { return model_->forward(b.x); }
  torch::Tensor loss(const torch::Tensor& out, const Batch& b) override {
    return torch::mse_loss(out.to(torch::kFloat), b.y);
  }

 private:
  torch::nn::Sequential model_{nullptr};
  std::int64_t dim_ = 0;
};

struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(8));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
    drop = register_module("drop", torch::nn::Dropout(0.25));
    fc = register_module("fc", torch::nn::Linear(16 * 4 * 4, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn(c1(x))), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    return fc(drop(x.flatten(1)));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ConvNet);

class ConvTrainer : public Trainer {
 public:
  explicit ConvTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    model_ = ConvNet();
    model_->to(s.device);
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override {
    auto p = model_->parameters();
    for (auto& b : model_->buffers())
      if (b.is_floating_point()) p.push_back(b);
    return p;
  }
  Batch batch(int step) override {
    auto g = step_generator(setup_, step);
    const std::int64_t n = setup_.small ? 8 : 32;
    auto y = torch::randint(0, 10, {n}, g, torch::kLong);
    // Images whose mean depends on the class: something to learn.
    auto x = torch::randn({n, 1, 16, 16}, g) + (y.to(torch::kFloat) / 5.0).view({n, 1, 1, 1});
    return {x.to(setup_.device), y.to(setup_.device)};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override { return {b.x.size(0), 10}; }

 protected:
  torch::Tensor forward(int, const Batch& b) override { return model_->forward(b.x); }
  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    return torch::nll_loss(torch::log_softmax(logits, 1), b.y);
  }

 private:
  ConvNet model_{nullptr};
};

struct LstmLmImpl : torch::nn::Module {
  LstmLmImpl(std::int64_t vocab, std::int64_t d, std::int64_t h) {
    emb = register_module("emb", torch::nn::Embedding(vocab, d));
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(d, h).batch_first(true)));
    out = register_module("out", torch::nn::Linear(h, vocab));
  }
  torch::Tensor forward(const torch::Tensor& idx) { return out(std::get<0>(lstm(emb(idx)))); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(LstmLm);

class LstmTrainer : public Trainer {
 public:
  explicit LstmTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    model_ = LstmLm(vocab_, 32, s.small ? 32 : 64);
    model_->to(s.device);
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override { return model_->parameters(); }
  Batch batch(int step) override {
    const std::int64_t B = setup_.small ? 4 : 8, T = setup_.small ? 8 : 16;
    auto toks = torch::randint(0, vocab_, {B, T + 1}, step_generator(setup_, step), torch::kLong)
                    .to(setup_.device);
    return {toks.slice(1, 0, T).contiguous(), toks.slice(1, 1, T + 1).contiguous()};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override {
    return {b.x.size(0), b.x.size(1), vocab_};
  }

 protected:
  torch::Tensor forward(int, const Batch& b) override { return model_->forward(b.x); }
  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab_}), b.y.reshape({-1}));
  }

 private:
  std::int64_t vocab_ = 64;
  LstmLm model_{nullptr};
};

// The example programs' models (examples/models), in their programs' loops.
class MnistTrainer : public Trainer {
 public:
  explicit MnistTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    model_ = hotpath_examples::MnistNet();
    model_->to(s.device);
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override { return model_->parameters(); }
  Batch batch(int step) override {
    auto g = step_generator(setup_, step);
    const std::int64_t n = setup_.small ? 8 : 64;
    auto y = torch::randint(0, 10, {n}, g, torch::kLong);
    auto x = (torch::randn({n, 1, 28, 28}, g) + (y.to(torch::kFloat) / 5.0).view({n, 1, 1, 1}) -
              0.1307) /
             0.3081;
    return {x.to(setup_.device), y.to(setup_.device)};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override { return {b.x.size(0), 10}; }

 protected:
  torch::Tensor forward(int, const Batch& b) override { return model_->forward(b.x); }
  torch::Tensor loss(const torch::Tensor& out, const Batch& b) override {
    return torch::nll_loss(out, b.y);
  }

 private:
  hotpath_examples::MnistNet model_{nullptr};
};

class LmTrainer : public Trainer {
 public:
  explicit LmTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    config_ = s.small ? hotpath_examples::LmConfig{128, 32, 2, 4, 64, 32}
                      : hotpath_examples::LmConfig{512, 128, 2, 4, 512, 64};
    model_ = hotpath_examples::TransformerLm(config_);
    model_->to(s.device);
    make_optimizer(model_->parameters());
  }
  std::vector<torch::Tensor> state() override { return model_->parameters(); }
  Batch batch(int step) override {
    const std::int64_t B = 4, T = config_.context / 2;
    auto toks =
        torch::randint(0, config_.vocab, {B, T + 1}, step_generator(setup_, step), torch::kLong)
            .to(setup_.device);
    return {toks.slice(1, 0, T), toks.slice(1, 1, T + 1)};  // views, as the example slices
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override {
    return {b.x.size(0), b.x.size(1), config_.vocab};
  }

 protected:
  torch::Tensor forward(int, const Batch& b) override { return model_->forward(b.x); }
  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, config_.vocab}),
                                                b.y.reshape({-1}));
  }

 private:
  hotpath_examples::LmConfig config_;
  hotpath_examples::TransformerLm model_{nullptr};
};

// The DCGAN's step: the discriminator on real images (labels drawn from U(0.8, 1)), on fakes,
// its Adam step, then the generator through the discriminator and its Adam step (betas 0.5, 0.5,
// as the example). The perturbation multiplies the discriminator's output on real images.
class DcganTrainer : public Trainer {
 public:
  explicit DcganTrainer(const Setup& s) : Trainer(s) {
    torch::manual_seed(s.seed);
    generator_ = hotpath_examples::DcganGenerator();
    generator_->to(s.device);
    discriminator_ = hotpath_examples::dcgan_discriminator();
    discriminator_->to(s.device);
    auto opts = torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5));
    g_opt_ = std::make_unique<torch::optim::Adam>(generator_->parameters(), opts);
    d_opt_ = std::make_unique<torch::optim::Adam>(discriminator_->parameters(), opts);
  }
  std::vector<torch::Tensor> state() override {
    auto p = generator_->parameters();
    for (auto& t : discriminator_->parameters()) p.push_back(t);
    for (auto& t : generator_->buffers())
      if (t.is_floating_point()) p.push_back(t);
    return p;
  }
  Batch batch(int step) override {
    auto g = step_generator(setup_, step);
    const std::int64_t n = setup_.small ? 8 : 64;
    return {torch::rand({n, 1, 28, 28}, g).mul(2).sub(1).to(setup_.device), {}};
  }
  std::vector<std::int64_t> output_shape(const Batch& b) override { return {b.x.size(0)}; }
  torch::Tensor step(int, const Batch& b, const torch::Tensor& perturb) override {
    const auto n = b.x.size(0);
    const auto dev = setup_.device;
    discriminator_->zero_grad();
    auto real_labels = torch::empty(n, dev).uniform_(0.8, 1.0);
    auto real_output = discriminator_->forward(b.x).reshape({n});
    if (perturb.defined()) real_output = real_output * perturb;
    auto d_loss_real = torch::binary_cross_entropy(real_output, real_labels);
    d_loss_real.backward();
    auto fake_images =
        generator_->forward(torch::randn({n, hotpath_examples::kNoiseSize, 1, 1}, dev));
    auto fake_labels = torch::zeros(n, dev);
    auto fake_output = discriminator_->forward(fake_images.detach()).reshape({n});
    torch::binary_cross_entropy(fake_output, fake_labels).backward();
    d_opt_->step();
    generator_->zero_grad();
    fake_labels.fill_(1);
    auto g_loss =
        torch::binary_cross_entropy(discriminator_->forward(fake_images).reshape({n}), fake_labels);
    g_loss.backward();
    g_opt_->step();
    return (d_loss_real + g_loss).detach();
  }

 protected:
  torch::Tensor forward(int, const Batch&) override { return {}; }
  torch::Tensor loss(const torch::Tensor&, const Batch&) override { return {}; }
  std::vector<torch::optim::Optimizer*> optimizers() override {
    return {d_opt_.get(), g_opt_.get()};
  }

 private:
  hotpath_examples::DcganGenerator generator_{nullptr};
  torch::nn::Sequential discriminator_{nullptr};
  std::unique_ptr<torch::optim::Adam> g_opt_, d_opt_;
};

}  // namespace

void Trainer::make_optimizer(std::vector<torch::Tensor> params) {
  params_ = params;
  if (setup_.optimizer == "adamw") {
    opt_ = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  } else if (setup_.optimizer == "sgd") {
    opt_ =
        std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  } else {
    throw std::invalid_argument("unknown optimizer '" + setup_.optimizer + "' (adamw | sgd)");
  }
}

std::vector<torch::Tensor> Trainer::full_state() {
  std::vector<torch::Tensor> all = state();
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) all.push_back(t);
  };
  for (torch::optim::Optimizer* opt : optimizers()) {
    for (auto& group : opt->param_groups()) {
      for (auto& p : group.params()) {
        // Keyed by the parameter's TensorImpl, as LibTorch's optimizers keep it; none before the
        // parameter's first update.
        const auto it = opt->state().find(p.unsafeGetTensorImpl());
        if (it == opt->state().end()) continue;
        torch::optim::OptimizerParamState* st = it->second.get();
        if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(st)) {
          add(a->exp_avg());
          add(a->exp_avg_sq());
          add(a->max_exp_avg_sq());
        } else if (auto* b = dynamic_cast<torch::optim::AdamParamState*>(st)) {
          add(b->exp_avg());
          add(b->exp_avg_sq());
          add(b->max_exp_avg_sq());
        } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(st)) {
          add(m->momentum_buffer());
        } else {
          throw std::logic_error("full_state: an optimizer state of a kind it does not list");
        }
      }
    }
  }
  return all;
}

torch::Tensor Trainer::step(int step, const Batch& b, const torch::Tensor& perturb) {
  for (auto& group : opt_->param_groups()) group.options().set_lr(learning_rate(setup_, step));
  opt_->zero_grad();
  // Gradient accumulation: micro-batches (slices of the batch and of the perturbation), each with
  // its forward and backward, before the one optimizer step.
  const std::int64_t micro = setup_.variant == Variant::GradAccum ? 4 : 1;
  std::vector<torch::Tensor> losses;
  for (std::int64_t k = 0; k < micro; ++k) {
    auto part = [&](const torch::Tensor& t) {
      return micro == 1 ? t : t.chunk(micro, 0)[static_cast<std::size_t>(k)];
    };
    const Batch mb{part(b.x), part(b.y)};
    torch::Tensor l;
    {
      Autocast autocast(setup_.bf16, setup_.device.type());
      auto out = forward(step, mb);
      if (perturb.defined()) out = out.to(torch::kFloat) * part(perturb);  // in fp32
      l = loss(out, mb);
    }
    if (micro > 1) l = l / static_cast<double>(micro);
    l.backward();
    losses.push_back(l);
  }
  torch::nn::utils::clip_grad_norm_(params_, 1.0);
  opt_->step();
  after_step(step, b);
  torch::Tensor total = losses[0].detach();
  for (std::size_t k = 1; k < losses.size(); ++k) total = total + losses[k].detach();
  return total;
}

std::unique_ptr<Trainer> make_trainer(const Setup& s) {
  if (s.model == "gpt") return std::make_unique<GptTrainer>(s);
  if (s.model == "mlp") return std::make_unique<MlpTrainer>(s);
  if (s.model == "convnet") return std::make_unique<ConvTrainer>(s);
  if (s.model == "lstm") return std::make_unique<LstmTrainer>(s);
  if (s.model == "mnist") return std::make_unique<MnistTrainer>(s);
  if (s.model == "lm") return std::make_unique<LmTrainer>(s);
  if (s.model == "dcgan") return std::make_unique<DcganTrainer>(s);
  throw std::invalid_argument("unknown model '" + s.model +
                              "' (gpt | mlp | convnet | lstm | mnist | dcgan | lm)");
}

}  // namespace hotpath_diff
