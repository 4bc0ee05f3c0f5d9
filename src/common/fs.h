// The few file-system operations hotpath needs, on POSIX calls. (std::filesystem is avoided: the
// LibTorch wheel exports its own copies of some of its symbols, and calls can bind to those.)
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hotpath::detail {

// mkdir -p; true when the directory exists afterwards.
bool make_dirs(const std::string& path);
// $TMPDIR, else /tmp.
std::string temp_dir();
// rename(2): atomic within a file system.
bool rename_file(const std::string& from, const std::string& to);
void remove_file(const std::string& path);
// Writes `contents` to a temporary file next to `path` and renames it over `path`: readers see
// the old file or the new one, never a part. Creates the directory. Returns an error message,
// empty on success.
std::string write_file_atomic(const std::string& dir, const std::string& path,
                              const std::string& contents);

// The whole of a file's bytes; nothing where it cannot be opened.
std::optional<std::string> read_file(const std::string& path);

// The regular files in `dir` whose names end in `suffix`, newest first (by modification time);
// none where the directory cannot be read.
struct DirEntry {
  std::string name;
  long long modified_ns = 0;
};
std::vector<DirEntry> list_files(const std::string& dir, const std::string& suffix);

}  // namespace hotpath::detail
