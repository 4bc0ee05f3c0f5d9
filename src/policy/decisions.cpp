#include "policy/decisions.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/log.h"

namespace hotpath::detail {
namespace {
constexpr const char* kMagic = "hotpath-decision 1";
}  // namespace

DecisionStore::DecisionStore(std::string dir)
    : dir_(dir.empty() ? std::string() : dir + "/decisions") {}

std::string DecisionStore::path(std::uint64_t signature) const {
  return dir_ + "/" + full_hex(signature) + ".txt";
}

std::optional<Decision> DecisionStore::load(std::uint64_t signature) const {
  if (dir_.empty()) return std::nullopt;
  std::ifstream f(path(signature));
  if (!f) return std::nullopt;
  std::string line;
  if (!std::getline(f, line) || line != kMagic) {
    log_warn(concat("hotpath: ignoring unreadable decision file ", path(signature)));
    return std::nullopt;
  }
  Decision d;
  bool have_verdict = false;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "verdict") {
      std::string v;
      in >> v;
      d.compile = v == "compile";
      have_verdict = v == "compile" || v == "eager";
    } else if (key == "group") {
      int keep = 0;
      std::string name;
      in >> keep >> name;
      d.groups.push_back(keep != 0);
      d.names.push_back(name);
    } else if (key == "eager_ms") {
      in >> d.eager_ms;
    } else if (key == "fused_ms") {
      in >> d.fused_ms;
    } else if (key == "replay") {
      std::string v;
      in >> v;
      d.replay_kept = v == "kept";
    } else if (key == "capture_ms") {
      in >> d.capture_ms;
    } else if (key == "pool_bytes") {
      in >> d.replay_pool_bytes;
    } else if (key == "pool_small_bytes") {
      in >> d.replay_pool_small_bytes;
    } else if (key == "skipped") {
      in >> d.skipped;
    } else if (key == "reason") {
      std::getline(in >> std::ws, d.reason);
    }
  }
  if (!have_verdict) {
    log_warn(concat("hotpath: ignoring unreadable decision file ", path(signature)));
    return std::nullopt;
  }
  return d;
}

void DecisionStore::save(std::uint64_t signature, const Decision& d) const {
  if (dir_.empty()) return;
  std::ostringstream f;
  f << kMagic << "\n";
  f << "verdict " << (d.compile ? "compile" : "eager") << "\n";
  for (std::size_t i = 0; i < d.groups.size(); ++i)
    f << "group " << (d.groups[i] ? 1 : 0) << " " << (i < d.names.size() ? d.names[i] : "?")
      << "\n";
  if (d.compile && d.replay_kept) f << "replay kept\n";
  if (d.compile && d.replay_kept && d.capture_ms > 0) f << "capture_ms " << d.capture_ms << "\n";
  if (d.compile && d.replay_kept && d.replay_pool_bytes > 0)
    f << "pool_bytes " << d.replay_pool_bytes << "\npool_small_bytes " << d.replay_pool_small_bytes
      << "\n";
  f << "eager_ms " << d.eager_ms << "\nfused_ms " << d.fused_ms << "\n";
  if (!d.compile) f << "skipped " << d.skipped << "\n";
  f << "reason " << d.reason << "\n";
  const std::string error = write_file_atomic(dir_, path(signature), f.str());
  if (!error.empty()) log_warn(concat("hotpath: verdicts are not remembered: ", error));
}

std::vector<std::pair<std::uint64_t, Decision>> DecisionStore::winners(std::size_t most) const {
  std::vector<std::pair<std::uint64_t, Decision>> out;
  if (dir_.empty()) return out;
  for (const DirEntry& e : list_files(dir_, ".txt")) {
    if (out.size() >= most) break;
    const std::string hex = e.name.substr(0, e.name.size() - 4);
    if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      continue;
    const std::uint64_t signature = std::strtoull(hex.c_str(), nullptr, 16);
    std::optional<Decision> d = load(signature);
    if (d && d->compile) out.emplace_back(signature, std::move(*d));
  }
  return out;
}

}  // namespace hotpath::detail
