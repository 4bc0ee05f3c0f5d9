// The interpreter kernel: one kernel that runs any interpretable fusion group from its bytecode
// (KernelSpec::program, runtime/program.cuh). It is compiled once per device and architecture
// (disk-cached like any kernel) and runs a group from the iteration after its signature turns
// hot, while the group's own kernel compiles; then the compiled kernel takes over. Its cases come
// from the op table (fusion/op_table.h): the same expressions as the generated kernels.
#pragma once

#include <cstdint>
#include <string>

namespace hotpath::detail {

constexpr const char* kInterpreterFunction = "hotpath_interpreter";
constexpr int kInterpreterBlock = 256;
constexpr int kInterpreterElements = 4;  // per thread and tile (kE in the source)

// The interpreter's CUDA C++ source (includes "hotpath_runtime.cuh" and "program.cuh").
const std::string& interpreter_source();

// The interpreter's grid for a group of `numel` elements on a device with `sm_count` SMs:
// a tile of kInterpreterBlock x kInterpreterElements elements per block, grid-stride beyond 16
// blocks per SM, at least one block.
std::int64_t interpreter_blocks(std::int64_t numel, int sm_count);

}  // namespace hotpath::detail
