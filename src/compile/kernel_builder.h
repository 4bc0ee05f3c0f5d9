// Kernels from source to cubin: the kernel cache first (compile/kernel_cache.h), else NVRTC,
// whose result is stored. One kernel (load_or_compile: the interpreter) or a plan's kernels
// (KernelBuilder: the cache misses compile in parallel, each ready as soon as it is).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compile/kernel_cache.h"

namespace hotpath::detail {

// Header files a source includes, by name (codegen's runtime_headers()).
using KernelHeaders = std::vector<std::pair<std::string, std::string>>;

struct KernelJob {
  std::string source;
  std::string name;  // the entry function
  std::string key;   // kernel_cache_key(source, arch)
};

struct BuiltKernel {
  std::string cubin;
  std::string error;  // empty: built
  double cpu_ms = 0;  // NVRTC's CPU time, on whichever thread compiled it
  bool from_cache = false;
};

// One kernel, on this thread. Throws Error when NVRTC fails.
BuiltKernel load_or_compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                            const KernelCache& cache);

// Distinct kernels of a plan: cache hits at once, the misses compiled by up to half the cores'
// threads (NVRTC programs are independent; its first compile in the process must have run, see
// nvrtc_start). wait(k) lends the calling thread to what no thread has taken yet, then blocks
// until kernel k is built or has failed. The injected fault "nvrtc" (common/faults.h) fails every
// compile here. The destructor joins the threads.
class KernelBuilder {
 public:
  KernelBuilder(std::vector<KernelJob> jobs, int arch, const KernelHeaders& headers,
                const KernelCache& cache);
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  const BuiltKernel& wait(std::size_t k);
  std::size_t compiled() const { return misses_.size(); }  // not found in the cache
  std::size_t threads() const { return threads_; }

 private:
  void compile_some();

  std::vector<KernelJob> jobs_;
  int arch_;
  const KernelHeaders& headers_;
  KernelCache cache_;
  std::string dump_;  // where NVRTC's failures leave their source
  std::vector<BuiltKernel> built_;
  std::vector<char> ready_;  // per job, under mu_
  std::vector<std::size_t> misses_;
  std::size_t next_ = 0;  // under mu_: the next miss to compile
  std::size_t threads_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> pool_;
};

}  // namespace hotpath::detail
