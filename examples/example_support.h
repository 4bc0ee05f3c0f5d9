// What the example programs share besides their training loops: argument parsing, the
// cross-check of hotpath against plain eager in one process, and the summary they print at exit.
// None of this is needed to use hotpath: a loop needs only the enable line.
#pragma once

#include <hotpath/hotpath.h>

#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hotpath_examples {

// --name value flags; a bad value or an unknown flag ends the program with status 2.
class Args {
 public:
  Args(std::string program, std::string usage)
      : program_(std::move(program)), usage_(std::move(usage)) {}
  Args& add(const std::string& name, int& target) {
    ints_[name] = &target;
    return *this;
  }
  Args& add(const std::string& name, std::int64_t& target) {
    longs_[name] = &target;
    return *this;
  }
  Args& add(const std::string& name, bool& target) {
    bools_[name] = &target;
    return *this;
  }
  Args& add(const std::string& name, std::string& target) {
    strings_[name] = &target;
    return *this;
  }
  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("usage: %s %s\n", program_.c_str(), usage_.c_str());
        std::exit(0);
      }
      if (const auto b = bools_.find(a); b != bools_.end()) {
        *b->second = true;
        continue;
      }
      if (i + 1 >= argc) fail(a + " needs a value");
      const std::string v = argv[++i];
      if (const auto s = strings_.find(a); s != strings_.end()) {
        *s->second = v;
      } else if (ints_.count(a) || longs_.count(a)) {
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || x < 0)
          fail(a + " needs a non-negative integer, got '" + v + "'");
        if (ints_.count(a))
          *ints_.at(a) = static_cast<int>(x);
        else
          *longs_.at(a) = x;
      } else {
        fail("unknown argument '" + a + "'");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_.c_str(), why.c_str(), program_.c_str(),
                 usage_.c_str());
    std::exit(2);
  }
  std::string program_, usage_;
  std::map<std::string, int*> ints_;
  std::map<std::string, std::int64_t*> longs_;
  std::map<std::string, bool*> bools_;
  std::map<std::string, std::string*> strings_;
};

// Milliseconds per step of `steps` steps: on the GPU from CUDA events around them (the GPU's span
// of their work, host gaps included), on the CPU from the clock. The GPU is waited for first: a
// block that starts behind a queue of the other side's work would read at the GPU's pace for as
// long as that queue lasts (the governor times its plain-eager blocks the same way).
inline double time_steps_ms(bool cuda, int steps, const std::function<void()>& step) {
  std::optional<at::cuda::CUDAEvent> start, stop;
  if (cuda) {
    torch::cuda::synchronize();
    start.emplace(cudaEventDefault);
    stop.emplace(cudaEventDefault);
    start->record();
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) step();
  if (!cuda)
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count() /
           steps;
  stop->record();
  stop->synchronize();
  return static_cast<double>(start->elapsed_time(*stop)) / steps;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Plans (signatures with fused groups, not reverted) the governor has not judged yet.
inline int unjudged_plans() {
  const hotpath::Stats s = hotpath::stats();
  const hotpath::Report r = hotpath::report();
  int n = 0;
  for (const auto& sig : s.signatures) {
    if (!sig.fusion.planned || sig.fusion.groups.empty() || sig.fusion.reverted) continue;
    for (const auto& rep : r.signatures)
      if (rep.hex == sig.hex && !rep.judged) ++n;
  }
  return n;
}

// Goes on training until the governor has judged every plan against this run's plain eager (or
// reverted it), at most `max_steps` more steps, and says how many it took: the cross-check's
// Pauses would cut the governor's own plain-eager blocks short, leaving it to judge against
// eager under the hook. Returns the steps run.
inline int settle(int max_steps, const std::function<void()>& step) {
  // Judged are the kernels as they will run: a compile still under way keeps the first window
  // from starting (the interpreter stands in meanwhile), however many steps run.
  hotpath::wait_for_compilation();
  // Asked every 10 steps only: report() waits for the GPU to finish the iterations it times,
  // and a loop synchronised at every step is not the loop the governor should judge.
  int steps = 0;
  while (steps < max_steps && (steps % 10 != 0 || unjudged_plans() > 0)) {
    step();
    ++steps;
  }
  const int left = unjudged_plans();
  std::printf("governor: %s after %d more step(s)%s\n",
              left == 0 ? "every plan judged" : "still measuring", steps,
              left == 0 ? "" : " (the cross-check may cut its plain-eager blocks short)");
  return steps;
}

// What hotpath ran in a stretch of the loop, from its counters before and after: iterations that
// ran the whole plan, and iterations of the governor's own plain-eager blocks (eager, not fused).
struct RunCounts {
  std::int64_t fused = 0, plain = 0;
  static RunCounts now() {
    RunCounts c;
    for (const auto& sig : hotpath::stats().signatures) c.fused += sig.fusion.fused_iterations;
    for (const auto& rep : hotpath::report().signatures) c.plain += rep.plain_iterations;
    return c;
  }
  RunCounts since(const RunCounts& before) const {
    return RunCounts{fused - before.fused, plain - before.plain};
  }
};

// The same loop, plain eager (under hotpath::Pause: not intercepted, unseen) in blocks of 10
// steps alternating with blocks under hotpath, `steps` a side, once the governor has settled;
// prints the medians of the blocks and returns eager's over hotpath's (above 1: hotpath is faster).
// Each block is timed after kSwitchSteps steps that pay for the switch from the other side (the
// governor leaves the same steps out after its own plain-eager blocks). Training goes on either
// way.
//
// Each hotpath block is then told apart by what ran in it: a block all of whose steps ran the
// fused plan measures what the report's steady state measures (fused iterations against plain
// eager); a block where the governor ran plain-eager iterations of its own (it re-times eager now
// and then, and a Pause cuts such a block short), or the plan was left, measures hotpath as the
// loop met it. Both figures are printed, with a line per block. The governor counts a block's
// iterations when the block ends, so they may show in the hotpath block after the one they ran in.
constexpr int kSwitchSteps = 4;
constexpr int kCrossBlock = 10;
inline double cross_check(bool cuda, int steps, const std::function<void()>& step) {
  settle(2 * steps, step);
  std::vector<double> plain, hot, hot_fused;
  std::vector<RunCounts> ran;
  for (int done = 0; done < steps; done += kCrossBlock) {
    {
      hotpath::Pause pause;
      for (int k = 0; k < kSwitchSteps; ++k) step();
      plain.push_back(time_steps_ms(cuda, kCrossBlock, step));
    }
    for (int k = 0; k < kSwitchSteps; ++k) step();
    const RunCounts before = RunCounts::now();
    hot.push_back(time_steps_ms(cuda, kCrossBlock, step));
    ran.push_back(RunCounts::now().since(before));
    if (ran.back().fused == kCrossBlock && ran.back().plain == 0) hot_fused.push_back(hot.back());
  }
  const double ratio = median(plain) / median(hot);
  std::printf(
      "cross-check against plain eager (hotpath::Pause), interleaved blocks of %d, %zu "
      "iterations a side (each block after %d steps that switch): eager %.3f ms, hotpath %.3f ms "
      "per iteration: %.2fx\n",
      kCrossBlock, plain.size() * kCrossBlock, kSwitchSteps, median(plain), median(hot), ratio);
  for (std::size_t b = 0; b < hot.size(); ++b)
    std::printf(
        "  cross-check block %2zu: eager %.3f ms, hotpath %.3f ms (%lld of %d steps fused; the "
        "governor's plain-eager blocks counted %lld iterations meanwhile)\n",
        b + 1, plain[b], hot[b], static_cast<long long>(ran[b].fused), kCrossBlock,
        static_cast<long long>(ran[b].plain));
  if (hot_fused.empty()) {
    std::printf("cross-check, hotpath blocks fused throughout: none of %zu\n", hot.size());
  } else {
    std::printf(
        "cross-check, hotpath blocks fused throughout: %zu of %zu, hotpath %.3f ms per "
        "iteration: %.2fx (what the report's steady state measures)\n",
        hot_fused.size(), hot.size(), median(hot_fused), median(plain) / median(hot_fused));
  }
  return ratio;
}

// Watches hotpath find the loop's step: how many steps had run when it first cut one (it cuts
// the steps before it, retroactively, as it finds the step at a forward pass).
struct LockWatch {
  int known_after = -1;
  void after_step(int step) {
    if (known_after < 0 && hotpath::stats().iterations > 0) known_after = step - 1;
  }
};

// hotpath's statistics and verdicts, then one line a person (or a script) can read.
inline void print_summary(const char* program, int steps, const LockWatch& watch, double ratio) {
  const hotpath::Stats s = hotpath::stats();
  std::printf("%s\n", hotpath::format_stats(s).c_str());
  std::printf("%s", hotpath::format_report(hotpath::report()).c_str());
  std::int64_t groups = 0, fused = 0;
  for (const auto& sig : s.signatures) {
    groups += static_cast<std::int64_t>(sig.fusion.groups.size());
    fused += sig.fusion.fused_iterations;
  }
  std::printf(
      "%s summary: %d steps, step known after %d steps (%d forward/backward pass(es) per step), "
      "%lld signature(s) hot, %lld fused group(s), %lld fused iteration(s), stood aside %lld "
      "time(s), cross-check %.2fx\n",
      program, steps, watch.known_after, s.passes_per_step,
      static_cast<long long>(s.hot_signatures()), static_cast<long long>(groups),
      static_cast<long long>(fused), static_cast<long long>(s.stood_aside), ratio);
}

}  // namespace hotpath_examples
