// The plans an executor holds: made when a signature turns hot (built and compiled on the worker),
// configured by the governor through the session (set_active, revert), read by stats().
// Running them is executor.cpp's.
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "compile/worker.h"
#include "exec/executor.h"
#include "exec/planner.h"
#include "exec/replay.h"
#include "trace/signature.h"
#include "trace/trace_file.h"

namespace hotpath::detail {

Executor::Executor(Recorder& recorder, const Config& config)
    : recorder_(recorder), config_(config), cache_(cache_dir(config.cache_dir)) {
  if (config.fuse) start_nvrtc(cache_);
}

Executor::~Executor() = default;

void Executor::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  config_ = config;
  cache_ = KernelCache(cache_dir(config.cache_dir));
  if (config.fuse) start_nvrtc(cache_);
}

void Executor::on_hot(HotTrace&& trace, const std::optional<PlanPrior>& remembered) {
  auto plan = std::make_shared<Plan>();
  plan->signature = trace.signature;
  plan->hex = short_hex(trace.signature);
  Config config;
  KernelCache cache{""};
  {
    std::lock_guard<std::mutex> lock(mu_);
    config = config_;
    cache = cache_;
    if (!config.fuse || plans_.count(trace.signature)) return;
    // A known winner's plan built before it was seen, from the trace an earlier run kept.
    if (take_prepared(trace, remembered && remembered->compile)) return;
    plans_[plan->signature] = plan;  // never analysed twice; not armed before it is ready
  }
  if (remembered && !remembered->compile) {
    plan->reverted = true;
    plan->remembered = "known loser from an earlier run";
    plan->reason = remembered->reason.empty() ? plan->remembered : remembered->reason;
    log_info(concat("hotpath: signature ", plan->hex, " is a known loser (", plan->reason,
                    "); it runs eagerly, nothing is compiled"));
    plan->compiled = true;
    plan->ready = true;  // nothing to compile; never armed
    return;
  }
  const bool cuda = reads_cuda(trace);
  auto ready = ready_plans_;
  if (!cuda) {
    // CPU plans (Config::fuse_cpu) have nothing to compile: built here, ready at once.
    build_plan(*plan, trace, remembered, config);
    plan->counted = !plan->groups.empty();
    plan->compiled = true;
    plan->ready = true;
    if (plan->counted) ++*ready;
    return;
  }
  // Everything else happens on the worker, so the training thread does not wait: analysis,
  // code generation, NVRTC (or the disk cache) and module loads.
  auto shared_trace = std::make_shared<HotTrace>(std::move(trace));
  // Until its kernels are in, a compile ahead of another signature stops for it (exec/ahead.h).
  auto book = ahead_;
  {
    std::lock_guard<std::mutex> lock(book->mu);
    book->plans_waiting.insert(plan->signature);
    book->planned.insert(plan->signature);
  }
  CompileWorker::instance().submit([plan, shared_trace, remembered, config, cache, ready, book] {
    struct Done {  // however the job ends
      Executor::AheadBook& book;
      std::uint64_t signature;
      ~Done() {
        std::lock_guard<std::mutex> lock(book.mu);
        book.plans_waiting.erase(book.plans_waiting.find(signature));
      }
    } done{*book, plan->signature};
    build_plan(*plan, *shared_trace, remembered, config);
    // The trace is kept beside the verdicts, for a later run to build the plan before it sees
    // the signature (Config::prepare_known).
    if (config.remember && !cache.dir().empty() && !plan->groups.empty() &&
        plan->device_index >= 0) {
      if (const std::string error = save_trace(cache.dir(), *shared_trace); !error.empty())
        log_debug(concat("hotpath: signature ", plan->hex, ": its trace is not kept: ", error));
    }
    // Ready before its kernels compile: the interpreter runs the groups meanwhile, if it is
    // loaded by then (else the plan picks it up at a later iteration start: Executor::try_arm).
    if (!plan->groups.empty() && plan->device_index >= 0) {
      request_interpreter(plan->device_index, cache);
      plan->interpreter = loaded_interpreter(plan->device_index);
    }
    plan->counted = !plan->groups.empty();
    plan->ready = true;
    if (plan->counted) ++*ready;
    if (!plan->groups.empty()) {
      // Its kernels may be compiling ahead on the other worker: waited for, they are cache hits.
      const double waited = book->wait_for(plan->signature);
      if (waited > 0.05)
        log_debug(concat("hotpath: signature ", plan->hex, ": waited ", ms_text(waited),
                         " for its kernels compiling ahead"));
      compile(*plan, cache, config.compile_kernels);
    }
    plan->compiled = true;
  });
}

void Executor::release_buffers() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [signature, plan] : plans_) {
    for (PlanOp& op : plan->ops) op.slots.assign(op.slots.size(), nullptr);
    for (PlanGroup& g : plan->groups) g.workspace = at::Tensor();
    drop_replay(*plan, "");
  }
}

void Executor::fill_stats(Stats& s) const {
  {
    std::lock_guard<std::mutex> lock(ahead_->mu);
    for (auto& sig : s.signatures) {
      if (!ahead_->done.count(sig.id)) continue;
      const AheadResult& r = ahead_->results.at(sig.id);
      sig.fusion.kernels_ahead = static_cast<int>(r.compiled);
      sig.fusion.ahead_ms = r.ms;
      if (r.cancelled) {
        sig.fusion.ahead_note = concat("stopped after ", r.compiled, " of ", r.kernels,
                                       " kernels: a hot plan needed the CPU");
      } else if (r.failed > 0) {
        sig.fusion.ahead_note = concat(r.failed, " of ", r.kernels, " kernels failed to compile");
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& sig : s.signatures) {
    const auto it = plans_.find(sig.id);
    if (it == plans_.end()) continue;
    const Plan& p = *it->second;
    sig.fusion.planned = true;
    sig.fusion.ready = p.ready;
    sig.fusion.stall_ms = p.stall_ms;
    if (!p.ready) continue;  // the worker is still building it: nothing else to read yet
    const bool compiled = p.compiled.load(std::memory_order_acquire);
    sig.fusion.compiled = compiled;
    if (compiled) {
      sig.fusion.compile_ms = p.compile_ms;
      sig.fusion.kernels_from_cache = p.from_cache;
    }
    sig.fusion.first_fused_iteration = p.first_fused_iteration;
    sig.fusion.fused_iterations = p.fused_iterations;
    sig.fusion.divergences = p.divergences;
    sig.fusion.last_divergence = p.last_divergence;
    sig.fusion.restored = p.restored;
    sig.fusion.reverted = p.reverted;
    sig.fusion.reason = p.reason;
    sig.fusion.remembered = p.remembered;
    sig.fusion.prepared = p.prepared;
    sig.fusion.stand_in_off = p.stand_in_off;
    sig.fusion.stand_in_kept = p.stand_in_kept;
    sig.fusion.replayed_iterations = p.replayed + (p.replay ? p.replay->replayed() : 0);
    sig.fusion.replay_rescued = p.replay_rescued + (p.replay ? p.replay->rescued() : 0);
    sig.fusion.replay_graphs = p.replay ? p.replay->graphs() : 0;
    sig.fusion.replay_copy_nodes = p.replay ? p.replay->static_nodes() : 0;
    sig.fusion.replay_repointed = p.replay_repointed + (p.replay ? p.replay->repointed() : 0);
    sig.fusion.replay_pool_bytes = p.replay ? p.replay->pool_bytes() : p.replay_pool_bytes;
    sig.fusion.replay_launcher_launches =
        p.replay_launcher_launches + (p.replay ? p.replay->launcher_launches() : 0);
    sig.fusion.replay_launcher_ms =
        p.replay_launcher_ms + (p.replay ? p.replay->launcher_us() * 1e-3 : 0.0);
    sig.fusion.replay_premade_outputs =
        p.replay_premade_outputs + (p.replay ? p.replay->premade_outputs() : 0);
    sig.fusion.replay_off = p.replay_off;
    const double capture_ms = p.replay ? p.replay->capture_ms() : 0.0;
    sig.fusion.replay_captures = p.replay_captures + (capture_ms > 0 ? 1 : 0);
    sig.fusion.replay_capture_ms = p.replay_capture_ms + capture_ms;
    sig.fusion.replay_capture_segments =
        capture_ms > 0 ? p.replay->capture_cost().mallocs : p.replay_capture_segments;
    for (const PlanGroup& g : p.groups) {
      GroupStats gs;
      gs.name = g.name;
      gs.ops = static_cast<int>(g.ops.size());
      gs.gpu = g.gpu;
      gs.interpretable = g.spec.interpretable();
      if (g.state->load(std::memory_order_acquire) != kCompiling) {
        gs.compiled = g.error.empty();
        gs.compile_ms = g.compile_ms;
        gs.from_cache = g.from_cache;
        gs.error = g.error;
      }
      if (g.eager_only && gs.error.empty()) gs.error = "a launch failed";
      gs.launches = g.launches;
      gs.interpreted = g.interpreted;
      gs.eager_runs = g.eager_runs;
      gs.checks = g.checks;
      gs.max_rel_error = g.max_rel_error;
      gs.verify_failures = g.verify_failures;
      gs.first_failure = g.first_failure;
      gs.active = g.active && !p.reverted;
      sig.fusion.fused_ops += gs.ops;
      sig.fusion.groups.push_back(std::move(gs));
    }
  }
}

void Executor::waited_unarmed(Plan& plan, std::int64_t first) {
  // Nothing of the plan can run in this iteration (its kernels compiling, the stand-in off or in
  // the trial's eager turn): it runs eagerly without the plan, as the iterations before the plan
  // did. Armed, it would defer each group's ops only to run them eagerly at the group's end (an
  // H200's MLP step: 1.0-1.4 ms so, 0.65 ms plain). The governor still sees it as the plan's
  // iteration that waited (the stand-in's trial counts it on the eager side).
  for (PlanGroup& g : plan.groups) {
    if (g.active && !g.eager_only) ++g.eager_runs;
  }
  completed_[completed_next_++ % std::size(completed_)] =
      Completed{plan.signature,     first,
                plan.epoch,
                /*fused=*/false,    /*final_tiers=*/false,
                /*diverged=*/false, 0,
                /*stood_in=*/false,
                /*waited=*/true};
}

Executor::RunInfo Executor::ran(std::uint64_t signature, std::int64_t first) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Completed& c : completed_) {
    if (c.first == first && (c.signature == signature || c.diverged))
      return RunInfo{c.fused,   c.epoch,    c.final_tiers, c.diverged ? c.signature : 0,
                     c.ops,     c.stood_in, c.waited,      c.replayed,
                     c.captured};
  }
  return RunInfo{};
}

std::int64_t Executor::set_active(std::uint64_t signature, const std::vector<bool>& active,
                                  const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return 0;
  it->second->requested_active = active;
  if (!reason.empty()) it->second->reason = reason;
  return ++it->second->requested_epoch;
}

void Executor::revert(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return;
  Plan& plan = *it->second;
  plan.reverted = true;
  plan.reason = reason;
  if (armed_ != it->second) uncount_if_reverted(plan);  // else when it is disarmed
}

void Executor::no_stand_in(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return;
  it->second->requested_stand_in = StandIn::kOff;
  it->second->stand_in_off = reason;
}

void Executor::no_replay(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it != plans_.end()) it->second->requested_replay_off = reason;
}

void Executor::release_replay(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end() || !it->second->replay_held) return;
  it->second->replay_held = false;
  log_info(concat("hotpath: signature ", it->second->hex, ": its capture for CUDA graph replay ",
                  "goes ahead (", reason, ")"));
}

void Executor::keep_stand_in(std::uint64_t signature, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end() || it->second->requested_stand_in == StandIn::kOff) return;
  it->second->requested_stand_in = StandIn::kOn;
  it->second->stand_in_kept = reason;
}

void Executor::uncount_if_reverted(Plan& plan) {
  // A plan that can no longer run stops counting as ready: with none left, ops skip the
  // executor's lock altogether.
  if (plan.reverted && plan.ready && plan.counted) {
    plan.counted = false;
    --*ready_plans_;
  }
}

std::vector<std::uint64_t> Executor::pending_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::uint64_t> out;
  for (const auto& [sig, p] : plans_)
    if (!p->ready) out.push_back(sig);
  return out;
}

bool Executor::waits_on_interpreter() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [sig, p] : plans_) {
    if (!p->ready || p->reverted || p->device_index < 0) continue;  // groups: set before ready
    for (const PlanGroup& g : p->groups)
      if (g.spec.interpretable() && g.state->load(std::memory_order_acquire) != kLoaded)
        return true;
  }
  return false;
}

void Executor::add_stall(const std::vector<std::uint64_t>& signatures, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::uint64_t sig : signatures) {
    const auto it = plans_.find(sig);
    if (it != plans_.end()) it->second->stall_ms += ms;
  }
}

bool Executor::plan_live(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  return it != plans_.end() && !it->second->reverted &&
         (!it->second->ready || !it->second->groups.empty());
}

std::pair<std::int64_t, std::int64_t> Executor::replay_pool(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  if (it == plans_.end()) return {0, 0};
  const Plan& p = *it->second;
  if (p.replay && p.replay->ready()) return {p.replay->pool_bytes(), p.replay->pool_small_bytes()};
  return {p.replay_pool_bytes, p.replay_pool_small_bytes};
}

std::shared_ptr<const Plan> Executor::plan(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(signature);
  return it == plans_.end() ? nullptr : it->second;
}

}  // namespace hotpath::detail
