// What a capture makes of an op by its name and schema (exec/replay.h), and where a captured
// stretch may be cut.
#include <ATen/core/function_schema.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "exec/replay.h"

namespace hotpath::detail {

// Ops the host waits on (their results decide what the host does next): they end a segment and
// run eagerly between graphs.
bool host_waits(std::string_view name) {
  static constexpr std::array<std::string_view, 11> kNames = {"aten::_local_scalar_dense",
                                                              "aten::item",
                                                              "aten::is_nonzero",
                                                              "aten::equal",
                                                              "aten::nonzero",
                                                              "aten::masked_select",
                                                              "aten::_unique2",
                                                              "aten::unique_dim",
                                                              "aten::unique_consecutive",
                                                              "aten::allclose",
                                                              "aten::repeat_interleave"};
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

bool resizes(std::string_view name) {
  return name == "aten::resize_" || name == "aten::resize_as_";
}

bool changes_view(const c10::OperatorHandle& op, std::string_view name) {
  if (resizes(name)) return false;
  return op.hasTag(at::Tag::inplace_view) || name == "aten::set_data" || name == "aten::set_";
}

// A view: a return that aliases an argument without writing it (no kernel runs).
bool is_view(const c10::FunctionSchema& s) {
  for (const c10::Argument& r : s.returns()) {
    const c10::AliasInfo* a = r.alias_info();
    if (a != nullptr && !a->isWrite()) return true;
  }
  return false;
}

bool draws_random(std::string_view name) {
  // ATen's random ops; some overloads take no generator (randn, rand_like).
  static constexpr std::array<std::string_view, 9> kWords = {"rand",    "normal",  "bernoulli",
                                                             "dropout", "uniform", "multinomial",
                                                             "poisson", "rrelu",   "exponential"};
  return std::any_of(kWords.begin(), kWords.end(),
                     [&](std::string_view w) { return name.find(w) != std::string_view::npos; });
}

bool draws_random(const c10::FunctionSchema& s, std::string_view name) {
  if (draws_random(name)) return true;
  for (const c10::Argument& a : s.arguments()) {
    if (a.type()->str().find("Generator") != std::string::npos) return true;
  }
  return false;
}

bool returns_list(const c10::FunctionSchema& s) {
  for (const c10::Argument& r : s.returns()) {
    if (r.type()->kind() == c10::TypeKind::ListType) return true;
  }
  return false;
}

std::vector<std::uint32_t> uncut_runs(const std::vector<int>& groups) {
  // Each group's first and last member; position i is free when no group spans it.
  std::map<int, std::pair<std::size_t, std::size_t>> span;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (groups[i] < 0) continue;
    auto [it, fresh] = span.emplace(groups[i], std::make_pair(i, i));
    if (!fresh) it->second.second = i;
  }
  std::vector<int> open(groups.size() + 1, 0);  // groups spanning position i (difference array)
  for (const auto& [g, s] : span) {
    ++open[s.first + 1];
    --open[s.second + 1];
  }
  std::vector<std::uint32_t> runs(groups.size(), 1);
  std::vector<bool> free(groups.size() + 1, true);
  int spanning = 0;
  for (std::size_t i = 0; i <= groups.size(); ++i) {
    spanning += open[i];
    free[i] = spanning == 0;
  }
  std::size_t next = groups.size();  // the nearest free position after i
  for (std::size_t i = groups.size(); i-- > 0;) {
    runs[i] = static_cast<std::uint32_t>(next - i);
    if (free[i]) next = i;
  }
  return runs;
}

}  // namespace hotpath::detail
