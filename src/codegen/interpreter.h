// The interpreter kernel: one kernel that runs any interpretable fusion group from its bytecode
// (KernelSpec::program, runtime/program.cuh). It is compiled once per device and architecture
// (disk-cached like any kernel) and runs a group from the iteration after its signature turns
// hot, while the group's own kernel compiles; then the compiled kernel takes over. Its cases come
// from the op table (fusion/op_table.h): the same expressions as the generated kernels.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/program.cuh"

namespace hotpath::detail {

constexpr const char* kInterpreterFunction = "hotpath_interpreter";
// The interpreter's module also holds runtime/fingerprint.cuh's kernel, launched with this many
// threads a block.
constexpr const char* kFingerprintFunction = "hotpath_fingerprint";
constexpr int kFingerprintBlock = 256;
constexpr int kInterpreterBlock = 128;
constexpr int kInterpreterElements = 8;  // per thread and tile (kE in the source)

// The interpreter's CUDA C++ source (includes "hotpath_runtime.cuh" and "program.cuh").
const std::string& interpreter_source();

// The interpreter's grid for a group of `numel` elements on a device with `sm_count` SMs:
// a tile of kInterpreterBlock x kInterpreterElements elements per block, grid-stride beyond 16
// blocks per SM, at least one block.
std::int64_t interpreter_blocks(std::int64_t numel, int sm_count);

// Gives a program's values (numbered one per load, cast and instruction by the builder) registers
// of the interpreter's register file, reusing a register once its value has been read for the
// last time (an instruction may write a register it reads). Sets and returns Program::regs;
// throws hotpath::Error on a program that reads a value before it is written.
int allocate_registers(hp::Program& p);

// The dynamic shared memory (bytes) the interpreter's launch for `p` needs: its register file.
unsigned interpreter_shared_bytes(const hp::Program& p);
// ... at most (the register file of kProgramFile registers), set on the kernel when it loads.
constexpr unsigned kInterpreterMaxShared =
    hp::kProgramFile * kInterpreterElements * kInterpreterBlock * sizeof(float);

}  // namespace hotpath::detail
