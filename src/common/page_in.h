// Pages a loaded shared library's read-only segments into memory ahead of need. A library the
// process has mapped but not yet run much of (NVRTC: over 100 MB, of which a first compile touches
// a part) is read from disk page by page as code first runs; on a machine whose file cache is
// cold, and whose image is unpacked as it is read, that cost the first compile 10x its time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hotpath::detail {

struct PageIn {
  std::vector<std::string> libraries;  // the files whose segments were paged in
  std::size_t pages = 0;               // read-only pages of their loaded segments
  std::size_t resident_before = 0;     // of those, in memory before (the file cache's)
  std::size_t resident_after = 0;      // ... and after
  double ms = 0;
};

// Every library loaded in the process whose file name starts with `prefix` (e.g. "libnvrtc"):
// its read-only loaded segments are asked for (madvise WILLNEED) and touched a page at a time.
// Writable segments are left alone (touching them would commit memory).
PageIn page_in_libraries(const std::string& prefix);

}  // namespace hotpath::detail
