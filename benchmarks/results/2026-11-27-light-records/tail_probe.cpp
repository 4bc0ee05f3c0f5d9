// The CPU probe of 2026-11-27-light-records.md: an MLP step with CPU plans and a tail of `tail`
// small adds, hotpath against plain eager (under hotpath::Pause) in blocks of 10 steps, one
// process; prints both medians a step. (hot - plain) / (tail + 63) is hotpath's cost per op over
// plain eager, most of it the tail's ops on the light lane. Built against a build's library:
//   TP=$(python -c 'import torch, os; print(os.path.dirname(torch.__file__))')
//   g++ -O2 -std=c++17 -Iinclude -isystem $TP/include -isystem $TP/include/torch/csrc/api/include \
//     tail_probe.cpp -o tail_probe -Lbuild -lhotpath -L$TP/lib -ltorch -ltorch_cpu -lc10 \
//     -Wl,-rpath,$PWD/build:$TP/lib
//   OMP_NUM_THREADS=1 ./tail_probe 400 2000        (steps, tail ops a step; PROFILE=1: host laps)
// Two builds' libraries in turn: LD_LIBRARY_PATH=<build>/ before each run.
#include <hotpath/hotpath.h>
#include <torch/torch.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  const int tail = argc > 2 ? std::atoi(argv[2]) : 200;
  torch::manual_seed(1);
  auto model =
      torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::ReLU(), torch::nn::Linear(32, 1));
  torch::optim::AdamW opt(model->parameters(), 1e-3);
  auto x = torch::rand({8, 16}), y = torch::rand({8, 1});
  std::vector<torch::Tensor> samples;
  for (int i = 0; i < 16; ++i) samples.push_back(torch::rand({16}));
  auto step = [&](int i) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    torch::Tensor acc = samples[i % 16];
    for (int j = 0; j < tail; ++j) acc = acc.add(samples[(i + j) % 16]);
    (void)acc;
  };
  hotpath::Config c;
  c.threshold = 3;
  c.fuse = true;
  c.fuse_cpu = true;
  c.revert_window = 1000000;
  c.remember = false;
  c.stand_aside = false;
  c.host_profile = std::getenv("PROFILE") != nullptr;
  hotpath::enable_hot_path_detection(c);
  std::vector<double> hot, plain;
  for (int r = 0; r < steps / 20; ++r) {
    for (int k = 0; k < 10; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      step(r * 20 + k);
      hot.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    {
      hotpath::Pause p;
      for (int k = 10; k < 20; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        step(r * 20 + k);
        plain.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
    }
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto s = hotpath::stats();
  std::printf("hot %.1f us, plain %.1f us per step; tail lane ops %lld\n", med(hot), med(plain),
              (long long)s.ops_tail_lane);
  std::printf("%s\n", hotpath::format_stats(s).c_str());
}
