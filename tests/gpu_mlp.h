// The GPU tests' MLP + AdamW loop (test_gpu.cpp and test_gpu_prepared.cpp): trained with hotpath
// or without, and its parameters compared with eager's.
#pragma once

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "hotpath/hotpath.h"
#include "temp_dir.h"

namespace hotpath_test {

// An MLP + AdamW trained `steps` steps on the GPU, hotpath on or off (no markers); its
// parameters at the end.
inline std::vector<torch::Tensor> train_gpu_mlp(
    bool hot, int steps, hotpath::Stats* stats = nullptr, const std::function<void(int)>& each = {},
    const std::function<void(hotpath::Config&)>& tune = {}) {
  // A kernel cache of its own: kernels another test (or process) compiled would be loaded from
  // a shared one, and an injected NVRTC failure would never be reached.
  const hotpath_test::TempDir cache("hotpath-gpu-mlp");
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                              torch::nn::Linear(256, 64));
  model->to(torch::kCUDA);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  hotpath::Config c;
  c.threshold = 3;
  c.remember = false;
  c.revert_window = 1000000;
  c.stand_aside = false;
  c.cache_dir = cache.path();
  c.log_level = hotpath::LogLevel::Warn;
  if (tune) tune(c);
  hotpath::disable_hot_path_detection();
  if (hot) hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
    if (each) each(i);
  }
  if (hot) hotpath::wait_for_compilation();  // what the compiles ended in, failures too
  if (stats) *stats = hotpath::stats();
  hotpath::disable_hot_path_detection();
  std::vector<torch::Tensor> p;
  for (auto& t : model->parameters()) p.push_back(t.detach().cpu());
  return p;
}

inline void check_equal_to_eager(const std::vector<torch::Tensor>& got, int steps) {
  const auto eager = train_gpu_mlp(false, steps);
  REQUIRE(got.size() == eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) {
    const double err = ((got[i] - eager[i]).abs().max() / eager[i].abs().max()).item<double>();
    CAPTURE(i, err);
    CHECK(err <= 1e-4);
  }
}

}  // namespace hotpath_test
