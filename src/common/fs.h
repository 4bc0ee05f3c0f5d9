// The few file-system operations hotpath needs, on POSIX calls. (std::filesystem is avoided: the
// LibTorch wheel exports its own copies of some of its symbols, and calls can bind to those.)
#pragma once

#include <string>

namespace hotpath::detail {

// mkdir -p; true when the directory exists afterwards.
bool make_dirs(const std::string& path);
// $TMPDIR, else /tmp.
std::string temp_dir();
// rename(2): atomic within a file system.
bool rename_file(const std::string& from, const std::string& to);
void remove_file(const std::string& path);

}  // namespace hotpath::detail
