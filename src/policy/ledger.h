// The iterations of a signature from hot on, in order, as they ran: break-even and the compile's
// cost are read from it against whichever eager baseline the report is made with, so that the
// break-even it names and the report's totals are sums of the same samples against the same
// figure. Exact for the first kExact iterations; after them, kept in buckets of consecutive
// iterations that double in size whenever the ledger fills (memory stays bounded in a long run,
// and a break-even that late is named at a bucket's last iteration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotpath::detail {

class Ledger {
 public:
  static constexpr std::size_t kExact = 1024;
  static constexpr std::size_t kCap = 4096;

  // Iteration `count` took `ms` (counts rise).
  void add(std::int64_t count, double ms);
  // The iteration from which on (at `first_fused` or later) the iterations so far have taken no
  // longer, together, than `eager` each would have: the compile repaid for good. -1 where the run
  // is behind at its last iteration, or no iteration from `first_fused` on has run.
  std::int64_t break_even(double eager, std::int64_t first_fused) const;
  // How far ahead of `eager` each the iterations so far are, together (ms; below 0: behind).
  double net(double eager) const;
  // What the iterations before `first_fused` took beyond `eager` each (never below 0).
  double cost_before(double eager, std::int64_t first_fused) const;
  // Iterations added, and what they took together (summed over the entries).
  std::int64_t iterations() const;
  double ms() const;
  std::size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    std::int64_t last;  // its last iteration
    std::int64_t n;     // iterations in it
    double ms;
  };
  void compact();
  std::vector<Entry> entries_;
  std::int64_t bucket_ = 1;  // iterations a new entry past kExact may hold
};

}  // namespace hotpath::detail
