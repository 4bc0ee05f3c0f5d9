// Training programs of the kinds users write, for the differential harness (train_diff.cpp): a
// small GPT (decomposed RMSNorm, rotary embedding through strided slices, causal masked softmax,
// SwiGLU), an MLP, a convnet (conv, batch norm, pooling, dropout), an LSTM language model, and the
// models of the example programs (examples/models: the MNIST classifier, the DCGAN with its
// three backward passes and two Adam optimizers per step, the transformer LM). Each
// `Trainer` owns one model and its optimizer and runs one training step at a time; the harness
// runs several identical trainers side by side (eager, perturbed eager, hotpath).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace hotpath_diff {

// What varies the loop around the model (the GPT's nine variants; the others run "plain").
// GradAccum: gradient accumulation, four micro-batches (each its own forward and backward, the
// loss divided by four) before one clipped optimizer step.
enum class Variant {
  Plain,
  BatchFlip,
  SeqGrow,
  ItemBranch,
  Alternate,
  KeepAcross,
  Eval,
  GradAccum,
  // The norms call at::_fused_rms_norm, the op rms_norm is on a CUDA tensor (two outputs; autograd
  // keeps its rstd through an alias of the storage), instead of the GPT's own pow, mean, rsqrt,
  // mul; on the CPU with the fuzzer's kernels for it (tests/fuzz/cuda_rms_on_cpu.h).
  FusedRms
};
const std::vector<std::string>& variant_names();
Variant parse_variant(const std::string& name);

struct Setup {
  std::string model = "gpt";  // gpt | mlp | convnet | lstm | mnist | dcgan | lm
  Variant variant = Variant::Plain;
  std::string optimizer = "adamw";  // adamw | sgd (momentum 0.9); the DCGAN: adam (its own)
  bool bf16 = false;                // forward under bf16 autocast
  torch::Device device = torch::kCPU;
  int steps = 120;
  std::uint64_t seed = 1;
  bool small = false;  // CPU-sized shapes
};

// One batch of the loop's step `step`, made outside the recorded stream and shared by every
// trainer of a comparison (the same data for each).
struct Batch {
  torch::Tensor x, y;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // The model's parameters and buffers (batch norm's running statistics), for comparisons.
  virtual std::vector<torch::Tensor> state() = 0;
  virtual Batch batch(int step) = 0;
  // One training step on `b`: zero_grad, forward (logits multiplied by `perturb` when it is
  // defined, in fp32), loss, backward, gradient clipping, the optimizer's step with this step's
  // learning rate, and what the variant adds. Returns the loss, detached.
  virtual torch::Tensor step(int step, const Batch& b, const torch::Tensor& perturb);
  // The logits' (or output's) shape of step `step`, for the perturbation.
  virtual std::vector<std::int64_t> output_shape(const Batch& b) = 0;
  // Everything a step reads and writes: state(), then the optimizers' buffers (Adam's moments,
  // SGD's momentum) in their parameters' order; the same list for every trainer of a setup once
  // they have taken the same steps. train_diff --resync copies eager's into the others.
  std::vector<torch::Tensor> full_state();

 protected:
  explicit Trainer(const Setup& s) : setup_(s) {}
  virtual torch::Tensor forward(int step, const Batch& b) = 0;  // the logits (or output)
  virtual torch::Tensor loss(const torch::Tensor& out, const Batch& b) = 0;
  virtual void after_step(int, const Batch&) {}
  // The optimizers whose buffers full_state() lists, in a fixed order.
  virtual std::vector<torch::optim::Optimizer*> optimizers() { return {opt_.get()}; }
  void make_optimizer(std::vector<torch::Tensor> params);
  Setup setup_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

std::unique_ptr<Trainer> make_trainer(const Setup& s);

}  // namespace hotpath_diff
