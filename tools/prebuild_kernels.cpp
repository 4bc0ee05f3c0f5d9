// Build step: compiles the interpreter kernel (codegen/interpreter.h) with NVRTC for each listed
// architecture into a kernel directory that the library reads as a read-only cache, so that a
// program's first hot signature runs at once, with nothing to compile, even on a cold cache.
// Needs no GPU. Usage: hotpath_prebuild_kernels DIR ARCH... (ARCH as 90 for sm_90)
#include <cstdio>
#include <exception>
#include <string>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "compile/kernel_cache.h"
#include "compile/nvrtc.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR ARCH...\n", argv[0]);
    return 2;
  }
  using namespace hotpath::detail;
  const KernelCache out(argv[1]);
  try {
    for (int i = 2; i < argc; ++i) {
      const int arch = std::stoi(argv[i]);
      const std::string& source = interpreter_source();
      const std::string key = kernel_cache_key(source, arch);
      if (out.load(key)) continue;  // up to date
      out.store(key,
                nvrtc_compile(source, kInterpreterFunction, arch, runtime_headers(), "").cubin);
      if (!out.load(key)) {
        std::fprintf(stderr, "hotpath_prebuild_kernels: could not write %s\n",
                     out.path(key).c_str());
        return 1;
      }
      std::printf("interpreter kernel for sm_%d: %s\n", arch, out.path(key).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hotpath_prebuild_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
