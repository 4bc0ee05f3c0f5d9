// A decoder-only transformer language model as users write it in LibTorch: token and learned
// position embeddings, pre-LayerNorm blocks of causal softmax attention (masked_fill with -inf)
// and a GELU MLP, a final LayerNorm and a linear head. Shared by examples/transformer_lm and the
// differential harness (tests/diff).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace hotpath_examples {

struct LmConfig {
  std::int64_t vocab = 10000, dim = 768, layers = 12, heads = 12, ff = 3072, context = 256;
};

struct LmBlockImpl : torch::nn::Module {
  LmBlockImpl(const LmConfig& c)
      : heads(c.heads),
        ln1(torch::nn::LayerNormOptions({c.dim})),
        ln2(torch::nn::LayerNormOptions({c.dim})),
        qkv(c.dim, 3 * c.dim),
        proj(c.dim, c.dim),
        fc(c.dim, c.ff),
        out(c.ff, c.dim) {
    register_module("ln1", ln1);
    register_module("ln2", ln2);
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("fc", fc);
    register_module("out", out);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
    auto parts = qkv(ln1(x)).split(C, -1);
    auto q = parts[0].view({B, T, heads, hd}).transpose(1, 2);
    auto k = parts[1].view({B, T, heads, hd}).transpose(1, 2);
    auto v = parts[2].view({B, T, heads, hd}).transpose(1, 2);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
    auto h = x + proj(y);
    return h + out(torch::gelu(fc(ln2(h))));
  }
  std::int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, proj, fc, out;
};
TORCH_MODULE(LmBlock);

struct TransformerLmImpl : torch::nn::Module {
  explicit TransformerLmImpl(const LmConfig& c)
      : tok(c.vocab, c.dim),
        pos(c.context, c.dim),
        ln(torch::nn::LayerNormOptions({c.dim})),
        head(c.dim, c.vocab) {
    register_module("tok", tok);
    register_module("pos", pos);
    for (std::int64_t l = 0; l < c.layers; ++l)
      blocks.push_back(register_module("block" + std::to_string(l), LmBlock(c)));
    register_module("ln", ln);
    register_module("head", head);
    mask = register_buffer("mask", torch::ones({c.context, c.context}, torch::kBool).triu(1));
  }
  // Token ids [B, T] -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& idx) {
    const auto T = idx.size(1);
    auto positions = torch::arange(T, idx.options());
    auto x = tok(idx) + pos(positions);
    const auto m = mask.slice(0, 0, T).slice(1, 0, T);
    for (auto& b : blocks) x = b->forward(x, m);
    return head(ln(x));
  }
  torch::nn::Embedding tok, pos;
  std::vector<LmBlock> blocks;
  torch::nn::LayerNorm ln;
  torch::nn::Linear head;
  torch::Tensor mask;
};
TORCH_MODULE(TransformerLm);

}  // namespace hotpath_examples
