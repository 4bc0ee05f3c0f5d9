// hotpath: automatic hot-path detection for LibTorch training loops.
//
//   hotpath::enable_hot_path_detection(10);  // the only required line
//   for (...) { ordinary LibTorch training step }
//
// This header is deliberately free of LibTorch headers so that including it costs nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/error.h"  // Error, LogLevel

namespace hotpath {

struct Config {
  // A signature becomes hot once this many iterations have produced it. Must be >= 1.
  int threshold = 10;
  // Detect iteration boundaries from the op stream when the loop never calls step() or uses
  // Iteration. Explicit boundaries always win once seen.
  bool auto_detect_period = true;
  // Longest loop body (in ops) the period detector looks for.
  std::int64_t max_period_ops = 65536;
  LogLevel log_level = LogLevel::Info;
  // Each log line starts with the time of day to the microsecond, to line hotpath's lines up
  // with a program's own output (HOTPATH_LOG_TIME=1).
  bool log_time = false;
  // Generate, compile and run fused kernels for hot signatures (CUDA tensors). HOTPATH_FUSE=0
  // turns it off (detection and statistics only).
  bool fuse = true;
  // Also run plans for CPU tensors, with ATen's kernels executing each fused group. Makes no loop
  // faster; it exercises the plan, guards and divergence handling without a GPU.
  bool fuse_cpu = false;
  // Where compiled kernels persist between runs. Empty: $HOTPATH_CACHE_DIR, else
  // $XDG_CACHE_HOME/hotpath, else ~/.cache/hotpath.
  std::string cache_dir;
  // Checks every fused kernel launch against eager ATen on the same inputs (fresh outputs are
  // poisoned with NaN first) and records the relative error per group in stats(). Slow: for tests
  // and benchmarks' correctness checks. HOTPATH_VERIFY=1.
  bool verify = false;
  // Regression revert (the governor). A signature whose fused iterations' median over this many
  // iterations is slower than its eager median by more than `revert_margin` (a fraction) goes
  // back to eager; where dropping single groups makes it faster, only those groups go.
  // HOTPATH_REVERT_WINDOW, HOTPATH_REVERT_MARGIN.
  int revert_window = 20;
  double revert_margin = 0.03;
  // Remember verdicts in cache_dir: a later run compiles known winners as soon as their
  // signature appears and never compiles known losers. HOTPATH_REMEMBER (0/1).
  bool remember = true;
  // Compile each fused group's own kernel (NVRTC, on the worker). A hot signature's groups run
  // on the interpreter kernel (one kernel, compiled once per device and cached) from the next
  // iteration on, until their own kernels are loaded. false: the interpreter only, no compile
  // per signature. HOTPATH_COMPILE_KERNELS (0/1).
  bool compile_kernels = true;
  // A signature's kernels start compiling in the background once it has come this many times in
  // a row, before it turns hot at `threshold`: its plan then finds them in the kernel cache
  // instead of waiting for NVRTC (a cold MLP+AdamW step spent 20-30 iterations on stand-ins
  // while its kernels compiled; on an H200's host they came 10-20 ms after hot when compiled from
  // its third iteration, 7-13 ms from its second). Nothing else happens early: the plan is built,
  // armed and judged at `threshold` as before. Such a compile stops between NVRTC programs while a
  // hot plan compiles; a signature that never turns hot has cost background CPU time and cache
  // entries only (in a row: one seen once an epoch, such as its last smaller batch, is not
  // compiled). 0, or a count >= threshold: compile once hot. Needs a cache directory (cache_dir).
  // HOTPATH_COMPILE_AHEAD.
  int compile_ahead = 2;
  // A known winner's plan is built before its signature is seen: a run that remembers verdicts
  // also keeps the trace each GPU plan was built from (<cache_dir>/traces), and a later enable
  // builds the plans of the most recent known winners (up to 4) from theirs on the worker, their
  // kernels loaded from the cache (a plan with a kernel missing there is not built early). When the
  // signature turns hot at first sight and the trace the loop recorded agrees with the kept one
  // in everything the plan is built from, the plan is ready at once: fused from the next
  // iteration instead of a few later. Otherwise it is built from the loop's trace as before.
  // Needs `remember` and a cache directory. HOTPATH_PREPARE_KNOWN (0/1).
  bool prepare_known = true;
  // Where interception buys nothing (no stable period, no signature that repeats, nothing to
  // fuse, every plan reverted), take the hook out of the thread's dispatch for a while (2 s, then
  // twice as long each time it still finds nothing, up to 64 s) so that the loop runs at eager's
  // speed; stats() says when and why. HOTPATH_STAND_ASIDE (0/1).
  bool stand_aside = true;
  // Replay a plan's iterations as CUDA graphs once it has run unchanged for a while (its fused
  // kernels and the eager kernels between them, one graph per stretch between ops the host waits
  // on): each op is then only guarded and handed its output, and the host's cost per op falls.
  // An iteration whose inputs move, or whose eager ops' scalars change, leaves replay for the
  // plan as it would leave a plan. HOTPATH_REPLAY (0/1).
  bool replay = true;
  // Ops per graph: a stretch is cut into graphs of about this many ops (where no fused group is
  // pending), each launched as soon as the host has gone through its ops, so that the GPU works
  // while the host goes on; 0: one graph per stretch. HOTPATH_REPLAY_GRAPH_OPS.
  int replay_graph_ops = 16;
  // The replay fast lane: an op of a replayed iteration is guarded against the capture without a
  // record of it being built (its metadata hashed, its data flow looked up, the plan's key kept);
  // off, replayed ops are recorded as every other op is. HOTPATH_REPLAY_FAST_LANE (0/1).
  bool replay_fast_lane = true;
  // A thread of hotpath's issues a replay's graph launches (and its graph nodes' new parameters)
  // for the training loop's thread, which goes on with the next op: a launch costs that thread
  // 4-6 us where the driver's code has left its caches, as it has between two launches of a
  // training loop. The thread spins for about 0.5 ms after each launch for the next one (a core
  // busy while a loop replays), then sleeps; the loop's thread waits for it before anything else
  // runs on the GPU and at each replayed iteration's end. Off, or on one CPU (the thread's
  // affinity mask), the loop's thread launches them. HOTPATH_REPLAY_LAUNCHER (0/1).
  bool replay_launcher = true;
  // Time what the hook itself costs the host per op (a few clock reads an op): stats() then says
  // how long the ops it saw spent in hotpath, apart from the ATen work it ran below itself.
  // HOTPATH_HOST_PROFILE (0/1).
  bool host_profile = false;
};

// Reads HOTPATH_THRESHOLD, HOTPATH_AUTO_PERIOD (0/1), HOTPATH_MAX_PERIOD, HOTPATH_LOG_LEVEL
// (trace|debug|info|warn|error|off), HOTPATH_FUSE (0/1), HOTPATH_FUSE_CPU (0/1) and
// HOTPATH_CACHE_DIR, HOTPATH_VERIFY (0/1), HOTPATH_REVERT_WINDOW, HOTPATH_REVERT_MARGIN,
// HOTPATH_REMEMBER (0/1), HOTPATH_COMPILE_KERNELS (0/1), HOTPATH_COMPILE_AHEAD,
// HOTPATH_STAND_ASIDE (0/1) and
// HOTPATH_REPLAY (0/1), HOTPATH_REPLAY_GRAPH_OPS, HOTPATH_REPLAY_FAST_LANE (0/1),
// HOTPATH_REPLAY_LAUNCHER (0/1),
// HOTPATH_HOST_PROFILE (0/1) on top of `base`. Throws hotpath::Error on a value it cannot use,
// naming the variable and the value.
Config config_from_env(Config base = Config{});

// Starts intercepting the ATen ops of the calling thread (and the autograd work it launches).
// The environment overrides the argument (see config_from_env). Calling it again on the same
// thread applies the new configuration and keeps what was recorded so far.
// Throws hotpath::Error if the threshold is < 1 or the dispatch key hotpath needs is taken.
void enable_hot_path_detection(int threshold = 10);
void enable_hot_path_detection(const Config& config);

// Stops intercepting on the calling thread: plain eager behaviour. stats() stays readable.
void disable_hot_path_detection();

// True while the calling thread is intercepted.
bool is_enabled();

// Marks the end of one iteration and the start of the next. Optional: without it the loop's
// period is detected from the op stream. A no-op when detection is not enabled.
void step();

// RAII iteration marker: the ops between construction and destruction form one iteration.
class Iteration {
 public:
  Iteration();
  ~Iteration();
  Iteration(const Iteration&) = delete;
  Iteration& operator=(const Iteration&) = delete;
};

// RAII: the ops the calling thread runs while a Pause lives (and the autograd work they start)
// are not intercepted: they run plain eager, are not recorded and belong to no iteration. For
// work beside the loop that should neither count nor disturb it: evaluation, logging, a
// comparison run of the same model. Pauses nest; a no-op when detection is not enabled.
class Pause {
 public:
  Pause();
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  bool was_excluded_;
};

// One fused group of a hot signature's plan.
struct GroupStats {
  std::string name;  // what it fuses, e.g. "mul_add_addcmul_sqrt_div_addcdiv"
  int ops = 0;
  bool gpu = false;              // a CUDA kernel; false: CPU group run by ATen (Config::fuse_cpu)
  bool interpretable = false;    // the interpreter kernel can run it
  bool compiled = false;         // its own kernel is loaded (and runs from now on)
  double compile_ms = 0;         // NVRTC time on the worker thread (or cache load)
  bool from_cache = false;       // loaded from the on-disk cache
  std::string error;             // why its kernel is not used (compile/load failure)
  std::int64_t launches = 0;     // kernel launches
  std::int64_t interpreted = 0;  // ... of them by the interpreter (before its kernel was loaded)
  std::int64_t eager_runs = 0;   // times its ops ran eagerly instead (CPU, divergence, hazards)
  std::int64_t checks = 0;       // launches verified against eager (Config::verify)
  // Largest max|fused - eager| / max|eager| over those checks (infinity: NaN or Inf where eager
  // has none, or the other way round), and the launches beyond the tolerance (1e-5 for fp32
  // outputs, 1e-2 for fp16/bf16) with the log line of the first (group, ops, element, values).
  double max_rel_error = 0;
  std::int64_t verify_failures = 0;
  std::string first_failure;
  bool active = true;  // false: reverted (its ops run eagerly); see FusionStats::reason
};

struct FusionStats {
  bool planned = false;   // a plan was built when the signature turned hot
  bool ready = false;     // built: it runs from the next iteration (interpreter meanwhile)
  bool compiled = false;  // every group's own kernel is loaded or has failed
  int fused_ops = 0;      // ops of an iteration covered by fused groups
  double compile_ms = 0;  // worker wall time for all of the plan's kernels
  int kernels_from_cache = 0;
  // Compiled ahead of hot (Config::compile_ahead): kernels NVRTC compiled into the cache before
  // the plan was built (the plan counts them among kernels_from_cache), that compile's wall
  // time, and "" or why it stopped short ("a hot plan needed the CPU", a failure).
  int kernels_ahead = 0;
  double ahead_ms = 0;
  std::string ahead_note;
  // Built before the signature was seen, from the trace an earlier run kept
  // (Config::prepare_known).
  bool prepared = false;
  std::int64_t first_fused_iteration = -1;  // iteration in which fused kernels first ran
  std::int64_t fused_iterations = 0;        // iterations that ran the whole plan
  std::int64_t divergences = 0;             // iterations that left the plan part-way
  // The last of them: "iteration 21, op 8695: expected aten::mul_.Scalar, got ... with other
  // inputs: input 0: expected ..., got ..." (what the guard saw), or empty.
  std::string last_divergence;
  // Values a kernel skipped (the recorded iterations never kept them) that the program held after
  // all, so they were computed eagerly; a steady loop has none.
  std::int64_t restored = 0;
  double stall_ms = 0;  // the training thread waited for compiles and module loads
  // The governor's decision: the whole signature (or some groups) went back to eager, and why.
  bool reverted = false;
  std::string reason;
  // The plan came from a verdict of an earlier run ("known winner" / "known loser").
  std::string remembered;
  // The interpreter standing in for kernels still compiling starts on trial (every fourth
  // iteration runs those groups eagerly) and is judged against them side by side: why it was
  // turned off (slower: those groups run eagerly until their kernels are in), or why it stands in
  // every iteration (not slower); both empty while on trial, or where it was never needed.
  std::string stand_in_off;
  std::string stand_in_kept;
  // CUDA graph replay (Config::replay): iterations replayed, the graphs of the capture in use
  // (stretches between ops the host waits on, cut into graphs of about replay_graph_ops ops),
  // the device memory their pool reserved, the captures made and their host time in all (each
  // the captured iteration's, its own work included, until its graphs were instantiated),
  // values the program still held where a replay would overwrite them (copied out first), and
  // why replay is off for this signature, if it is ("" while it waits to capture or replays).
  // Inputs that may move between iterations (a batch) are read from copies that the graphs
  // refresh themselves: replay_copy_nodes of them in the graphs now, and how many times in all a
  // replay pointed one at the input's new address (none where the input stays put).
  // replay_capture_segments: the caching allocator segments (cudaMalloc calls) the last capture
  // opened; where an earlier run said how large the pool grew, the capture grows it to that size
  // first (one large block, and the small blocks' segments), and these count among them.
  // Config::replay_launcher: the graph launches its thread issued for the loop's thread, and
  // that thread's time issuing them (host time beside the loop's, on another core), and the
  // outputs handed out that it had made ahead (each a tensor the loop's thread did not make).
  std::int64_t replayed_iterations = 0;
  int replay_graphs = 0;
  std::int64_t replay_pool_bytes = 0;
  int replay_captures = 0;
  double replay_capture_ms = 0;
  std::int64_t replay_capture_segments = 0;
  std::int64_t replay_rescued = 0;
  int replay_copy_nodes = 0;
  std::int64_t replay_repointed = 0;
  std::int64_t replay_launcher_launches = 0;
  double replay_launcher_ms = 0;
  std::int64_t replay_premade_outputs = 0;
  std::string replay_off;
  std::vector<GroupStats> groups;
};

struct SignatureStats {
  std::uint64_t id = 0;    // 64-bit signature hash
  std::string hex;         // short form used in logs, e.g. "3f9a0c1d"
  std::int64_t count = 0;  // iterations that produced this signature
  std::int64_t ops_per_iteration = 0;
  bool hot = false;
  std::int64_t hot_at_iteration = -1;  // iteration index (1-based, per thread) it turned hot at
  std::vector<std::string> op_names;   // the ops of its first iteration, e.g. "aten::addmm"
  FusionStats fusion;
};

enum class BoundaryMode { None, Explicit, Auto };

struct Stats {
  bool enabled = false;
  int threshold = 0;
  BoundaryMode boundaries = BoundaryMode::None;
  std::int64_t detected_period = 0;  // ops per iteration found by the detector (Auto mode)
  // Auto mode, training loops: forward/backward passes per step found at the forward passes
  // (1 for most loops, 3 for a GAN's discriminator-real, discriminator-fake, generator).
  int passes_per_step = 0;
  std::int64_t iterations = 0;      // completed iterations
  std::int64_t ops_seen = 0;        // top-level ops intercepted for this thread
  std::int64_t ops_unassigned = 0;  // ops dropped: outside Iteration scopes or before a period
  // Ops of training steps' tails (data preparation, host syncs, logging after a plan's
  // iteration) that the hook ran with a light record only.
  std::int64_t ops_tail_lane = 0;
  std::vector<SignatureStats> signatures;  // in order of first appearance
  // Standing aside: where interception bought nothing (no stable period, no signature that
  // repeats, nothing to fuse, every plan reverted) hotpath took its hook out of the thread's
  // dispatch for a while, so that the loop ran at eager's speed, and looked again later.
  std::int64_t stood_aside = 0;  // times
  double aside_seconds = 0;      // planned pauses, in total
  std::string aside_reason;      // why, the last time
  bool standing_aside = false;   // now
  // Config::host_profile: the ops the hook timed (on every thread working for this one) since
  // detection was first enabled, the hook's own time over them (recording, guards, plans,
  // hotpath's launches) and the time of the ops it ran below itself (ATen's dispatch under the
  // hook and its kernels). The rest of an op's host cost (the C++ API, autograd, the dispatch
  // down to the hook) is LibTorch's, with or without hotpath.
  std::int64_t host_ops = 0;
  double host_hook_us = 0, host_below_us = 0;
  // ... of host_hook_us: building each op's record (metadata, hash), its data flow and the step
  // detector, a plan's guard, deferring the op into a fused group or handing out its replayed
  // output, launching hotpath's kernels (or setting a replayed graph's parameters), copying moving
  // inputs where a replay's graphs read them, launching those graphs, completing and keeping the
  // record (with what an iteration's end sets off: the governor, new plans).
  double host_record_us = 0, host_flow_us = 0, host_guard_us = 0, host_defer_us = 0,
         host_launch_us = 0, host_copy_us = 0, host_graph_us = 0, host_commit_us = 0;

  std::int64_t hot_signatures() const;
  // The signature of the most recent completed iteration (id 0 when there is none yet).
  SignatureStats last() const;
  std::uint64_t last_signature = 0;
};

// What hotpath has seen on the calling thread (the thread that enabled detection).
Stats stats();

// A short human-readable summary of stats(), a few lines.
std::string format_stats(const Stats& s);

// Did compiling pay off? Per signature: the eager baseline (median of its iterations before the
// plan ran) against what this run measured, split into warm-up (the iterations before fused
// kernels first ran) and steady state; compile cost; break-even; a verdict. Times come from
// iteration boundaries: CUDA events for loops on the GPU, a steady clock on the CPU. The "no
// compile" column is the eager median times the iteration count (those iterations did not run
// eagerly, so it is a projection).
enum class Verdict {
  Pending,      // not enough measurements yet
  NotCompiled,  // cold, nothing to fuse, or fusion off: it ran eagerly throughout
  CompileWins,
  EagerWins,  // reverted (or a known loser)
  Even,       // within the margin either way
};

struct SignatureReport {
  std::string hex;
  std::int64_t ops_per_iteration = 0;
  std::int64_t iterations = 0;        // of this signature
  std::int64_t timed_iterations = 0;  // with a time (auto-detected loops: once the period is known)
  std::int64_t hot_at_iteration = -1;       // per-signature iteration count when it turned hot
  std::int64_t first_fused_iteration = -1;  // per-signature iteration count
  bool cuda_events = false;                 // times from CUDA events (else a steady clock)
  double eager_median_ms = 0;               // baseline
  bool baseline_remembered = false;         // ... from an earlier run (not re-measured yet)
  // ... timed plain: a block of iterations with hotpath's hook out of the dispatch, between
  // fused ones (else under the hook, before the plan ran: interception's cost included).
  bool baseline_plain = false;
  // ... else re-timed under the hook with every fused group off (plain eager could not be timed
  // in this loop), which includes what interception costs every op.
  bool baseline_rebased = false;
  int plain_blocks = 0;  // plain-eager blocks run for it (a Pause may cut one short)
  // ... of them, counted by the iteration marker in an unmarked loop (the loop ran as without
  // hotpath, but for one small kernel per call of the iteration's first operator; the others
  // were counted by a RecordFunction callback, whose cost on every op their times include)
  int plain_blocks_marked = 0;
  int plain_blocks_dropped = 0;  // ... dropped: the marker's count proved wrong
  // ... dropped: the marker's end could not be confirmed as an iteration start (the iteration
  // after the block had other inputs, as a loader's last short batch does, or a stretch with
  // grad mode off, an evaluation, ran inside the block); the marker counts the next block
  int plain_blocks_unconfirmed = 0;
  double fused_median_ms = 0;    // fused iterations, current plan
  // The steady-state speedup as the governor last judged it: windows of fused iterations, each
  // against the eager iterations timed beside it (plain eager where the loop allows), pooled
  // while noise left it undecided; with its 95% bootstrap interval and the samples a side it
  // rests on (0: no verdict yet, or one on a remembered baseline).
  double speedup_judged = 0, speedup_low = 0, speedup_high = 0;
  std::int64_t speedup_samples_fused = 0, speedup_samples_eager = 0;
  // ... and the rounds (a window and the eager iterations timed beside it) it pools. With one
  // round the interval covers the iterations within it, not how far another plain-eager block may
  // fall (a host whose speed moves between blocks); rounds kept as evidence widen it by how far
  // they scatter.
  std::int64_t speedup_rounds = 0;
  // Iterations that ran the plan whole, and that started on it and left it part-way (each
  // finished eagerly; its ops differ from the plan's, so it may be counted under another
  // signature, and it is not in the judged figure: a plan that is often left speeds the loop up
  // less than speedup_judged says).
  std::int64_t fused_iterations = 0, left_plan = 0;
  // Eager under the hook (the iterations before the plan ran, in a process still warming up):
  // against a plain baseline, what the hook costs a loop it does not fuse. 0: not timed.
  double hooked_eager_ms = 0;
  // The timed iterations before the signature turned hot: they ran eagerly under the hook, and
  // the first of them pay for the process's own start (CUDA's context, cuBLAS's handles, the
  // allocator's first blocks) as plain eager would; the report leaves them out of its ratios.
  std::int64_t before_hot_iterations = 0;
  double before_hot_ms = 0;
  // Warm-up: the timed iterations from hot until fused kernels first ran (what the compile cost
  // the loop); interim: those after it that ran before every group had its own kernel (the
  // interpreter or the groups' eager ops standing in for kernels still compiling, the iteration
  // captured as CUDA graphs); steady: the rest.
  std::int64_t warmup_iterations = 0;
  double warmup_ms = 0;
  std::int64_t interim_iterations = 0;
  double interim_ms = 0;
  std::int64_t steady_iterations = 0;
  double steady_ms = 0;
  // The iterations of the governor's plain-eager blocks (hotpath out of the dispatch, to time
  // eager beside the fused path): the loop ran them at eager's pace, and the totals count them
  // on both sides as they ran.
  std::int64_t plain_iterations = 0;
  double plain_ms = 0;
  double compile_ms = 0;  // worker wall time for the plan's kernels
  double stall_ms = 0;    // time the training thread waited for compilation and module loads
  int kernels = 0;
  int kernels_from_cache = 0;
  int kernels_ahead = 0;  // compiled before hot (FusionStats::kernels_ahead), in the cache then
  // Iteration (of this signature) at which the time saved repays the compile cost the loop paid:
  // projected from the medians, and as it happened. -1: not (yet) reached.
  std::int64_t break_even_projected = -1;
  std::int64_t break_even_actual = -1;
  // The plain-eager blocks' medians, lowest and highest over the run (0 with fewer than two
  // blocks): how far the machine's speed moved while the run was timed. A side-by-side timed at
  // another moment can read a speedup as far from this run's as they are apart.
  double plain_low_ms = 0, plain_high_ms = 0;
  // The mean of the plain-eager iterations the governor took as samples (0: none). Beside the
  // steady state's mean (steady_ms / steady_iterations), it is what the loop's time adds up to:
  // the judged figure compares medians, which leave out a tail of slow iterations (the
  // DataLoader convnet on an H200 judged 1.44x where its cross-check read 1.25x, and its
  // report's table put the steady state's mean against the plain blocks' at 1.23x).
  double plain_mean_ms = 0;
  Verdict verdict = Verdict::Pending;
  std::string reason;  // for reverts, known winners/losers, not compiled
  // The governor has judged this run's fused path against an eager baseline timed in this run
  // and is no longer measuring it (kept or reverted); false while it still times windows,
  // blocks or eager again, or rests on a verdict remembered from an earlier run.
  bool judged = false;
};

struct Report {
  std::vector<SignatureReport> signatures;  // in order of first appearance
};

// The calling thread's report (the thread that enabled detection).
Report report();

// The table for one signature, e.g.
//   Results                          No Compile     Compile    Speedup
//   Warm-up (first 12 iters):          10.2 ms      10.9 ms      0.94x
//   ...
//   VERDICT: COMPILE WINS (1.63x faster overall) · steady state 2.26x · break-even at iteration 12
std::string format_report(const SignatureReport& r);
// Every signature that ran more than once, and a one-line note for the rest.
std::string format_report(const Report& r);

// Blocks until every plan's kernel compiles started so far have finished (the loop never needs
// to: plans swap in at the next iteration start after their kernels are ready). The interpreter
// kernel, a stand-in for kernels still compiling, is waited for only where a kernel failed and
// the interpreter runs its group instead.
void wait_for_compilation();

// The LibTorch version hotpath was built against, e.g. "2.11.0".
std::string libtorch_version();

}  // namespace hotpath
