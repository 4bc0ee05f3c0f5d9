// Probe (issue "Launch-bound loops"): where a replayed step's host time goes, function by
// function. The example's MLP+AdamW step with loss.item() after the forward pass, replayed as
// CUDA graphs, runs under a sampler (SIGPROF every --period-us of wall-clock time on the loop's
// thread and on autograd's, each sample the stack of its thread); the raw stacks and the process's
// memory map go to --out, for host_samples.py to name the functions (the machine has no perf).
// Plain eager (under Pause) is sampled too, into --out with ".eager" appended, for the ATen and
// autograd frames a step has without hotpath.
//   probe_host_samples --steps 3000 --out samples.txt; python3 host_samples.py samples.txt
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include <hotpath/hotpath.h>

#include "replayed.h"

#include "sampler.h"

int main(int argc, char** argv) {
  int steps = 3000, period_us = 100;
  bool cpu = false;  // the sampler and the script tried on a machine without a GPU
  std::string out = "host_samples.txt";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::stoi(argv[++i]);
    else if (a == "--period-us" && i + 1 < argc)
      period_us = std::stoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (a == "--cpu")
      cpu = true;
    else {
      std::fprintf(stderr,
                   "usage: probe_host_samples [--steps N] [--period-us US] [--out FILE] [--cpu]\n");
      return 2;
    }
  }
  if (!cpu && !torch::cuda::is_available()) {
    std::fprintf(stderr,
                 "probe_host_samples: needs a CUDA device (--cpu: on the CPU, no replay)\n");
    return 2;
  }
  const torch::Device dev(cpu ? torch::kCPU : torch::kCUDA);
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(1024, 4096), torch::nn::GELU(),
                              torch::nn::Linear(4096, 1024));
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const int batch = cpu ? 16 : 256;
  const auto x = torch::randn({batch, 1024}, dev), y = torch::randn({batch, 1024}, dev);
  auto step = [&] {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.item<double>();
    loss.backward();
    opt.step();
  };
  probe::warm_until_replayed(step, !cpu, 60);
  const auto before = hotpath::stats().last().fusion.replayed_iterations;
  // The loop's thread and autograd's workers (named pt_autograd_* by PyTorch).
  std::vector<pid_t> tids{static_cast<pid_t>(getpid())};
  for (const pid_t t : probe::threads_named({"pt_autograd"})) tids.push_back(t);
  probe::start_sampling(tids, period_us);
  std::printf("probe_host_samples: sampling %zu thread(s) every %d us\n", tids.size(), period_us);
  probe::Samples& samples = probe::samples();
  samples.on = true;
  for (int i = 0; i < steps; ++i) {
    step();
    hotpath::step();
  }
  samples.on = false;
  const int replayed_samples = std::min(samples.count.load(), probe::kMaxSamples);
  const auto replayed = hotpath::stats().last().fusion.replayed_iterations - before;
  {
    hotpath::Pause pause;
    samples.on = true;
    for (int i = 0; i < steps; ++i) step();
    samples.on = false;
  }
  probe::stop_sampling();
  const int all = std::min(samples.count.load(), probe::kMaxSamples);
  hotpath::disable_hot_path_detection();
  probe::write_samples(out, 0, replayed_samples);
  probe::write_samples(out + ".eager", replayed_samples, all);
  std::printf("probe_host_samples: %d steps, %lld replayed: %d samples; plain eager %d samples\n",
              steps, static_cast<long long>(replayed), replayed_samples, all - replayed_samples);
  return 0;
}
