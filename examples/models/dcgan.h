// The networks of LibTorch's DCGAN example (28x28 images): a generator of transposed
// convolutions with batch norm and ReLU, a discriminator of strided convolutions with batch norm
// and leaky ReLU. Shared by examples/dcgan and the differential harness (tests/diff).
#pragma once

#include <torch/torch.h>

namespace hotpath_examples {

constexpr std::int64_t kNoiseSize = 100;

struct DcganGeneratorImpl : torch::nn::Module {
  explicit DcganGeneratorImpl(std::int64_t noise = kNoiseSize)
      : conv1(torch::nn::ConvTranspose2dOptions(noise, 256, 4).bias(false)),
        conv2(torch::nn::ConvTranspose2dOptions(256, 128, 3).stride(2).padding(1).bias(false)),
        conv3(torch::nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)),
        conv4(torch::nn::ConvTranspose2dOptions(64, 1, 4).stride(2).padding(1).bias(false)),
        batch_norm1(256),
        batch_norm2(128),
        batch_norm3(64) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv3", conv3);
    register_module("conv4", conv4);
    register_module("batch_norm1", batch_norm1);
    register_module("batch_norm2", batch_norm2);
    register_module("batch_norm3", batch_norm3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(batch_norm1(conv1(x)));
    x = torch::relu(batch_norm2(conv2(x)));
    x = torch::relu(batch_norm3(conv3(x)));
    return torch::tanh(conv4(x));
  }
  torch::nn::ConvTranspose2d conv1, conv2, conv3, conv4;
  torch::nn::BatchNorm2d batch_norm1, batch_norm2, batch_norm3;
};
TORCH_MODULE(DcganGenerator);

inline torch::nn::Sequential dcgan_discriminator() {
  using namespace torch::nn;
  return Sequential(Conv2d(Conv2dOptions(1, 64, 4).stride(2).padding(1).bias(false)),
                    LeakyReLU(LeakyReLUOptions().negative_slope(0.2)),
                    Conv2d(Conv2dOptions(64, 128, 4).stride(2).padding(1).bias(false)),
                    BatchNorm2d(128), LeakyReLU(LeakyReLUOptions().negative_slope(0.2)),
                    Conv2d(Conv2dOptions(128, 256, 4).stride(2).padding(1).bias(false)),
                    BatchNorm2d(256), LeakyReLU(LeakyReLUOptions().negative_slope(0.2)),
                    Conv2d(Conv2dOptions(256, 1, 3).stride(1).padding(0).bias(false)), Sigmoid());
}

}  // namespace hotpath_examples
