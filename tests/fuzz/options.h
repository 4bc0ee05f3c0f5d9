// The fuzzer's command line (tests/fuzz/fuzz_programs.cpp says what each option does).
#pragma once

#include <cstdint>
#include <string>

namespace fuzz {

struct Options {
  std::string device;  // "cpu" or "cuda"
  long programs = 200;
  double seconds = 0;  // 0: no limit
  std::uint64_t seed = 1;
  int iterations = 6;
  bool compile_kernels = false, show = false, stand_ins = false, handover = false, actions = false,
       layers = false, layouts = false, cuda_rms = false, self_test = false;
  std::string replay, csv;
};

// Parsed by CLI11. Returns only with options it could read: after --help it exits 0, after a bad
// argument (a count, seed or time that is none, a file that is not there, --device cuda without a
// CUDA device, --stand-ins with --handover) it prints what was wrong and exits 2.
Options parse_options(int argc, char** argv);

// A bad argument or input file (`why`) on stderr, then exit status 2.
[[noreturn]] void usage(const std::string& why);

}  // namespace fuzz
