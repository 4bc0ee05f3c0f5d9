#include "common/faults.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace hotpath::detail {
namespace {
std::atomic<unsigned> faults{0};
}  // namespace

void arm_faults_from_env() {
  const char* v = std::getenv("HOTPATH_FAULTS");
  unsigned f = 0;
  if (v != nullptr) {
    std::stringstream ss(v);
    for (std::string item; std::getline(ss, item, ',');) {
      if (item.empty()) continue;
      if (item == "nvrtc")
        f |= kFaultNvrtc;
      else if (item == "launch")
        f |= kFaultLaunch;
      else if (item == "oom")
        f |= kFaultOom;
      else if (item == "slow")
        f |= kFaultSlow;
      else
        HOTPATH_FAIL("HOTPATH_FAULTS='", v, "': unknown fault '", item,
                     "' (nvrtc, launch, oom, slow; comma-separated)");
    }
  }
  faults.store(f, std::memory_order_relaxed);
}

unsigned armed_faults() { return faults.load(std::memory_order_relaxed); }

}  // namespace hotpath::detail
