#include "exec/ahead.h"

#include <chrono>
#include <utility>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "compile/kernel_builder.h"
#include "compile/worker.h"
#include "exec/executor.h"
#include "exec/planner.h"

namespace hotpath::detail {

AheadResult compile_ahead(const HotTrace& trace, const Config& config, const KernelCache& cache,
                          const std::optional<DeviceInfo>& device,
                          std::function<bool()> cancelled) {
  const auto t0 = std::chrono::steady_clock::now();
  AheadResult r;
  if (cancelled && cancelled()) {
    r.cancelled = true;
    return r;
  }
  Plan plan;
  plan.signature = trace.signature;
  plan.hex = short_hex(trace.signature);
  analyse_plan(plan, trace, std::nullopt, config, device);
  if (plan.device_index < 0) return r;  // no GPU group: nothing to compile
  std::vector<KernelJob> jobs = kernel_jobs(plan);
  r.kernels = jobs.size();
  KernelBuilder builder(std::move(jobs), plan.arch, runtime_headers(), cache, std::move(cancelled));
  // Every kernel in order: a cache hit is ready at once, a miss once its program is built (this
  // thread lends itself to the programs no other has taken).
  for (std::size_t k = 0; k < r.kernels; ++k) {
    const BuiltKernel& b = builder.wait(k);
    if (b.error == KernelBuilder::kNotCompiled) continue;
    if (!b.error.empty()) {
      ++r.failed;
    } else if (!b.from_cache) {
      ++r.compiled;
    }
  }
  r.cancelled = builder.was_cancelled();
  r.ms = ms_since(t0);
  return r;
}

bool Executor::AheadBook::other_waiting(std::uint64_t signature) {
  std::lock_guard<std::mutex> lock(mu);
  for (std::uint64_t s : plans_waiting)
    if (s != signature) return true;
  return false;
}

double Executor::AheadBook::wait_for(std::uint64_t signature) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return running.count(signature) == 0; });
  return ms_since(t0);
}

void Executor::compile_ahead(HotTrace&& trace) {
  Config config;
  KernelCache cache{""};
  {
    std::lock_guard<std::mutex> lock(mu_);
    config = config_;
    cache = cache_;
    if (!config.fuse || !config.compile_kernels || plans_.count(trace.signature)) return;
  }
  const std::string hex = short_hex(trace.signature);
  if (cache.dir().empty()) {
    log_debug(concat("hotpath: signature ", hex,
                     ": no kernel cache directory to compile its kernels ahead into"));
    return;
  }
  if (!reads_cuda(trace)) return;
  {
    std::lock_guard<std::mutex> lock(ahead_->mu);
    if (!ahead_->results.emplace(trace.signature, AheadResult{}).second) return;
  }
  auto shared_trace = std::make_shared<HotTrace>(std::move(trace));
  auto book = ahead_;
  CompileWorker::ahead().submit([shared_trace, config, cache, book, hex] {
    const std::uint64_t signature = shared_trace->signature;
    const std::int64_t seen = shared_trace->iteration;
    {
      std::lock_guard<std::mutex> lock(book->mu);
      if (book->planned.count(signature)) {  // hot already: its plan compiles them
        book->done.insert(signature);
        return;
      }
      book->running.insert(signature);
    }
    AheadResult r;
    std::string failure;
    try {
      r = detail::compile_ahead(*shared_trace, config, cache, std::nullopt,
                                [book, signature] { return book->other_waiting(signature); });
    } catch (const std::exception& e) {
      failure = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(book->mu);
      book->results[signature] = r;
      book->done.insert(signature);
      book->running.erase(signature);
    }
    book->cv.notify_all();
    if (!failure.empty()) {
      log_debug(concat("hotpath: signature ", hex, ": compiling ahead failed: ", failure));
    } else if (r.cancelled && r.compiled == 0) {
      log_debug(concat("hotpath: signature ", hex,
                       ": no kernel compiled ahead (a hot plan needed the CPU)"));
    } else if (r.compiled == 0) {
      log_debug(concat("hotpath: signature ", hex, ": its ", r.kernels,
                       " kernel(s) were in the cache already; nothing compiled ahead"));
    } else {
      log_info(concat("hotpath: signature ", hex, ": ", r.compiled, " of ", r.kernels,
                      " kernel(s) compiled ahead in ", static_cast<long long>(r.ms + 0.5),
                      " ms, before it turned hot (seen at iteration ", seen, ")",
                      r.cancelled ? "; stopped there: a hot plan needed the CPU" : "",
                      r.failed > 0 ? concat("; ", r.failed, " failed") : std::string()));
    }
  });
}

}  // namespace hotpath::detail
