#include "policy/ratio_interval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hotpath::detail {

namespace {

// The median of v, reordering it.
double median_in_place(std::vector<double>& v) {
  if (v.empty()) return 0;
  const std::size_t n = v.size();
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(v.begin(), mid, v.end());
  const double upper = *mid;
  if (n % 2) return upper;
  return 0.5 * (*std::max_element(v.begin(), mid) + upper);
}

}  // namespace

double median_of(std::vector<double> v) { return median_in_place(v); }

RatioInterval pooled_ratio(const std::vector<RatioRound>& all, std::uint64_t seed, int resamples,
                           double level) {
  RatioInterval r;
  std::vector<const RatioRound*> rounds;
  double log_sum = 0;
  bool spread = false;
  for (const RatioRound& x : all) {
    const double n = median_of(x.num), d = median_of(x.den);
    if (n <= 0 || d <= 0) continue;
    rounds.push_back(&x);
    log_sum += std::log(n / d);
    spread = spread || x.num.size() > 1 || x.den.size() > 1;
  }
  if (rounds.empty()) return r;
  const double k = static_cast<double>(rounds.size());
  r.ratio = std::exp(log_sum / k);
  r.low = r.high = r.ratio;
  if (!spread) return r;
  // splitmix64, and a multiply-shift into [0, n): the governor runs this on the training thread
  // (once a window, once an iteration pair while the stand-in is on trial), so it must cost
  // little. A resample's median is read from counts over the sorted samples (which sorted sample
  // each draw picked), not by reordering a copy: a round of 20 and 10 samples took ~0.25 ms with
  // nth_element, 0.15-0.36 ms per judgement of the stand-in on the GPU host.
  std::uint64_t state = seed;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  struct Sorted {
    std::vector<double> num, den;
  };
  std::vector<Sorted> sorted;
  for (const RatioRound* x : rounds) {
    Sorted z{x->num, x->den};
    std::sort(z.num.begin(), z.num.end());
    std::sort(z.den.begin(), z.den.end());
    sorted.push_back(std::move(z));
  }
  std::vector<int> counts;
  auto resampled_median = [&](const std::vector<double>& v) {  // v sorted
    const std::size_t n = v.size();
    counts.assign(n, 0);
    const auto m = static_cast<unsigned __int128>(n);
    for (std::size_t k = 0; k < n; ++k) ++counts[static_cast<std::size_t>((next() * m) >> 64)];
    // The order statistics at (n - 1) / 2 and n / 2 (one for odd n).
    const std::size_t lo = (n - 1) / 2, hi = n / 2;
    double at_lo = 0;
    std::size_t seen = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t before = seen;
      seen += static_cast<std::size_t>(counts[i]);
      if (before <= lo && lo < seen) at_lo = v[i];
      if (hi < seen) return 0.5 * (at_lo + v[i]);
    }
    return at_lo;  // not reached: the counts sum to n
  };
  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(resamples));
  for (int i = 0; i < resamples; ++i) {
    double logs = 0;
    bool ok = true;
    for (const Sorted& x : sorted) {
      const double n = resampled_median(x.num), d = resampled_median(x.den);
      if (n <= 0 || d <= 0) {
        ok = false;
        break;
      }
      logs += std::log(n / d);
    }
    if (ok) ratios.push_back(std::exp(logs / k));
  }
  if (ratios.empty()) return r;
  std::sort(ratios.begin(), ratios.end());
  const double tail = (1 - level) / 2;
  auto at = [&](double q) {
    const auto i =
        static_cast<std::size_t>(std::lround(q * static_cast<double>(ratios.size() - 1)));
    return ratios[std::min(i, ratios.size() - 1)];
  };
  r.low = std::min(at(tail), r.ratio);
  r.high = std::max(at(1 - tail), r.ratio);
  return r;
}

RatioInterval ratio_of_medians(const std::vector<double>& num, const std::vector<double>& den,
                               std::uint64_t seed, int resamples, double level) {
  return pooled_ratio({RatioRound{num, den}}, seed, resamples, level);
}

namespace {
constexpr double kZ95 = 1.959964;  // two-sided 95% of the normal
}  // namespace

RatioInterval pool_intervals(const std::vector<RatioInterval>& rounds) {
  RatioInterval r;
  std::vector<double> logs;
  double within = 0;  // the rounds' own variances (in logs), summed
  for (const RatioInterval& x : rounds) {
    if (!x.known() || x.low <= 0) continue;
    logs.push_back(std::log(x.ratio));
    const double sd = 0.5 * (std::log(x.high) - std::log(x.low)) / kZ95;
    within += sd * sd;
  }
  const int k = static_cast<int>(logs.size());
  if (k == 0) return r;
  double mean = 0;
  for (const double l : logs) mean += l;
  mean /= k;
  // Each round's interval covers the noise within it; a host whose speed drifts between rounds
  // moves their ratios further apart than that (the MLP step on the GPU hosts: rounds 0.66-0.97
  // with intervals of +-5% each). What they scatter beyond their own noise (the sample variance
  // of their logs less their mean variance, a method-of-moments random effect) is added to
  // every round's variance; rounds that agree as well as their intervals say add nothing.
  double between = 0;
  if (k > 1) {
    double ss = 0;
    for (const double l : logs) ss += (l - mean) * (l - mean);
    between = std::max(0.0, ss / (k - 1) - within / k);
  }
  const double half = kZ95 * std::sqrt(within + k * between) / k;
  r.ratio = std::exp(mean);
  r.low = std::exp(mean - half);
  r.high = std::exp(mean + half);
  return r;
}

std::string interval_text(const RatioInterval& iv) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f [%.3f-%.3f]", iv.ratio, iv.low, iv.high);
  return buf;
}

std::string speedup_text(const RatioInterval& iv) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3fx (%.3f-%.3fx)", 1 / iv.ratio, 1 / iv.high, 1 / iv.low);
  return buf;
}

std::string percent(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", b > 0 ? 100.0 * (a - b) / b : 0.0);
  return buf;
}

}  // namespace hotpath::detail
