#include "common/page_in.h"

#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace hotpath::detail {
namespace {

struct Segment {
  std::uintptr_t begin = 0, end = 0;  // page-aligned
};

struct Found {
  const std::string* prefix = nullptr;
  std::size_t page = 4096;
  std::vector<std::string> names;
  std::vector<Segment> segments;
};

int collect(dl_phdr_info* info, std::size_t, void* data) {
  Found& found = *static_cast<Found*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  const char* slash = std::strrchr(info->dlpi_name, '/');
  const char* base = slash != nullptr ? slash + 1 : info->dlpi_name;
  if (std::strncmp(base, found.prefix->c_str(), found.prefix->size()) != 0) return 0;
  found.names.emplace_back(info->dlpi_name);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_R) == 0 || (ph.p_flags & PF_W) != 0 ||
        ph.p_memsz == 0)
      continue;
    const std::uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    const std::uintptr_t mask = ~static_cast<std::uintptr_t>(found.page - 1);
    found.segments.push_back({a & mask, (a + ph.p_memsz + found.page - 1) & mask});
  }
  return 0;
}

std::size_t resident(const Segment& s, std::size_t page) {
  std::vector<unsigned char> v((s.end - s.begin) / page);
  if (::mincore(reinterpret_cast<void*>(s.begin), s.end - s.begin, v.data()) != 0) return 0;
  std::size_t n = 0;
  for (const unsigned char c : v) n += c & 1;
  return n;
}

}  // namespace

PageIn page_in_libraries(const std::string& prefix) {
  const auto t0 = std::chrono::steady_clock::now();
  Found found;
  found.prefix = &prefix;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) found.page = static_cast<std::size_t>(page);
  dl_iterate_phdr(collect, &found);
  PageIn out;
  out.libraries = std::move(found.names);
  for (const Segment& s : found.segments) {
    out.pages += (s.end - s.begin) / found.page;
    out.resident_before += resident(s, found.page);
    // Read-ahead in large requests first, then one read per page: what the kernel did not bring
    // in is faulted here, on this thread, rather than in the middle of a compile.
    ::madvise(reinterpret_cast<void*>(s.begin), s.end - s.begin, MADV_WILLNEED);
    volatile unsigned char sink = 0;
    for (std::uintptr_t p = s.begin; p < s.end; p += found.page)
      sink = sink + *reinterpret_cast<const volatile unsigned char*>(p);
    (void)sink;
    out.resident_after += resident(s, found.page);
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace hotpath::detail
