// Built against an installed hotpath: the public header alone, no LibTorch headers.
#include <hotpath/hotpath.h>

#include <cstdio>

int main() {
  hotpath::Config c = hotpath::config_from_env();
  std::printf("hotpath consumer: built against LibTorch %s, default threshold %d\n",
              hotpath::libtorch_version().c_str(), c.threshold);
  return hotpath::libtorch_version() == EXPECTED_TORCH ? 0 : 1;
}
