#include "options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "tests/cli_checks.h"

namespace fuzz {

using hotpath_cli::whole;

Options parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{
      "fuzz_programs: random programs run with hotpath and eagerly, their results compared "
      "(see tests/fuzz/fuzz_programs.cpp)"};
  hotpath_cli::add_device(app, o.device);
  app.add_option("--programs", o.programs, "how many programs (default 200)")->check(whole(0));
  app.add_option("--seconds", o.seconds, "stop after this long (0: no limit)")
      ->check(hotpath_cli::number(0, true, "a number of seconds (0 or more)"));
  app.add_option("--seed", o.seed, "the first program's seed (default 1)")->check(whole(0));
  app.add_option("--iterations", o.iterations, "iterations a program (default 6)")->check(whole(1));
  app.add_flag("--compile-kernels", o.compile_kernels,
               "NVRTC compiles every kernel the plans make");
  app.add_flag("--stand-ins", o.stand_ins, "no group kernel compiled: stand-ins run the groups");
  app.add_flag("--handover", o.handover, "the kernels let in part-way, as a cold start gets them");
  app.add_flag("--actions", o.actions, "the governor's reconfigurations at random points");
  app.add_flag("--layers", o.layers, "a layer's ops appended to each program");
  app.add_flag("--cuda-rms", o.cuda_rms, "with --layers on the CPU: CUDA's fused rms norm");
  app.add_flag("--layouts", o.layouts, "a value transposed or resized in place, then read");
  app.add_flag("--show", o.show, "each program's values, what hotpath did, and its kernels");
  app.add_option("--replay", o.replay, "a regressions file: its seeds first")
      ->check(CLI::ExistingFile);
  app.add_option("--csv", o.csv, "the counts as CSV to this file");
  app.add_flag("--self-test", o.self_test, "check the shrinker and the noise floor, then exit");
  hotpath_cli::parse_or_exit(app, argc, argv);
  if (o.stand_ins && o.handover)
    usage("--stand-ins compiles no kernels for --handover to hand over");
  return o;
}

void usage(const std::string& why) {
  std::fprintf(stderr, "fuzz_programs: %s\n(see tests/fuzz/fuzz_programs.cpp)\n", why.c_str());
  std::exit(2);
}

}  // namespace fuzz
