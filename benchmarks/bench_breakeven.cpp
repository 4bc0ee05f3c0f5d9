// Break-even measured outside hotpath: the first steps of a fresh process, timed one by one with
// CUDA events, plain eager in one process and with hotpath in another (run them in turns:
// gpu_check.sh's `breakeven` part; benchmarks/breakeven_summary.py finds where the sums cross).
// Both processes pay for their own start (CUDA's lazy module loads, cuBLAS's handles, the caching
// allocator's first blocks); hotpath's own break-even, taken in one process against plain eager
// timed later in it, charges all of that to hotpath. The step is the MLP+AdamW example's
// (Linear 1024->4096, GELU, Linear 4096->1024, batch 256, MSE, AdamW), with no step() marks.
//
//   bench_breakeven --mode eager|hotpath [--steps N] [--threshold T] [--cache DIR]
//                   [--settle N] [--label NAME] [--trace] --json FILE
//
// --trace adds, per timed step, what hotpath's busiest signature did in it (read from stats()
// between the steps, outside the timed events): whether it was hot, its plan ready and compiled,
// and how many fused iterations, kernel launches, interpreter launches and eager runs of its
// groups the step added, and the caching allocator's new segments (cudaMalloc calls); and the
// step's host time. It tells which steps waited for a plan, ran
// on the interpreter or paid for a switch. Each step's end is written to stderr too, with the
// time of day, between hotpath's own log lines (HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1).
//
// --op-times FILE writes every op of the timed steps, from ATen's RecordFunction callbacks (the
// op's whole call, hotpath's hook in it): step, thread (0 the training thread, then in order of
// their first op: autograd's), nesting depth, name, start (us from the step's start) and
// duration (us), as CSV. It tells whether a slow step is
// slow all over (the host shared with something) or in a few ops. The callbacks cost every op
// some time, eager or not: compare such runs with each other only.
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench_support.h"

namespace {

// The caching allocator's segments (its cudaMalloc calls) so far on the current device.
std::int64_t segments() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return stats.segment[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .allocated;
}

// The state and counters now of the signature that covers most ops (a hot one first; see
// --trace).
nlohmann::json step_state() {
  const hotpath::Stats stats = hotpath::stats();
  const hotpath::SignatureStats* top = nullptr;
  for (const auto& s : stats.signatures) {
    if (!top || std::make_pair(s.hot, s.ops_per_iteration * s.count) >
                    std::make_pair(top->hot, top->ops_per_iteration * top->count))
      top = &s;
  }
  if (top == nullptr) return {{"segments", segments()}};
  const hotpath::FusionStats& f = top->fusion;
  std::int64_t launches = 0, interpreted = 0, eager_runs = 0;
  for (const auto& g : f.groups) {
    launches += g.launches;
    interpreted += g.interpreted;
    eager_runs += g.eager_runs;
  }
  return {{"hot", top->hot},
          {"ready", f.ready},
          {"compiled", f.compiled},
          {"fused_iterations", f.fused_iterations},
          {"divergences", f.divergences},
          {"launches", launches},
          {"interpreted", interpreted},
          {"eager_runs", eager_runs},
          {"stall_ms", f.stall_ms},
          {"segments", segments()}};
}

// The time of day as hotpath's log lines carry it with HOTPATH_LOG_TIME=1 (spdlog's local time).
std::string now_text() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  char buf[32];
  std::snprintf(buf, sizeof buf, "[%02d:%02d:%02d.%06lld]", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us));
  return buf;
}

// --op-times: the ops of the training thread, as RecordFunction reports them.
class OpTimes {
 public:
  using Clock = std::chrono::steady_clock;
  struct Op {
    int step, thread, depth;
    std::string name;
    double start_us, dur_us;
  };
  OpTimes() {
    threads_.push_back(std::this_thread::get_id());
    instance_ = this;
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OpTimes::enter, &OpTimes::leave)
                                        .scopes({at::RecordScope::FUNCTION}));
  }
  ~OpTimes() {
    at::removeCallback(handle_);
    instance_ = nullptr;
  }
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;
  void begin_step(int step) {
    step_start_ = Clock::now().time_since_epoch().count();
    step_ = step;
  }
  void write(const std::string& path) const {
    std::ofstream f(path);
    f << "step,thread,depth,name,start_us,dur_us\n";
    for (const Op& o : ops_)
      f << o.step << "," << o.thread << "," << o.depth << "," << o.name << "," << o.start_us << ","
        << o.dur_us << "\n";
  }

 private:
  struct Context : at::ObserverContext {
    Clock::time_point start;
    int depth = 0;
  };
  static std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction&) {
    OpTimes* self = instance_;
    if (self == nullptr || self->step_ < 0) return nullptr;
    auto c = std::make_unique<Context>();
    c->depth = depth_++;
    c->start = Clock::now();
    return c;
  }
  static void leave(const at::RecordFunction& fn, at::ObserverContext* ctx) {
    OpTimes* self = instance_;
    if (self == nullptr || ctx == nullptr) return;
    const auto end = Clock::now();
    const auto* c = static_cast<Context*>(ctx);
    --depth_;
    auto us = [](Clock::duration d) {
      return std::chrono::duration<double, std::micro>(d).count();
    };
    std::lock_guard<std::mutex> lock(self->mu_);
    const auto id = std::this_thread::get_id();
    auto it = std::find(self->threads_.begin(), self->threads_.end(), id);
    if (it == self->threads_.end()) it = self->threads_.insert(self->threads_.end(), id);
    self->ops_.push_back(
        Op{self->step_, static_cast<int>(it - self->threads_.begin()), c->depth, fn.name(),
           us(c->start - Clock::time_point(Clock::duration(self->step_start_.load()))),
           us(end - c->start)});
  }
  static inline OpTimes* instance_ = nullptr;
  static inline thread_local int depth_ = 0;
  std::mutex mu_;
  std::vector<std::thread::id> threads_;
  at::CallbackHandle handle_{};
  std::atomic<int> step_{-1};
  std::atomic<Clock::rep> step_start_{0};  // read by autograd's threads too
  std::vector<Op> ops_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the first steps of a fresh process, plain eager or with hotpath, timed one by one"};
  std::string mode = "hotpath", cache, label, json_path, op_times_path;
  int steps = 60, threshold = 10, settle = 400;
  bool trace = false;
  app.add_option("--mode", mode, "eager (hotpath never enabled) or hotpath")
      ->check(CLI::IsMember({"eager", "hotpath"}));
  app.add_option("--steps", steps, "steps timed from the first")->check(CLI::Range(2, 100000));
  app.add_option("--threshold", threshold, "hotpath's hot threshold")->check(CLI::Range(1, 1000));
  app.add_option("--cache", cache, "hotpath's cache directory (kernels and verdicts)");
  app.add_option("--label", label, "the run's name in the summary (default: the mode)");
  app.add_option("--settle", settle,
                 "untimed steps at most after the timed ones, until hotpath's governor has judged "
                 "the plan (and remembered its verdict for the next run)")
      ->check(CLI::Range(0, 100000));
  app.add_flag("--trace", trace, "record what hotpath did in each step (see the file's comment)");
  app.add_option("--json", json_path, "write the steps' times here")->required();
  app.add_option("--op-times", op_times_path,
                 "write each op of the timed steps here (CSV; see the file's comment)");
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_breakeven: needs a CUDA device\n");
    return 2;
  }
  torch::manual_seed(0);
  bench::Mlp m;
  const bool hot = mode == "hotpath";
  if (hot) {
    hotpath::Config c;
    c.threshold = threshold;
    c.fuse = true;
    c.cache_dir = cache;
    c.log_level = hotpath::LogLevel::Warn;
    hotpath::enable_hot_path_detection(c);
  }
  std::unique_ptr<OpTimes> op_times;
  if (!op_times_path.empty()) op_times = std::make_unique<OpTimes>();
  nlohmann::json states = nlohmann::json::array();
  std::vector<double> host;
  // The steps (1-based, of this process) in which the signature turned hot and first ran fused:
  // hotpath's own counts are the signature's iterations, which start where the detector found
  // the loop's period (a few steps in, on an unmarked loop).
  int hot_step = -1, fused_step = -1;
  const std::vector<double> ms = bench::time_iterations(
      steps,
      [&](int i) {
        if (op_times) op_times->begin_step(i + 1);
        m.step();
      },
      trace ? &host : nullptr,
      [&](int i) {
        if (hot && (trace || fused_step < 0)) {
          const nlohmann::json st = step_state();
          if (hot_step < 0 && st.value("hot", false)) hot_step = i + 1;
          if (fused_step < 0 && st.value("launches", 0) > 0) fused_step = i + 1;
          if (trace) states.push_back(st);
        }
        // Between hotpath's own log lines (stderr too): which step they fell in.
        if (trace)
          std::fprintf(stderr, "%s bench_breakeven: step %d done\n", now_text().c_str(), i + 1);
      });
  if (op_times) {
    op_times->write(op_times_path);
    op_times.reset();  // the steps after the timed ones are not recorded
  }
  nlohmann::json out{{"mode", mode}, {"label", label.empty() ? mode : label}, {"steps_ms", ms}};
  if (hot) {
    out["hot_step"] = hot_step;
    out["fused_step"] = fused_step;
  }
  if (trace) {
    out["host_ms"] = host;
    if (hot) out["trace"] = states;
  }
  if (hot) {
    // Asked every 10 steps only: report() waits for the GPU to finish the steps it times.
    for (int k = 0; k < settle && (k % 10 != 0 || !bench::governor_state().second); ++k) m.step();
    const auto top = bench::busiest(hotpath::stats());
    for (const auto& r : hotpath::report().signatures) {
      if (!top || r.hex != top->hex) continue;
      out["hot_at"] = r.hot_at_iteration;
      out["first_fused"] = r.first_fused_iteration;
      out["governor_break_even"] = r.break_even_actual;
    }
    hotpath::disable_hot_path_detection();
  }
  std::ofstream(json_path) << out.dump(1) << "\n";
  std::printf("%s: %d steps, first %.3f ms, median %.3f ms%s\n",
              out["label"].get<std::string>().c_str(), steps, ms.front(), bench::median(ms),
              out.contains("hot_at")
                  ? (", hot at " + std::to_string(out["hot_at"].get<long long>()) +
                     ", fused from " + std::to_string(out["first_fused"].get<long long>()))
                        .c_str()
                  : "");
  return 0;
}
