// Interception + hashing overhead per op: the same loops run eager and with hotpath detection
// enabled, interleaved in rounds in one process, on the same inputs. Reports medians. Also what an
// op deferred into a fused group costs the host, and on a GPU what an op costs the host while its
// step is replayed as CUDA graphs (the host's time until the step's body returns), and on a GPU
// where a step with a host sync (the example's MLP step) spends its time, eager and replayed.
//
//   bench_overhead [--device cpu|cuda] [--rounds R] [--iters K] [--csv FILE]
#include <hotpath/hotpath.h>

#include <torch/torch.h>
#include "crash_backtrace.h"
#include "host_share.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Workload {
  std::string name;
  std::function<void()> iteration;
};

struct Result {
  std::string name;
  int64_t ops = 0;
  double eager_us = 0, hotpath_us = 0;
  // Config::host_profile, where it was on (host.ops > 0): the hook's share per op, from blocks of
  // their own; profiled_us: those blocks' median (the profile's clock reads and counters cost the
  // host too: hotpath_us is timed without them).
  bench::HostShare host;
  double profiled_us = 0;
};

// Interception alone: fusion is off here (bench_fusion measures it), so that both sides run the
// same kernels and the difference is the hook's cost.
hotpath::Config detect_only(int threshold) {
  hotpath::Config c;
  c.threshold = threshold;
  c.fuse = false;
  return c;
}

// Host time (us) of each of `iters` iterations, synchronised before and after; `mark`: with a
// hotpath::step() at the end of each. `host_only`: the time until the iteration's body returns
// (the GPU's work queued, not waited for; synchronised after the clock stops).
void time_host(const Workload& w, bool cuda, int iters, bool mark, std::vector<double>& out,
               bool host_only = false) {
  for (int i = 0; i < iters; ++i) {
    if (cuda) torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    w.iteration();
    if (mark) hotpath::step();
    if (cuda && !host_only) torch::cuda::synchronize();
    out.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (cuda && host_only) torch::cuda::synchronize();
  }
}

Result measure(const Workload& w, bool cuda, int rounds, int iters) {
  // Learn the op count with explicit markers.
  hotpath::enable_hot_path_detection(detect_only(1));
  for (int i = 0; i < 3; ++i) {
    w.iteration();
    hotpath::step();
  }
  Result r;
  r.name = w.name;
  r.ops = hotpath::stats().last().ops_per_iteration;
  hotpath::disable_hot_path_detection();

  std::vector<double> eager, hp;
  for (int i = 0; i < 5; ++i) w.iteration();  // warm-up
  hotpath::enable_hot_path_detection(
      detect_only(10));  // unmarked loop: the detector cuts iterations
  for (int i = 0; i < 30; ++i) w.iteration();
  hotpath::disable_hot_path_detection();
  for (int round = 0; round < rounds; ++round) {
    time_host(w, cuda, iters, false, eager);
    hotpath::enable_hot_path_detection(detect_only(10));
    time_host(w, cuda, iters, false, hp);
    hotpath::disable_hot_path_detection();
  }
  r.eager_us = median(eager);
  r.hotpath_us = median(hp);
  return r;
}

}  // namespace

// Eager (under hotpath::Pause) and fused blocks interleaved in one enabled session; the groups
// run on the interpreter kernel (nothing to compile). Host time per iteration, synchronised.
Result measure_fused(const Workload& w, bool cuda, int rounds, int iters) {
  hotpath::Config c;
  c.threshold = 10;
  c.fuse = true;
  c.fuse_cpu = true;
  c.compile_kernels = false;
  c.remember = false;
  c.revert_window = 1000000;  // measured here, not judged
  hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < 30; ++i) {
    w.iteration();
    hotpath::step();
  }
  hotpath::wait_for_compilation();
  Result r;
  r.name = w.name;
  r.ops = hotpath::stats().last().ops_per_iteration;
  std::vector<double> eager, hp;
  for (int round = 0; round < rounds; ++round) {
    {
      hotpath::Pause pause;
      time_host(w, cuda, iters, false, eager);
    }
    time_host(w, cuda, iters, true, hp);
  }
  const auto st = hotpath::stats().last();
  if (st.fusion.fused_iterations < static_cast<std::int64_t>(rounds) * iters)
    std::fprintf(stderr, "bench_overhead: %s: only %lld fused iterations\n", w.name.c_str(),
                 static_cast<long long>(st.fusion.fused_iterations));
  hotpath::disable_hot_path_detection();
  r.eager_us = median(eager);
  r.hotpath_us = median(hp);
  return r;
}

// Replay on, measured here rather than judged; `profile`: with the host profile (a few clock
// reads an op: what the hook itself takes, and where). Switching between the two configures the
// running session again: plans and captures stay.
hotpath::Config replay_measured(bool fast_lane = true, bool profile = true) {
  hotpath::Config c;
  c.replay_fast_lane = fast_lane;
  c.threshold = 10;
  c.remember = false;
  c.revert_window = 1000000;
  c.stand_aside = false;
  c.replay = true;
  c.host_profile = profile;
  return c;
}

// The step replayed as CUDA graphs (its own kernels compiled, Config::replay): the host's time
// until the step's body returns, its GPU work queued, against plain eager's (under Pause), in
// interleaved blocks. Over the ops, that is what an op costs the host while replaying. A third
// block each round runs with the host profile, for the hook's share and its parts.
// `fast_lane`: Config::replay_fast_lane.
Result measure_replayed(const Workload& w, int rounds, int iters, bool fast_lane) {
  hotpath::enable_hot_path_detection(replay_measured(fast_lane));
  for (int i = 0; i < 20; ++i) {
    w.iteration();
    hotpath::step();
  }
  hotpath::wait_for_compilation();
  for (int i = 0; i < 40; ++i) {  // the plan runs whole, then is observed and captured
    w.iteration();
    hotpath::step();
  }
  Result r;
  r.name = w.name;
  r.ops = hotpath::stats().last().ops_per_iteration;
  const hotpath::Stats s0 = hotpath::stats();
  const std::int64_t before = s0.last().fusion.replayed_iterations;
  std::vector<double> eager, hp, profiled;
  for (int round = 0; round < rounds; ++round) {
    {
      hotpath::Pause pause;
      time_host(w, true, iters, false, eager, true);
    }
    hotpath::enable_hot_path_detection(replay_measured(fast_lane, false));
    time_host(w, true, iters, true, hp, true);
    hotpath::enable_hot_path_detection(replay_measured(fast_lane, true));
    time_host(w, true, iters, true, profiled, true);
  }
  // Only the profiled blocks add to the host profile's counters.
  const hotpath::Stats s1 = hotpath::stats();
  r.host = bench::host_share(s0, s1);
  // The launcher thread works in the blocks without the profile too: its time over all their ops.
  r.host.launcher = (bench::launcher_ms(s1) - bench::launcher_ms(s0)) * 1e3 /
                    (2.0 * rounds * iters * static_cast<double>(std::max<std::int64_t>(r.ops, 1)));
  const auto f = s1.last().fusion;
  if (f.replayed_iterations - before < 2 * static_cast<std::int64_t>(rounds) * iters)
    std::fprintf(stderr, "bench_overhead: %s: only %lld of %d iterations replayed%s%s\n",
                 w.name.c_str(), static_cast<long long>(f.replayed_iterations - before),
                 2 * rounds * iters,
                 f.replay_off.empty() ? "" : "; replay is off: ", f.replay_off.c_str());
  hotpath::disable_hot_path_detection();
  r.eager_us = median(eager);
  r.hotpath_us = median(hp);
  r.profiled_us = median(profiled);
  return r;
}

// The example's MLP+AdamW step (1024-4096-1024, batch 256) with a host sync in each step (its
// loss read with item() after the forward pass, as a loop that logs each step's loss does):
// plain eager (under Pause) and replayed, in interleaved blocks, no other synchronisation. Per
// step: its time (start to next start), the time the host waited in item(), and the rest (the
// host walking the step's ops). Beside it, the same step without item() (a block's time over its
// steps: the GPU's time per step where the GPU is the bottleneck) and the step's five matrix
// products alone: what the GPU cannot do without, whatever the host does.
// The replayed steps are timed without the host profile; its figures come from blocks of their own
// (profiled_step: their median step).
struct SyncedSplit {
  double eager_step = 0, eager_wait = 0, replay_step = 0, replay_wait = 0, profiled_step = 0;
  // Replayed with Config::replay_fast_lane off (each replayed op recorded in full), in the same
  // rounds.
  double recorded_step = 0, recorded_wait = 0, recorded_profiled_step = 0;
  std::int64_t replayed_recorded = 0;
  bench::HostShare host_recorded;
  double eager_free = 0, replay_free = 0, products = 0;
  std::int64_t replayed = 0, steps = 0, replayed_free = 0;
  bench::HostShare host;
};

SyncedSplit measure_synced(int rounds, int iters) {
  const torch::Device dev(torch::kCUDA);
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(1024, 4096), torch::nn::GELU(),
                              torch::nn::Linear(4096, 1024));
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const auto x = torch::randn({256, 1024}, dev), y = torch::randn({256, 1024}, dev);
  using clock = std::chrono::steady_clock;
  auto block = [&](std::vector<double>& steps, std::vector<double>& waits, bool mark) {
    torch::cuda::synchronize();
    clock::time_point start = clock::now();
    for (int i = 0; i <= iters; ++i) {  // the first step of a block is not counted
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      const clock::time_point before = clock::now();
      loss.item<double>();
      const clock::time_point after = clock::now();
      loss.backward();
      opt.step();
      if (mark) hotpath::step();
      const clock::time_point end = clock::now();
      if (i > 0) {
        steps.push_back(std::chrono::duration<double, std::micro>(end - start).count());
        waits.push_back(std::chrono::duration<double, std::micro>(after - before).count());
      }
      start = end;
    }
  };
  // Without item(): a block's time after its first step, synchronised at both ends, over its
  // steps.
  auto free_block = [&](std::vector<double>& per_step, bool mark) {
    clock::time_point start;
    for (int i = 0; i <= iters; ++i) {
      if (i == 1) {
        torch::cuda::synchronize();
        start = clock::now();
      }
      opt.zero_grad();
      torch::mse_loss(model->forward(x), y).backward();
      opt.step();
      if (mark) hotpath::step();
    }
    torch::cuda::synchronize();
    per_step.push_back(std::chrono::duration<double, std::micro>(clock::now() - start).count() /
                       iters);
  };
  hotpath::enable_hot_path_detection(replay_measured(true, false));
  std::vector<double> es, ew, rs, rw;
  block(rs, rw, true);
  hotpath::wait_for_compilation();
  for (int i = 0; i < 3; ++i) block(rs, rw, true);  // the plan runs whole, then is captured
  rs.clear();
  rw.clear();
  SyncedSplit r;
  // Iterations replayed between two snapshots, over all signatures (the step with and without
  // item() are two).
  auto replayed_between = [](const hotpath::Stats& a, const hotpath::Stats& b) {
    std::int64_t n = 0;
    for (const auto& sig : b.signatures) n += sig.fusion.replayed_iterations;
    for (const auto& sig : a.signatures) n -= sig.fusion.replayed_iterations;
    return n;
  };
  // A replayed block with the fast lane on or off, timed: its steps and replayed iterations
  // added to the kind's. Then a block with the host profile, for the kind's profile.
  std::vector<double> cs, cw, ps, qs;
  auto replayed_block = [&](bool fast, std::vector<double>& steps, std::vector<double>& waits,
                            std::int64_t& replayed, bench::HostShare& host,
                            std::vector<double>& profiled) {
    hotpath::enable_hot_path_detection(replay_measured(fast, false));
    const hotpath::Stats a = hotpath::stats();
    block(steps, waits, true);
    const hotpath::Stats b = hotpath::stats();
    replayed += replayed_between(a, b);
    hotpath::enable_hot_path_detection(replay_measured(fast, true));
    std::vector<double> unused;
    block(profiled, unused, true);
    bench::add_host_share(host, bench::host_share(b, hotpath::stats()));
  };
  for (int round = 0; round < rounds; ++round) {
    {
      hotpath::Pause pause;
      block(es, ew, false);
    }
    replayed_block(true, rs, rw, r.replayed, r.host, ps);
    replayed_block(false, cs, cw, r.replayed_recorded, r.host_recorded, qs);
  }
  hotpath::enable_hot_path_detection(replay_measured(true, false));
  std::vector<double> ef, rf;
  // Without item() the step is another signature: it turns hot, compiles and is captured first.
  free_block(rf, true);
  hotpath::wait_for_compilation();
  for (int i = 0; i < 3; ++i) free_block(rf, true);
  rf.clear();
  const hotpath::Stats s2 = hotpath::stats();
  for (int round = 0; round < rounds; ++round) {
    {
      hotpath::Pause pause;
      free_block(ef, false);
    }
    free_block(rf, true);
  }
  r.replayed_free = replayed_between(s2, hotpath::stats());
  hotpath::disable_hot_path_detection();
  // The products of a step: forward h = x W1^T, out = g(h) W2^T; backward dW2 = dout^T g(h),
  // dg = dout W2, dW1 = dh^T x (x needs no gradient).
  const auto w1 = torch::randn({4096, 1024}, dev), w2 = torch::randn({1024, 4096}, dev);
  const auto h = torch::randn({256, 4096}, dev), dout = torch::randn({256, 1024}, dev);
  auto products = [&] {
    torch::mm(x, w1.t());
    torch::mm(h, w2.t());
    torch::mm(dout.t(), h);
    torch::mm(dout, w2);
    torch::mm(h.t(), x);
  };
  std::vector<double> pr;
  for (int round = 0; round < rounds; ++round) {
    products();
    torch::cuda::synchronize();
    const clock::time_point t0 = clock::now();
    for (int i = 0; i < iters; ++i) products();
    torch::cuda::synchronize();
    pr.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters);
  }
  r.eager_free = median(ef);
  r.replay_free = median(rf);
  r.products = median(pr);
  r.eager_step = median(es);
  r.eager_wait = median(ew);
  r.replay_step = median(rs);
  r.replay_wait = median(rw);
  r.profiled_step = median(ps);
  r.recorded_profiled_step = median(qs);
  r.recorded_step = median(cs);
  r.recorded_wait = median(cw);
  r.steps = static_cast<std::int64_t>(rounds) * (iters + 1);
  return r;
}

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  std::string device = torch::cuda::is_available() ? "cuda" : "cpu";
  int rounds = 20, iters = 25;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      device = argv[++i];
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::stoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc)
      iters = std::stoi(argv[++i]);
    else if (a == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: bench_overhead [--device cpu|cuda] [--rounds R] [--iters K] [--csv FILE]\n");
      return 2;
    }
  }
  const bool cuda = device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_overhead: --device cuda but no CUDA device\n");
    return 2;
  }
  const torch::Device dev = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::manual_seed(0);

  // 1. Small pointwise chain: op overhead dominates, the worst case for an interceptor.
  auto a = torch::randn({256}, dev), b = torch::randn({256}, dev);
  Workload chain{"pointwise chain (80 ops, 256 elems)", [&] {
                   auto t = a;
                   for (int k = 0; k < 16; ++k) t = ((t * b + 0.5).tanh() - a).abs();
                 }};
  // 2. MLP + AdamW step (small, so op overhead is visible next to the math).
  const int64_t dim = 64, hidden = 256, batch = 32;
  torch::nn::Sequential model(torch::nn::Linear(dim, hidden), torch::nn::GELU(),
                              torch::nn::Linear(hidden, dim));
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::randn({batch, dim}, dev), y = torch::randn({batch, dim}, dev);
  Workload mlp{"MLP+AdamW step (64-256-64, batch 32)", [&] {
                 opt.zero_grad();
                 torch::mse_loss(model->forward(x), y).backward();
                 opt.step();
               }};

  std::vector<Result> results;
  for (const auto* w : {&chain, &mlp}) results.push_back(measure(*w, cuda, rounds, iters));
  // 3. The optimizer step alone, fused: what an op deferred into a fused group costs the host
  // (36 ops become 4 kernels), next to what the same op costs eagerly.
  opt.zero_grad();
  torch::mse_loss(model->forward(x), y).backward();  // gradients stay; each step reuses them
  Workload adamw{"AdamW step alone, fused (36 ops)", [&] { opt.step(); }};
  results.push_back(measure_fused(adamw, cuda, rounds, iters));
  // 4. The whole MLP step replayed as CUDA graphs: host time until the body returns (GPU only).
  if (cuda) {
    Workload replayed{"MLP+AdamW step, replayed (host only)", mlp.iteration};
    results.push_back(measure_replayed(replayed, rounds, iters, true));
    // ... and with each replayed op recorded in full, as before the fast lane.
    Workload recorded{"MLP+AdamW step, replayed, no fast lane", mlp.iteration};
    results.push_back(measure_replayed(recorded, rounds, iters, false));
  }

  std::optional<SyncedSplit> synced;
  if (cuda) synced = measure_synced(std::max(2, rounds / 2), iters);

  std::printf(
      "\ndevice: %s%s, LibTorch %s, %d rounds x %d iterations each side, medians\n", device.c_str(),
      cuda ? (" (" + std::string(torch::cuda::device_count() > 0 ? "GPU" : "") + ")").c_str() : "",
      hotpath::libtorch_version().c_str(), rounds, iters);
  std::printf("%-40s %6s %12s %12s %14s %12s %12s\n", "workload", "ops", "eager us", "hotpath us",
              "overhead/op us", "host/op us", "hook/op us");
  // (the fused row's "overhead" is negative where deferring an op costs less than running it; the
  // replayed row's hotpath column over its ops is the host's cost per op while replaying, timed
  // without the host profile, and of that, from profiled blocks beside them, what the hook itself
  // took: the rest is LibTorch's C++ API, autograd and dispatch down to the hook, and the loop's
  // own code)
  for (const auto& r : results) {
    std::printf("%-40s %6lld %12.1f %12.1f %14.3f", r.name.c_str(), (long long)r.ops, r.eager_us,
                r.hotpath_us, (r.hotpath_us - r.eager_us) / r.ops);
    if (r.host.ops > 0) std::printf(" %12.3f %12.3f", r.hotpath_us / r.ops, r.host.hook);
    std::printf("\n");
  }
  for (const auto& r : results) {
    if (r.host.ops > 0)
      std::printf(
          "%s: %s; the host %.3f us an op in the profiled blocks, %.3f without the profile\n",
          r.name.c_str(), bench::host_share_text(r.host).c_str(), r.profiled_us / r.ops,
          r.hotpath_us / r.ops);
  }
  if (synced) {
    const SyncedSplit& y = *synced;
    std::printf(
        "\nMLP+AdamW step (1024-4096-1024, batch 256) with loss.item() after the forward pass, "
        "medians in us:\n"
        "  plain eager: step %.1f = host %.1f + waiting in item() %.1f\n"
        "  replayed:    step %.1f = host %.1f + waiting in item() %.1f  (%.2fx; %lld of %lld steps "
        "replayed)\n  replayed, with the host profile (blocks of their own, step %.1f): %s\n"
        "  replayed, no fast lane: step %.1f = host %.1f + waiting in item() %.1f  (%.2fx; %lld "
        "of %lld steps replayed)\n  replayed, no fast lane, with the host profile (blocks of their "
        "own, step %.1f): %s\n"
        "  without item(), a step (a block over its steps): plain eager %.1f, replayed %.1f; its "
        "five matrix products alone %.1f (%lld of %lld steps replayed)\n",
        y.eager_step, y.eager_step - y.eager_wait, y.eager_wait, y.replay_step,
        y.replay_step - y.replay_wait, y.replay_wait, y.eager_step / y.replay_step,
        static_cast<long long>(y.replayed), static_cast<long long>(y.steps), y.profiled_step,
        bench::host_share_text(y.host).c_str(), y.recorded_step, y.recorded_step - y.recorded_wait,
        y.recorded_wait, y.eager_step / y.recorded_step,
        static_cast<long long>(y.replayed_recorded), static_cast<long long>(y.steps),
        y.recorded_profiled_step, bench::host_share_text(y.host_recorded).c_str(), y.eager_free,
        y.replay_free, y.products, static_cast<long long>(y.replayed_free),
        static_cast<long long>(y.steps));
  }
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "device,workload,ops_per_iteration,eager_us_median,hotpath_us_median,overhead_us_per_op,"
         "hook_us_per_op,below_us_per_op\n";
    for (const auto& r : results) {
      f << device << ",\"" << r.name << "\"," << r.ops << "," << r.eager_us << "," << r.hotpath_us
        << "," << (r.hotpath_us - r.eager_us) / r.ops << ",";
      if (r.host.ops > 0)
        f << r.host.hook << "," << r.host.below << "\n";
      else
        f << ",\n";
    }
  }
  return 0;
}
