// An environment variable set for one scope of a test, unset at its end.
#pragma once

#include <stdlib.h>

#include <string>

namespace hotpath_test {

struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;
};

}  // namespace hotpath_test
