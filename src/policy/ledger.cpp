#include "policy/ledger.h"

#include <algorithm>

namespace hotpath::detail {

void Ledger::add(std::int64_t count, double ms) {
  if (entries_.size() > kExact && entries_.back().n < bucket_) {
    Entry& b = entries_.back();
    b.last = count;
    b.n += 1;
    b.ms += ms;
    return;
  }
  entries_.push_back({count, 1, ms});
  if (entries_.size() >= kCap) compact();
}

void Ledger::compact() {
  // Pairs of entries past the exact ones become one: the tail halves, its buckets double.
  std::size_t w = kExact;
  for (std::size_t r = kExact; r < entries_.size(); r += 2) {
    Entry e = entries_[r];
    if (r + 1 < entries_.size()) {
      const Entry& f = entries_[r + 1];
      e.last = f.last;
      e.n += f.n;
      e.ms += f.ms;
    }
    entries_[w++] = e;
  }
  entries_.resize(w);
  bucket_ *= 2;
}

std::int64_t Ledger::break_even(double eager, std::int64_t first_fused) const {
  if (first_fused < 0) return -1;
  double net = 0;  // what eager would have taken, less what the iterations took
  std::int64_t since = -1;
  for (const Entry& e : entries_) {
    net += eager * static_cast<double>(e.n) - e.ms;
    if (e.last < first_fused) continue;
    if (net < 0)
      since = -1;
    else if (since < 0)
      since = e.last;
  }
  return since;
}

double Ledger::net(double eager) const {
  double net = 0;
  for (const Entry& e : entries_) net += eager * static_cast<double>(e.n) - e.ms;
  return net;
}

std::int64_t Ledger::iterations() const {
  std::int64_t n = 0;
  for (const Entry& e : entries_) n += e.n;
  return n;
}

double Ledger::ms() const {
  double ms = 0;
  for (const Entry& e : entries_) ms += e.ms;
  return ms;
}

double Ledger::cost_before(double eager, std::int64_t first_fused) const {
  double cost = 0;
  for (const Entry& e : entries_) {
    if (first_fused >= 0 && e.last >= first_fused) break;
    cost += e.ms - eager * static_cast<double>(e.n);
  }
  return std::max(0.0, cost);
}

}  // namespace hotpath::detail
