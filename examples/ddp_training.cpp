// Data-parallel training through LibTorch's c10d, one process per rank, as torchrun launches
// them (examples/ddp_launch.sh does it on one machine): every rank builds the same model from
// the same seed, trains on its own shard of the batches, all-reduces its gradients in buckets
// after backward (NCCL on GPUs, gloo on the CPU or where ranks share a GPU) and takes the same
// AdamW step. The only hotpath line is the enable call, on every rank; collectives are ops hotpath
// runs where the loop puts them, in the loop's order, whatever its plans do.
//
//   ddp_training [--model mlp|lm] [--steps N] [--batch B] [--dim D] [--hidden H] [--layers L]
//                [--context T] [--threshold T] [--cpu] [--backend nccl|gloo] [--bucket-mib M]
//                [--cross-check N] [--verify] [--diverge-step K] [--timeout-s S]
//
// By default each rank trains N steps under hotpath, cross-checks against plain eager data
// parallel (blocks of 10 steps under hotpath::Pause on every rank at once, alternating with
// blocks under hotpath), prints its own statistics and verdicts, and rank 0 prints a table of
// every rank's. --verify instead trains eager data-parallel, then hotpath data-parallel from the
// same start, and on rank 0 the same steps in one process (every rank's batch, gradients
// averaged) and that again with its outputs perturbed by 1e-7 (the noise floor), and checks the
// parameters at steps 5, 10, 20, ... and the last: equal between ranks, and hotpath's and eager's
// equal to the one-process training, each within 10x the floor measured up to it (the runs'
// parameters at every checkpoint are kept in host memory: rank 0 holds three copies per
// checkpoint, about 6 GB for the 12-layer LM over 120 steps). --diverge-step K makes the last
// rank compute a gradient norm at
// step K that the others do not (its plan's guard fails there): the ranks must still agree.
#include <hotpath/hotpath.h>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "crash_backtrace.h"
#include "ddp_support.h"
#include "example_support.h"
#include "models/transformer_lm.h"

namespace {

using hotpath_examples::Rendezvous;

struct Options {
  std::string model = "mlp", backend;
  int steps = 200, threshold = 10, cross = 100, bucket_mib = 25, diverge_step = 0;
  int timeout_s = 300;
  std::int64_t batch = -1, dim = -1, hidden = -1, layers = -1, context = -1;
  bool cpu = false, verify = false;
};

// Each rank's batches: a few per rank, made from a seed of (rank, k) so that any process can
// make any rank's (the one-process reference needs them all); step s uses batch s % kPool.
constexpr int kPool = 8;
struct Data {
  Options o;
  torch::Device device;
  hotpath_examples::LmConfig lm;
  std::map<std::pair<int, int>, std::pair<torch::Tensor, torch::Tensor>> made;
  const std::pair<torch::Tensor, torch::Tensor>& get(int step, int rank) {
    const auto key = std::make_pair(rank, step % kPool);
    auto it = made.find(key);
    if (it != made.end()) return it->second;
    auto g = at::detail::createCPUGenerator(0x0dd9 + 1000003ULL * rank + key.second);
    torch::Tensor x, y;
    if (o.model == "mlp") {
      x = torch::randn({o.batch, o.dim}, torch::Generator(g));
      y = torch::randn({o.batch, o.dim}, torch::Generator(g));
    } else {
      auto t = torch::randint(lm.vocab, {o.batch, lm.context + 1}, torch::Generator(g));
      x = t.slice(1, 0, lm.context);
      y = t.slice(1, 1, lm.context + 1);
    }
    return made.emplace(key, std::make_pair(x.to(device), y.to(device))).first->second;
  }
};

// A model and its optimizer, built from the same seed on every rank. `perturb` (the noise
// floor's run) multiplies the model's outputs by 1 + 1e-7 x noise, new noise every step.
struct Job {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::vector<torch::Tensor> params;
  bool perturb = false;

  torch::Tensor loss(Data& data, int step, int rank) {
    const auto& [x, y] = data.get(step, rank);
    torch::Tensor out = forward(x);
    if (perturb) {
      auto g = at::detail::createCPUGenerator(0x5eed + 7919ULL * step + rank);
      out = out * (1 + 1e-7 * torch::randn(out.sizes(), torch::Generator(g))).to(out.device());
    }
    if (data.o.model == "mlp") return torch::mse_loss(out, y);
    return torch::nn::functional::cross_entropy(out.view({-1, out.size(-1)}), y.reshape({-1}));
  }
};

Job make_job(const Options& o, const Data& data, bool perturb = false) {
  torch::manual_seed(0);  // the same parameters on every rank
  Job j;
  if (o.model == "mlp") {
    torch::nn::Sequential m(torch::nn::Linear(o.dim, o.hidden), torch::nn::GELU(),
                            torch::nn::Linear(o.hidden, o.dim));
    m->to(data.device);
    j.module = m.ptr();
    j.forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
  } else {
    hotpath_examples::TransformerLm m(data.lm);
    m->to(data.device);
    j.module = m.ptr();
    j.forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
  }
  j.params = j.module->parameters();
  j.opt = std::make_unique<torch::optim::AdamW>(
      j.params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  j.perturb = perturb;
  return j;
}

// One data-parallel step on this rank. At --diverge-step the last rank also computes (and
// prints) its local gradient norm: ops the other ranks do not run.
torch::Tensor dp_step(Job& j, Data& data, int step, const Rendezvous& r, c10d::ProcessGroup& pg,
                      hotpath_examples::GradBuckets& buckets, const Options& o) {
  j.opt->zero_grad();
  torch::Tensor loss = j.loss(data, step, r.rank);
  loss.backward();
  if (o.diverge_step > 0 && step == o.diverge_step && r.rank == r.world - 1) {
    torch::NoGradGuard no_grad;
    double sq = 0;
    for (const auto& p : j.params) sq += p.grad().pow(2).sum().item<double>();
    std::printf("[rank %d] step %d: local gradient norm %.6f (this rank only)\n", r.rank, step,
                std::sqrt(sq));
  }
  buckets.allreduce(pg);
  j.opt->step();
  return loss;
}

// The same steps in one process: every rank's batch, gradients summed and averaged.
void reference_step(Job& j, Data& data, int step, int world) {
  j.opt->zero_grad();
  for (int rk = 0; rk < world; ++rk) j.loss(data, step, rk).backward();
  torch::NoGradGuard no_grad;
  for (auto& p : j.params) p.grad().div_(static_cast<double>(world));
  j.opt->step();
}

// The largest of every rank's `x`. Collectives take tensors on the job's device (NCCL has no
// CPU tensors).
double max_over_ranks(c10d::ProcessGroup& pg, const torch::Device& dev, double x) {
  std::vector<at::Tensor> t{torch::tensor({x}, torch::kDouble).to(dev)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  pg.allreduce(t, opts)->wait();
  return t[0].item<double>();
}

// Rows of every rank's numbers, on rank 0 (each rank fills its row; the sum is the table).
torch::Tensor gather_rows(c10d::ProcessGroup& pg, const torch::Device& dev,
                          const std::vector<double>& mine) {
  const auto n = static_cast<std::int64_t>(mine.size());
  std::vector<at::Tensor> t{torch::zeros({pg.getSize(), n}, torch::kDouble)};
  t[0][pg.getRank()].copy_(torch::tensor(mine, torch::kDouble));
  t[0] = t[0].to(dev);
  pg.allreduce(t)->wait();
  return t[0].cpu();
}

// What hotpath did on this rank, summed over its signatures; `collectives`: the c10d ops in a hot
// iteration, as hotpath recorded it.
struct FusionTotals {
  std::int64_t groups = 0, fused = 0, divergences = 0, collectives = 0;
  explicit FusionTotals(const hotpath::Stats& st) {
    for (const auto& sig : st.signatures) {
      groups += static_cast<std::int64_t>(sig.fusion.groups.size());
      fused += sig.fusion.fused_iterations;
      divergences += sig.fusion.divergences;
      if (!sig.hot) continue;
      collectives = std::max<std::int64_t>(
          collectives,
          std::count_if(sig.op_names.begin(), sig.op_names.end(),
                        [](const std::string& n) { return n.rfind("c10d::", 0) == 0; }));
    }
  }
};

hotpath::Config hotpath_config(const Options& o, bool cuda) {
  hotpath::Config c;
  c.threshold = o.threshold;
  c.fuse_cpu = !cuda;  // on the CPU, plans run their groups through ATen: the path is exercised
  return c;
}

// The steps at which verify compares parameters: 5, 10, 20, 40, ... and the last. A chaotic
// loop (a deep model at a high learning rate) amplifies any rounding difference until the final
// floor is large; each checkpoint is judged against the floor measured up to it, so the early
// ones, soon after hotpath's plan takes over, are judged against a small one.
std::vector<int> checkpoints(int steps) {
  std::vector<int> at;
  for (int s = 5; s < steps; s *= 2) at.push_back(s);
  at.push_back(steps);
  return at;
}

// Trains `j` for o.steps data-parallel steps, keeping its parameters (on the CPU) at each
// checkpoint. Taken under a Pause: the copies are no step's ops.
std::vector<torch::Tensor> train_dp(Job& j, Data& data, const Rendezvous& r, c10d::ProcessGroup& pg,
                                    const Options& o) {
  hotpath_examples::GradBuckets buckets(j.params, static_cast<std::int64_t>(o.bucket_mib) << 20);
  const std::vector<int> at = checkpoints(o.steps);
  std::vector<torch::Tensor> kept;
  for (int s = 1; s <= o.steps; ++s) {
    dp_step(j, data, s, r, pg, buckets, o);
    if (std::find(at.begin(), at.end(), s) == at.end()) continue;
    hotpath::Pause pause;
    kept.push_back(hotpath_examples::flat_parameters(j.params));
  }
  return kept;
}

int verify(const Options& o, Data& data, const Rendezvous& r, c10d::ProcessGroup& pg, bool cuda) {
  const std::vector<int> at = checkpoints(o.steps);
  const std::size_t n = at.size();
  Job eager = make_job(o, data);
  const std::vector<torch::Tensor> p_eager = train_dp(eager, data, r, pg, o);

  hotpath::Config c = hotpath_config(o, cuda);
  c.remember = false;  // judged on its own
  hotpath::enable_hot_path_detection(c);
  Job hot = make_job(o, data);
  const std::vector<torch::Tensor> p_hot = train_dp(hot, data, r, pg, o);
  hotpath::disable_hot_path_detection();
  const hotpath::Stats st = hotpath::stats();
  const FusionTotals t(st);

  // Per checkpoint, the largest over ranks of: hotpath's parameters against rank 0's, and
  // against eager data-parallel's on the same rank.
  const torch::Device dev = data.device;
  std::vector<double> between_ranks(n), hot_eager(n);
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<at::Tensor> root{p_hot[k].to(dev, /*non_blocking=*/false, /*copy=*/true)};
    pg.broadcast(root)->wait();
    between_ranks[k] =
        max_over_ranks(pg, dev, hotpath_examples::relative_distance(p_hot[k], root[0].cpu()));
    hot_eager[k] =
        max_over_ranks(pg, dev, hotpath_examples::relative_distance(p_hot[k], p_eager[k]));
  }
  const torch::Tensor rows =
      gather_rows(pg, dev,
                  {static_cast<double>(st.hot_signatures()), static_cast<double>(t.fused),
                   static_cast<double>(t.divergences), static_cast<double>(t.collectives)});

  // Rank 0 trains the one-process reference and its perturbed twin; the others wait for the
  // verdict, so that every rank exits with the same status.
  std::vector<at::Tensor> verdict{
      torch::zeros({1}, torch::TensorOptions(torch::kDouble).device(dev))};
  if (r.rank == 0) {
    Job ref = make_job(o, data), twin = make_job(o, data, true);
    std::vector<double> floor;  // the largest twin-to-reference distance up to each checkpoint
    std::vector<torch::Tensor> p_ref;
    for (int s = 1; s <= o.steps; ++s) {
      reference_step(ref, data, s, r.world);
      reference_step(twin, data, s, r.world);
      if (std::find(at.begin(), at.end(), s) == at.end()) continue;
      p_ref.push_back(hotpath_examples::flat_parameters(ref.params));
      const double d = hotpath_examples::relative_distance(
          hotpath_examples::flat_parameters(twin.params), p_ref.back());
      floor.push_back(std::max(d, floor.empty() ? 0.0 : floor.back()));
    }
    std::printf(
        "ddp verify: %d ranks, %d steps of %s; parameters compared at %zu checkpoint(s), each "
        "within 10x the noise floor up to it (one process, outputs perturbed by 1e-7)\n",
        r.world, o.steps, o.model.c_str(), n);
    std::printf("  (relative L2 distances of all parameters; 1p: the same steps in one process)\n");
    for (int rk = 0; rk < r.world; ++rk) {
      std::printf(
          "  rank %d: %.0f signature(s) hot, %.0f fused iteration(s), %.0f divergence(s), %.0f "
          "collective(s) in the hot iteration\n",
          rk, rows[rk][0].item<double>(), rows[rk][1].item<double>(), rows[rk][2].item<double>(),
          rows[rk][3].item<double>());
    }
    std::printf("  %5s %10s %10s %12s %12s %12s %12s\n", "step", "floor", "tolerance",
                "ranks apart", "hot vs eager", "eager vs 1p", "hot vs 1p");
    bool ok = true;
    double worst = 0;  // the largest deviation over its tolerance
    for (std::size_t k = 0; k < n; ++k) {
      const double tol = 10 * floor[k] + 8 * FLT_EPSILON;
      const double d[4] = {between_ranks[k], hot_eager[k],
                           hotpath_examples::relative_distance(p_eager[k], p_ref[k]),
                           hotpath_examples::relative_distance(p_hot[k], p_ref[k])};
      bool pass = true;
      for (double x : d) {
        pass = pass && x <= tol;
        worst = std::max(worst, x / tol);
      }
      ok = ok && pass;
      std::printf("  %5d %10.3g %10.3g %12.3g %12.3g %12.3g %12.3g  %s\n", at[k], floor[k], tol,
                  d[0], d[1], d[2], d[3], pass ? "ok" : "OUTSIDE the tolerance");
    }
    std::printf("ddp verify: %s (largest deviation %.2f of its tolerance)\n", ok ? "PASS" : "FAIL",
                worst);
    verdict[0].fill_(ok ? 1.0 : 0.0);
  }
  pg.broadcast(verdict)->wait();
  return verdict[0].item<double>() > 0 ? 0 : 1;
}

int train(const Options& o, Data& data, const Rendezvous& r, c10d::ProcessGroup& pg, bool cuda) {
  Job j = make_job(o, data);
  hotpath_examples::GradBuckets buckets(j.params, static_cast<std::int64_t>(o.bucket_mib) << 20);
  if (r.rank == 0)
    std::printf("ddp_training: %zu parameter tensor(s) in %zu gradient bucket(s)\n",
                j.params.size(), buckets.size());
  hotpath::enable_hot_path_detection(hotpath_config(o, cuda));  // the only hotpath line
  int step = 0;
  auto one = [&] { return dp_step(j, data, ++step, r, pg, buckets, o); };
  hotpath_examples::LockWatch watch;
  for (int i = 1; i <= o.steps; ++i) {
    const torch::Tensor loss = one();
    watch.after_step(i);
    if (r.rank == 0 && (i == 1 || i % std::max(1, o.steps / 4) == 0))
      std::printf("step %4d  loss (rank 0's batch) %.5f\n", i, loss.item<double>());
  }
  double ratio = 0, eager_ms = 0, hot_ms = 0;
  if (o.cross > 0) {
    // The governor settles on each rank in its own time; every rank goes on until all have
    // (decided together, under a Pause: the vote is no step's), so that all run the same steps.
    hotpath::wait_for_compilation();
    for (int k = 0; k < 2 * o.cross; k += 10) {
      {
        hotpath::Pause pause;
        if (max_over_ranks(pg, data.device, hotpath_examples::unjudged_plans()) == 0) break;
      }
      for (int s = 0; s < 10; ++s) one();
    }
    std::vector<double> plain, hot;
    for (int done = 0; done < o.cross; done += 10) {
      {
        hotpath::Pause pause;
        plain.push_back(hotpath_examples::time_steps_ms(cuda, 10, [&] { one(); }));
      }
      hot.push_back(hotpath_examples::time_steps_ms(cuda, 10, [&] { one(); }));
    }
    eager_ms = hotpath_examples::median(plain);
    hot_ms = hotpath_examples::median(hot);
    ratio = eager_ms / hot_ms;
  }
  hotpath::disable_hot_path_detection();
  const hotpath::Stats st = hotpath::stats();
  const FusionTotals t(st);
  std::ostringstream mine;  // one write per rank: the ranks' reports do not interleave
  mine << "[rank " << r.rank << "] " << hotpath::format_stats(st) << "\n"
       << hotpath::format_report(hotpath::report());
  std::printf("%s", mine.str().c_str());
  std::fflush(stdout);
  const torch::Tensor rows =
      gather_rows(pg, data.device,
                  {eager_ms, hot_ms, ratio, static_cast<double>(st.hot_signatures()),
                   static_cast<double>(t.groups), static_cast<double>(t.fused),
                   static_cast<double>(t.divergences), static_cast<double>(st.stood_aside)});
  if (r.rank == 0) {
    std::printf(
        "\nrank  eager DP ms  hotpath ms  speedup  hot  groups  fused iters  divergences  "
        "stood aside\n");
    for (int rk = 0; rk < r.world; ++rk) {
      auto v = [&](int c) { return rows[rk][c].item<double>(); };
      std::printf("%4d  %11.3f  %10.3f  %6.2fx  %3.0f  %6.0f  %11.0f  %11.0f  %11.0f\n", rk, v(0),
                  v(1), v(2), v(3), v(4), v(5), v(6), v(7));
    }
    std::printf(
        "ddp summary: %d rank(s), %s, %d steps, step known after %d steps, cross-check %.2fx "
        "(rank 0; eager data-parallel %.3f ms per step, hotpath %.3f ms)\n",
        r.world, o.backend.c_str(), o.steps, watch.known_after, ratio, eager_ms, hot_ms);
  }
  return st.hot_signatures() > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  hotpath_tools::install_crash_backtrace();
  Options o;
  hotpath_examples::Args("ddp_training",
                         "[--model mlp|lm] [--steps N] [--batch B] [--dim D] [--hidden H] "
                         "[--layers L] [--context T] [--threshold T] [--cpu] [--backend nccl|gloo] "
                         "[--bucket-mib M] [--cross-check N] [--verify] [--diverge-step K] "
                         "[--timeout-s S]   (rank and world from RANK, WORLD_SIZE, MASTER_ADDR, "
                         "MASTER_PORT, LOCAL_RANK: see examples/ddp_launch.sh)")
      .add("--model", o.model)
      .add("--steps", o.steps)
      .add("--batch", o.batch)
      .add("--dim", o.dim)
      .add("--hidden", o.hidden)
      .add("--layers", o.layers)
      .add("--context", o.context)
      .add("--threshold", o.threshold)
      .add("--cpu", o.cpu)
      .add("--backend", o.backend)
      .add("--bucket-mib", o.bucket_mib)
      .add("--cross-check", o.cross)
      .add("--verify", o.verify)
      .add("--diverge-step", o.diverge_step)
      .add("--timeout-s", o.timeout_s)
      .parse(argc, argv);
  if (o.model != "mlp" && o.model != "lm")
    hotpath_examples::ddp_fail("--model is mlp or lm, got '" + o.model + "'");
  if (o.steps < 1 || o.threshold < 1 || o.bucket_mib < 1 || o.timeout_s < 1)
    hotpath_examples::ddp_fail("--steps, --threshold, --bucket-mib and --timeout-s must be >= 1");
  const Rendezvous r = hotpath_examples::rendezvous_from_env();
  const bool cuda = !o.cpu && torch::cuda::is_available();
  torch::Device device(torch::kCPU);
  if (cuda) {
    const int gpus = static_cast<int>(torch::cuda::device_count());
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r.local_rank % gpus));
    if (o.backend.empty()) o.backend = r.local_rank < gpus ? "nccl" : "gloo";
    if (o.backend == "nccl" && r.local_rank >= gpus)
      hotpath_examples::ddp_fail("NCCL needs a GPU per rank: local rank " +
                                 std::to_string(r.local_rank) + ", " + std::to_string(gpus) +
                                 " GPU(s); ranks that share a GPU need --backend gloo");
  } else if (o.backend.empty()) {
    o.backend = "gloo";
  }
  if (o.backend != "gloo" && o.backend != "nccl")
    hotpath_examples::ddp_fail("--backend is nccl or gloo, got '" + o.backend + "'");
  if (o.backend == "nccl" && !cuda)
    hotpath_examples::ddp_fail("--backend nccl needs CUDA tensors (drop --cpu, or use gloo)");
  const std::int64_t scale = cuda ? 1 : 4;
  auto pick = [](std::int64_t v, std::int64_t d) { return v > 0 ? v : d; };
  o.batch = pick(o.batch, o.model == "mlp" ? 256 / scale : 4);
  o.dim = pick(o.dim, o.model == "mlp" ? 1024 / scale : (cuda ? 768 : 64));
  o.hidden = pick(o.hidden, o.model == "mlp" ? 4096 / scale : (cuda ? 3072 : 256));
  Data data{o, device, {}, {}};
  if (o.model == "lm") {
    const std::int64_t heads = o.dim >= 128 ? o.dim / 64 : 4;  // 64 wide, as GPT-2's
    if (o.dim % heads != 0)
      hotpath_examples::ddp_fail("--dim " + std::to_string(o.dim) + " is not a multiple of " +
                                 std::to_string(heads) + " heads of 64");
    data.lm = {cuda ? 10000 : 512,
               o.dim,
               pick(o.layers, cuda ? 12 : 2),
               heads,
               o.hidden,
               pick(o.context, cuda ? 256 : 64)};
  }
  if (r.rank == 0) {
    std::printf(
        "ddp_training: %d rank(s), backend %s, %s, model %s, batch %lld per rank, %d steps\n",
        r.world, o.backend.c_str(), cuda ? "CUDA" : "CPU", o.model.c_str(),
        static_cast<long long>(o.batch), o.steps);
    std::fflush(stdout);
  }
  if (cuda) c10::cuda::set_device(device.index());  // before NCCL sets up its communicator
  auto pg =
      hotpath_examples::make_process_group(r, o.backend, device, std::chrono::seconds(o.timeout_s));
  const int rc = o.verify ? verify(o, data, r, *pg, cuda) : train(o, data, r, *pg, cuda);
  pg->shutdown();
  return rc;
}
