// Kernels from source to cubin: the kernel cache first (compile/kernel_cache.h), else NVRTC,
// whose result is stored. One kernel (load_or_compile: the interpreter) or a plan's kernels
// (KernelBuilder: the cache misses compiled together, several to an NVRTC program).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
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
  double cpu_ms = 0;  // NVRTC's CPU time (a program's, shared out among its kernels)
  bool from_cache = false;
  // The kernels of one program share its cubin, stored once under the program's key (each
  // kernel's own entry names it): how many kernels the cubin holds (1: compiled alone; 0: read
  // from the cache), and the key whose entry holds the cubin (the kernel's own or its program's):
  // kernels with one image load it once.
  std::size_t program_kernels = 1;
  std::string image;
};

// One kernel, on this thread. Throws Error when NVRTC fails.
BuiltKernel load_or_compile(const KernelJob& job, int arch, const KernelHeaders& headers,
                            const KernelCache& cache);

// The most kernels compiled in one NVRTC program: a plan's first kernels are not held back for
// all of a large plan's.
constexpr std::size_t kProgramKernels = 8;

// One NVRTC program for several kernels: the headers their sources include, once, then each
// source (without its #include lines) in a namespace of its own, so that their helper functions
// and typedefs do not collide. Their entry functions (extern "C") must differ.
std::string program_source(const std::vector<const KernelJob*>& jobs);

// Distinct kernels of a plan: cache hits at once; the misses in NVRTC programs of up to
// kProgramKernels each (program_source), in the order given, the cubin stored once under the
// program's key and referred to by each kernel's. Where a program fails, its kernels compile one
// by one: a failure is one kernel's, with its own log. Why together: most of a small kernel's
// compile is the program's fixed cost (an H200 host: 13 ms for an empty kernel, the MLP step's
// five kernels 76 ms one by one and 18 ms in one program; five threads compiling them one each
// took as long as one thread). Programs compile in parallel on up to half the cores' threads
// (large kernels do overlap: the 12-layer LM's 82 took 2-2.8 s of wall time on 8 threads for
// 12-20 s of CPU); wait(k) lends the calling thread to the programs no thread has taken yet,
// until kernel k's is taken, then blocks until it is built or has failed. NVRTC's first compile
// in the process must have run (see nvrtc_start). The injected fault "nvrtc" (common/faults.h)
// fails every compile, "late" holds each program's kernels back. The destructor joins the
// threads.
//
// `cancelled`, if given, is asked before each program is taken: once it says true, the programs
// no thread has taken are not compiled (their kernels wait() with BuiltKernel::error set to
// kNotCompiled); a program already compiling finishes. Compiles made ahead of need
// (exec/ahead.cpp) stop so while a hot plan compiles.
class KernelBuilder {
 public:
  static constexpr const char* kNotCompiled = "not compiled: the build was cancelled";
  KernelBuilder(std::vector<KernelJob> jobs, int arch, const KernelHeaders& headers,
                const KernelCache& cache, std::function<bool()> cancelled = {});
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  const BuiltKernel& wait(std::size_t k);
  std::size_t compiled() const { return misses_.size(); }  // not found in the cache
  std::size_t programs() const;                            // NVRTC programs compiled so far
  std::size_t threads() const { return threads_; }
  bool was_cancelled() const;  // `cancelled` said true before every program was taken

 private:
  // Takes the next program no thread has taken, if it is not after program `last` (false: none
  // left, or the build was cancelled: cancel_rest_locked).
  bool take(std::size_t& chunk, std::size_t last = static_cast<std::size_t>(-1));
  void cancel_rest_locked();  // the programs not taken are not compiled
  void build_some();
  void build(const std::vector<std::size_t>& chunk);

  std::vector<KernelJob> jobs_;
  int arch_;
  const KernelHeaders& headers_;
  KernelCache cache_;
  std::string dump_;  // where NVRTC's failures leave their source
  std::vector<BuiltKernel> built_;
  std::vector<char> ready_;                       // per job, under mu_
  std::vector<std::size_t> misses_;               // jobs, in order
  std::vector<std::vector<std::size_t>> chunks_;  // the misses, by program
  std::vector<std::size_t> chunk_of_;             // per job: its program (misses only)
  std::size_t next_chunk_ = 0;                    // under mu_
  std::size_t programs_ = 0;                      // under mu_
  std::size_t threads_ = 0;
  std::function<bool()> cancelled_;
  bool was_cancelled_ = false;  // under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> pool_;
};

}  // namespace hotpath::detail
