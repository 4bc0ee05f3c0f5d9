// Launching a replayed segment (exec/replay.h): its kernel nodes' parameters made this replay's,
// then its graph launched on the loop's thread or handed to the launcher's
// (exec/replay_launcher.h, Config::replay_launcher), and what the loop's thread waits for there.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "dispatch/host_laps.h"
#include "driver/cuda_driver.h"
#include "exec/replay.h"
#include "exec/replay_launcher.h"

namespace hotpath::detail {

void Replay::launch_pending() {
  if (records_.empty()) return;
  host_lap(kDeferPart);
  reclaim();
  const int seg = ops_[records_.front().index].segment;
  rescue(seg);
  Segment& s = segments_[static_cast<std::size_t>(seg)];
  update_nodes(s, seg);
  host_lap(kLaunchPart);
  if (launcher_ && !s.empty && !s.random) {
    submit_launch(seg);
    host_lap(kGraphPart);
    return;
  }
  if (!s.empty || !refills_.empty()) settle();  // the launcher's launches first, then this work
  for (const Node* n : s.launch_nodes) set_params(s.graph->raw_cuda_graph_exec(), *n);
  host_lap(kLaunchPart);
  for (const auto& [st, value] : refills_)
    copy_bytes(statics_[static_cast<std::size_t>(st)].data_ptr(), value.const_data_ptr(),
               span_bytes(value), device_);
  refills_.clear();
  host_lap(kCopyPart);
  // A graph that draws no random numbers straight to the driver: CUDAGraph::replay() first
  // prepares the random number generators a graph drew from, and builds a message string, asks
  // for the device and whether the stream captures at every launch.
  if (s.empty) {
    // Nothing to launch (Segment::empty).
  } else if (s.random) {
    // The generator first (Segment::random): its fills are ATen ops, below the hook.
    c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
    s.graph->replay();
  } else {
    const c10::cuda::CUDAStream stream =
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    const cudaError_t e = cudaGraphLaunch(s.graph->raw_cuda_graph_exec(), stream.stream());
    HOTPATH_CHECK(e == cudaSuccess, "launching replay segment ", seg,
                  "'s CUDA graph failed: ", cudaGetErrorString(e));
  }
  records_.clear();
  host_lap(kGraphPart);
}

void Replay::set_params(void* exec, const Node& n) {
  std::vector<void*> params(n.multi ? 1 : n.words.size());
  for (std::size_t j = 0; j < params.size(); ++j)
    params[j] = const_cast<std::uint64_t*>(&n.words[j]);
  set_kernel_node_params(exec, n.node, *n.kernel, n.blocks, n.block, 0, params.data(), n.multi);
}

void Replay::submit_launch(int seg) {
  Segment& s = segments_[static_cast<std::size_t>(seg)];
  s.launch_copies.clear();
  for (const auto& [st, value] : refills_)
    s.launch_copies.push_back(Segment::Copy{statics_[static_cast<std::size_t>(st)].data_ptr(),
                                            value.const_data_ptr(),
                                            static_cast<std::size_t>(span_bytes(value))});
  s.launch_stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
  // Small enough for std::function to hold without an allocation.
  const std::uint64_t ticket = launcher_->submit([this, seg] { issue(seg); });
  ++launched_async_;
  InFlight f;
  f.ticket = ticket;
  f.records.swap(records_);
  f.refills.swap(refills_);
  in_flight_.push_back(std::move(f));
  if (!spare_records_.empty()) {
    records_.swap(spare_records_.back());
    spare_records_.pop_back();
  }
}

void Replay::issue(int seg) const {
  // The segment's graph, nodes' words and copies' ends stay as they are until this has run: the
  // replay's next launch of the segment, or a change to its words, comes after settle().
  const Segment& s = segments_[static_cast<std::size_t>(seg)];
  const cudaGraphExec_t exec = s.graph->raw_cuda_graph_exec();
  for (const Node* n : s.launch_nodes) set_params(exec, *n);
  for (const Segment::Copy& c : s.launch_copies) {
    if (c.bytes == 0) continue;
    const cudaError_t e =
        cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, s.launch_stream);
    HOTPATH_CHECK(e == cudaSuccess, "a copy of ", c.bytes,
                  " bytes on the GPU failed: ", cudaGetErrorString(e));
  }
  const cudaError_t e = cudaGraphLaunch(exec, s.launch_stream);
  HOTPATH_CHECK(e == cudaSuccess, "launching replay segment ", seg,
                "'s CUDA graph failed: ", cudaGetErrorString(e));
}

void Replay::reclaim() {
  if (in_flight_.empty()) return;
  const std::uint64_t done = launcher_ ? launcher_->done() : ~std::uint64_t{0};
  while (!in_flight_.empty() && in_flight_.front().ticket <= done) {
    InFlight& f = in_flight_.front();
    f.records.clear();  // its calls' tensors let go on this thread
    spare_records_.push_back(std::move(f.records));
    in_flight_.pop_front();
  }
}

void Replay::settle() {
  if (!launcher_) return;
  launcher_->drain();
  host_lap(kGraphPart);  // waiting for the launcher: the graphs' launches
  reclaim();
}

void Replay::start_launcher() {
  if (!use_launcher_ || launcher_) return;
  if (const int cpus = usable_cpus(); cpus < 2) {
    log_info(
        concat("hotpath: the replayed graphs' launches stay on the training loop's thread: "
               "it may run on ",
               cpus, " CPU only, and a launcher thread would take it from the loop"));
    return;
  }
  const int device = device_;
  try {
    launcher_ = std::make_unique<ReplayLauncher>([device] {
      const cudaError_t e = cudaSetDevice(device);
      HOTPATH_CHECK(e == cudaSuccess, "cudaSetDevice(", device,
                    ") failed: ", cudaGetErrorString(e));
      make_device_current(device);
    });
    launcher_->submit([] {});
    launcher_->drain();
  } catch (const std::exception& e) {
    launcher_.reset();
    log_warn(
        concat("hotpath: the thread that launches replayed CUDA graphs could not start; the "
               "training loop's thread launches them: ",
               e.what()));
  }
}

at::Tensor Replay::take_placeholder(std::size_t index, std::size_t k) {
  // A TensorImpl's dispatch keys depend on the thread's inference mode: the slots were made
  // outside it.
  if (launcher_ && premade_ticket_ != 0 && index < premade_first_.size() &&
      premade_first_[index] != kNoSlot && !c10::InferenceMode::is_enabled()) {
    if (!premade_ready_) premade_ready_ = launcher_->done() >= premade_ticket_;
    if (premade_ready_) {
      at::Tensor& slot = premade_[premade_first_[index] + k];
      if (slot.defined()) {
        ++premade_taken_;
        premade_short_ = true;
        return std::move(slot);  // leaves the slot empty, for the next job
      }
    }
  }
  return placeholder(index, k);
}

void Replay::premake() {
  if (!launcher_) return;
  if (premade_ticket_ != 0) {
    if (!premade_ready_) premade_ready_ = launcher_->done() >= premade_ticket_;
    if (!premade_ready_) return;  // the last job is still to run: its slots are its own
  }
  if (premade_first_.empty()) {
    premade_first_.assign(ops_.size(), kNoSlot);
    std::size_t slots = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const OpRecipe& r = ops_[i];
      if (r.kind != Kind::kGraph ||
          std::none_of(r.outs.begin(), r.outs.end(), [](const Out& o) { return o.kept; }))
        continue;
      premade_first_[i] = slots;
      slots += r.outs.size();
    }
    premade_.resize(slots);
  }
  // Nothing taken since the last job: every slot it filled is still full. (A slot the job could
  // not fill stays empty until a later job, after some other slot was taken.)
  if (!premade_short_) return;
  premade_short_ = false;
  premade_ready_ = false;
  premade_ticket_ = launcher_->submit([this] {
    // On the launcher's thread. The recipes do not change after the capture; the slots are this
    // job's until it has run. A placeholder that cannot be made here is made when it is handed
    // out.
    try {
      for (std::size_t i = 0; i < premade_first_.size(); ++i) {
        if (premade_first_[i] == kNoSlot) continue;
        const OpRecipe& r = ops_[i];
        for (std::size_t k = 0; k < r.outs.size(); ++k) {
          at::Tensor& slot = premade_[premade_first_[i] + k];
          if (r.outs[k].kept && !slot.defined()) slot = placeholder(i, k);
        }
      }
    } catch (const std::exception&) {
    }
  });
}

void Replay::let_go(std::vector<ReplayValues::Kept> kept) {
  if (!launcher_ || kept.empty()) return;  // let go of here
  try {
    // The job does nothing: the launcher's thread destroys what it holds after running it
    // (ReplayLauncher::run).
    launcher_->submit([kept = std::move(kept)] {});
  } catch (const std::exception&) {
    // The launcher failed (the next launch says so): they are let go of here.
  }
}

double Replay::launcher_us() const { return launcher_ ? launcher_->busy_us() : 0.0; }

std::int64_t Replay::launcher_launches() const { return launched_async_; }

void Replay::update_nodes(Segment& s, int seg) {
  s.launch_nodes.clear();
  auto record = [&](std::size_t index) -> const Record& {
    const Record* r = deferred(index);
    HOTPATH_CHECK(r != nullptr, "op ", index, " of a replayed segment was not deferred");
    return *r;
  };
  for (Node& n : s.nodes) {
    for (std::int64_t* launches : n.launches) ++*launches;
    bool changed = false;
    int writes = 0;
    bool skips_changed = false;
    for (Node::Optional& o : n.optional) {
      void* const ptr = written(n, o) ? o.shadow : nullptr;
      writes += ptr != nullptr;
      o.handed = false;
      if (std::memcmp(&n.words[o.word], &ptr, sizeof ptr) != 0) {
        std::memcpy(&n.words[o.word], &ptr, sizeof ptr);
        changed = skips_changed = true;
      }
    }
    if (skips_changed)
      log_debug(concat("hotpath: replay ", iteration_, ", segment ", seg, ": a kernel node writes ",
                       writes, " of its ", n.optional.size(), " values written only where held"));
    for (const auto& [param, index, argument] : n.scalars) {
      const float v = static_cast<float>(record(index).args.at(argument).toScalar().toDouble());
      if (std::memcmp(&n.words[param], &v, sizeof v) != 0) {
        std::memcpy(&n.words[param], &v, sizeof v);
        changed = true;
      }
    }
    if (changed) s.launch_nodes.push_back(&n);
  }
}

bool Replay::written(const Node& n, const Node::Optional& o) const {
  if (!o.handed) return true;
  // Tensors on its memory besides the one handed out (a view, autograd's saved copy): held.
  const c10::intrusive_ptr<c10::StorageImpl> storage = o.storage.lock();
  const c10::intrusive_ptr<c10::TensorImpl> impl = o.tensor.lock();
  const std::size_t on_storage = storage ? storage.use_count() - 1 : 0;
  // References besides the group members' own arguments (the program, a later op): held.
  const std::size_t refs = impl ? impl.use_count() - 1 : 0;
  std::size_t ours = 0;
  if (impl) {
    const at::Tensor t(impl);
    for (const std::size_t m : n.members[o.group])
      if (const Record* r = deferred(m)) ours += static_cast<std::size_t>(count_refs(t, r->args));
  }
  const bool held = on_storage > (impl ? 1U : 0U) || refs > ours;
  if (iteration_ <= 1)
    log_debug(concat("hotpath: replay: op ", o.op, "'s value: ", on_storage,
                     " tensor(s) on its memory, ", refs, " reference(s) to it, ", ours,
                     " of them its group's: ", held ? "written" : "skipped"));
  return held;
}

}  // namespace hotpath::detail
