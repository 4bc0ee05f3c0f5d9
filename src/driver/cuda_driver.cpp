#include "driver/cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "common/error.h"
#include "common/faults.h"

namespace hotpath::detail {
namespace {

struct Driver {
  bool ok = false;
  std::string error;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuFuncLoad)(CUfunction) = nullptr;  // optional (CUDA 12.4+ drivers)
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int) = nullptr;

  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  // CUDA graphs (replay): optional, replay is off without them.
  CUresult (*cuStreamGetCaptureInfo)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                     const CUgraphNode**, const CUgraphEdgeData**,
                                     size_t*) = nullptr;
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                             const CUDA_KERNEL_NODE_PARAMS*) = nullptr;
};

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// Primary contexts retained so far, per device.
struct Primaries {
  std::mutex mu;
  std::map<int, CUcontext> contexts;
};
Primaries& primaries() {
  static Primaries p;
  return p;
}

const Driver& driver() {
  static const Driver d = [] {
    primaries();  // constructed first, so destroyed after everything that uses the driver
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      d.error = std::string("cannot open libcuda.so.1: ") + (e ? e : "unknown error");
      return d;
    }
    const bool all =
        bind(lib, "cuInit", d.cuInit) && bind(lib, "cuGetErrorString", d.cuGetErrorString) &&
        bind(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent) &&
        bind(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent) &&
        bind(lib, "cuDeviceGet", d.cuDeviceGet) &&
        bind(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain) &&
        bind(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute) &&
        bind(lib, "cuModuleLoadData", d.cuModuleLoadData) &&
        bind(lib, "cuModuleUnload", d.cuModuleUnload) &&
        bind(lib, "cuModuleGetFunction", d.cuModuleGetFunction) &&
        bind(lib, "cuLaunchKernel", d.cuLaunchKernel) &&
        bind(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute) &&
        bind(lib, "cuEventCreate", d.cuEventCreate) &&
        bind(lib, "cuEventDestroy_v2", d.cuEventDestroy) &&
        bind(lib, "cuEventRecord", d.cuEventRecord) && bind(lib, "cuEventQuery", d.cuEventQuery) &&
        bind(lib, "cuEventSynchronize", d.cuEventSynchronize) &&
        bind(lib, "cuEventElapsedTime_v2", d.cuEventElapsedTime);
    bind(lib, "cuFuncLoad", d.cuFuncLoad);
    bind(lib, "cuStreamGetCaptureInfo_v3", d.cuStreamGetCaptureInfo);
    bind(lib, "cuGraphExecKernelNodeSetParams_v2", d.cuGraphExecKernelNodeSetParams);
    if (!all) {
      d.error = "libcuda.so.1 lacks a Driver API entry point hotpath needs";
      return d;
    }
    const CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
      d.error = "cuInit failed with code " + std::to_string(static_cast<int>(r));
      return d;
    }
    d.ok = true;
    return d;
  }();
  return d;
}

std::string error_text(CUresult r) {
  const char* s = nullptr;
  if (driver().cuGetErrorString != nullptr) driver().cuGetErrorString(r, &s);
  return s != nullptr ? s : "error " + std::to_string(static_cast<int>(r));
}

const Driver& checked_driver() {
  const Driver& d = driver();
  HOTPATH_CHECK(d.ok, "CUDA driver unavailable: ", d.error);
  return d;
}

void ensure_context(int device) {
  const Driver& d = checked_driver();
  // The device's primary context (the one the CUDA runtime, and so ATen, uses), retained once.
  CUcontext want = nullptr;
  {
    Primaries& p = primaries();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.contexts.find(device);
    if (it == p.contexts.end()) {
      CUdevice dev = 0;
      HOTPATH_CU_CHECK(d.cuDeviceGet(&dev, device));
      CUcontext ctx = nullptr;
      HOTPATH_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx, dev));
      it = p.contexts.emplace(device, ctx).first;
    }
    want = it->second;
  }
  CUcontext current = nullptr;
  HOTPATH_CU_CHECK(d.cuCtxGetCurrent(&current));
  if (current != want) HOTPATH_CU_CHECK(d.cuCtxSetCurrent(want));
}

}  // namespace

std::string cu_error_text(int code) { return error_text(static_cast<CUresult>(code)); }

bool cuda_driver_available() { return driver().ok; }

void make_device_current(int device) { ensure_context(device); }

CudaImage::CudaImage(const std::string& cubin, int device) {
  const Driver& d = checked_driver();
  ensure_context(device);
  CUmodule m = nullptr;
  HOTPATH_CU_CHECK(d.cuModuleLoadData(&m, cubin.data()));
  module_ = m;
}

CudaImage::~CudaImage() {
  // At process exit the context may already be gone; nothing useful can be done about an error.
  if (module_ != nullptr && driver().ok) driver().cuModuleUnload(static_cast<CUmodule>(module_));
}

CudaModule::CudaModule(std::shared_ptr<const CudaImage> image, const std::string& function,
                       const std::string& multi_function)
    : image_(std::move(image)), name_(function) {
  const Driver& d = checked_driver();
  const auto m = static_cast<CUmodule>(image_->get());
  // With lazy module loading (CUDA's default) the first launch would load a function: do it
  // now, on the thread that loads the module (the compile worker), not in the training loop.
  auto load = [&](const std::string& name) -> void* {
    CUfunction f = nullptr;
    const CUresult r = d.cuModuleGetFunction(&f, m, name.c_str());
    CUresult l = CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && d.cuFuncLoad != nullptr) l = d.cuFuncLoad(f);
    if (r != CUDA_SUCCESS || l != CUDA_SUCCESS)
      HOTPATH_FAIL(r != CUDA_SUCCESS ? "cuModuleGetFunction(" : "cuFuncLoad(", name,
                   ") failed: ", error_text(r != CUDA_SUCCESS ? r : l));
    return f;
  };
  function_ = load(function);
  if (!multi_function.empty()) multi_ = load(multi_function);
}

CudaModule::CudaModule(const std::string& cubin, const std::string& function, int device,
                       const std::string& multi_function)
    : CudaModule(std::make_shared<const CudaImage>(cubin, device), function, multi_function) {}

void CudaModule::allow_shared(unsigned bytes) {
  HOTPATH_CU_CHECK(checked_driver().cuFuncSetAttribute(
      static_cast<CUfunction>(function_), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
      static_cast<int>(bytes)));
  max_shared_ = bytes;
}

void CudaModule::launch(unsigned grid, unsigned block, void* stream, void** params, bool multi,
                        unsigned shared) const {
  const Driver& d = checked_driver();
  HOTPATH_CHECK(!multi || multi_ != nullptr, "kernel ", name_, " has no multi entry");
  HOTPATH_CHECK(shared <= std::max(max_shared_, 48u << 10), "kernel ", name_, " launched with ",
                shared, " bytes of shared memory; ", max_shared_, " allowed");
  HOTPATH_CHECK(!fault_armed(kFaultLaunch), "launch of ", name_,
                " failed (injected: HOTPATH_FAULTS=launch)");
  HOTPATH_CU_CHECK(d.cuLaunchKernel(static_cast<CUfunction>(multi ? multi_ : function_), grid, 1, 1,
                                    block, 1, 1, shared, static_cast<CUstream>(stream), params,
                                    nullptr));
}

bool graph_updates_available() {
  const Driver& d = driver();
  return d.ok && d.cuStreamGetCaptureInfo != nullptr && d.cuGraphExecKernelNodeSetParams != nullptr;
}

void* last_captured_node(void* stream) {
  const Driver& d = checked_driver();
  HOTPATH_CHECK(graph_updates_available(), "the CUDA driver lacks cuStreamGetCaptureInfo_v3");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUgraphNode* deps = nullptr;
  size_t n = 0;
  HOTPATH_CU_CHECK(d.cuStreamGetCaptureInfo(static_cast<CUstream>(stream), &status, nullptr,
                                            nullptr, &deps, nullptr, &n));
  HOTPATH_CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && n == 1,
                "the stream is not capturing one launch after another (", n, " dependencies)");
  return deps[0];
}

void set_kernel_node_params(void* exec, void* node, const CudaModule& kernel, unsigned grid,
                            unsigned block, unsigned shared, void** params, bool multi) {
  const Driver& d = checked_driver();
  HOTPATH_CHECK(!multi || kernel.has_multi(), "kernel ", kernel.name(), " has no multi entry");
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = static_cast<CUfunction>(multi ? kernel.multi_function() : kernel.function());
  p.gridDimX = grid;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = block;
  p.blockDimY = p.blockDimZ = 1;
  p.sharedMemBytes = shared;
  p.kernelParams = params;
  HOTPATH_CU_CHECK(d.cuGraphExecKernelNodeSetParams(static_cast<CUgraphExec>(exec),
                                                    static_cast<CUgraphNode>(node), &p));
}

CudaEvent::CudaEvent(int device) {
  const Driver& d = checked_driver();
  ensure_context(device);
  CUevent e = nullptr;
  HOTPATH_CU_CHECK(d.cuEventCreate(&e, CU_EVENT_DEFAULT));  // timing enabled
  event_ = e;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr && driver().ok) driver().cuEventDestroy(static_cast<CUevent>(event_));
}

void CudaEvent::record(void* stream) {
  HOTPATH_CU_CHECK(
      checked_driver().cuEventRecord(static_cast<CUevent>(event_), static_cast<CUstream>(stream)));
}

bool CudaEvent::done() const {
  const CUresult r = checked_driver().cuEventQuery(static_cast<CUevent>(event_));
  if (r == CUDA_ERROR_NOT_READY) return false;
  HOTPATH_CU_CHECK(r);
  return true;
}

void CudaEvent::wait() const {
  HOTPATH_CU_CHECK(checked_driver().cuEventSynchronize(static_cast<CUevent>(event_)));
}

float CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
  float ms = 0;
  HOTPATH_CU_CHECK(checked_driver().cuEventElapsedTime(&ms, static_cast<CUevent>(start.event_),
                                                       static_cast<CUevent>(end.event_)));
  return ms;
}

DeviceInfo device_info(int device) {
  const Driver& d = checked_driver();
  CUdevice dev = 0;
  HOTPATH_CU_CHECK(d.cuDeviceGet(&dev, device));
  DeviceInfo info;
  int major = 0, minor = 0;
  HOTPATH_CU_CHECK(
      d.cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  HOTPATH_CU_CHECK(
      d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  HOTPATH_CU_CHECK(
      d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  info.arch = major * 10 + minor;
  return info;
}

}  // namespace hotpath::detail
