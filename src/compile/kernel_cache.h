// Persistent on-disk cache of compiled kernels. Key: hash of the source, the embedded runtime
// headers, the architecture, the NVRTC version and the options. Entries are written atomically
// (temporary file + rename) and carry a checksum; a corrupt or truncated entry is a miss and is
// overwritten by the recompiled kernel. A kernel compiled with others in one NVRTC program has
// an entry that names the program's key, where the cubin they share is stored once.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hotpath::detail {

class KernelCache {
 public:
  // `dir` empty: no persistence. Created on first store.
  explicit KernelCache(std::string dir) : dir_(std::move(dir)) {}

  // From `dir`, else from the kernels compiled when hotpath was built (prebuilt_kernel_dirs()).
  // A kernel's cubin, following a reference to its program's (`image`, if given: the key whose
  // entry holds the cubin, the kernel's own or its program's). `programs`, if given: the program
  // cubins read so far (or found missing), so that a plan's kernels read theirs once.
  using ProgramCubins = std::map<std::string, std::optional<std::string>>;
  std::optional<std::string> load(const std::string& key, std::string* image = nullptr,
                                  ProgramCubins* programs = nullptr) const;
  // The entry as stored: a cubin, or a reference (referenced() says which).
  std::optional<std::string> load_entry(const std::string& key) const;
  // Best effort: a failed write only costs a recompile next run (it is logged).
  void store(const std::string& key, const std::string& cubin) const;
  // `key`'s kernel lies in the cubin stored under `program_key`.
  void store_reference(const std::string& key, const std::string& program_key) const;
  // The program key an entry refers to, if it is a reference (a cubin never starts like one).
  static std::optional<std::string> referenced(const std::string& entry);
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
