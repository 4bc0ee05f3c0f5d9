// How sure a verdict is: the ratio of two medians (fused iterations over eager ones) with a
// percentile-bootstrap interval. Timings of a loop are skewed and bursty (a neighbour, a clock
// change, a collection in another process), so the interval assumes nothing of their
// distribution; resampling is seeded, so the same samples always give the same interval.
// Several rounds (a window of fused iterations and the eager ones timed beside it) pool into the
// geometric mean of their ratios: a machine that drifts between rounds moves both sides of a
// round alike, and does not widen the interval as pooling all samples would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hotpath::detail {

struct RatioInterval {
  double ratio = 0;          // median(num) / median(den) (rounds: their geometric mean); 0: none
  double low = 0, high = 0;  // the interval; low == high == ratio with one sample a side
  bool known() const { return ratio > 0; }
};

struct RatioRound {
  std::vector<double> num, den;
};

double median_of(std::vector<double> v);

// `level`: the interval's coverage (0.95: from the 2.5th to the 97.5th percentile of the
// resampled ratios). Rounds with no samples on a side are left out.
RatioInterval pooled_ratio(const std::vector<RatioRound>& rounds, std::uint64_t seed,
                           int resamples = 500, double level = 0.95);
RatioInterval ratio_of_medians(const std::vector<double>& num, const std::vector<double>& den,
                               std::uint64_t seed, int resamples = 500, double level = 0.95);

// Rounds judged one at a time, pooled afterwards without resampling them again: the geometric
// mean of their ratios, and an interval from each round's own (its half-width in logs taken as
// that round's spread; independent rounds add in quadrature), widened by what the rounds scatter
// beyond it (a host whose speed drifts between them). O(rounds): the governor pools its rounds
// on the training thread, where bootstrapping all their samples again cost 0.3 ms per round
// pooled (seen as a 2-4 ms iteration after every plain-eager block of a 0.6 ms loop). Unknown
// intervals are left out.
RatioInterval pool_intervals(const std::vector<RatioInterval>& rounds);

// For the log and the report: "1.177 [1.029-1.527]" (fused over eager); the same as a speedup
// (eager over fused), "1.352x (1.301-1.405x)"; a over b as a change, "+26.4%".
std::string interval_text(const RatioInterval& iv);
std::string speedup_text(const RatioInterval& iv);
std::string percent(double a, double b);

}  // namespace hotpath::detail
