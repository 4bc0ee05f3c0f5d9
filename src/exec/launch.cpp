// Launching a plan's groups: a group's own kernel or the interpreter, a batch of groups in one
// launch of the multi entry, on the current stream of the plan's device.
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "common/error.h"
#include "common/faults.h"
#include "common/log.h"
#include "exec/executor.h"
#include "exec/replay.h"

namespace hotpath::detail {

void Executor::run_batch(int batch) {
  run_together(armed_->batches[static_cast<std::size_t>(batch)]);
}

void Executor::run_together(const std::vector<int>& which) {
  // The groups that have deferred work (an inactive group's ops ran eagerly; a captured
  // iteration may have launched part of a batch already: flush_finished).
  std::vector<int> pending;
  std::vector<std::vector<Deferred*>> members;
  for (int gi : which) {
    std::vector<Deferred*> m = members_of(gi);
    if (m.empty()) continue;
    pending.push_back(gi);
    members.push_back(std::move(m));
  }
  auto group = [&](int gi) -> PlanGroup& { return armed_->groups[static_cast<std::size_t>(gi)]; };
  // One launch needs every group's own kernel, loaded (they share it: one source), and, since
  // their order is then the GPU's, no group touching a storage another one writes (views of one
  // tensor are different values in the plan). Else they launch one by one, in order.
  const CudaModule* kernel = pending.empty() ? nullptr : group(pending.front()).module.get();
  // (A captured iteration's joint launch is one graph node too: Replay::capture_batch.)
  bool together = pending.size() >= 2 && kernel != nullptr && kernel->has_multi();
  for (int gi : pending) {
    together = together && group(gi).state->load(std::memory_order_acquire) == kLoaded &&
               group(gi).module.get() == kernel;
  }
  if (together) {
    // Each group's tensors, once (the written ones flagged), then every written one against the
    // other groups' tensors.
    std::vector<std::vector<std::pair<at::Tensor, bool>>> tensors(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) {
      for (const KernelArg& a : group(pending[k]).spec.args) {
        if (a.kind != KernelArg::Kind::Tensor) continue;
        const Deferred& m = *members[k][static_cast<std::size_t>(a.member)];
        at::Tensor t = m.tensor(a);
        if (t.defined()) tensors[k].emplace_back(std::move(t), a.written);
      }
    }
    for (std::size_t x = 0; x < pending.size() && together; ++x) {
      for (const auto& [w, written] : tensors[x]) {
        if (!written) continue;
        for (std::size_t y = 0; y < pending.size() && together; ++y) {
          if (x == y) continue;
          for (const auto& t : tensors[y])
            together = together && !t.first.storage().is_alias_of(w.storage());
        }
      }
    }
  }
  if (!together) {
    for (int gi : pending) run_group(gi);
    return;
  }
  std::vector<LaunchArgs> args;
  args.reserve(pending.size());
  std::vector<std::size_t> filled;  // positions in pending
  for (std::size_t k = 0; k < pending.size(); ++k) {
    args.emplace_back();
    if (fill(group(pending[k]), members[k], true, args.back())) {
      filled.push_back(k);
    } else {
      args.pop_back();
      materialize(members[k]);
      ++group(pending[k]).eager_runs;
      if (mode_ == Mode::kCapture)
        armed_->replay->fail(
            concat("group ", group(pending[k]).name, " ran eagerly in the captured iteration"));
    }
  }
  const KernelSpec& spec = group(pending.front()).spec;
  // A plan batches at most multi_segments groups (plan_batches): one launch.
  HOTPATH_CHECK(filled.size() <= static_cast<std::size_t>(spec.multi_segments), "a batch of ",
                filled.size(), " groups for ", spec.multi_segments, " segments");
  const std::size_t seg_bytes = multi_segment_bytes(spec);
  const std::size_t nargs = spec.args.size();
  std::vector<unsigned char> param(seg_bytes * static_cast<std::size_t>(spec.multi_segments) + 8,
                                   0);
  unsigned first_block = 0;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const LaunchArgs& a = args[k];
    unsigned char* seg = param.data() + k * seg_bytes;
    for (std::size_t i = 0; i < nargs; ++i) {
      if (spec.args[i].kind == KernelArg::Kind::Scalar)
        std::memcpy(seg + 8 * i, &a.scalars[i], sizeof(float));
      else
        std::memcpy(seg + 8 * i, &a.ptrs[i], sizeof(void*));
    }
    if (spec.index64)
      std::memcpy(seg + 8 * nargs, &a.numel64, sizeof(long long));
    else
      std::memcpy(seg + 8 * nargs, &a.numel32, sizeof(int));
    std::memcpy(seg + 8 * (nargs + 1), &a.vector_ok, sizeof(int));
    const auto blocks = static_cast<unsigned>(a.blocks);
    std::memcpy(seg + 8 * (nargs + 2), &first_block, sizeof(unsigned));
    std::memcpy(seg + 8 * (nargs + 3), &blocks, sizeof(unsigned));
    first_block += blocks;
  }
  const int count = static_cast<int>(args.size());
  std::memcpy(param.data() + seg_bytes * static_cast<std::size_t>(spec.multi_segments), &count,
              sizeof(int));
  void* params[] = {param.data()};
  try {
    if (!args.empty())
      kernel->launch(first_block, static_cast<unsigned>(spec.block), current_stream(), params,
                     true);
    for (std::size_t k = 0; k < args.size(); ++k) {
      finish(group(pending[filled[k]]), members[filled[k]], args[k], false);
      slow_fault(pending[filled[k]]);
    }
    if (mode_ == Mode::kCapture) {
      std::vector<PlanGroup*> groups;
      std::vector<const std::vector<Deferred*>*> of;
      std::vector<const LaunchArgs*> launched;
      for (std::size_t k = 0; k < args.size(); ++k) {
        groups.push_back(&group(pending[filled[k]]));
        of.push_back(&members[filled[k]]);
        launched.push_back(&args[k]);
      }
      capture_launches(groups, of, launched, /*joint=*/true);
    }
  } catch (const Error& e) {
    log_warn(concat("hotpath: the joint launch of kernel ", kernel->name(),
                    " failed; its groups launch one by one from now on: ", e.what()));
    for (std::vector<int>& b : armed_->batches)
      if (std::find(b.begin(), b.end(), pending.front()) != b.end()) b.clear();
    if (mode_ == Mode::kCapture)
      armed_->replay->fail(concat("the joint launch of kernel ", kernel->name(), " failed"));
    for (std::size_t k : filled) {
      materialize(members[k]);
      ++group(pending[k]).eager_runs;
    }
  }
  for (int gi : pending) forget_group(gi);
}

void Executor::slow_fault(int group) const {
  if (group != 0 || !fault_armed(kFaultSlow)) return;
  if (!armed_->groups.front().gpu) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow_fault_ms()));
    return;
  }
  // A spin of slow_fault_ms() at 2 GHz (the H100's and H200's clocks are below it: a little more).
  at::cuda::sleep(static_cast<std::int64_t>(slow_fault_ms() * 2e6));
}

void* Executor::current_stream() const {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(armed_->device_index))
      .stream();
}

void Executor::finish(PlanGroup& g, const std::vector<Deferred*>& members, LaunchArgs& l,
                      bool interpreted) {
  ++g.launches;
  if (interpreted) ++g.interpreted;
  launched_ = true;
  if (config_.verify) verify(g, members, l);
  if (armed_->first_fused_iteration < 0) {
    armed_->first_fused_iteration = iteration_;
    log_info(concat("hotpath: signature ", armed_->hex, ": fused kernels running from iteration ",
                    iteration_));
  }
}

void Executor::launch_own(const PlanGroup& g, LaunchArgs& l) {
  const auto& args = g.spec.args;
  std::vector<void*> params(args.size() + 4, nullptr);
  for (std::size_t i = 0; i < args.size(); ++i)
    params[i] = args[i].kind == KernelArg::Kind::Scalar ? static_cast<void*>(&l.scalars[i])
                                                        : static_cast<void*>(&l.ptrs[i]);
  params[args.size()] =
      g.spec.index64 ? static_cast<void*>(&l.numel64) : static_cast<void*>(&l.numel32);
  params[args.size() + 1] = &l.vector_ok;
  params[args.size() + 2] = &l.partial;  // read by kernels with a workspace only
  params[args.size() + 3] = &l.done;
  g.module->launch(static_cast<unsigned>(l.blocks), static_cast<unsigned>(g.spec.block),
                   current_stream(), params.data());
}

bool Executor::launch(PlanGroup& g, const std::vector<Deferred*>& members) {
  // The group's own kernel once the worker has loaded it, else the interpreter.
  const int state = g.state->load(std::memory_order_acquire);
  const CudaModule* kernel = state == kLoaded ? g.module.get() : nullptr;
  // A group whose kernel failed runs on the interpreter for good: not a stand-in, and not on
  // the stand-in's trial.
  const CudaModule* interpreter =
      kernel == nullptr && g.spec.interpretable() && (armed_->stand_in || state == kFailed)
          ? armed_->interpreter.get()
          : nullptr;
  // An iteration that ran a group on a stand-in while its kernel compiles is not the final
  // configuration's: the governor does not judge it.
  if (state == kCompiling) {
    tiers_final_ = false;
    waited_ = waited_ || interpreter == nullptr;
    stood_in_ = stood_in_ || interpreter != nullptr;
  }
  if (kernel == nullptr && interpreter == nullptr) return false;
  LaunchArgs l;
  if (!fill(g, members, kernel != nullptr, l)) return false;
  const auto& args = g.spec.args;
  try {
    if (kernel != nullptr) {
      launch_own(g, l);
    } else {
      hp::Program program = g.spec.program;
      for (std::size_t i = 0; i < args.size(); ++i) {
        program.ptr[i] = l.ptrs[i];
        program.scalar[i] = l.scalars[i];
      }
      void* interpreter_params[] = {&program};
      interpreter->launch(static_cast<unsigned>(l.blocks), kInterpreterBlock, current_stream(),
                          interpreter_params, false, interpreter_shared_bytes(program));
    }
  } catch (const Error& e) {
    g.eager_only = true;
    log_warn(concat("hotpath: group ", g.name, " runs eagerly from now on: ", e.what()));
    return false;
  }
  finish(g, members, l, kernel == nullptr);
  if (mode_ == Mode::kCapture) {
    if (kernel != nullptr)
      capture_launches({&g}, {&members}, {&l}, /*joint=*/false);
    else
      armed_->replay->fail(concat("group ", g.name, " ran on the interpreter"));
  }
  return true;
}

}  // namespace hotpath::detail
