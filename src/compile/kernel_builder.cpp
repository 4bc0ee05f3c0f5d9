#include "compile/kernel_builder.h"

#include <sys/resource.h>

#include <chrono>
#include <ctime>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/faults.h"
#include "common/fs.h"
#include "common/log.h"
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

double ms_of(const timeval& t) {
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3;
}

// NVRTC, then the cache keeps the cubin. At debug level, where a compile's CPU time went (its
// user and system time, page faults: a first compile on a fresh machine took 10x a later one's).
BuiltKernel compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                    const KernelCache& cache, const std::string& dump) {
  BuiltKernel b;
  const double c0 = thread_cpu_ms();
  rusage r0{};
  const bool usage = log_enabled(LogLevel::Debug) && getrusage(RUSAGE_THREAD, &r0) == 0;
  make_dirs(dump);
  b.cubin = nvrtc_compile(job.source, job.name, arch, headers, dump).cubin;
  b.image = job.key;
  cache.store(job.key, b.cubin);
  b.cpu_ms = thread_cpu_ms() - c0;
  rusage r1{};
  if (usage && getrusage(RUSAGE_THREAD, &r1) == 0) {
    log_debug(concat(
        "hotpath: NVRTC compiled ", job.name, " (", job.source.size(), " bytes of source) in ",
        ms_text(b.cpu_ms), " of CPU: user ", ms_text(ms_of(r1.ru_utime) - ms_of(r0.ru_utime)),
        ", system ", ms_text(ms_of(r1.ru_stime) - ms_of(r0.ru_stime)), ", ",
        r1.ru_minflt - r0.ru_minflt, " page faults, ", r1.ru_majflt - r0.ru_majflt, " from disk"));
  }
  return b;
}

}  // namespace

BuiltKernel load_or_compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                            const KernelCache& cache) {
  BuiltKernel b;
  if (auto hit = cache.load(job.key, &b.image)) {
    b.cubin = std::move(*hit);
    b.from_cache = true;
    b.program_kernels = 0;
    return b;
  }
  return compile(job, arch, headers, cache, dump_dir(cache));
}

std::string program_source(const std::vector<const KernelJob*>& jobs) {
  std::string includes, units;
  std::set<std::string> included;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    units += "namespace hotpath_unit_" + std::to_string(i) + " {\n";
    std::istringstream in(jobs[i]->source);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("#include", 0) == 0) {
        if (included.insert(line).second) includes += line + "\n";
        continue;
      }
      units += line + "\n";
    }
    units += "}  // namespace hotpath_unit_" + std::to_string(i) + "\n";
  }
  return includes + units;
}

KernelBuilder::KernelBuilder(std::vector<KernelJob> jobs, int arch, const KernelHeaders& headers,
                             const KernelCache& cache, std::function<bool()> cancelled)
    : jobs_(std::move(jobs)),
      arch_(arch),
      headers_(headers),
      cache_(cache),
      dump_(dump_dir(cache)),
      built_(jobs_.size()),
      ready_(jobs_.size(), 0),
      chunk_of_(jobs_.size(), 0),
      cancelled_(std::move(cancelled)) {
  std::set<std::string> names;          // of the chunk being filled: entry functions must differ
  KernelCache::ProgramCubins programs;  // read once for all their kernels
  for (std::size_t k = 0; k < jobs_.size(); ++k) {
    BuiltKernel& b = built_[k];
    std::optional<std::string> hit = cache_.load(jobs_[k].key, &b.image, &programs);
    if (hit) {
      b.cubin = std::move(*hit);
      b.from_cache = true;
      b.program_kernels = 0;
      ready_[k] = true;
      continue;
    }
    misses_.push_back(k);
    if (chunks_.empty() || chunks_.back().size() >= kProgramKernels ||
        names.count(jobs_[k].name) > 0) {
      chunks_.emplace_back();
      names.clear();
    }
    chunks_.back().push_back(k);
    chunk_of_[k] = chunks_.size() - 1;
    names.insert(jobs_[k].name);
  }
  threads_ =
      std::min<std::size_t>(chunks_.size(), std::max(1u, std::thread::hardware_concurrency() / 2));
  for (std::size_t t = 1; t < threads_; ++t) pool_.emplace_back([this] { build_some(); });
}

KernelBuilder::~KernelBuilder() {
  for (std::thread& t : pool_) t.join();
}

std::size_t KernelBuilder::programs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_;
}

bool KernelBuilder::was_cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return was_cancelled_;
}

bool KernelBuilder::take(std::size_t& chunk, std::size_t last) {
  // Asked outside the lock: the predicate may take locks of its own.
  const bool cancel = cancelled_ && cancelled_();
  std::lock_guard<std::mutex> lock(mu_);
  if (next_chunk_ >= chunks_.size() || next_chunk_ > last) return false;
  if (cancel) {
    cancel_rest_locked();
    return false;
  }
  chunk = next_chunk_++;
  return true;
}

void KernelBuilder::cancel_rest_locked() {
  for (; next_chunk_ < chunks_.size(); ++next_chunk_) {
    for (std::size_t k : chunks_[next_chunk_]) {
      built_[k].error = kNotCompiled;
      ready_[k] = true;
    }
  }
  was_cancelled_ = true;
  cv_.notify_all();
}

void KernelBuilder::build_some() {
  for (std::size_t c = 0; take(c);) build(chunks_[c]);
}

void KernelBuilder::build(const std::vector<std::size_t>& chunk) {
  std::size_t programs = 0;
  // One NVRTC program (a kernel alone, or several), its cubin stored under job.key.
  auto attempt = [&](const KernelJob& job) {
    BuiltKernel b;
    try {
      if (fault_armed(kFaultNvrtc))
        HOTPATH_FAIL("NVRTC failed to compile ", job.name, " (injected: HOTPATH_FAULTS=nvrtc)");
      b = compile(job, arch_, headers_, cache_, dump_);
    } catch (const Error& e) {
      b.error = e.what();
    }
    ++programs;
    return b;
  };
  std::vector<BuiltKernel> out;
  if (chunk.size() == 1) {
    out.push_back(attempt(jobs_[chunk[0]]));
  } else {
    std::vector<const KernelJob*> jobs;
    for (std::size_t k : chunk) jobs.push_back(&jobs_[k]);
    const std::string source = program_source(jobs);
    const BuiltKernel program = attempt(KernelJob{
        source, jobs_[chunk[0]].name + "_and_" + std::to_string(chunk.size() - 1) + "_more",
        kernel_cache_key(source, arch_)});
    for (std::size_t k : chunk) {
      if (!program.error.empty()) {  // the kernels one by one: each failure with its own log
        out.push_back(attempt(jobs_[k]));
        continue;
      }
      BuiltKernel b = program;
      b.cpu_ms = program.cpu_ms / static_cast<double>(chunk.size());
      b.program_kernels = chunk.size();
      cache_.store_reference(jobs_[k].key, program.image);
      out.push_back(std::move(b));
    }
  }
  if (fault_armed(kFaultLate))
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(late_fault_ms()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      built_[chunk[i]] = std::move(out[i]);
      ready_[chunk[i]] = true;
    }
    programs_ += programs;
  }
  cv_.notify_all();
}

const BuiltKernel& KernelBuilder::wait(std::size_t k) {
  // Programs no thread has taken, here, while k's is among them: one thread alone never waits in
  // vain, and k is not held back for programs after its own.
  for (;;) {
    std::size_t c = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ready_[k]) break;
    }
    if (!take(c, chunk_of_[k])) break;
    build(chunks_[c]);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_[k] != 0; });
  return built_[k];
}

}  // namespace hotpath::detail
