// A DCGAN in the style of LibTorch's example: a generator of transposed convolutions and batch
// norm, a convolutional discriminator, three backward() calls and two Adam optimizers per step,
// a DataLoader with 2 worker threads, a print (item()) every 10 steps, checkpoints with
// torch::save and a sample every 200 steps. The only hotpath line is the enable call. The data
// are synthetic MNIST files written by the program (examples/models/mnist_files.h).
//
//   dcgan [--epochs N] [--batch B] [--max-batches N] [--threshold T] [--cpu] [--cross-check N]
//         [--data DIR] [--checkpoint-every N] [--out DIR]
#include <hotpath/hotpath.h>

#include <torch/torch.h>

#include <sys/stat.h>

#include <cstdio>

#include "crash_backtrace.h"
#include "example_support.h"
#include "models/dcgan.h"
#include "models/mnist_files.h"

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  int epochs = 2, batch = 64, max_batches = 0, threshold = 10, cross = 200, checkpoint_every = 200;
  bool cpu = false;
  std::string data = "/tmp/hotpath-synthetic-mnist", out = "/tmp/hotpath-dcgan";
  hotpath_examples::Args("dcgan",
                         "[--epochs N] [--batch B] [--max-batches N] [--threshold T] [--cpu] "
                         "[--cross-check N] [--data DIR] [--checkpoint-every N] [--out DIR]")
      .add("--epochs", epochs)
      .add("--batch", batch)
      .add("--max-batches", max_batches)
      .add("--threshold", threshold)
      .add("--cpu", cpu)
      .add("--cross-check", cross)
      .add("--data", data)
      .add("--checkpoint-every", checkpoint_every)
      .add("--out", out)
      .parse(argc, argv);
  const bool cuda = !cpu && torch::cuda::is_available();
  const torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
  hotpath_examples::synthetic_mnist(data);
  ::mkdir(out.c_str(), 0755);

  torch::manual_seed(1);
  hotpath_examples::DcganGenerator generator;
  generator->to(device);
  torch::nn::Sequential discriminator = hotpath_examples::dcgan_discriminator();
  discriminator->to(device);
  auto dataset = torch::data::datasets::MNIST(data)
                     .map(torch::data::transforms::Normalize<>(0.5, 0.5))
                     .map(torch::data::transforms::Stack<>());
  const std::int64_t batches_per_epoch =
      (static_cast<std::int64_t>(dataset.size().value()) + batch - 1) / batch;
  auto loader = torch::data::make_data_loader(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(batch).workers(2));
  torch::optim::Adam g_opt(generator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  torch::optim::Adam d_opt(discriminator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  std::printf("dcgan: %s, batch %d, %d epoch(s) of %lld batches\n", cuda ? "CUDA" : "CPU", batch,
              epochs, static_cast<long long>(batches_per_epoch));

  hotpath::enable_hot_path_detection(threshold);  // the only hotpath line the loop needs

  hotpath_examples::LockWatch watch;
  int steps = 0, checkpoints = 0;
  auto train_step = [&](torch::data::Example<>& b, bool print) {
    // Train the discriminator on real images, then on fakes.
    discriminator->zero_grad();
    auto real_images = b.data.to(device);
    auto real_labels = torch::empty(b.data.size(0), device).uniform_(0.8, 1.0);
    auto real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
    auto d_loss_real = torch::binary_cross_entropy(real_output, real_labels);
    d_loss_real.backward();
    auto noise = torch::randn({b.data.size(0), hotpath_examples::kNoiseSize, 1, 1}, device);
    auto fake_images = generator->forward(noise);
    auto fake_labels = torch::zeros(b.data.size(0), device);
    auto fake_output = discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
    auto d_loss_fake = torch::binary_cross_entropy(fake_output, fake_labels);
    d_loss_fake.backward();
    auto d_loss = d_loss_real + d_loss_fake;
    d_opt.step();
    // Train the generator.
    generator->zero_grad();
    fake_labels.fill_(1);
    fake_output = discriminator->forward(fake_images).reshape(fake_labels.sizes());
    auto g_loss = torch::binary_cross_entropy(fake_output, fake_labels);
    g_loss.backward();
    g_opt.step();
    // item() every 10 steps: a host sync; printed every 100.
    if (print) {
      const float d = d_loss.item<float>(), g = g_loss.item<float>();
      if ((steps + 1) % 100 == 0)
        std::printf("[%5d] D_loss: %.4f | G_loss: %.4f\n", steps + 1, d, g);
    }
  };
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    std::int64_t batch_index = 0;
    for (auto& b : *loader) {
      if (max_batches > 0 && batch_index >= max_batches) continue;  // drain the workers
      ++batch_index;
      train_step(b, (steps + 1) % 10 == 0);
      watch.after_step(++steps);
      if (checkpoint_every > 0 && steps % checkpoint_every == 0) {
        torch::save(generator, out + "/generator-checkpoint.pt");
        torch::save(g_opt, out + "/generator-optimizer-checkpoint.pt");
        torch::save(discriminator, out + "/discriminator-checkpoint.pt");
        torch::save(d_opt, out + "/discriminator-optimizer-checkpoint.pt");
        torch::NoGradGuard no_grad;
        auto samples =
            generator->forward(torch::randn({8, hotpath_examples::kNoiseSize, 1, 1}, device));
        torch::save((samples + 1.0) / 2.0,
                    out + "/dcgan-sample-" + std::to_string(++checkpoints) + ".pt");
      }
    }
    std::printf("epoch %d done\n", epoch);
  }

  double ratio = 0;
  if (cross > 0) {
    auto it = loader->begin();
    ratio = hotpath_examples::cross_check(cuda, cross, [&] {
      if (it == loader->end()) it = loader->begin();
      train_step(*it, false);
      ++it;
    });
    for (; it != loader->end(); ++it) {
    }  // the workers' batches in flight
  }
  hotpath::disable_hot_path_detection();
  std::printf("checkpoints written: %d\n", checkpoints);
  hotpath_examples::print_summary("dcgan", steps, watch, ratio);
  return 0;
}
