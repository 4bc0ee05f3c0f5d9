#include "judge.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fuzz {

double perturbation(const Outcome& eager) {
  double u = kPerturbation;
  for (const auto& t : eager.values) {
    if (t.scalar_type() == torch::kHalf) u = std::max(u, std::ldexp(1.0, -11));
    if (t.scalar_type() == torch::kBFloat16) u = std::max(u, std::ldexp(1.0, -8));
  }
  return u;
}

std::vector<double> noise_floor(const Outcome& eager, const Outcome& perturbed) {
  std::vector<double> floor;
  if (eager.threw || perturbed.threw || eager.values.size() != perturbed.values.size())
    return floor;
  for (std::size_t i = 0; i < eager.values.size(); ++i) {
    const auto x = perturbed.values[i].to(torch::kDouble), y = eager.values[i].to(torch::kDouble);
    if (x.sizes() != y.sizes() || !torch::equal(x.isfinite(), y.isfinite())) {
      floor.push_back(INFINITY);
      continue;
    }
    const auto fin = y.isfinite();
    floor.push_back(fin.any().item<bool>() ? (x - y).abs().masked_select(fin).max().item<double>()
                                           : 0.0);
  }
  return floor;
}

std::string compare(const Outcome& eager, const Outcome& fused, bool exact,
                    const std::vector<double>& floor) {
  if (eager.threw != fused.threw)
    return "eager " + std::string(eager.threw ? "threw: " + eager.error : "ran") + ", hotpath " +
           (fused.threw ? "threw: " + fused.error : "ran");
  if (eager.values.size() != fused.values.size()) return "different numbers of values";
  for (std::size_t i = 0; i < eager.values.size(); ++i) {
    const auto& a = fused.values[i];
    const auto& b = eager.values[i];
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
      return "value " + std::to_string(i) + ": another shape or dtype";
    if (a.numel() == 0) continue;
    const double noise = i < floor.size() ? floor[i] : 0.0;
    if (std::isinf(noise)) continue;  // eager's own NaN and Inf move with its inputs
    if (exact) {
      if (!torch::equal(a.isnan(), b.isnan()) ||
          !torch::equal(a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0)))
        return "value " + std::to_string(i) + " differs (bitwise)";
      continue;
    }
    const auto x = a.to(torch::kDouble), y = b.to(torch::kDouble);
    if (!torch::equal(x.isnan(), y.isnan()) || !torch::equal(x.isinf(), y.isinf()) ||
        !torch::equal(x.isinf() * x.sign(), y.isinf() * y.sign()))
      return "value " + std::to_string(i) +
             ": NaN or Inf where eager has none (or none where it has)";
    const auto fin = y.isfinite();
    if (!fin.any().item<bool>()) continue;
    const double diff = (x - y).abs().masked_select(fin).max().item<double>();
    const double scale = std::max(y.abs().masked_select(fin).max().item<double>(), 1.0);
    const double tol = b.scalar_type() == torch::kFloat ? 1e-4 : 2e-2;
    if (diff > std::max(tol * scale, kNoiseFactor * noise)) {
      std::ostringstream os;
      os << "value " << i << " " << b.sizes() << " " << b.scalar_type() << ": max |diff| " << diff
         << " over scale " << scale;
      if (!floor.empty()) os << " (eager on perturbed inputs: " << noise << ")";
      return os.str();
    }
  }
  return {};
}

}  // namespace fuzz
