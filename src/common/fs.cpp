#include "common/fs.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hotpath::detail {

bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return (t != nullptr && *t != '\0') ? t : "/tmp";
}

bool rename_file(const std::string& from, const std::string& to) {
  return std::rename(from.c_str(), to.c_str()) == 0;
}

void remove_file(const std::string& path) { std::remove(path.c_str()); }

std::string write_file_atomic(const std::string& dir, const std::string& path,
                              const std::string& contents) {
  if (!make_dirs(dir)) return "cannot create the directory " + dir;
  // Unique per process and call, so that concurrent writers never share a temporary.
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!f) {
      remove_file(tmp);
      return "could not write " + tmp;
    }
  }
  if (!rename_file(tmp, path)) {
    remove_file(tmp);
    return "could not write " + path;
  }
  return {};
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<DirEntry> list_files(const std::string& dir, const std::string& suffix) {
  std::vector<DirEntry> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    struct stat st {};
    if (::stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back(
        {name, static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) {
    return a.modified_ns != b.modified_ns ? a.modified_ns > b.modified_ns : a.name < b.name;
  });
  return out;
}

}  // namespace hotpath::detail
