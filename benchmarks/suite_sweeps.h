// The suite's workloads (bench_suite.cpp) and its two sweeps: op_bench (single ops over batch x
// sequence x width, with the bandwidth they reach against the device's copy bandwidth) and
// attention_memory (naive attention's time and peak memory over width x sequence, running out of
// memory reported as a status). A sweep is many small rows, each measured in a short run of its
// own (quick_side_by_side) instead of the full side_by_side.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace suite {

// One workload (one row): what the row says of its sizes, and a step that runs it once.
struct Workload {
  std::string name, sizes, dtype = "fp32", mode;
  std::function<void()> step;
  double bytes = 0;         // op_bench: what one ideal kernel reads and writes, for GB/s
  double theory_bytes = 0;  // attention_memory: the accounting's lower bound of its peak
  bool quick = false;       // a sweep's row: quick_side_by_side
};

// The op_bench ops by name (--op-bench-ops checks against them).
const std::vector<std::string>& op_bench_ops();

struct SweepShapes {
  std::vector<std::string> ops = op_bench_ops();
  std::vector<std::int64_t> op_batch = {16, 32, 64, 128}, op_seq = {256, 512, 1024, 2048},
                            op_dim = {64, 128, 256, 512, 1024};
  std::int64_t attn_batch = 8;
  std::vector<std::int64_t> attn_dims = {16, 32, 64, 128},
                            attn_seqs = {256, 1024, 4096, 8192, 16384};
};

// A sweep's rows are made one at a time (their inputs would not fit in memory together).
using Make = std::function<Workload()>;

std::vector<Make> op_bench(const SweepShapes& s);
std::vector<Make> attention_memory(const SweepShapes& s);

// The device's copy bandwidth (GB/s, bytes read plus written), measured now with a 512 MiB copy.
double copy_gbps();

// A sweep's row: two eager iterations (eager's peak memory), then hotpath (hot after 3
// iterations, its kernels awaited), then blocks of 5 eager iterations under Pause interleaved
// with blocks of 5 hotpath ones (hotpath's peak), `iters` a side; out of memory on either side is
// the row's status.
nlohmann::json quick_side_by_side(const Workload& wl, int iters, const std::string& cache);

}  // namespace suite
