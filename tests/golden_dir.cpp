// Where the golden files are (fusion_support.h): the checkout's absolute path, given to this file
// alone by tests/CMakeLists.txt.
#include <string>

namespace fusion_test {

std::string golden_dir() { return HOTPATH_GOLDEN_DIR; }

}  // namespace fusion_test
