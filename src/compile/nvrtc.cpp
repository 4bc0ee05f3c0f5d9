#include "compile/nvrtc.h"

#include <nvrtc.h>

#include <fstream>
#include <mutex>

#include "codegen/kernel.h"
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

}  // namespace

std::vector<std::string> nvrtc_options(int arch) {
  return {"--gpu-architecture=sm_" + std::to_string(arch), "--std=c++17", "-default-device",
          "-lineinfo"};
}

void nvrtc_start(int arch) {
  nvrtc_compile("extern \"C\" __global__ void hotpath_start(float* p) { p[0] = sqrtf(p[1]); }\n",
                "hotpath_start", arch, {}, "");
}

std::string nvrtc_warm_up(int arch) {
  // Shaped like a generated kernel (codegen/kernel.cpp): element function, vector path with
  // 16-byte loads, scalar tail, optional stores, the math library, half and bf16 conversions.
  // NVRTC's one-time costs in a process are paid by whichever compile first needs each part.
  const char* source = R"(#include "hotpath_runtime.cuh"
typedef int idx_t;
__device__ __forceinline__ void element(const float x0, const float x1, const float s0,
                                        float& y0, float& y1) {
  const float v0 = (x0 * s0 + x1);
  const float v1 = hp::gelu_erf(v0) + hp::gelu_tanh(v0) + hp::sigmoid(v0) + sqrtf(fabsf(v0)) +
                   logf(fabsf(v0) + 1.0f) + log1pf(fabsf(v0)) + tanhf(v0) + powf(fabsf(v0), s0);
  y0 = v0;
  y1 = hp::round_to<hp::bfloat16>(v1);
}
extern "C" __global__ void __launch_bounds__(256) hotpath_warm_up(
    const float* __restrict__ t0, const float* __restrict__ t1, const float s0,
    float* __restrict__ t2, hp::half* __restrict__ t3, const idx_t kNumel, const int vector_ok) {
  const idx_t stride = static_cast<idx_t>(gridDim.x) * blockDim.x;
  const idx_t start = static_cast<idx_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector_ok) {
    const idx_t kVectors = kNumel / 4;
    for (idx_t v = start; v < kVectors; v += stride) {
      const auto a = hp::load_vec<4>(t0, v);
      const auto b = hp::load_vec<4>(t1, v);
      hp::Vec<float, 4> y0;
      hp::Vec<hp::half, 4> y1;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float r0, r1;
        element(hp::to_float(a.v[k]), hp::to_float(b.v[k]), s0, r0, r1);
        y0.v[k] = hp::from_float<float>(r0);
        y1.v[k] = hp::from_float<hp::half>(r1);
      }
      if (t2 != nullptr) hp::store_vec<4>(t2, v, y0);
      hp::store_vec<4>(t3, v, y1);
    }
    return;
  }
  for (idx_t i = start; i < kNumel; i += stride) {
    float r0, r1;
    element(hp::to_float(t0[i]), hp::to_float(t1[i % 7]), s0, r0, r1);
    if (t2 != nullptr) t2[i] = hp::from_float<float>(r0);
    t3[i] = hp::from_float<hp::half>(r1);
  }
}
)";
  return nvrtc_compile(source, "hotpath_warm_up", arch, runtime_headers(), "").cubin;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  HOTPATH_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

CompileOutput nvrtc_compile(const std::string& source, const std::string& name, int arch,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::string& dump_dir) {
  Program prog(source, name, headers);
  const std::vector<std::string> opts = nvrtc_options(arch);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  const nvrtcResult status =
      nvrtcCompileProgram(prog.get(), static_cast<int>(copts.size()), copts.data());
  CompileOutput out;
  out.log = program_log(prog.get());
  if (status != NVRTC_SUCCESS) {
    std::string where = "(source not dumped)";
    if (!dump_dir.empty()) {
      const std::string path = dump_dir + "/" + name + ".cu";
      std::ofstream f(path);
      f << source;
      if (f) where = path;
    }
    HOTPATH_FAIL("NVRTC could not compile kernel ", name, " for sm_", arch, ": ",
                 nvrtcGetErrorString(status), "; source: ", where, "\n", out.log);
  }
  std::size_t size = 0;
  HOTPATH_NVRTC_CHECK(nvrtcGetCUBINSize(prog.get(), &size));
  out.cubin.resize(size);
  HOTPATH_NVRTC_CHECK(nvrtcGetCUBIN(prog.get(), out.cubin.data()));
  return out;
}

}  // namespace hotpath::detail
