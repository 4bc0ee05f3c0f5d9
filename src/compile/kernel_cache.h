// Persistent on-disk cache of compiled kernels. Key: hash of the source, the embedded runtime
// headers, the architecture, the NVRTC version and the options. Entries are written atomically
// (temporary file + rename) and carry a checksum; a corrupt or truncated entry is a miss and is
// overwritten by the recompiled kernel.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hotpath::detail {

class KernelCache {
 public:
  // `dir` empty: no persistence. Created on first store.
  explicit KernelCache(std::string dir) : dir_(std::move(dir)) {}

  // From `dir`, else from the kernels compiled when hotpath was built (prebuilt_kernel_dirs()).
  std::optional<std::string> load(const std::string& key) const;
  // Best effort: a failed write only costs a recompile next run (it is logged).
  void store(const std::string& key, const std::string& cubin) const;
  std::string path(const std::string& key) const;
  const std::string& dir() const { return dir_; }

 private:
  static std::optional<std::string> read_entry(const std::string& file);
  std::string dir_;
};

// The cache directory: `configured` (Config::cache_dir) if set, else $HOTPATH_CACHE_DIR, else
// $XDG_CACHE_HOME/hotpath, else $HOME/.cache/hotpath; empty when none of those exists.
std::string cache_dir(const std::string& configured);

// Read-only kernel directories written when hotpath was built (the interpreter kernel for the
// usual architectures): the build tree's and the installed one.
const std::vector<std::string>& prebuilt_kernel_dirs();

// The cache key of a kernel source compiled for sm_<arch>.
std::string kernel_cache_key(const std::string& source, int arch);

}  // namespace hotpath::detail
