// Probe (issue "Launch-bound loops"): what a CUDA graph launch costs the host, on which stream,
// instantiated how, and with how many kernel nodes' parameters changed before it (a replay
// changes the scalars that change every step: Adam's bias corrections, a learning-rate
// schedule). Plain CUDA runtime, nothing of hotpath's or LibTorch's. Every variant runs in turn
// in one process, several rounds, so that the host's own drift (these hosts change speed between
// processes) falls on all of them alike.
//   nvcc -O2 -std=c++17 -cudart static -arch=sm_90 -o graph_updates
//   benchmarks/probes/graph_updates.cu
//   ./graph_updates [--nodes 16] [--launches 2000] [--rounds 3] [--thrash KB]
// Prints, per variant, the host's median us per cudaGraphLaunch and per
// cudaGraphExecKernelNodeSetParams. Variants: a non-blocking stream or the legacy default stream
// (LibTorch's current stream unless a program sets one); instantiated with no flags or with
// cudaGraphInstantiateFlagAutoFreeOnLaunch (as at::cuda::CUDAGraph does); 0 or 4 kernel nodes
// changed before each launch. --thrash KB: between launches the host walks KB kilobytes of its
// own memory, as a loop's host work between two graph launches does (the driver's code and data
// no longer in the caches); its time is not counted. Last, the same launch handed to a thread that
// waits for it spinning, the caller waiting until it is issued (a launch whose ordering is the
// caller's), against the caller's own launch, each after the walk.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__global__ void bump(float* x, float a) {
  if (threadIdx.x == 0 && blockIdx.x == 0) x[0] += a;
}

void check(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "graph_updates.cu:%d: %s: %s\n", line, what, cudaGetErrorString(e));
  std::exit(1);
}
#define CHECK(call) check((call), #call, __LINE__)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaGraphNode_t> kernels;
  std::vector<cudaKernelNodeParams> params;
};

Graph capture(cudaStream_t s, float* x, int nodes, unsigned long long flags) {
  Graph g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < nodes; ++i) bump<<<1, 32, 0, s>>>(x, 1.0f);
  CHECK(cudaStreamEndCapture(s, &g.graph));
  CHECK(cudaGraphInstantiateWithFlags(&g.exec, g.graph, flags));
  size_t count = 0;
  CHECK(cudaGraphGetNodes(g.graph, nullptr, &count));
  std::vector<cudaGraphNode_t> all(count);
  CHECK(cudaGraphGetNodes(g.graph, all.data(), &count));
  for (cudaGraphNode_t n : all) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(n, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    g.kernels.push_back(n);
    g.params.emplace_back();
    CHECK(cudaGraphKernelNodeGetParams(n, &g.params.back()));
  }
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 16, launches = 2000, rounds = 3, thrash_kb = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nodes") == 0) nodes = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--launches") == 0) launches = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--thrash") == 0) thrash_kb = std::atoi(argv[i + 1]);
  }
  if (nodes < 4 || launches < 20 || rounds < 1 || thrash_kb < 0) {
    std::fprintf(stderr,
                 "usage: graph_updates [--nodes N>=4] [--launches N>=20] [--rounds R>=1] "
                 "[--thrash KB>=0]\n");
    return 2;
  }
  float* x = nullptr;
  CHECK(cudaMalloc(&x, sizeof(float)));
  cudaStream_t side;
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  Graph graphs[2] = {capture(side, x, nodes, 0),
                     capture(side, x, nodes, cudaGraphInstantiateFlagAutoFreeOnLaunch)};
  const cudaStream_t streams[2] = {side, cudaStreamLegacy};
  const char* stream_names[2] = {"non-blocking stream", "legacy default stream"};
  const char* graph_names[2] = {"no flags", "AutoFreeOnLaunch"};

  using clock = std::chrono::steady_clock;
  float a = 1.0f;
  std::vector<unsigned long long> junk(static_cast<size_t>(thrash_kb) * 128, 1);
  unsigned long long sink = 0;
  auto thrash = [&] {
    for (size_t i = 0; i < junk.size(); i += 8) sink += junk[i]++;
  };
  // One variant: `changed` kernel nodes get a new scalar before each launch; the GPU catches up
  // every 20 launches (the queue never fills).
  auto run = [&](Graph& g, cudaStream_t s, int changed, std::vector<double>& launch_us,
                 std::vector<double>& set_us) {
    for (int l = 0; l < launches; ++l) {
      if (l % 20 == 0) CHECK(cudaStreamSynchronize(s));
      a += 1.0f;
      thrash();
      for (int n = 0; n < changed; ++n) {
        float* px = x;
        void* args[] = {&px, &a};
        cudaKernelNodeParams p = g.params[static_cast<size_t>(n)];
        p.kernelParams = args;
        const auto u0 = clock::now();
        CHECK(cudaGraphExecKernelNodeSetParams(g.exec, g.kernels[static_cast<size_t>(n)], &p));
        set_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - u0).count());
      }
      const auto t0 = clock::now();
      CHECK(cudaGraphLaunch(g.exec, s));
      launch_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
    }
    CHECK(cudaStreamSynchronize(s));
  };
  struct Variant {
    int graph, stream, changed;
    std::vector<double> launch_us, set_us;
  };
  std::vector<Variant> variants;
  for (int gi = 0; gi < 2; ++gi)
    for (int si = 0; si < 2; ++si)
      for (int c : {0, 4}) variants.push_back(Variant{gi, si, c, {}, {}});
  std::vector<double> scratch_l, scratch_s;
  for (Variant& v : variants)  // warm-up: each graph uploaded, each stream used
    run(graphs[v.graph], streams[v.stream], v.changed, scratch_l, scratch_s);
  for (int r = 0; r < rounds; ++r)
    for (Variant& v : variants)
      run(graphs[v.graph], streams[v.stream], v.changed, v.launch_us, v.set_us);
  std::printf(
      "%d kernel nodes a graph; %d rounds of %d launches a variant, in turns; %d KB walked "
      "between launches; host us, medians (%llu)\n",
      nodes, rounds, launches, thrash_kb, sink % 2);
  for (const Variant& v : variants) {
    std::printf("  %-16s on the %-21s %d node(s) changed: launch %.2f us", graph_names[v.graph],
                stream_names[v.stream], v.changed, median(v.launch_us));
    if (!v.set_us.empty()) std::printf(", a node's update %.2f us", median(v.set_us));
    std::printf("\n");
  }
  // The launch handed to a spinning thread: the caller stores the job, spins until the thread
  // has issued it, and counts the whole round trip.
  {
    std::atomic<int> job{0};
    std::atomic<bool> quit{false};
    std::thread launcher([&] {
      while (!quit.load(std::memory_order_acquire)) {
        if (job.load(std::memory_order_acquire) == 1) {
          CHECK(cudaGraphLaunch(graphs[0].exec, side));
          job.store(0, std::memory_order_release);
        }
      }
    });
    std::vector<double> direct, handed;
    for (int r = 0; r < rounds; ++r) {
      for (int by_thread = 0; by_thread < 2; ++by_thread) {
        for (int l = 0; l < launches; ++l) {
          if (l % 20 == 0) CHECK(cudaStreamSynchronize(side));
          thrash();
          const auto t0 = clock::now();
          if (by_thread) {
            job.store(1, std::memory_order_release);
            while (job.load(std::memory_order_acquire) != 0) {
            }
          } else {
            CHECK(cudaGraphLaunch(graphs[0].exec, side));
          }
          (by_thread ? handed : direct)
              .push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
        }
        CHECK(cudaStreamSynchronize(side));
      }
    }
    quit.store(true, std::memory_order_release);
    launcher.join();
    std::printf(
        "  no flags on the non-blocking stream, after the walk: launched by the caller %.2f "
        "us; handed to a spinning thread, until issued %.2f us\n",
        median(direct), median(handed));
  }
  for (Graph& g : graphs) {
    CHECK(cudaGraphExecDestroy(g.exec));
    CHECK(cudaGraphDestroy(g.graph));
  }
  CHECK(cudaStreamDestroy(side));
  CHECK(cudaFree(x));
  return 0;
}
