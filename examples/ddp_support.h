// Data-parallel plumbing as a LibTorch user writes it (C++ has no DistributedDataParallel
// module): the rendezvous that torchrun's environment variables describe, a c10d ProcessGroup
// whose collectives go through the dispatcher (c10d::allreduce_, ...), gradients all-reduced in
// buckets after backward, and the comparisons the example checks itself with. hotpath needs none
// of it: each rank enables hotpath as a single process would.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace hotpath_examples {

// Where this process stands in the job: torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK). Without RANK the process is a job of one.
struct Rendezvous {
  int rank = 0, world = 1, local_rank = 0;
  std::string addr = "127.0.0.1";
  int port = 29500;
};

[[noreturn]] inline void ddp_fail(const std::string& why) {
  std::fprintf(stderr, "ddp_training: %s\n", why.c_str());
  std::exit(2);
}

inline Rendezvous rendezvous_from_env() {
  Rendezvous r;
  auto number = [](const char* name, int fallback, int lo, int hi) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < lo || x > hi)
      ddp_fail(std::string(name) + "='" + v + "' must be an integer in [" + std::to_string(lo) +
               ", " + std::to_string(hi) + "]");
    return static_cast<int>(x);
  };
  if (std::getenv("RANK") == nullptr) return r;
  r.world = number("WORLD_SIZE", -1, 1, 1 << 16);
  if (r.world < 0)
    ddp_fail("RANK is set but WORLD_SIZE is not (launch with examples/ddp_launch.sh)");
  r.rank = number("RANK", 0, 0, r.world - 1);
  r.local_rank = number("LOCAL_RANK", r.rank, 0, r.world - 1);
  r.port = number("MASTER_PORT", r.port, 1, 65535);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') r.addr = a;
  return r;
}

inline bool loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// A process group for `backend` ("nccl" or "gloo") on `device`, after every rank has joined the
// store at MASTER_ADDR:MASTER_PORT (rank 0 serves it). Collectives wait at most `timeout`.
inline c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(
    const Rendezvous& r, const std::string& backend, const torch::Device& device,
    std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(r.port);
  so.isServer = r.rank == 0;
  so.numWorkers = static_cast<std::size_t>(r.world);
  so.waitWorkers = true;
  so.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(r.addr, so);
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, r.rank, r.world);
  if (backend == "gloo") {
#ifdef USE_C10D_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // GLOO_SOCKET_IFNAME picks the interface, as in PyTorch; a job on one machine talks over
    // the loopback; otherwise the address this machine's hostname resolves to.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname)
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (loopback(r.addr))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r.rank, r.world, opts);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    if (device.is_cuda())
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#else
    ddp_fail("this build has no gloo backend (gloo's headers were not found at configure time)");
#endif
  } else if (backend == "nccl") {
#ifdef USE_C10D_NCCL
    if (!device.is_cuda()) ddp_fail("--backend nccl needs CUDA tensors (drop --cpu)");
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, r.rank, r.world, opts);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
#else
    ddp_fail("this build has no NCCL backend (nccl.h was not found at configure time)");
#endif
  } else {
    ddp_fail("--backend is nccl or gloo, got '" + backend + "'");
  }
  return pg;
}

// Gradients all-reduced after backward in buckets of at most `cap_bytes` (parameters in reverse
// order, as DistributedDataParallel fills them: the last layers' gradients are ready first), then
// averaged. A bucket of several gradients is flattened into one tensor for one collective.
class GradBuckets {
 public:
  GradBuckets(const std::vector<torch::Tensor>& params, std::int64_t cap_bytes) : params_(params) {
    std::int64_t bytes = 0;
    for (std::size_t i = params.size(); i-- > 0;) {
      const std::int64_t b = params[i].numel() * params[i].element_size();
      if (buckets_.empty() || bytes + b > cap_bytes ||
          params[buckets_.back().back()].scalar_type() != params[i].scalar_type()) {
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().push_back(i);
      bytes += b;
    }
  }
  std::size_t size() const { return buckets_.size(); }

  void allreduce(c10d::ProcessGroup& pg) {
    torch::NoGradGuard no_grad;  // as DDP's reducer: the gradients are data, not a graph
    const double world = pg.getSize();
    std::vector<std::vector<at::Tensor>> flats(buckets_.size());
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      std::vector<at::Tensor> grads;
      for (std::size_t i : buckets_[b]) {
        torch::Tensor& p = params_[i];
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step
        grads.push_back(p.grad().view(-1));
      }
      flats[b] = {grads.size() == 1 ? grads[0] : torch::cat(grads)};
      works.push_back(pg.allreduce(flats[b]));  // started for every bucket before any waits
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      works[b]->wait();
      at::Tensor& flat = flats[b][0];
      flat.div_(world);
      if (buckets_[b].size() == 1) continue;  // reduced in place
      std::int64_t at = 0;
      for (std::size_t i : buckets_[b]) {
        const torch::Tensor g = params_[i].grad();
        g.copy_(flat.narrow(0, at, g.numel()).view_as(g));
        at += g.numel();
      }
    }
  }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<std::size_t>> buckets_;
};

// Every parameter, flattened into one fp32 vector on the CPU (for comparisons).
inline torch::Tensor flat_parameters(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : params) flat.push_back(p.detach().to(torch::kCPU, torch::kFloat).view(-1));
  return torch::cat(flat);
}

// ||a - b|| / ||b||: how far `a` ended from `b`.
inline double relative_distance(const torch::Tensor& a, const torch::Tensor& b) {
  const double nb = b.norm().item<double>();
  return (a - b).norm().item<double>() / (nb > 0 ? nb : 1.0);
}

}  // namespace hotpath_examples
