// Verdicts that outlive the process: one small text file per signature under
// <cache_dir>/decisions/, written atomically (temp file + rename). A later run of the same
// program compiles known winners as soon as their signature appears and never compiles losers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/plan_prior.h"

namespace hotpath::detail {

// A verdict: what it says of the plan (compile, groups, names, reason: exec's PlanPrior) and what
// led to it.
struct Decision : PlanPrior {
  double eager_ms = 0, fused_ms = 0;  // medians that led to it
  int skipped = 0;  // a loser: later runs that kept it eager (it is tried again after a while)
};

// A known loser is tried again in the run after it kept this many runs eager: a verdict from
// one noisy run, or from a machine that has changed since, does not hold forever.
constexpr int kLoserRuns = 10;

class DecisionStore {
 public:
  explicit DecisionStore(std::string dir);  // empty: remembers nothing
  std::optional<Decision> load(std::uint64_t signature) const;
  void save(std::uint64_t signature, const Decision& d) const;
  // The signatures of the `most` verdicts written last that say compile (known winners), newest
  // first, with their verdicts. Unreadable files are left out.
  std::vector<std::pair<std::uint64_t, Decision>> winners(std::size_t most) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string path(std::uint64_t signature) const;
  std::string dir_;
};

}  // namespace hotpath::detail
