// Known winners' plans built before their signatures are seen (Config::prepare_known). A run that
// keeps a verdict keeps the trace its plan was built from (trace/trace_file.h); a later enable
// builds the newest winners' plans from theirs on the plans' worker, their kernels loaded from the
// cache, and on_hot takes one where the trace the loop recorded agrees with the kept one. A known
// winner is hot at first sight; its plan then took the worker 2-3 ms (analysis, kernel sources
// for the cache keys, module loads): on a 1 ms step, the three iterations before it was fused.
#include <atomic>
#include <chrono>

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "compile/worker.h"
#include "driver/cuda_driver.h"
#include "exec/executor.h"
#include "exec/planner.h"
#include "trace/trace_file.h"

namespace hotpath::detail {

struct Executor::Prepared {
  enum State { kBuilding, kUsable, kUnusable };
  HotTrace trace;  // as kept; not changed once the job is submitted
  std::shared_ptr<Plan> plan = std::make_shared<Plan>();
  // kUsable once the plan is built with GPU groups whose kernels are all in the cache (they may
  // still be loading: Plan::compiled says when they are in, as for any plan).
  std::atomic<int> state{kBuilding};
};

namespace {

// Why `plan` is not to be prepared (no GPU group, a kernel missing from the cache), or "".
std::string not_preparable(const Plan& plan, const KernelCache& cache) {
  if (plan.groups.empty() || plan.device_index < 0) return "it has no fused GPU group";
  for (const KernelJob& job : kernel_jobs(plan))
    if (!cache.load(job.key)) return concat("kernel ", job.name, " is not in the cache");
  return {};
}

}  // namespace

void Executor::prepare_known(const std::vector<std::pair<std::uint64_t, PlanPrior>>& winners) {
  Config config;
  KernelCache cache{""};
  {
    std::lock_guard<std::mutex> lock(mu_);
    config = config_;
    cache = cache_;
  }
  if (!config.fuse || !config.prepare_known || !config.remember || !config.compile_kernels ||
      cache.dir().empty() || !cuda_driver_available())
    return;
  for (const auto& [signature, prior] : winners) {
    if (!prior.compile) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (plans_.count(signature) || prepared_.count(signature)) continue;
    }
    std::string why;
    std::optional<HotTrace> trace = load_trace(cache.dir(), signature, &why);
    if (!trace) {
      log_debug(concat("hotpath: signature ", short_hex(signature),
                       " (a known winner) is not prepared before it is seen: ", why));
      continue;
    }
    if (!reads_cuda(*trace)) continue;  // a CPU plan is built at hot at once
    auto p = std::make_shared<Prepared>();
    p->trace = std::move(*trace);
    p->plan->signature = signature;
    p->plan->hex = short_hex(signature);
    {
      std::lock_guard<std::mutex> lock(mu_);
      prepared_[signature] = p;
    }
    CompileWorker::instance().submit([p, prior = prior, config, cache] {
      Plan& plan = *p->plan;
      try {
        const auto t0 = std::chrono::steady_clock::now();
        const int fused_ops = analyse_plan(plan, p->trace, prior, config, std::nullopt);
        if (const std::string why = not_preparable(plan, cache); !why.empty()) {
          p->state = Prepared::kUnusable;
          log_debug(concat("hotpath: signature ", plan.hex, " (a known winner) is not prepared ",
                           "before it is seen (", why, "); its plan is built when it turns hot"));
          return;
        }
        const double built_ms = ms_since(t0);
        // Then as on_hot's job: the interpreter, and the kernels (cache hits) loaded.
        request_interpreter(plan.device_index, cache);
        plan.interpreter = loaded_interpreter(plan.device_index);
        p->state = Prepared::kUsable;
        log_info(concat("hotpath: signature ", plan.hex, " (a known winner): plan built before it ",
                        "is seen, from the trace an earlier run kept: ", plan.groups.size(),
                        " fused group(s) cover ", fused_ops, " of ", p->trace.ops.size(),
                        " ops (built in ", ms_text(built_ms), ")"));
        compile(plan, cache, config.compile_kernels);
        plan.compiled = true;
      } catch (const std::exception& e) {
        if (p->state.load() == Prepared::kUsable) throw;  // as any plan's job: logged there
        p->state = Prepared::kUnusable;
        log_debug(concat("hotpath: signature ", plan.hex, " (a known winner) is not prepared ",
                         "before it is seen: ", e.what()));
      }
    });
  }
}

std::shared_ptr<Plan> Executor::take_prepared(const HotTrace& trace, bool known) {
  const auto it = prepared_.find(trace.signature);
  if (it == prepared_.end()) return nullptr;
  const std::shared_ptr<Prepared> p = it->second;
  prepared_.erase(it);  // taken or dropped: a signature turns hot once
  const std::string hex = short_hex(trace.signature);
  if (!known) return nullptr;  // its verdict changed since (a test's store, another process's)
  if (p->state.load() != Prepared::kUsable) {
    log_debug(concat("hotpath: signature ", hex, ": its plan prepared before it was seen is ",
                     p->state.load() == Prepared::kBuilding ? "still being built" : "unusable",
                     "; built from the loop's trace"));
    return nullptr;
  }
  // Which outputs were held matters where the plan's groups read it: their members' outputs.
  std::vector<bool> members(p->plan->ops.size());
  for (std::size_t i = 0; i < members.size(); ++i) members[i] = p->plan->ops[i].group >= 0;
  if (const std::string diff = plan_input_difference(p->trace, trace, &members); !diff.empty()) {
    log_info(concat("hotpath: signature ", hex, ": the trace an earlier run kept differs from the ",
                    "loop's (", diff, "); its plan is built from the loop's"));
    return nullptr;
  }
  Plan& plan = *p->plan;
  plan.prepared = true;
  plan.remembered = "known winner from an earlier run, its plan built before it was seen";
  plan.counted = true;
  plans_[trace.signature] = p->plan;
  ++*ready_plans_;
  plan.ready = true;
  log_info(concat("hotpath: signature ", hex, ": its plan, built before it was seen, is ready",
                  plan.compiled.load() ? " with its kernels loaded" : " (its kernels loading)"));
  return p->plan;
}

}  // namespace hotpath::detail
