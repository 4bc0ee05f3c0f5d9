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
  double milliseconds = 0;
};

// Compiles `source` for sm_<arch> (e.g. 90) with the in-memory `headers`. Throws hotpath::Error
// with the NVRTC log on failure; the source is written to `dump_dir` (when not empty) and the
// message names the file.
CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir);

// Compiles a kernel like the generated ones (runtime headers, libdevice math). The executor does
// this once per process on the thread that enables fusion (see Executor::start_nvrtc).
void nvrtc_warm_up(int arch);

// "13.0"
std::string nvrtc_version();
// The options nvrtc_compile passes, for cache keys.
std::vector<std::string> nvrtc_options(int arch);

}  // namespace hotpath::detail
