#include "cuda_rms_on_cpu.h"

#include <torch/library.h>
#include <torch/torch.h>

#include <array>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>

namespace fuzz {

namespace {

// rstd of each row of `x` (fp32, [..., C]) as ATen's CUDA kernel computes it
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu): rows of a multiple of 4 elements at an
// address aligned to 4 of them take the vectorized path, rsqrt(sum(x^2) / C + eps); the rest the
// Welford one, rsqrt(var + mean^2 + eps), NaN where a row holds an infinity.
torch::Tensor cuda_rstd(const torch::Tensor& input, const torch::Tensor& x,
                        const torch::Tensor& weight, double eps) {
  const std::int64_t cols = x.size(-1);
  const auto align = static_cast<std::uintptr_t>(4 * input.element_size());
  auto aligned = [&](const torch::Tensor& t) {
    // ATen reads a contiguous tensor in place, else a contiguous copy (a new allocation).
    return !t.defined() || !t.is_contiguous() ||
           reinterpret_cast<std::uintptr_t>(t.data_ptr()) % align == 0;
  };
  if (cols % 4 == 0 && cols <= (std::int64_t{1} << 24) && aligned(input) && aligned(weight))
    return (x.square().sum(-1, true) / static_cast<double>(cols) + eps).rsqrt();
  const auto mean = x.mean(-1, true);
  return ((x - mean).square().sum(-1, true) / static_cast<double>(cols) + mean * mean + eps)
      .rsqrt();
}

std::tuple<torch::Tensor, torch::Tensor> fused_rms_norm(const torch::Tensor& input,
                                                        c10::IntArrayRef normalized_shape,
                                                        const std::optional<torch::Tensor>& weight,
                                                        std::optional<double> eps) {
  TORCH_CHECK(normalized_shape.size() == 1 && normalized_shape[0] == input.size(-1),
              "fuzz_programs' _fused_rms_norm on the CPU normalizes the last dimension only");
  const torch::Tensor w = weight.value_or(torch::Tensor());
  const auto x = input.to(torch::kFloat);
  const auto rstd = cuda_rstd(input, x, w, eps.value_or(std::numeric_limits<float>::epsilon()));
  auto y = x * rstd;
  if (w.defined()) y = y * w.to(torch::kFloat);
  return {y.to(input.scalar_type()), rstd};
}

std::tuple<torch::Tensor, torch::Tensor> fused_rms_norm_backward(
    const torch::Tensor& grad_out, const torch::Tensor& input, c10::IntArrayRef normalized_shape,
    const torch::Tensor& rstd, const std::optional<torch::Tensor>& weight,
    std::array<bool, 2> output_mask) {
  const std::int64_t cols = normalized_shape[0];
  const auto x = input.to(torch::kFloat), g = grad_out.to(torch::kFloat);
  const auto xhat = x * rstd;
  const torch::Tensor w = weight.value_or(torch::Tensor());
  const auto gw = w.defined() ? g * w.to(torch::kFloat) : g;
  torch::Tensor dx, dw;
  if (output_mask[0])
    dx = (rstd * (gw - xhat * (gw * xhat).mean(-1, true))).to(input.scalar_type());
  if (output_mask[1] && w.defined()) dw = (g * xhat).reshape({-1, cols}).sum(0).to(w.scalar_type());
  return {dx, dw};
}

}  // namespace

bool& cuda_rms_on_cpu() {
  static bool on = false;
  return on;
}

void register_cuda_rms_on_cpu() {
  static std::unique_ptr<torch::Library> lib;
  if (lib) return;
  lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", std::make_optional(c10::DispatchKey::CPU), __FILE__, __LINE__);
  lib->impl("_fused_rms_norm", TORCH_FN(fused_rms_norm));
  lib->impl("_fused_rms_norm_backward", TORCH_FN(fused_rms_norm_backward));
}

}  // namespace fuzz
