// A convnet classifier in the style of LibTorch's MNIST example: a DataLoader over the MNIST
// files (a per-sample Normalize transform and Stack, on the main thread), SGD with momentum,
// loss.item() every step, a print every 10 batches and a test pass under NoGradGuard after each
// epoch. The only hotpath line is the enable call. The data are synthetic MNIST files written by
// the program (examples/models/mnist_files.h): no download.
//
//   convnet_classifier [--epochs N] [--batch B] [--max-batches N] [--threshold T] [--cpu]
//                      [--cross-check N] [--data DIR]
//
// After training, --cross-check N more batches a side (default 200; 0: none) time hotpath
// against plain eager in one process (blocks of 10 under hotpath::Pause alternating with blocks
// under hotpath).
#include <hotpath/hotpath.h>

#include <torch/torch.h>

#include <cstdio>

#include "crash_backtrace.h"
#include "example_support.h"
#include "models/mnist_files.h"
#include "models/mnist_net.h"

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  int epochs = 3, batch = 64, max_batches = 0, threshold = 10, cross = 200;
  bool cpu = false;
  std::string data = "/tmp/hotpath-synthetic-mnist";
  hotpath_examples::Args("convnet_classifier",
                         "[--epochs N] [--batch B] [--max-batches N] [--threshold T] [--cpu] "
                         "[--cross-check N] [--data DIR]")
      .add("--epochs", epochs)
      .add("--batch", batch)
      .add("--max-batches", max_batches)
      .add("--threshold", threshold)
      .add("--cpu", cpu)
      .add("--cross-check", cross)
      .add("--data", data)
      .parse(argc, argv);
  const bool cuda = !cpu && torch::cuda::is_available();
  const torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
  hotpath_examples::synthetic_mnist(data);

  torch::manual_seed(1);
  hotpath_examples::MnistNet model;
  model->to(device);
  auto train_set = torch::data::datasets::MNIST(data)
                       .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                       .map(torch::data::transforms::Stack<>());
  const auto train_size = train_set.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_set), batch);
  auto test_set = torch::data::datasets::MNIST(data, torch::data::datasets::MNIST::Mode::kTest)
                      .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                      .map(torch::data::transforms::Stack<>());
  const auto test_size = test_set.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_set), 1000);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  std::printf("convnet_classifier: %s, %zu training images, batch %d, %d epoch(s)\n",
              cuda ? "CUDA" : "CPU", train_size, batch, epochs);

  hotpath::enable_hot_path_detection(threshold);  // the only hotpath line the loop needs

  hotpath_examples::LockWatch watch;
  int steps = 0;
  auto train_step = [&](torch::data::Example<>& b) {
    auto data = b.data.to(device), targets = b.target.to(device);
    optimizer.zero_grad();
    auto output = model->forward(data);
    auto loss = torch::nll_loss(output, targets);
    loss.backward();
    optimizer.step();
    return loss.item<float>();
  };
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    int batch_idx = 0;
    for (auto& b : *train_loader) {
      const float loss = train_step(b);
      watch.after_step(++steps);
      if (++batch_idx % 100 == 0)
        std::printf("Train Epoch: %d [%5d/%5zu] Loss: %.4f\n", epoch, batch_idx * batch, train_size,
                    loss);
      if (max_batches > 0 && batch_idx >= max_batches) break;
    }
    model->eval();
    torch::NoGradGuard no_grad;
    double test_loss = 0;
    int32_t correct = 0;
    for (const auto& b : *test_loader) {
      auto data = b.data.to(device), targets = b.target.to(device);
      auto output = model->forward(data);
      test_loss += torch::nll_loss(output, targets, {}, torch::Reduction::Sum).item<float>();
      correct += output.argmax(1).eq(targets).sum().item<int32_t>();
    }
    std::printf("Test set: Average loss: %.4f | Accuracy: %.3f\n", test_loss / test_size,
                static_cast<double>(correct) / test_size);
  }

  double ratio = 0;
  if (cross > 0) {
    model->train();
    auto it = train_loader->begin();
    ratio = hotpath_examples::cross_check(cuda, cross, [&] {
      if (it == train_loader->end()) it = train_loader->begin();
      train_step(*it);
      ++it;
    });
  }
  hotpath::disable_hot_path_detection();
  hotpath_examples::print_summary("convnet_classifier", steps, watch, ratio);
  return 0;
}
