# Turns runtime/*.cuh into a C++ source so that NVRTC gets the device helpers from memory.
# Inputs: OUTPUT (the .cpp to write), HEADERS (|-separated list of files).
string(REPLACE "|" ";" HEADERS "${HEADERS}")
set(body "")
foreach(h IN LISTS HEADERS)
  file(READ "${h}" text)
  get_filename_component(name "${h}" NAME)
  string(APPEND body "      {\"${name}\", R\"hotpath_embed(${text})hotpath_embed\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "// Generated from runtime/*.cuh by cmake/embed_runtime.cmake. Do not edit.
#include <string>
#include <utility>
#include <vector>

namespace hotpath::detail {

const std::vector<std::pair<std::string, std::string>>& runtime_headers() {
  static const std::vector<std::pair<std::string, std::string>> headers = {
${body}  };
  return headers;
}

}  // namespace hotpath::detail
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
