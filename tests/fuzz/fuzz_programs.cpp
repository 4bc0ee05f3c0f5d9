// A random-program fuzzer: small programs of pointwise chains with broadcasting, mixed dtypes
// (fp32/fp16/bf16, bool masks), non-contiguous, transposed and sliced operands, views and
// in-place ops on them, one-element and empty tensors, NaN and Inf, the reductions hotpath fuses
// (sums and means over the last dimension, softmax, log_softmax, sums over the first of two;
// with --layers a layer's ops too), autograd through them and an SGD step whose learning rate
// changes every iteration. Each program runs several iterations with hotpath (hot after 2, step()
// markers) and without, on the same inputs; a disagreement is shrunk (ops removed one at a time
// while it still disagrees) and printed with its seed. A program that kills the process (a signal)
// is named on stderr first.
//
//   fuzz_programs [--device cpu|cuda] [--programs N] [--seconds S] [--seed S] [--compile-kernels]
//                 [--iterations N] [--stand-ins | --handover] [--actions] [--layers]
//                 [--cuda-rms] [--layouts]
//                 [--replay FILE]
//                 [--csv FILE] [--show]
//                 [--self-test]
//
// Each program runs --iterations times (6 unless told). Its outputs of the iteration before the
// last are held through the last one and compared too: a value the program keeps must stay as
// eager left it. On a GPU, 30 or more iterations let a program's plan run steadily, be captured
// and be replayed as CUDA graphs (Config::replay) for the rest; the summary counts the programs
// whose iterations were replayed.
//
// The run waits for its plans' kernels after its third iteration, so that the rest run them. With
// --stand-ins no group kernel is compiled (Config::compile_kernels): the interpreter runs the
// groups it can and the rest run as their eager ops, as in a cold start's first iterations,
// while NVRTC compiles. A regressions line asks for that with `stand-ins` after its seed (and
// iterations). On the CPU, where plans run ATen's kernels, it changes nothing.
//
// --handover holds the plans' compiled kernels back (compile/kernel_gate.h) and lets them in as a
// cold start gets them, part-way: the first group's kernel in the middle of an iteration (after
// an op the seed draws, while that iteration's fused groups may be pending), the rest after a
// later iteration, and at least one iteration runs on them all (fuzz/program.h: Handover). The
// iterations before run on stand-ins. A regressions line asks for it with `handover`. On the CPU
// it changes nothing either.
//
// --actions asks each run's plans, at points the seed draws (mid-iteration included), what the
// governor may ask of them: a random set of groups fused and the rest eager, every group eager,
// every group fused again, replay or the stand-ins let go, the stand-ins kept, the plan reverted
// (fuzz/program.h: Action). The fuzzer runs with the governor's windows off, so without it these
// reconfigurations, which a real run's governor makes by timing, would never meet a program. A
// regressions line asks for it with `actions`.
//
// --layers appends a layer's ops to each program where its values allow: a layer norm or a cross
// entropy, then an rms norm or a linear layer (fuzz/program.h: K::LayerNorm). Without it no
// program has them, so that the regressions' seeds keep their programs. A regressions line asks
// for it with `layers`.
//
// --cuda-rms (with --layers, on the CPU) has the programs' rms norms call the op LibTorch runs on a
// CUDA tensor, at::_fused_rms_norm (out and rstd; autograd saves rstd for
// _fused_rms_norm_backward), with CPU kernels of the fuzzer's own (cuda_rms_on_cpu.h): on the CPU
// rms_norm decomposes, so only the GPU met that op before. A regressions line asks for it with
// `cuda-rms`.
//
// --layouts appends a recent value transposed or resized in place, then read by pointwise ops
// (fuzz/program.h: K::TransposeInPlace), where its values allow; without it no program has
// them. A regressions line asks for it with `layouts`.
//
// --show prints each program's values (shape, dtype, strides), what hotpath's run of it did
// (hotpath::format_stats: plans, groups, launches on the interpreter, eager runs, replayed
// iterations) and, with --compile-kernels, the source of every kernel its plans generate: `--seed S
// --programs 1 --show --compile-kernels` looks at one.
//
// On the CPU, plans run ATen's kernels (Config::fuse_cpu): results must be bitwise equal, and
// --compile-kernels has NVRTC compile every kernel the plans generate. On a GPU the kernels run,
// and results must agree within 1e-4 (fp32) or 2e-2 (fp16/bf16) of the largest magnitude, with
// NaN and Inf exactly where eager has them. A program beyond that is run again with every launch
// verified against eager on its own inputs (one launch beyond Config::verify's tolerance is a
// disagreement in an fp32 program), and then judged by its own noise floor: eager again with its
// float inputs moved by about a rounding error (1e-7; where the program computes in fp16 or bf16,
// that type's: 2^-11 or 2^-8); hotpath agrees if it moves no result more than 10 times as far (as
// tests/diff/train_diff does for training runs). Such programs (an SGD step through rsqrt or a
// division near zero, fp16 gradients that cancel) are counted apart. --replay runs the programs of
// a file of seeds (the regressions kept in tests/fuzz/regressions.txt) before the random ones. Exit
// status 1 when a program disagrees, 2 for a bad argument.
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "compile/kernel_gate.h"
#include "compile/nvrtc.h"
#include "cuda_rms_on_cpu.h"
#include "hotpath/hotpath.h"
#include "judge.h"
#include "options.h"
#include "program.h"
#include "session/session.h"

namespace {

// The program being run, for a crash: a signal that kills the process (a crash in hotpath or in
// ATen) names the program's seed and ops first, so that a run that dies can be reproduced.
char g_running[2048];

extern "C" void report_crash(int sig) {
  const char head[] = "\nfuzz_programs: died of a signal while running ";
  (void)!write(STDERR_FILENO, head, sizeof head - 1);
  (void)!write(STDERR_FILENO, g_running, std::strlen(g_running));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void report_crashes() {
  struct sigaction sa {};
  sa.sa_handler = report_crash;
  sa.sa_flags = static_cast<int>(SA_RESETHAND);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

using namespace fuzz;
// --actions: asks every plan of the run what the action says, as the governor would.
void ask(const Action& a) {
  const auto session = hotpath::detail::thread_session();
  if (!session) return;
  std::mt19937_64 r(a.bits);
  const std::string why = std::string("fuzz_programs: ") + action_name(a.kind);
  for (const auto& sig : hotpath::stats().signatures) {
    const auto groups = session->groups(sig.id);
    if (!groups || groups->empty()) continue;
    switch (a.kind) {
      case Action::kMask:
      case Action::kAllOff:
      case Action::kAllOn: {
        std::vector<bool> on(groups->size(), a.kind != Action::kAllOff);
        if (a.kind == Action::kMask)
          for (std::size_t g = 0; g < on.size(); ++g) on[g] = (r() & 1) != 0;
        session->set_active(sig.id, on, why);
        break;
      }
      case Action::kNoReplay:
        session->no_replay(sig.id, why);
        break;
      case Action::kNoStandIn:
        session->no_stand_in(sig.id, why);
        break;
      case Action::kKeepStandIn:
        session->keep_stand_in(sig.id, why);
        break;
      case Action::kRevert:
        session->revert(sig.id, why);
        break;
    }
  }
}

// `perturb` > 0: each float input is first multiplied by (1 + perturb * noise), noise drawn from
// the program's seed: the same program with its inputs moved by about a rounding error.
Outcome run(const Program& p, torch::Device d, bool hot, const hotpath::Config& c,
            double perturb = 0) {
  Outcome o;
  auto in = make_inputs(p, d, p.backward);
  if (perturb > 0) {
    torch::NoGradGuard no_grad;
    auto g = at::detail::createCPUGenerator(p.seed ^ 0x5eedULL);
    for (auto& t : in)
      if (t.is_floating_point() && t.numel() > 0)
        t.mul_((1 + perturb * torch::randn(t.sizes(), torch::Generator(g))).to(d));
  }
  hotpath::disable_hot_path_detection();
  // --handover: the plans' kernels wait at the gate until the points the seed drew.
  const Handover h = p.handover && hot && d.is_cuda() ? handover_points(p) : Handover{};
  hotpath::detail::HeldKernels hold(h.all >= 0);
  const std::vector<Action> acts = p.actions && hot ? action_points(p) : std::vector<Action>{};
  std::size_t next_act = 0;
  if (hot) hotpath::enable_hot_path_detection(c);
  try {
    std::vector<torch::Tensor> held;  // the outputs of the iteration before, as they came
    for (int i = 0; i < p.iterations; ++i) {
      std::vector<torch::Tensor> v = in;
      // Between two ops of the iteration: a held kernel let in, the governor's actions asked.
      auto between = [&](std::size_t op) {
        if (i == h.first && op == h.op) hotpath::detail::release_held_kernels(1);
        for (; next_act < acts.size() && acts[next_act].iteration == i && acts[next_act].op == op;
             ++next_act)
          ask(acts[next_act]);
      };
      const bool asks = next_act < acts.size() && acts[next_act].iteration == i;
      apply(p, v, i, i == h.first || asks ? std::function<void(std::size_t)>(between) : nullptr);
      if (p.backward) {
        torch::Tensor loss = torch::zeros({}, torch::TensorOptions(d));
        for (std::size_t k = in.size(); k < v.size(); ++k)
          if (v[k].is_floating_point() && v[k].requires_grad())
            loss = loss + v[k].to(torch::kFloat).nan_to_num(0, 0, 0).sum() * 0.01;
        if (loss.requires_grad()) loss.backward();
        torch::NoGradGuard no_grad;
        for (auto& t : in) {
          if (!t.requires_grad() || !t.grad().defined()) continue;
          t.sub_(t.grad().nan_to_num(0, 0, 0) * (0.01 / (1 + i)));
          t.mutable_grad().reset();
        }
      }
      hotpath::step();
      if (hot && i == (hold.on() ? h.all : 2) && d.is_cuda()) {
        hold.let_go();
        hotpath::wait_for_compilation();
      }
      if (i == p.iterations - 1) {
        for (std::size_t k = in.size(); k < v.size(); ++k)
          o.values.push_back(v[k].detach().cpu().clone());
      } else {
        held.assign(v.begin() + static_cast<std::ptrdiff_t>(in.size()), v.end());
      }
    }
    for (auto& t : in) o.values.push_back(t.detach().cpu().clone());
    for (auto& t : held) o.values.push_back(t.detach().cpu().clone());
  } catch (const std::exception& e) {
    o.threw = true;
    o.error = e.what();
  }
  hold.let_go();
  hotpath::disable_hot_path_detection();
  return o;
}

struct Verdict {
  std::string why;       // empty: hotpath agrees with eager
  bool noise = false;    // agrees only within the program's own noise floor
  hotpath::Stats stats;  // of the hotpath run judged, not of the checks that may follow it
};

// Runs `p` with and without hotpath. On a GPU, a result beyond the fixed tolerance is looked at
// twice more: every kernel launch against eager on the launch's own inputs (a launch that
// differs is a disagreement), then eager on inputs moved by a rounding error (a program whose
// results move that much, as ones dividing by a value near zero do, is judged by its own noise).
Verdict judge(const Program& p, torch::Device d, const hotpath::Config& c, bool exact) {
  const Outcome eager = run(p, d, false, c);
  const Outcome fused = run(p, d, true, c);
  Verdict v{compare(eager, fused, exact), false, hotpath::stats()};
  if (v.why.empty() || exact) return v;
  hotpath::Config verify = c;
  verify.verify = true;
  run(p, d, true, verify);
  const hotpath::Stats verified = hotpath::stats();
  // In fp32 a launch beyond Config::verify's tolerance is a disagreement whatever the results;
  // in half precision a launch's own rounding differs from eager's by more (see perturbation),
  // so its results are judged by the half-precision noise floor, the launch named if they fail.
  const double u = perturbation(eager);
  std::string launches;
  for (const auto& sig : verified.signatures) {
    for (const auto& g : sig.fusion.groups) {
      if (g.verify_failures == 0 || !launches.empty()) continue;
      std::ostringstream os;
      os << "; group " << g.name << ": " << g.verify_failures
         << " launch(es) differ from eager on their own inputs (max relative error "
         << g.max_rel_error << ")";
      launches = os.str();
    }
  }
  if (!launches.empty() && u == kPerturbation) {
    v.why += launches;
    return v;
  }
  const std::string within =
      compare(eager, fused, exact, noise_floor(eager, run(p, d, false, c, u)));
  if (within.empty()) {
    v.why.clear();
    v.noise = true;
    return v;
  }
  // Every launch within tolerance, yet the result beyond the noise: how each group ran in the
  // checked run (a group whose ops ran eagerly was checked by no launch), the ones that
  // differed from eager at all first to look at.
  std::ostringstream os;
  if (!launches.empty()) {
    v.why = within + launches;
    return v;
  }
  os << within << "; every launch within tolerance; groups (launches, on the interpreter, eager "
     << "runs, launches checked, largest relative error):";
  for (const auto& sig : verified.signatures)
    for (const auto& g : sig.fusion.groups)
      os << " " << g.name << " (" << g.launches << ", " << g.interpreted << ", " << g.eager_runs
         << ", " << g.checks << ", " << g.max_rel_error << ")";
  v.why = os.str();
  return v;
}

// Removes ops (and the values only they made) one at a time while the program still
// disagrees: what is left is kept as a regression.
Program shrink(Program p, const std::function<bool(const Program&)>& fails) {
  for (bool again = true; again;) {
    again = false;
    for (std::size_t i = p.ops.size(); i-- > 0;) {
      Program q = p;
      const int removed = q.values + static_cast<int>(i);
      q.ops.erase(q.ops.begin() + static_cast<std::ptrdiff_t>(i));
      bool ok = true;
      for (std::size_t k = i; k < q.ops.size(); ++k) {
        for (int* x : {&q.ops[k].a, &q.ops[k].b, &q.ops[k].c}) {
          if (*x == removed) ok = false;
          if (*x > removed) --*x;
        }
      }
      if (ok && fails(q)) {
        p = q;
        again = true;
      }
    }
  }
  return p;
}

// --self-test: the shrinker and the noise floor on programs planted to fail (0: as they should).
int self_test() {
  // The shrinker keeps exactly what a disagreement needs: here, any program with an exp
  // of an exp is taken to disagree.
  Program p = generate(7, torch::kCPU);
  p.ops.push_back({K::Exp, p.inputs - 1, 0, 0, 1.0});
  p.ops.push_back({K::MulS, p.values + static_cast<int>(p.ops.size()) - 1, 0, 0, 2.0});
  p.ops.push_back({K::Exp, p.values + static_cast<int>(p.ops.size()) - 2, 0, 0, 1.0});
  auto fails = [](const Program& q) {
    for (const FOp& o : q.ops)
      if (o.kind == K::Exp && o.a >= q.values &&
          q.ops[static_cast<std::size_t>(o.a - q.values)].kind == K::Exp)
        return true;
    return false;
  };
  if (!fails(p)) fuzz::usage("self-test: the planted program does not fail");
  const Program small = shrink(p, fails);
  std::printf("self-test: %zu ops shrunk to %zu: %s\n", p.ops.size(), small.ops.size(),
              small.text().c_str());
  // The noise floor widens the tolerance to 10x eager's own movement, no further, and a
  // NaN that moves with eager's inputs is not held against hotpath.
  auto outcome = [](std::vector<double> v) {
    Outcome o;
    o.values.push_back(torch::tensor(v, torch::kFloat));
    return o;
  };
  const Outcome e = outcome({1.0, 2.0}), moved = outcome({1.0, 2.001});
  const auto floor = noise_floor(e, moved);
  const bool noise_ok = floor.size() == 1 && std::abs(floor[0] - 0.001) < 1e-6 &&
                        !compare(e, outcome({1.0, 2.005}), false).empty() &&
                        compare(e, outcome({1.0, 2.005}), false, floor).empty() &&
                        !compare(e, outcome({1.0, 2.02}), false, floor).empty() &&
                        std::isinf(noise_floor(e, outcome({1.0, NAN}))[0]);
  std::printf("self-test: noise floor %s\n", noise_ok ? "ok" : "WRONG");
  return small.ops.size() == 2 && fails(small) && noise_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  report_crashes();
  const fuzz::Options o = fuzz::parse_options(argc, argv);
  if (o.self_test) return self_test();
  const torch::Device d(o.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const long programs = o.programs;
  const double seconds = o.seconds;
  const std::uint64_t seed = o.seed;
  const int iterations = o.iterations;
  const bool compile_kernels = o.compile_kernels, show = o.show, stand_ins = o.stand_ins,
             handover = o.handover, actions = o.actions, layers = o.layers, layouts = o.layouts,
             cuda_rms = o.cuda_rms;
  const std::string& replay = o.replay;
  const std::string& csv = o.csv;
  hotpath::Config c;
  c.threshold = 2;
  c.fuse_cpu = !d.is_cuda();
  c.verify = false;
  c.remember = false;
  c.stand_aside = false;
  c.revert_window = 1000000;  // correctness, not speed
  c.log_level = hotpath::LogLevel::Error;
  const bool exact = !d.is_cuda();

  // The programs to run: a line of the regressions file may name more iterations than
  // --iterations after its seed (a replayed capture needs about 20): it runs with the larger;
  // then `stand-ins` or `handover`, `actions` and `layers` (see above).
  struct Seed {
    std::uint64_t seed = 0;
    int iterations = 0;
    bool stand_ins = false, handover = false, actions = false, layers = false, cuda_rms = false,
         layouts = false;
  };
  std::vector<Seed> seeds;
  if (!replay.empty()) {
    std::ifstream f(replay);
    if (!f) fuzz::usage("cannot read " + replay);
    for (std::string line; std::getline(f, line);) {
      std::istringstream words(line.substr(0, line.find('#')));
      std::string word;
      if (!(words >> word)) continue;
      if (word.find_first_not_of("0123456789") != std::string::npos)
        fuzz::usage(replay + ": '" + word + "' is no seed");
      Seed s{std::strtoull(word.c_str(), nullptr, 10),
             iterations,
             stand_ins,
             handover,
             actions,
             layers,
             cuda_rms,
             layouts};
      while (words >> word) {
        if (word == "actions") {
          s.actions = true;
        } else if (word == "layers") {
          s.layers = true;
        } else if (word == "cuda-rms") {
          s.cuda_rms = true;
        } else if (word == "layouts") {
          s.layouts = true;
        } else if (word == "stand-ins" || word == "handover") {
          (word == "handover" ? s.handover : s.stand_ins) = true;
          if (s.stand_ins && s.handover)
            fuzz::usage(
                replay + ": seed " + std::to_string(s.seed) +
                " asks for stand-ins and handover (stand-ins compile nothing to hand over)");
        } else if (word.find_first_not_of("0123456789") == std::string::npos) {
          s.iterations = std::max(iterations, std::atoi(word.c_str()));
        } else {
          fuzz::usage(replay + ": after seed " + std::to_string(s.seed) + ", '" + word +
                      "' is neither iterations, stand-ins, handover, actions, layers, cuda-rms nor "
                      "layouts");
        }
      }
      seeds.push_back(s);
    }
  }
  const std::size_t replayed = seeds.size();
  for (long k = 0; k < programs; ++k)
    seeds.push_back({seed + static_cast<std::uint64_t>(k), iterations, stand_ins, handover, actions,
                     layers, cuda_rms, layouts});

  const auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> compiled;
  long ran = 0, fused_programs = 0, disagreements = 0, kernels = 0, refused = 0, within_noise = 0,
       replayed_programs = 0, stand_in_programs = 0, handover_programs = 0, handed_over = 0,
       action_programs = 0, layer_programs = 0, cuda_rms_programs = 0, layout_programs = 0;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    if (seconds > 0 && k >= replayed &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
      break;
    // CUDA's rms_norm on the CPU (cuda_rms_on_cpu.h); on a GPU the programs call it anyway.
    if (seeds[k].cuda_rms && !d.is_cuda()) fuzz::register_cuda_rms_on_cpu();
    fuzz::cuda_rms_on_cpu() = seeds[k].cuda_rms && !d.is_cuda();
    Program p = generate(seeds[k].seed, d, seeds[k].layers, seeds[k].layouts);
    p.iterations = seeds[k].iterations;
    p.handover = seeds[k].handover;
    p.actions = seeds[k].actions;
    if (p.ops.empty()) continue;
    hotpath::Config pc = c;
    pc.compile_kernels = !seeds[k].stand_ins;
    std::snprintf(g_running, sizeof g_running, "%s", p.text().c_str());
    const Verdict verdict = judge(p, d, pc, exact);
    ++ran;
    stand_in_programs += seeds[k].stand_ins ? 1 : 0;
    handover_programs += seeds[k].handover ? 1 : 0;
    action_programs += seeds[k].actions ? 1 : 0;
    layer_programs += seeds[k].layers ? 1 : 0;
    layout_programs += seeds[k].layouts ? 1 : 0;
    cuda_rms_programs += fuzz::cuda_rms_on_cpu() ? 1 : 0;
    const hotpath::Stats& st = verdict.stats;
    if (show) {
      show_program(p, d);
      const Handover h = p.handover ? handover_points(p) : Handover{};
      if (h.first >= 0)
        std::printf("  one kernel let in after op %zu of iteration %d\n", h.op, h.first);
      if (h.all >= 0) std::printf("  every kernel let in after iteration %d\n", h.all);
      for (const Action& a : p.actions ? action_points(p) : std::vector<Action>{})
        std::printf("  after op %zu of iteration %d: %s\n", a.op, a.iteration, action_name(a.kind));
      std::printf("%s\n", hotpath::format_stats(st).c_str());
    }
    bool any_group = false, any_replayed = false, any_handed = false;
    for (const auto& sig : st.signatures) {
      any_group = any_group || sig.fusion.fused_iterations > 0;
      any_replayed = any_replayed || sig.fusion.replayed_iterations > 0;
      // A group that ran on a stand-in and then on its own kernel: handed over in the run.
      for (const auto& g : sig.fusion.groups)
        any_handed = any_handed || ((g.interpreted > 0 || g.eager_runs > 0) &&
                                    g.launches > g.interpreted && seeds[k].handover);
    }
    handed_over += any_handed ? 1 : 0;
    fused_programs += any_group ? 1 : 0;
    replayed_programs += any_replayed ? 1 : 0;
    if (compile_kernels) {
      auto session = hotpath::detail::thread_session();
      for (const auto& sig : st.signatures) {
        const auto plan = session ? session->executor.plan(sig.id) : nullptr;
        if (!plan || !plan->graph) continue;
        for (const auto& grp : plan->partition.groups) {
          hotpath::detail::KernelSpec spec;
          try {
            spec = hotpath::detail::generate_kernel(*plan->graph, grp);
          } catch (const hotpath::Error& e) {
            // The executor runs such a group eagerly (build() logs it): a lost fusion, not a
            // wrong result; counted so that the partitioner's checks can catch up.
            if (refused++ < 5)
              std::printf("codegen refuses group %s of %s: %s\n", grp.name.c_str(),
                          p.text().c_str(), e.what());
            continue;
          }
          if (show) std::printf("kernel of group %s:\n%s\n", grp.name.c_str(), spec.source.c_str());
          if (!compiled.insert(spec.source).second) continue;
          try {
            hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                           hotpath::detail::runtime_headers(), "");
            ++kernels;
          } catch (const std::exception& e) {
            ++disagreements;
            std::printf("NVRTC REJECTS a kernel of %s:\n%s\n", p.text().c_str(), e.what());
          }
        }
      }
    }
    if (verdict.noise) {
      ++within_noise;
      std::printf("within its noise floor: %s\n", p.text().c_str());
    }
    if (verdict.why.empty()) continue;
    ++disagreements;
    const Program small =
        shrink(p, [&](const Program& q) { return !judge(q, d, pc, exact).why.empty(); });
    std::printf("DISAGREES%s: %s\n  %s\n  shrunk: %s\n",
                seeds[k].stand_ins ? " (stand-ins for kernels)" : "", p.text().c_str(),
                verdict.why.c_str(), small.text().c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "fuzz_programs: %ld program(s) on %s (%zu from the regressions file, %ld with stand-ins "
      "for kernels, %ld with kernels handed over, in %ld of them from a stand-in to a group's "
      "kernel, %ld with the governor's actions, %ld with a layer's ops, %ld with CUDA's rms_norm "
      "on the CPU, %ld with a layout changed in place), %d iterations a program, "
      "%ld with fused iterations, %ld with iterations "
      "replayed as CUDA graphs, %ld disagreement(s), %ld within their noise floor only, %ld "
      "group(s) codegen refused%s, %.1f s\n",
      ran, d.str().c_str(), replayed, stand_in_programs, handover_programs, handed_over,
      action_programs, layer_programs, cuda_rms_programs, layout_programs, iterations,
      fused_programs, replayed_programs, disagreements, within_noise, refused,
      compile_kernels
          ? (", " + std::to_string(kernels) + " distinct kernels compiled by NVRTC").c_str()
          : "",
      secs);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "device,programs,replayed,fused_programs,disagreements,codegen_refused,kernels_compiled,"
         "seconds,within_noise,graph_programs,iterations,stand_in_programs,handover_programs,"
         "handed_over,action_programs\n"
      << d.str() << "," << ran << "," << replayed << "," << fused_programs << "," << disagreements
      << "," << refused << "," << kernels << "," << secs << "," << within_noise << ","
      << replayed_programs << "," << iterations << "," << stand_in_programs << ","
      << handover_programs << "," << handed_over << "," << action_programs << "\n";
  }
  return disagreements == 0 ? 0 : 1;
}
