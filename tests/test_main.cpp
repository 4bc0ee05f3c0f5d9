// The tests' main: Catch2's, after the caller's HOTPATH_* settings are taken out of the
// environment. hotpath reads them over the Config a test passes (HOTPATH_CACHE_DIR over its own
// temporary cache directory, HOTPATH_FAULTS, HOTPATH_FUSE, ...), so a shell that still exported
// one from an example run made tests share one cache and remember each other's verdicts (three
// GPU tests failed so). Tests that want a setting set it themselves (env_var.h).
// HOTPATH_LOG_LEVEL stays (it only changes what is logged), and HOTPATH_UPDATE_GOLDEN (a
// developer's request to rewrite the golden files, fusion_support.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

int main(int argc, char* argv[]) {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("HOTPATH_", 0) == 0 && name != "HOTPATH_LOG_LEVEL" &&
        name != "HOTPATH_UPDATE_GOLDEN")
      names.push_back(name);
  }
  for (const std::string& name : names) {
    std::fprintf(stderr, "tests: %s is unset for the tests (they set what they need)\n",
                 name.c_str());
    unsetenv(name.c_str());
  }
  return Catch::Session().run(argc, argv);
}
