// The executor's kernels: NVRTC's first compile, the interpreter kernel per device (on the side
// worker), and a built plan's kernels through compile/ (cache, else NVRTC, several kernels to a
// program), loaded on the compile worker (one image per program).
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "common/error.h"
#include "common/log.h"
#include "compile/kernel_builder.h"
#include "compile/kernel_gate.h"
#include "compile/nvrtc.h"
#include "compile/worker.h"
#include "exec/executor.h"
#include "exec/planner.h"
#include "exec/replay.h"

namespace hotpath::detail {

void Executor::start_nvrtc(const KernelCache& cache) {
  static std::once_flag once;
  std::call_once(once, [cache] {
    // NVRTC's first compile, here on the enabling thread and before the compile worker exists:
    // NVRTC crashed (inside nvrtcCompileProgram) when its first use was on another thread, and
    // the static state it creates then must be destroyed after the worker at exit (the worker
    // finishes a running job first).
    runtime_headers();
    log_enabled(LogLevel::Debug);
    // Without a CUDA driver no plan is ever compiled on the worker: nothing to start.
    if (!cuda_driver_available()) return;
    int arch = 90;
    try {
      arch = device_info(0).arch;
    } catch (const Error& e) {
      log_warn(concat("hotpath: no usable CUDA device (", e.what(), "); kernels for sm_90"));
    }
    try {
      nvrtc_start(arch);
    } catch (const Error& e) {
      log_warn(concat("hotpath: NVRTC does not work here; hot paths stay eager: ", e.what()));
      return;
    }
    // The interpreter kernel (from the cache, or compiled) and the driver's first module load,
    // in the background while the loop is profiled: the first hot signature runs on it at once.
    request_interpreter(0, cache);
    // The plans' worker too, now that NVRTC has run here: its thread is not started at the
    // loop's first hot step. Its first job runs the planner's code once, while the loop is
    // still being profiled (exec/planner_warm_up.cpp).
    CompileWorker::instance().start();
    CompileWorker::instance().submit([arch] {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const std::size_t groups = warm_up_planner(arch);
        log_debug(concat("hotpath: the planner's code warmed up on a made-up step (", groups,
                         " groups) in ", ms_text(ms_since(t0))));
      } catch (const std::exception& e) {
        log_debug(concat("hotpath: the planner's warm-up failed: ", e.what()));
      }
    });
  });
}

namespace {

// The interpreter kernel per device. Never destroyed: a compile job may still run while static
// destructors do at exit.
struct Interpreters {
  std::mutex mu;
  std::map<int, std::shared_ptr<CudaModule>> loaded;
  std::map<int, std::shared_ptr<const CudaModule>> fingerprints;  // from the same module
  std::set<int> requested;
};

Interpreters& interpreters() {
  static Interpreters* const state = new Interpreters;
  return *state;
}

// On the side worker: from the cache (or the kernels prebuilt with hotpath), else compiled.
void load_interpreter(int device, const KernelCache& cache) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const int arch = device_info(device).arch;
    const std::string& source = interpreter_source();
    const BuiltKernel built =
        load_or_compile(KernelJob{source, kInterpreterFunction, kernel_cache_key(source, arch)},
                        arch, runtime_headers(), cache);
    auto module = std::make_shared<CudaModule>(built.cubin, kInterpreterFunction, device);
    module->allow_shared(kInterpreterMaxShared);  // its register file
    auto fingerprint = std::make_shared<const CudaModule>(module->image(), kFingerprintFunction);
    // One launch with nothing to do, here on the worker: a kernel's first launch costs the driver
    // milliseconds (it grew the context's local memory when the interpreter kept its registers
    // there), which would otherwise stall the first fused iteration.
    hp::Program empty{};
    void* params[] = {&empty};
    module->launch(1, kInterpreterBlock, nullptr, params);
    log_info(concat("hotpath: interpreter kernel for device ", device, " ready in ",
                    ms_text(ms_since(t0)),
                    built.from_cache ? " (prebuilt or cached: nothing compiled)" : ""));
    Interpreters& state = interpreters();
    std::lock_guard<std::mutex> lock(state.mu);
    state.loaded[device] = std::move(module);
    state.fingerprints[device] = std::move(fingerprint);
  } catch (const Error& e) {
    log_warn(concat("hotpath: no interpreter kernel for device ", device,
                    " (fused groups wait for their own kernels): ", e.what()));
  }
}

}  // namespace

void Executor::request_interpreter(int device, const KernelCache& cache) {
  Interpreters& state = interpreters();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (!state.requested.insert(device).second) return;
  }
  // On a worker of its own: compiled (seconds, where no prebuilt copy fits this device), it would
  // hold up every plan queued behind it.
  CompileWorker::side().submit([device, cache] { load_interpreter(device, cache); });
  // Then, on the same worker, what a first capture on the device would pay on the loop's thread
  // (a job of its own: should it fail, the interpreter is loaded all the same).
  CompileWorker::side().submit([device] { prepare_replay_streams(device); });
}

std::shared_ptr<CudaModule> Executor::loaded_interpreter(int device) {
  Interpreters& state = interpreters();
  std::lock_guard<std::mutex> lock(state.mu);
  const auto it = state.loaded.find(device);
  return it == state.loaded.end() ? nullptr : it->second;
}

std::shared_ptr<const CudaModule> fingerprint_kernel(int device) {
  Interpreters& state = interpreters();
  std::lock_guard<std::mutex> lock(state.mu);
  const auto it = state.fingerprints.find(device);
  return it == state.fingerprints.end() ? nullptr : it->second;
}

void Executor::compile(Plan& out, const KernelCache& cache, bool kernels) {
  Plan* plan = &out;
  const auto t0 = std::chrono::steady_clock::now();
  double cpu_ms = 0;  // of the NVRTC compiles, on whichever threads ran them
  // The plan's distinct kernels: the plan is ready when its slowest kernel is, not after the sum
  // of them (compile/kernel_builder.h).
  // In the order that saves the most first (compile_order): the misses compile in it, and the
  // groups are published in it.
  const std::vector<int> order = compile_order(*plan);
  std::map<std::string, std::size_t> job_of;  // cache key -> job
  KernelBuilder builder(kernels ? kernel_jobs(*plan, &job_of) : std::vector<KernelJob>{},
                        plan->arch, runtime_headers(), cache);
  std::map<std::string, const PlanGroup*> done;  // groups with the same kernel compile once
  // Kernels compiled in one NVRTC program share its cubin: loaded once (BuiltKernel::image).
  std::map<std::string, std::shared_ptr<const CudaImage>> images;
  auto image_of = [&](const BuiltKernel& b) {
    std::shared_ptr<const CudaImage>& image = images[b.image];
    if (!image) image = std::make_shared<const CudaImage>(b.cubin, plan->device_index);
    return image;
  };
  auto failed = [](PlanGroup& g, const Error& e) {
    g.error = e.what();
    log_warn(concat("hotpath: group ", g.name, " stays ",
                    g.spec.interpretable() ? "on the interpreter: " : "eager: ", e.what()));
  };
  for (const int gi : order) {
    PlanGroup& g = plan->groups[static_cast<std::size_t>(gi)];
    if (!g.active_default) {
      g.error = "not compiled: it lost in an earlier run";
      g.state->store(kFailed, std::memory_order_release);
      continue;
    }
    if (!kernels) {
      g.error = "kernels are not compiled (Config::compile_kernels)";
      g.state->store(kFailed, std::memory_order_release);
      continue;
    }
    const auto g0 = std::chrono::steady_clock::now();
    const BuiltKernel* built = nullptr;
    if (const auto same = done.find(g.cache_key); same != done.end()) {
      g.error = same->second->error;
      g.module = same->second->module;
      g.from_cache = true;
      ++plan->from_cache;
    } else {
      built = &builder.wait(job_of.at(g.cache_key));
      g.from_cache = built->from_cache;
      plan->from_cache += built->from_cache ? 1 : 0;
      cpu_ms += built->cpu_ms;
      if (!built->error.empty()) failed(g, Error(built->error));
    }
    // Loaded here too: cuModuleLoadData on the training thread would be a stall.
    if (g.error.empty() && g.module == nullptr && built != nullptr) {
      try {
        g.module = std::make_shared<CudaModule>(image_of(*built), g.spec.name, g.spec.multi_name);
      } catch (const Error& e) {
        failed(g, e);
      }
    }
    g.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g0).count();
    done.emplace(g.cache_key, &g);
    // A test may hold the handover back to a place in its loop of its choosing.
    publish_through_gate(
        [&g] { g.state->store(g.error.empty() ? kLoaded : kFailed, std::memory_order_release); });
  }
  plan->compile_ms = ms_since(t0);
  if (!kernels) return;
  // NVRTC's CPU time next to wall time: a worker that waits for a core shows less CPU than wall.
  log_info(concat("hotpath: signature ", plan->hex, ": ", plan->groups.size(),
                  " kernel(s) ready in ", static_cast<long long>(plan->compile_ms + 0.5), " ms (",
                  builder.compiled(), " compiled in ", builder.programs(), " NVRTC program(s) on ",
                  builder.threads(), " thread(s), ", static_cast<long long>(cpu_ms + 0.5),
                  " ms CPU; ", plan->from_cache, " from the cache)"));
}

}  // namespace hotpath::detail
