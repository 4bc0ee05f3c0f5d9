// The differential harness: whole training loops, eager and hotpath side by side in one process,
// judged against a noise floor measured in the same run.
//
// For each model x variant x dtype x optimizer, four identical trainers take the same batches in
// lockstep: eager, eager again (where eager itself is not deterministic, cuDNN's backward), eager
// with its logits multiplied by (1 + u N(0,1)) every step, and the hotpath one. u is the unit
// roundoff of the precision the model computes in: 1e-7 for fp32, 2^-9 under bf16 autocast (a
// 1e-7 change of fp32 logits vanishes in bf16 matmuls, and the measured floor would be zero). The
// first three run under hotpath::Pause; the hotpath trainer's loop, its batches' preparation
// included, is intercepted as a user's would be (its iterations found at its forward passes unless
// --explicit-steps). Every step compares losses
// and the whole model state (parameters and buffers, relative L2) with eager's; hotpath passes
// when at every step its deviation is within --factor (10) times the largest deviation the two
// eager references have shown up to that step, or within the resolution of what is compared
// (the loss: 8 fp32 ulps, 1e-6 relative, as one reduction summed in another order differs;
// the state: 1e-7). Random number generators are reset to the same
// state before each trainer's step, so dropout draws the same masks for all four.
//
//   train_diff [--device cpu|cuda] [--models gpt,mlp,convnet,lstm,mnist,dcgan,lm] [--variants
//   plain,...|all]
//              [--optimizers adamw,sgd] [--dtypes fp32,bf16] [--steps N] [--threshold N]
//              [--verify] [--explicit-steps] [--exact] [--compile-kernels] [--small]
//              [--csv FILE] [--trace FILE] [--cache DIR] [--factor F] [--handover STEP]
//              [--resync] [--remember] [--help]
//
// --resync starts every step of eager again, perturbed eager and hotpath from eager's state before
// that step (parameters, buffers and the optimizers' buffers, copied under hotpath::Pause): each
// step's deviation is then that step's own, not a sum over the steps before it, and the state's
// deviation is read against the size of the step's update (relative L2 of the difference to
// eager's update). In a model whose training branches (one rounding sends a run another way for
// good, a choice such as a max-pool's, we think; on a GPU eager run twice branches apart too,
// cuDNN's backward being nondeterministic), hotpath can take a branch no reference has taken by
// that step. So a run that fails is run again so; where every step of that is within its own
// noise floor and hotpath's deviation over the first run stays within the factor of the largest
// the references showed in it, the result reads "chaotic" (a pass, counted apart), not FAIL.
//
// --handover STEP holds the plans' compiled kernels back (compile/kernel_gate.h) and, from step
// STEP on, lets one more group take its kernel after each step: the plans run on stand-ins (the
// interpreter, eager ops), then on a mix of kernels and stand-ins, as a cold start's do while
// NVRTC compiles, in an order and at steps that are the same in every run.
//
// --remember (with --cache DIR) keeps verdicts, and the traces GPU plans were built from, in DIR,
// as a user's runs do (Config::remember): a second train_diff on the same DIR starts each model's
// plans as known winners (hot at first sight, a GPU plan built at enable from the kept trace and
// taken when the loop's trace agrees, Config::prepare_known; replay captured after
// kReplayAfterKnown iterations where it ran) and each run says how many it found. The harness's
// loop holds a Pause in every iteration (the references' steps), so the governor times none and
// judges none: the harness writes each hot signature's verdict itself where none is kept yet
// (compile, every group kept, replay kept where it replayed), as a governor that kept the plan
// would. Without --remember every run is judged on its own.
//
// Exit status: 0 when every run passes, 1 when one does not, 2 for a bad argument.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "compile/kernel_gate.h"
#include "compile/nvrtc.h"
#include "hotpath/hotpath.h"
#include "judge.h"
#include "models.h"
#include "policy/decisions.h"
#include "session/session.h"
#include "tests/cli_checks.h"

namespace {

using hotpath_diff::Batch;
using hotpath_diff::Setup;
using hotpath_diff::Trainer;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "train_diff: %s\n(see the comment at the top of tests/diff/train_diff.cpp)\n",
               why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Options {
  torch::Device device = torch::kCPU;
  std::vector<std::string> models{"gpt", "mlp", "convnet", "lstm", "mnist", "dcgan", "lm"};
  std::vector<std::string> variants;  // empty: all for gpt, plain for the rest
  std::vector<std::string> optimizers{"adamw", "sgd"};
  std::vector<std::string> dtypes;
  int steps = 120, threshold = 10;
  int handover = -1;  // --handover: the step after which kernels start to come in
  bool verify = false, explicit_steps = false, exact = false, compile_kernels = false,
       small = false, resync = false, remember = false;
  double factor = 10.0;
  std::string csv, trace, cache;
};

// The random state every trainer's step starts from (dropout): the CPU's generator and, on a
// GPU, the device's.
struct RngState {
  std::vector<std::pair<at::Generator, torch::Tensor>> states;
  static RngState save(const torch::Device& d) {
    RngState s;
    std::vector<at::Generator> gens{at::globalContext().defaultGenerator(c10::Device(c10::kCPU))};
    if (d.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(d));
    for (auto& g : gens) {
      std::lock_guard<std::mutex> lock(g.mutex());
      s.states.emplace_back(g, g.get_state());
    }
    return s;
  }
  void restore() const {
    for (const auto& [g, state] : states) {
      at::Generator gen = g;
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  }
};

// Relative L2 distance of two model states (all tensors together), and of two losses. With
// `from` (the state both started the step from: --resync), relative to the step's update
// (ref - from) instead of to ref.
double state_distance(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& ref,
                      const std::vector<torch::Tensor>& from = {}) {
  auto num = torch::zeros({}, torch::TensorOptions(ref.at(0).device()).dtype(torch::kDouble));
  auto den = num.clone();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const auto r = ref[i].detach().to(torch::kDouble);
    num += (a.at(i).detach().to(torch::kDouble) - r).pow(2).sum();
    den += (from.empty() ? r : r - from.at(i).detach().to(torch::kDouble)).pow(2).sum();
  }
  const double n = num.item<double>(), d = den.item<double>();
  return d > 0 ? std::sqrt(n / d) : std::sqrt(n);
}

double loss_distance(double a, double ref) {
  if (std::isnan(a) != std::isnan(ref)) return INFINITY;
  if (std::isnan(a)) return 0;
  return std::abs(a - ref) / std::max(std::abs(ref), 1e-12);
}

// --resync: `t` set to `from` (a copy of eager's full_state() before the step), in place (the
// trainer's tensors keep their addresses, as a loop's do). Lists that do not line up tensor for
// tensor (count, shape, dtype) are refused: copy_ would broadcast one into another.
void load_state(hotpath_diff::Trainer& t, const std::vector<torch::Tensor>& from) {
  const std::vector<torch::Tensor> to = t.full_state();
  if (to.size() != from.size())
    throw std::runtime_error("--resync: a trainer's state has " + std::to_string(to.size()) +
                             " tensors where eager's has " + std::to_string(from.size()));
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < to.size(); ++k) {
    if (to[k].sizes() != from[k].sizes() || to[k].scalar_type() != from[k].scalar_type())
      throw std::runtime_error("--resync: state tensor " + std::to_string(k) +
                               " differs in shape or dtype from eager's");
    to[k].copy_(from[k]);
  }
}

struct Result {
  Setup setup;
  hotpath_diff::StepJudge judge;  // the deviations and their tolerances, step by step
  std::int64_t fused_iterations = 0, replayed = 0, groups = 0, divergences = 0, verify_failures = 0,
               hot_signatures = 0, iterations = 0;
  // --remember: signatures an earlier run's verdict named, and GPU plans built before they were
  // seen (from the trace it kept) and taken.
  std::int64_t known_winners = 0, known_losers = 0, prepared = 0;
  int kernels_compiled = 0;
  std::string first_failure;
  bool pass = true;  // the judge's, and no launch beyond verify's tolerance
  hotpath_diff::Verdict verdict = hotpath_diff::Verdict::Pass;
  double resync_worst = -1;  // the resynced run's worst ratio, where one ran after a failure
  bool resync_pass = false;
  double seconds = 0;
};

std::string dtype_name(const Setup& s) { return s.bf16 ? "bf16" : "fp32"; }

const char* result_text(const Result& r) {
  return r.verdict == hotpath_diff::Verdict::Pass      ? "pass"
         : r.verdict == hotpath_diff::Verdict::Chaotic ? "chaotic"
                                                       : "FAIL";
}

// Compiles every kernel the run's plans generated with NVRTC (for sm_90): on a machine without a
// GPU this is the check that the code generator's output for these models is valid CUDA.
int compile_plans(const hotpath::Stats& st, std::set<std::string>& compiled_sources) {
  auto session = hotpath::detail::thread_session();
  if (!session) return 0;
  int n = 0;
  for (const auto& sig : st.signatures) {
    const auto plan = session->executor.plan(sig.id);
    if (!plan || !plan->graph) continue;
    for (const auto& grp : plan->partition.groups) {
      const auto spec = hotpath::detail::generate_kernel(*plan->graph, grp);
      if (!compiled_sources.insert(spec.source).second) continue;
      hotpath::detail::nvrtc_compile(spec.source, spec.name, 90, hotpath::detail::runtime_headers(),
                                     "");
      ++n;
    }
  }
  return n;
}

// --remember: a "compile" verdict for each hot signature that ran fused and has none in `dir` yet
// (the harness's loop is never judged: see the comment at the top).
void keep_verdicts(const hotpath::Stats& st, const std::string& dir) {
  const hotpath::detail::DecisionStore store(dir);
  for (const auto& sig : st.signatures) {
    if (!sig.hot || sig.fusion.fused_iterations == 0 || store.load(sig.id)) continue;
    hotpath::detail::Decision d;
    d.compile = true;
    d.replay_kept = sig.fusion.replayed_iterations > 0;  // no groups listed: every one kept
    d.reason = "kept by train_diff --remember";
    store.save(sig.id, d);
  }
}

Result run(const Setup& s, const Options& o, std::ofstream* trace,
           std::set<std::string>& compiled_sources, bool resync) {
  const auto t0 = std::chrono::steady_clock::now();
  Result r;
  r.setup = s;
  auto eager = hotpath_diff::make_trainer(s);
  auto eager2 = hotpath_diff::make_trainer(s);
  auto perturbed = hotpath_diff::make_trainer(s);
  auto hot = hotpath_diff::make_trainer(s);

  hotpath::Config c;
  c.threshold = o.threshold;
  c.fuse_cpu = !s.device.is_cuda();
  c.verify = o.verify;
  c.remember = o.remember;  // else every run is judged on its own
  c.log_level = hotpath::LogLevel::Warn;
  if (!o.cache.empty()) c.cache_dir = o.cache;
  hotpath::disable_hot_path_detection();
  hotpath::detail::HeldKernels hold(o.handover >= 0);  // --handover
  hotpath::enable_hot_path_detection(c);

  hotpath_diff::StepJudge& judge = r.judge;
  judge.factor = o.factor;
  judge.exact = o.exact;
  const double u = s.bf16 ? 1.0 / 512 : 1e-7;
  for (int i = 0; i < s.steps; ++i) {
    Batch b;
    torch::Tensor perturb;
    double le = 0, le2 = 0, lp = 0;
    const RngState rng = RngState::save(s.device);
    std::vector<torch::Tensor> from;  // --resync: eager's full state before this step
    {
      hotpath::Pause pause;
      if (resync) {
        for (const auto& t : eager->full_state()) from.push_back(t.detach().clone());
      }
      b = eager->batch(i);
      le = eager->step(i, b, {}).item<double>();
      rng.restore();
      if (resync) load_state(*eager2, from);
      le2 = eager2->step(i, b, {}).item<double>();
      auto g = at::detail::createCPUGenerator(0x5eed + static_cast<std::uint64_t>(i));
      perturb =
          (1 + u * torch::randn(perturbed->output_shape(b), torch::Generator(g))).to(s.device);
      rng.restore();
      if (resync) load_state(*perturbed, from);
      lp = perturbed->step(i, b, perturb).item<double>();
      rng.restore();
      if (resync) load_state(*hot, from);
    }
    // The hotpath trainer prepares its own batch, in its intercepted stream, as a loop does.
    torch::Tensor lh_t = hot->step(i, hot->batch(i), {});
    if (o.explicit_steps) hotpath::step();
    hotpath::Pause pause;
    const double lh = lh_t.item<double>();
    if (hold.on() && i >= o.handover) hotpath::detail::release_held_kernels(1);
    const auto ref = eager->state();
    // --resync: against the step's update (the first ref.size() tensors of `from` are state()).
    if (resync) from.resize(ref.size());
    const double d_loss_e2 = loss_distance(le2, le), d_loss_p = loss_distance(lp, le);
    const double d_state_e2 = state_distance(eager2->state(), ref, from);
    const double d_state_p = state_distance(perturbed->state(), ref, from);
    const double d_loss_h = loss_distance(lh, le);
    const double d_state_h = state_distance(hot->state(), ref, from);
    judge.step(i, std::max(d_loss_e2, d_loss_p), std::max(d_state_e2, d_state_p), d_loss_h,
               d_state_h);
    if (trace) {
      *trace << s.model << "," << hotpath_diff::variant_names()[static_cast<int>(s.variant)] << ","
             << dtype_name(s) << "," << s.optimizer << "," << i << "," << le << "," << lh << ","
             << d_loss_p << "," << d_loss_e2 << "," << d_loss_h << "," << d_state_p << ","
             << d_state_e2 << "," << d_state_h << "," << (resync ? "resync" : "free") << "\n";
    }
  }
  r.pass = judge.pass;
  const hotpath::Stats st = hotpath::stats();
  r.iterations = st.iterations;
  r.hot_signatures = st.hot_signatures();
  for (const auto& sig : st.signatures) {
    r.fused_iterations += sig.fusion.fused_iterations;
    r.groups += static_cast<std::int64_t>(sig.fusion.groups.size());
    r.divergences += sig.fusion.divergences;
    r.replayed += sig.fusion.replayed_iterations;
    const std::string& known = sig.fusion.remembered;
    if (known.rfind("known winner", 0) == 0) ++r.known_winners;
    if (known.rfind("known loser", 0) == 0) ++r.known_losers;
    if (sig.fusion.prepared) ++r.prepared;
    for (const auto& g : sig.fusion.groups) {
      r.verify_failures += g.verify_failures;
      if (r.first_failure.empty() && !g.first_failure.empty()) r.first_failure = g.first_failure;
    }
  }
  if (r.verify_failures > 0) r.pass = false;
  if (o.remember) keep_verdicts(st, o.cache);
  r.verdict = r.pass ? hotpath_diff::Verdict::Pass : hotpath_diff::Verdict::Fail;
  if (o.compile_kernels) r.kernels_compiled = compile_plans(st, compiled_sources);
  hotpath::disable_hot_path_detection();
  if (const char* v = std::getenv("TRAIN_DIFF_STATS"); v != nullptr) {
    std::printf("%s", hotpath::format_stats(st).c_str());
    if (std::string(v) == "ops") {  // the ops of each hot signature, in order
      for (const auto& sig : st.signatures) {
        if (!sig.hot) continue;
        std::printf("  %s:", sig.hex.c_str());
        for (const auto& n : sig.op_names) std::printf(" %s", n.c_str());
        std::printf("\n");
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The command line (CLI11): exits 0 after --help, 2 after a bad argument, naming it.
Options parse_options(int argc, char** argv) {
  Options o;
  std::string device, models, variants, optimizers, dtypes;
  CLI::App app{
      "train_diff: whole training loops, eager and hotpath side by side, judged against the noise "
      "floor measured in the same run (see the comment at the top of tests/diff/train_diff.cpp)"};
  hotpath_cli::add_device(app, device);
  app.add_option("--models", models,
                 "comma-separated (default: gpt,mlp,convnet,lstm,mnist,dcgan,lm)");
  app.add_option(
      "--variants", variants,
      "the GPT's, comma-separated, or all (default: all for the GPT, plain for the rest)");
  app.add_option("--optimizers", optimizers, "comma-separated (default: adamw,sgd)");
  app.add_option("--dtypes", dtypes, "fp32 and/or bf16 (default: both on a GPU, fp32 on the CPU)");
  app.add_option("--steps", o.steps, "steps a run (default 120)")->check(hotpath_cli::whole(1));
  app.add_option("--threshold", o.threshold, "hotpath's hot threshold (default 10)")
      ->check(hotpath_cli::whole(1));
  app.add_option("--factor", o.factor, "times the noise floor a pass allows (default 10)")
      ->check(hotpath_cli::number(0, false, "a positive number"));
  app.add_flag("--verify", o.verify, "hotpath checks each fused group against its eager ops");
  app.add_flag("--explicit-steps", o.explicit_steps, "the loop marks its steps with step()");
  app.add_flag("--exact", o.exact, "hotpath must equal eager to the bit");
  app.add_flag("--compile-kernels", o.compile_kernels,
               "NVRTC compiles every kernel, also on the CPU");
  app.add_flag("--small", o.small, "small models (the CPU tests')");
  app.add_flag("--resync", o.resync, "each step from eager's state");
  app.add_option("--csv", o.csv, "one row a run to this file");
  app.add_option("--trace", o.trace, "one row a step to this file");
  app.add_option("--cache", o.cache, "hotpath's cache directory");
  app.add_flag("--remember", o.remember, "keep verdicts in --cache for the next run");
  app.add_option("--handover", o.handover, "the step after which kernels come in, one a step")
      ->check(hotpath_cli::whole(0));
  hotpath_cli::parse_or_exit(app, argc, argv);
  o.device = torch::Device(device == "cuda" ? torch::kCUDA : torch::kCPU);
  if (!models.empty()) o.models = split(models);
  if (variants == "all")
    o.variants = hotpath_diff::variant_names();
  else if (!variants.empty())
    o.variants = split(variants);
  if (!optimizers.empty()) o.optimizers = split(optimizers);
  if (!dtypes.empty()) o.dtypes = split(dtypes);
  if (o.dtypes.empty())
    o.dtypes = o.device.is_cuda() ? std::vector<std::string>{"fp32", "bf16"}
                                  : std::vector<std::string>{"fp32"};
  for (const auto& dt : o.dtypes)
    if (dt != "fp32" && dt != "bf16") usage("--dtypes are fp32 and bf16, got '" + dt + "'");
  if (o.remember && o.cache.empty())
    usage("--remember needs --cache DIR: the verdicts are kept there for the next run");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);

  std::vector<Setup> setups;
  try {
    for (const auto& m : o.models) {
      std::vector<std::string> vs = o.variants;
      if (vs.empty())
        vs = m == "gpt" ? hotpath_diff::variant_names() : std::vector<std::string>{"plain"};
      for (const auto& v : vs) {
        if (m != "gpt" && v != "plain") continue;  // the variants are the GPT's
        for (const auto& dt : o.dtypes) {
          for (const auto& opt : o.optimizers) {
            // The DCGAN trains with its own two Adam optimizers: one run per dtype.
            if (m == "dcgan" && opt != o.optimizers.front()) continue;
            Setup s;
            s.model = m;
            s.variant = hotpath_diff::parse_variant(v);
            s.optimizer = m == "dcgan" ? "adam" : opt;
            s.bf16 = dt == "bf16";
            s.device = o.device;
            s.steps = o.steps;
            s.small = o.small;
            hotpath_diff::make_trainer(s);  // refuses unknown names before anything runs
            setups.push_back(s);
          }
        }
      }
    }
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }

  std::unique_ptr<std::ofstream> trace;
  if (!o.trace.empty()) {
    trace = std::make_unique<std::ofstream>(o.trace);
    *trace << "model,variant,dtype,optimizer,step,loss_eager,loss_hotpath,dloss_perturbed,"
              "dloss_eager2,dloss_hotpath,dstate_perturbed,dstate_eager2,dstate_hotpath,mode\n";
  }
  std::printf(
      "train_diff: %zu run(s) on %s, %d steps each, hot after %d, tolerance %.0fx the "
      "noise floor%s%s\n",
      setups.size(), o.device.str().c_str(), o.steps, o.threshold, o.factor,
      o.exact ? " (exact: bitwise equal required)" : "",
      o.resync ? "; each step from eager's state, the state against the step's update" : "");
  const char* head = "%-8s %-12s %-5s %-6s %10s %10s %10s %10s %8s %6s %6s %6s %5s %6s  %s\n";
  std::printf(head, "model", "variant", "dtype", "opt", "noise_loss", "hot_loss", "noise_stat",
              "hot_state", "worst", "fused", "replay", "groups", "div", "time", "result");
  std::set<std::string> compiled_sources;
  std::vector<Result> results;
  int failed = 0, chaotic = 0;
  for (const Setup& s : setups) {
    Result r = run(s, o, trace.get(), compiled_sources, o.resync);
    // A free run that failed on its deviations alone: again, each step from eager's state.
    if (!r.pass && !o.exact && !o.resync && r.verify_failures == 0) {
      const Result again = run(s, o, trace.get(), compiled_sources, true);
      r.resync_worst = again.judge.worst;
      r.resync_pass = again.pass;
      // A launch beyond verify's tolerance in the second run is no pass either.
      hotpath_diff::StepJudge resynced = again.judge;
      resynced.pass = again.pass;
      r.verdict = hotpath_diff::verdict(r.judge, &resynced);
      r.seconds += again.seconds;
    }
    std::printf(
        "%-8s %-12s %-5s %-6s %10.2e %10.2e %10.2e %10.2e %8.3f %6lld %6lld %6lld %5lld %5.1fs  "
        "%s\n",
        s.model.c_str(), hotpath_diff::variant_names()[static_cast<int>(s.variant)].c_str(),
        dtype_name(s).c_str(), s.optimizer.c_str(), r.judge.max_noise_loss, r.judge.hot_loss,
        r.judge.max_noise_state, r.judge.hot_state, r.judge.worst,
        static_cast<long long>(r.fused_iterations), static_cast<long long>(r.replayed),
        static_cast<long long>(r.groups), static_cast<long long>(r.divergences), r.seconds,
        result_text(r));
    if (o.remember) {
      std::printf(
          "    remembered from an earlier run: %lld known winner(s) (%lld plan(s) built before "
          "they were seen), %lld known loser(s)\n",
          static_cast<long long>(r.known_winners), static_cast<long long>(r.prepared),
          static_cast<long long>(r.known_losers));
    }
    if (!r.pass) {
      r.verdict == hotpath_diff::Verdict::Chaotic ? ++chaotic : ++failed;
      std::printf("    worst at step %d%s%s\n", r.judge.worst_step,
                  r.verify_failures > 0 ? "; " : "", r.first_failure.c_str());
      if (r.resync_worst >= 0) {
        std::printf(
            "    run again with each step from eager's state: worst %.3f of its tolerance (%s); "
            "over the whole first run within %.0fx the references' largest deviation: %s\n",
            r.resync_worst, r.resync_pass ? "pass" : "FAIL", o.factor,
            r.judge.within_whole_run() ? "yes" : "no");
      }
    }
    std::fflush(stdout);
    results.push_back(std::move(r));
  }
  int kernels = 0;
  for (const auto& r : results) kernels += r.kernels_compiled;
  if (o.compile_kernels)
    std::printf("NVRTC compiled %d distinct generated kernel(s) for sm_90\n", kernels);
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "model,variant,dtype,optimizer,steps,noise_loss,hot_loss,noise_state,hot_state,worst_"
         "ratio,"
         "worst_step,iterations,hot_signatures,fused_iterations,replayed,groups,divergences,"
         "verify_failures,seconds,result\n";
    for (const auto& r : results) {
      const Setup& s = r.setup;
      f << s.model << "," << hotpath_diff::variant_names()[static_cast<int>(s.variant)] << ","
        << dtype_name(s) << "," << s.optimizer << "," << s.steps << "," << r.judge.max_noise_loss
        << "," << r.judge.hot_loss << "," << r.judge.max_noise_state << "," << r.judge.hot_state
        << "," << r.judge.worst << "," << r.judge.worst_step << "," << r.iterations << ","
        << r.hot_signatures << "," << r.fused_iterations << "," << r.replayed << "," << r.groups
        << "," << r.divergences << "," << r.verify_failures << "," << r.seconds << ","
        << result_text(r) << "\n";
    }
  }
  std::printf("%zu run(s): %zu passed, %d failed", results.size(), results.size() - failed, failed);
  if (chaotic > 0)
    std::printf(
        " (%d of the passes chaotic: a branch of training no reference took by then, each "
        "step within its noise floor)",
        chaotic);
  std::printf("\n");
  return failed == 0 ? 0 : 1;
}
