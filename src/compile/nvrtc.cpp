#include "compile/nvrtc.h"

#include <nvrtc.h>

#include <fstream>
#include <mutex>

#include "common/error.h"
#include "common/hash.h"

#define HOTPATH_NVRTC_CHECK(call)                                                  \
  do {                                                                             \
    const nvrtcResult hotpath_nvrtc_status = (call);                               \
    if (hotpath_nvrtc_status != NVRTC_SUCCESS) {                                   \
      HOTPATH_FAIL(#call, " failed: ", nvrtcGetErrorString(hotpath_nvrtc_status)); \
    }                                                                              \
  } while (0)

namespace hotpath::detail {
namespace {

class Program {
 public:
  Program(const std::string& source, const std::string& name,
          const std::vector<std::pair<std::string, std::string>>& headers) {
    std::vector<const char*> contents, names;
    for (const auto& [n, c] : headers) {
      names.push_back(n.c_str());
      contents.push_back(c.c_str());
    }
    HOTPATH_NVRTC_CHECK(nvrtcCreateProgram(&prog_, source.c_str(), (name + ".cu").c_str(),
                                           static_cast<int>(headers.size()), contents.data(),
                                           names.data()));
  }
  ~Program() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string program_log(nvrtcProgram p) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(size - 1);
  return log;
}

// `prog` compiled with `opts`; throws with NVRTC's log (and the source dumped) on failure.
std::string compile_program(const Program& prog, const std::string& source, const std::string& name,
                            const std::string& target, const std::vector<std::string>& opts,
                            const std::string& dump_dir) {
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  const nvrtcResult status =
      nvrtcCompileProgram(prog.get(), static_cast<int>(copts.size()), copts.data());
  std::string log = program_log(prog.get());
  if (status != NVRTC_SUCCESS) {
    std::string where = "(source not dumped)";
    if (!dump_dir.empty()) {
      const std::string path = dump_dir + "/" + name + ".cu";
      std::ofstream f(path);
      f << source;
      if (f) where = path;
    }
    HOTPATH_FAIL("NVRTC could not compile kernel ", name, " for ", target, ": ",
                 nvrtcGetErrorString(status), "; source: ", where, "\n", log);
  }
  return log;
}

}  // namespace

std::vector<std::string> nvrtc_options(int arch) {
  return {"--gpu-architecture=sm_" + std::to_string(arch), "--std=c++17", "-default-device",
          "-minimal"};
}

void nvrtc_start(int arch) {
  nvrtc_compile("extern \"C\" __global__ void hotpath_start(float* p) { p[0] = sqrtf(p[1]); }\n",
                "hotpath_start", arch, {}, "");
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  HOTPATH_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir) {
  return nvrtc_compile(source, name, arch, headers, dump_dir, nvrtc_options(arch));
}

CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir, const std::vector<std::string>& options) {
  Program prog(source, name, headers);
  CompileOutput out;
  out.log = compile_program(prog, source, name, "sm_" + std::to_string(arch), options, dump_dir);
  std::size_t size = 0;
  HOTPATH_NVRTC_CHECK(nvrtcGetCUBINSize(prog.get(), &size));
  out.cubin.resize(size);
  HOTPATH_NVRTC_CHECK(nvrtcGetCUBIN(prog.get(), out.cubin.data()));
  return out;
}

std::string nvrtc_ptx(const std::string& source, const std::string& name, int arch,
                      const std::vector<std::pair<std::string, std::string>>& headers) {
  Program prog(source, name, headers);
  std::vector<std::string> opts = nvrtc_options(arch);
  opts.front() = "--gpu-architecture=compute_" + std::to_string(arch);
  compile_program(prog, source, name, "compute_" + std::to_string(arch), opts, "");
  std::size_t size = 0;
  HOTPATH_NVRTC_CHECK(nvrtcGetPTXSize(prog.get(), &size));
  std::string ptx(size, '\0');
  HOTPATH_NVRTC_CHECK(nvrtcGetPTX(prog.get(), ptx.data()));
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace hotpath::detail
