#include "common/faults.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace hotpath::detail {
namespace {
std::atomic<unsigned> faults{0};
std::atomic<double> slow_ms{kSlowFaultMs};
std::atomic<double> late_ms{0};

// The milliseconds of `item` after its `prefix` ("slow:", "late:"), a number in (0, 1000].
double fault_ms(const char* all, const std::string& item, std::size_t prefix) {
  const std::string ms = item.substr(prefix);
  char* end = nullptr;
  const double v = std::strtod(ms.c_str(), &end);
  if (end == ms.c_str() || *end != '\0' || !(v > 0) || v > 1000)
    HOTPATH_FAIL("HOTPATH_FAULTS='", all, "': '", item.substr(0, prefix), ms,
                 "' wants milliseconds, a number in (0, 1000]");
  return v;
}
}  // namespace

void arm_faults_from_env() {
  const char* v = std::getenv("HOTPATH_FAULTS");
  unsigned f = 0;
  double slow = kSlowFaultMs, late = 0;
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
        if (item != "slow") slow = fault_ms(v, item, 5);
      } else if (item.rfind("late:", 0) == 0) {
        f |= kFaultLate;
        late = fault_ms(v, item, 5);
      } else
        HOTPATH_FAIL(
            "HOTPATH_FAULTS='", v, "': unknown fault '", item,
            "' (nvrtc, launch, oom, slow or slow:<ms>, marks, late:<ms>; comma-separated)");
    }
  }
  slow_ms.store(slow, std::memory_order_relaxed);
  late_ms.store(late, std::memory_order_relaxed);
  faults.store(f, std::memory_order_relaxed);
}

double slow_fault_ms() { return slow_ms.load(std::memory_order_relaxed); }

double late_fault_ms() { return late_ms.load(std::memory_order_relaxed); }

unsigned armed_faults() { return faults.load(std::memory_order_relaxed); }

}  // namespace hotpath::detail
