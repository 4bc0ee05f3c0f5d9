// Build step: compiles the interpreter kernel (codegen/interpreter.h) with NVRTC for each listed
// architecture into a kernel directory that the library reads as a read-only cache, so that a
// program's first hot signature runs at once, with nothing to compile, even on a cold cache.
// Then the fused update kernels of LibTorch's AdamW, Adam and SGD with momentum on fp32
// parameters: their source is the same for every model (sizes are kernel arguments), and AdamW's
// is the largest kernel of a small model's plan, so a cold start compiles only the model's own.
// They come from plans of a tiny CPU training loop, generated as a GPU plan generates them; a
// source that differs from the one a run generates is only a key nobody asks for.
// Needs no GPU. Usage: hotpath_prebuild_kernels DIR ARCH... (ARCH as 90 for sm_90)
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <hotpath/hotpath.h>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "compile/kernel_cache.h"
#include "compile/nvrtc.h"
#include "exec/plan.h"
#include "session/session.h"

namespace {

using namespace hotpath::detail;
using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// The fused groups of an optimizer step in a plan of a linear layer trained with `make`, as GPU
// plans generate them: alone, and with the entry that launches a batch of them at once (the
// groups of several parameters).
std::vector<KernelSpec> optimizer_kernels(const MakeOptimizer& make) {
  at::manual_seed(0);
  std::vector<at::Tensor> params = {at::randn({16, 8}).requires_grad_(),
                                    at::randn({8}).requires_grad_()};
  const at::Tensor x = at::randn({4, 16}), y = at::randn({4, 8});
  const std::unique_ptr<torch::optim::Optimizer> opt = make(params);
  hotpath::Config c;
  c.threshold = 2;
  c.fuse_cpu = true;
  c.remember = false;
  c.revert_window = 1000000;
  c.log_level = hotpath::LogLevel::Warn;
  hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < 5; ++i) {
    opt->zero_grad();
    at::mse_loss(at::addmm(params[1], x, params[0]), y).backward();
    opt->step();
    hotpath::step();
  }
  hotpath::wait_for_compilation();
  const auto session = thread_session();
  const auto plan = session ? session->executor.plan(hotpath::stats().last_signature) : nullptr;
  hotpath::disable_hot_path_detection();
  std::vector<KernelSpec> specs;
  if (!plan || !plan->graph) return specs;
  for (const FusionGroup& g : plan->partition.groups) {
    // An update: grad mode off (as the backward pass's ops too) and a parameter's or a state's
    // memory written in place.
    bool grad_off = g.kind == GroupKind::Pointwise, in_place = false;
    for (int n : g.nodes) {
      const PlanOp& op = plan->ops[static_cast<std::size_t>(n)];
      grad_off = grad_off && !op.grad_enabled;
      in_place = in_place || op.out_alias >= 0;
    }
    if (!grad_off || !in_place) continue;
    for (bool multi : {false, true}) {
      KernelSpec spec = generate_kernel(*plan->graph, g, multi);
      if (multi && spec.multi_name.empty()) continue;
      specs.push_back(std::move(spec));
    }
  }
  return specs;
}

std::vector<KernelSpec> optimizers_kernels() {
  const std::vector<MakeOptimizer> optimizers = {
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::AdamW>(std::move(p),
                                                     torch::optim::AdamWOptions(1e-3));
      },
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(1e-3));
      },
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(std::move(p),
                                                   torch::optim::SGDOptions(1e-2).momentum(0.9));
      }};
  std::vector<KernelSpec> all;
  std::set<std::string> sources;
  for (const MakeOptimizer& make : optimizers) {
    // A speed-up, not a part of the build: a loop that fails leaves its kernels to run time.
    try {
      for (KernelSpec& spec : optimizer_kernels(make))
        if (sources.insert(spec.source).second) all.push_back(std::move(spec));
    } catch (const std::exception& e) {
      hotpath::disable_hot_path_detection();
      std::fprintf(stderr,
                   "hotpath_prebuild_kernels: warning: an optimizer's update kernels are not "
                   "prebuilt (%s); they compile at run time\n",
                   e.what());
    }
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR ARCH...\n", argv[0]);
    return 2;
  }
  const KernelCache out(argv[1]);
  std::vector<int> archs;
  for (int i = 2; i < argc; ++i) archs.push_back(std::stoi(argv[i]));
  // Compiled unless the directory has it (up to date); false where it could not be written.
  auto build = [&](const std::string& source, const std::string& name, int arch) {
    const std::string key = kernel_cache_key(source, arch);
    if (out.load(key)) return true;
    out.store(key, nvrtc_compile(source, name, arch, runtime_headers(), "").cubin);
    if (out.load(key)) return true;
    std::fprintf(stderr, "hotpath_prebuild_kernels: could not write %s\n", out.path(key).c_str());
    return false;
  };
  try {
    for (const int arch : archs)
      if (!build(interpreter_source(), kInterpreterFunction, arch)) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hotpath_prebuild_kernels: %s\n", e.what());
    return 1;
  }
  // After the interpreter kernel: the training loops' sessions find it here (on a machine with
  // a GPU they load it), rather than compiling it into a user's cache.
  const std::vector<KernelSpec> updates = optimizers_kernels();
  for (const int arch : archs) {
    std::printf("sm_%d in %s: the interpreter kernel", arch, argv[1]);
    for (const KernelSpec& spec : updates) {
      try {
        if (build(spec.source, spec.name, arch)) std::printf(", %s", spec.name.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hotpath_prebuild_kernels: warning: %s is not prebuilt: %s\n",
                     spec.name.c_str(), e.what());
      }
    }
    std::printf("\n");
  }
  return 0;
}
