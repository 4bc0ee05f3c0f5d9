// Probe (issue "Launch-bound loops"): where a replayed step's host time goes, function by
// function. The example's MLP+AdamW step with loss.item() after the forward pass, replayed as
// CUDA graphs, runs under a sampler (SIGPROF every --period-us of wall-clock time on the loop's
// thread and on autograd's, each sample the stack of its thread); the raw stacks and the process's
// memory map go to --out, for host_samples.py to name the functions (the machine has no perf).
// Plain eager (under Pause) is sampled too, into --out with ".eager" appended, for the ATen and
// autograd frames a step has without hotpath.
//   probe_host_samples --steps 3000 --out samples.txt; python3 host_samples.py samples.txt
#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <hotpath/hotpath.h>

namespace {

constexpr int kDepth = 48;
constexpr int kMaxSamples = 200000;
void* g_frames[kMaxSamples][kDepth];
int g_depth[kMaxSamples];
std::atomic<int> g_count{0};
std::atomic<bool> g_on{false};

void on_prof(int) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  const int i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  // Frames 0 and 1 are this handler and the kernel's signal trampoline; frame 2 is where the
  // thread was.
  void* frames[kDepth + 2];
  const int n = backtrace(frames, kDepth + 2);
  g_depth[i] = n > 2 ? n - 2 : 0;
  for (int k = 0; k < g_depth[i]; ++k) g_frames[i][k] = frames[k + 2];
}

// One wall-clock timer a thread (the loop's thread and autograd's workers, named pt_autograd_*
// by PyTorch), each signalling its own thread: CPU-time timers tick at the scheduler's rate
// (about 4 ms), too coarse for a 0.5 ms step.
std::vector<timer_t> g_timers;

void start_sampling(int period_us) {
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder outside the handler
  struct sigaction sa {};
  sa.sa_handler = on_prof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, nullptr);
  std::vector<pid_t> tids{static_cast<pid_t>(getpid())};
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name.rfind("pt_autograd", 0) == 0) tids.push_back(std::stoi(e->d_name));
    }
    closedir(d);
  }
  for (const pid_t tid : tids) {
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = tid;
    timer_t t;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0) continue;
    itimerspec spec{};
    spec.it_interval.tv_nsec = static_cast<long>(period_us) * 1000;
    spec.it_value.tv_nsec = spec.it_interval.tv_nsec;
    timer_settime(t, 0, &spec, nullptr);
    g_timers.push_back(t);
  }
  std::printf("probe_host_samples: sampling %zu thread(s) every %d us\n", g_timers.size(),
              period_us);
}

void stop_sampling() {
  for (timer_t t : g_timers) timer_delete(t);
  g_timers.clear();
}

void write_samples(const std::string& path, int from, int to) {
  std::ofstream out(path);
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) out << "map " << line << "\n";
  }
  for (int i = from; i < to && i < kMaxSamples; ++i) {
    out << "sample";
    for (int k = 0; k < g_depth[i]; ++k) out << ' ' << g_frames[i][k];
    out << "\n";
  }
}

}  // namespace

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
  hotpath::Config c;
  c.threshold = 10;
  c.remember = false;
  c.revert_window = 1000000;
  c.stand_aside = false;
  c.replay = !cpu;
  hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < 20; ++i) {
    step();
    hotpath::step();
  }
  hotpath::wait_for_compilation();
  for (int i = 0; i < 60; ++i) {  // the plan runs whole, then is observed and captured
    step();
    hotpath::step();
  }
  const auto before = hotpath::stats().last().fusion.replayed_iterations;
  start_sampling(period_us);
  g_on = true;
  for (int i = 0; i < steps; ++i) {
    step();
    hotpath::step();
  }
  g_on = false;
  const int replayed_samples = std::min(g_count.load(), kMaxSamples);
  const auto replayed = hotpath::stats().last().fusion.replayed_iterations - before;
  {
    hotpath::Pause pause;
    g_on = true;
    for (int i = 0; i < steps; ++i) step();
    g_on = false;
  }
  stop_sampling();
  const int all = std::min(g_count.load(), kMaxSamples);
  hotpath::disable_hot_path_detection();
  write_samples(out, 0, replayed_samples);
  write_samples(out + ".eager", replayed_samples, all);
  std::printf("probe_host_samples: %d steps, %lld replayed: %d samples; plain eager %d samples\n",
              steps, static_cast<long long>(replayed), replayed_samples, all - replayed_samples);
  return 0;
}
