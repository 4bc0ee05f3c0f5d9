// CUDA Driver API: modules, functions and launches. libcuda is opened at first use (dlopen), so
// that hotpath loads and runs its CPU paths on machines without a GPU driver. Every call is
// checked (HOTPATH_CU_CHECK -> hotpath::Error with file:line); modules are RAII.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hotpath::detail {

// True when libcuda could be opened and initialised.
bool cuda_driver_available();

// Makes `device`'s primary context (the CUDA runtime's, and so ATen's) current on the calling
// thread: a thread of hotpath's own that calls the driver for a device.
void make_device_current(int device);

// A cubin loaded into the primary context of `device` (made current on the calling thread unless
// the thread's current context is already for that device): one CUmodule, unloaded when the last
// CudaModule using it goes. A plan's kernels compiled in one NVRTC program share one.
class CudaImage {
 public:
  CudaImage(const std::string& cubin, int device);
  ~CudaImage();
  CudaImage(const CudaImage&) = delete;
  CudaImage& operator=(const CudaImage&) = delete;
  void* get() const { return module_; }  // CUmodule

 private:
  void* module_ = nullptr;
};

// A kernel of a loaded image: `function`, and `multi_function` unless empty (a pointwise kernel's
// entry for several segments), looked up and loaded (CUDA loads lazily: not at the first launch,
// in the training loop).
class CudaModule {
 public:
  CudaModule(std::shared_ptr<const CudaImage> image, const std::string& function,
             const std::string& multi_function = "");
  // ... of an image of its own.
  CudaModule(const std::string& cubin, const std::string& function, int device,
             const std::string& multi_function = "");
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  // Lets launches of `function` use up to `bytes` of dynamic shared memory (beyond the 48 KiB
  // every device allows without asking). Throws where the device has less.
  void allow_shared(unsigned bytes);
  // Launches on `stream` (a CUstream / cudaStream_t). `params` as cuLaunchKernel takes them.
  // `multi`: the multi entry (KernelSpec::multi_name); `shared`: dynamic shared memory, bytes.
  void launch(unsigned grid, unsigned block, void* stream, void** params, bool multi = false,
              unsigned shared = 0) const;
  bool has_multi() const { return multi_ != nullptr; }
  const std::string& name() const { return name_; }
  const std::shared_ptr<const CudaImage>& image() const { return image_; }
  void* function() const { return function_; }     // CUfunction
  void* multi_function() const { return multi_; }  // CUfunction of the multi entry, or null

 private:
  std::shared_ptr<const CudaImage> image_;
  void* function_ = nullptr;  // CUfunction
  void* multi_ = nullptr;     // CUfunction of the multi entry, if any
  unsigned max_shared_ = 0;   // allow_shared's
  std::string name_;
};

// CUDA graphs (exec/replay.h). Whether the driver has what replay needs; the kernel node the last
// launch on a capturing `stream` made (a CUgraphNode); new parameters for such a node of an
// instantiated graph `exec` (a CUgraphExec), `kernel`'s own entry (or its multi entry), as
// cuLaunchKernel takes them.
bool graph_updates_available();
void* last_captured_node(void* stream);
void set_kernel_node_params(void* exec, void* node, const CudaModule& kernel, unsigned grid,
                            unsigned block, unsigned shared, void** params, bool multi = false);

// A timing event (RAII). Recording and querying never synchronise with the device.
class CudaEvent {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void record(void* stream);  // a CUstream / cudaStream_t
  bool done() const;          // the work before the record has finished
  void wait() const;          // blocks the host until it has
  // Milliseconds between two recorded events that are both done.
  static float elapsed_ms(const CudaEvent& start, const CudaEvent& end);

 private:
  void* event_ = nullptr;  // CUevent
};

// Multiprocessor count and compute capability (major*10+minor) of a device.
struct DeviceInfo {
  int sm_count = 0;
  int arch = 0;
};
DeviceInfo device_info(int device);

}  // namespace hotpath::detail
