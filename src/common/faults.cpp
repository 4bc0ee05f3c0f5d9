#include "common/faults.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace hotpath::detail {
namespace {
std::atomic<unsigned> faults{0};
std::atomic<double> slow_ms{kSlowFaultMs};
}  // namespace

void arm_faults_from_env() {
  const char* v = std::getenv("HOTPATH_FAULTS");
  unsigned f = 0;
  double slow = kSlowFaultMs;
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
      else if (item == "marks")
        f |= kFaultMarks;
      else if (item == "slow" || item.rfind("slow:", 0) == 0) {
        f |= kFaultSlow;
        if (item != "slow") {
          const std::string ms = item.substr(5);
          char* end = nullptr;
          slow = std::strtod(ms.c_str(), &end);
          if (end == ms.c_str() || *end != '\0' || !(slow > 0) || slow > 1000)
            HOTPATH_FAIL("HOTPATH_FAULTS='", v, "': 'slow:", ms,
                         "' wants the milliseconds to add, a number in (0, 1000]");
        }
      } else
        HOTPATH_FAIL("HOTPATH_FAULTS='", v, "': unknown fault '", item,
                     "' (nvrtc, launch, oom, slow or slow:<ms>, marks; comma-separated)");
    }
  }
  slow_ms.store(slow, std::memory_order_relaxed);
  faults.store(f, std::memory_order_relaxed);
}

double slow_fault_ms() { return slow_ms.load(std::memory_order_relaxed); }

unsigned armed_faults() { return faults.load(std::memory_order_relaxed); }

}  // namespace hotpath::detail
