// NVRTC: CUDA C++ source -> cubin for one architecture. Needs no GPU. Every NVRTC call is checked
// (HOTPATH_NVRTC_CHECK) and the program handle is RAII.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hotpath::detail {

struct CompileOutput {
  std::string cubin;
  std::string log;
};

// Compiles `source` for sm_<arch> (e.g. 90) with the in-memory `headers`. Throws hotpath::Error
// with the NVRTC log on failure; the source is written to `dump_dir` (when not empty) and the
// message names the file.
CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir);
// ... with these options in place of nvrtc_options(arch) (they must name the architecture): a
// probe's comparison of options (benchmarks/probes/nvrtc_programs.cpp).
CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir, const std::vector<std::string>& options);

// The PTX NVRTC makes of `source` for compute_<arch> (what ptxas would get): how large a
// generated kernel's code is (tests of codegen; throws as nvrtc_compile does).
std::string nvrtc_ptx(const std::string& source, const std::string& name, int arch,
                      const std::vector<std::pair<std::string, std::string>>& headers);

// NVRTC's first compile in the process: a tiny kernel. The executor runs it on the thread that
// enables fusion, before the compile worker exists (see Executor::start_nvrtc).
void nvrtc_start(int arch);

// "13.0"
std::string nvrtc_version();
// The options nvrtc_compile passes, for cache keys. `-minimal` leaves out of every program what
// generated kernels never use (textures and surfaces, the device runtime, launches from device
// code, the runtime API's types); no `-lineinfo`. On an H200's host one program of four generated
// kernels compiled in 14.3 ms against 20.9 with `-lineinfo` and without `-minimal`, and four small
// ones in 10.5 against 15.6 (benchmarks/results/2026-11-29-nvrtc-options.md): a cold plan's
// kernels are what its first fused iterations wait for.
std::vector<std::string> nvrtc_options(int arch);

}  // namespace hotpath::detail
