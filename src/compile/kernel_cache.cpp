#include "compile/kernel_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/log.h"
#include "compile/nvrtc.h"

namespace hotpath::detail {
namespace {
constexpr char kMagic[8] = {'H', 'P', 'C', 'U', 'B', 'I', 'N', '1'};
constexpr const char* kReference = "hotpath-program ";  // a cubin starts with ELF's magic

std::uint64_t checksum(const std::string& s) { return hash_string(s); }
}  // namespace

std::string cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* d = std::getenv("HOTPATH_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/hotpath";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.cache/hotpath";
  return {};
}

namespace {
// What every key for `arch` folds in after the source's hash: the runtime headers, the
// architecture, NVRTC's version and options. Hashed once per architecture (the headers' 15 KB
// took some 16 us a key, and a plan asks for a dozen keys); folded the same way as ever, so the
// keys, and the caches and prebuilt kernels named by them, stay as they were.
const std::vector<std::uint64_t>& key_parts(int arch) {
  static std::mutex mu;
  static std::map<int, std::vector<std::uint64_t>> parts;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::uint64_t>& p = parts[arch];
  if (!p.empty()) return p;
  for (const auto& [name, text] : runtime_headers()) {
    p.push_back(hash_string(name));
    p.push_back(hash_string(text));
  }
  p.push_back(static_cast<std::uint64_t>(arch));
  p.push_back(hash_string(nvrtc_version()));
  for (const auto& o : nvrtc_options(arch)) p.push_back(hash_string(o));
  return p;
}
}  // namespace

std::string kernel_cache_key(const std::string& source, int arch) {
  std::uint64_t h = hash_string(source);
  for (const std::uint64_t part : key_parts(arch)) h = hash_combine(h, part);
  return full_hex(h) + "-sm" + std::to_string(arch);
}

const std::vector<std::string>& prebuilt_kernel_dirs() {
  static const std::vector<std::string> dirs = {
#ifdef HOTPATH_BUILD_KERNELS
      HOTPATH_BUILD_KERNELS,
#endif
#ifdef HOTPATH_INSTALL_KERNELS
      HOTPATH_INSTALL_KERNELS,
#endif
  };
  return dirs;
}

std::string KernelCache::path(const std::string& key) const { return dir_ + "/" + key + ".cubin"; }

std::optional<std::string> KernelCache::load(const std::string& key, std::string* image,
                                             ProgramCubins* programs) const {
  auto entry = load_entry(key);
  if (!entry) return std::nullopt;
  const auto program = referenced(*entry);
  if (!program) {
    if (image != nullptr) *image = key;
    return entry;
  }
  auto read = [&] {
    auto cubin = load_entry(*program);
    if (cubin && referenced(*cubin)) cubin.reset();  // one level: a program's is a cubin
    return cubin;
  };
  std::optional<std::string> cubin;
  if (programs == nullptr) {
    cubin = read();
  } else {
    auto it = programs->find(*program);
    if (it == programs->end()) it = programs->emplace(*program, read()).first;
    cubin = it->second;
  }
  if (cubin && image != nullptr) *image = *program;
  return cubin;
}

std::optional<std::string> KernelCache::referenced(const std::string& entry) {
  const std::size_t n = std::strlen(kReference);
  if (entry.size() <= n || entry.compare(0, n, kReference) != 0) return std::nullopt;
  return entry.substr(n);
}

void KernelCache::store_reference(const std::string& key, const std::string& program_key) const {
  store(key, kReference + program_key);
}

std::optional<std::string> KernelCache::load_entry(const std::string& key) const {
  if (!dir_.empty()) {
    if (auto own = read_entry(path(key))) return own;
  }
  for (const std::string& d : prebuilt_kernel_dirs()) {
    if (d == dir_) continue;
    if (auto pre = read_entry(d + "/" + key + ".cubin")) return pre;
  }
  return std::nullopt;
}

std::optional<std::string> KernelCache::read_entry(const std::string& file) {
  const std::optional<std::string> read = read_file(file);
  if (!read) return std::nullopt;
  const std::string& all = *read;
  const std::size_t header = sizeof kMagic + 16;
  if (all.size() < header || std::memcmp(all.data(), kMagic, sizeof kMagic) != 0) {
    log_warn(concat("hotpath: cache entry ", file, " is corrupt; recompiling"));
    return std::nullopt;
  }
  std::uint64_t size = 0, sum = 0;
  std::memcpy(&size, all.data() + sizeof kMagic, 8);
  std::memcpy(&sum, all.data() + sizeof kMagic + 8, 8);
  std::string cubin = all.substr(header);
  if (cubin.size() != size || checksum(cubin) != sum) {
    log_warn(concat("hotpath: cache entry ", file, " is corrupt; recompiling"));
    return std::nullopt;
  }
  return cubin;
}

void KernelCache::store(const std::string& key, const std::string& cubin) const {
  if (dir_.empty()) return;
  const std::uint64_t size = cubin.size(), sum = checksum(cubin);
  std::string entry(kMagic, sizeof kMagic);
  entry.append(reinterpret_cast<const char*>(&size), 8);
  entry.append(reinterpret_cast<const char*>(&sum), 8);
  entry += cubin;
  const std::string error = write_file_atomic(dir_, path(key), entry);
  if (!error.empty()) log_warn(concat("hotpath: kernel cache: ", error));
}

}  // namespace hotpath::detail
