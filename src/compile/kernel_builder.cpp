#include "compile/kernel_builder.h"

#include <chrono>
#include <ctime>
#include <thread>

#include "common/error.h"
#include "common/faults.h"
#include "common/fs.h"
#include "compile/nvrtc.h"

namespace hotpath::detail {
namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string dump_dir(const KernelCache& cache) {
  return cache.dir().empty() ? temp_dir() : cache.dir();
}

// NVRTC, then the cache keeps the cubin.
BuiltKernel compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                    const KernelCache& cache, const std::string& dump) {
  BuiltKernel b;
  const double c0 = thread_cpu_ms();
  make_dirs(dump);
  b.cubin = nvrtc_compile(job.source, job.name, arch, headers, dump).cubin;
  cache.store(job.key, b.cubin);
  b.cpu_ms = thread_cpu_ms() - c0;
  return b;
}

}  // namespace

BuiltKernel load_or_compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                            const KernelCache& cache) {
  if (auto hit = cache.load(job.key)) {
    BuiltKernel b;
    b.cubin = std::move(*hit);
    b.from_cache = true;
    return b;
  }
  return compile(job, arch, headers, cache, dump_dir(cache));
}

KernelBuilder::KernelBuilder(std::vector<KernelJob> jobs, int arch, const KernelHeaders& headers,
                             const KernelCache& cache)
    : jobs_(std::move(jobs)),
      arch_(arch),
      headers_(headers),
      cache_(cache),
      dump_(dump_dir(cache)),
      built_(jobs_.size()),
      ready_(jobs_.size(), 0) {
  for (std::size_t k = 0; k < jobs_.size(); ++k) {
    if (auto hit = cache_.load(jobs_[k].key)) {
      built_[k].cubin = std::move(*hit);
      built_[k].from_cache = true;
      ready_[k] = true;
    } else {
      misses_.push_back(k);
    }
  }
  threads_ =
      std::min<std::size_t>(misses_.size(), std::max(1u, std::thread::hardware_concurrency() / 2));
  for (std::size_t t = 1; t < threads_; ++t) pool_.emplace_back([this] { compile_some(); });
}

KernelBuilder::~KernelBuilder() {
  for (std::thread& t : pool_) t.join();
}

void KernelBuilder::compile_some() {
  for (;;) {
    std::size_t k;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= misses_.size()) return;
      k = misses_[next_++];
    }
    BuiltKernel b;
    try {
      if (fault_armed(kFaultNvrtc))
        HOTPATH_FAIL("NVRTC failed to compile ", jobs_[k].name,
                     " (injected: HOTPATH_FAULTS=nvrtc)");
      b = compile(jobs_[k], arch_, headers_, cache_, dump_);
    } catch (const Error& e) {
      b.error = e.what();
    }
    if (fault_armed(kFaultLate))
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(late_fault_ms()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      built_[k] = std::move(b);
      ready_[k] = true;
    }
    cv_.notify_all();
  }
}

const BuiltKernel& KernelBuilder::wait(std::size_t k) {
  compile_some();  // what no thread has taken yet, here: one thread alone never waits in vain
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_[k]; });
  return built_[k];
}

}  // namespace hotpath::detail
