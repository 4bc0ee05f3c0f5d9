// What the test tools' command lines (CLI11) share: checks that refuse a number that is none with
// the option's name and what it got, where CLI11 alone would take "-3" for an unsigned count
// (wrapped) or read a count from "4.5"; and the exit statuses of parsing.
#pragma once

#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace hotpath_cli {

// A whole number of at least `least`, digits only.
inline CLI::Validator whole(unsigned long long least) {
  return CLI::Validator(
      [least](std::string& v) -> std::string {
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (digits && v.size() < 20 && std::stoull(v) >= least) return "";
        return "needs a whole number of at least " + std::to_string(least) + ", got '" + v + "'";
      },
      "N");
}

// A finite number above `above` (or of at least it, where `or_equal`), as strtod reads it whole.
inline CLI::Validator number(double above, bool or_equal, const std::string& what) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (!v.empty() && *end == '\0' && std::isfinite(x) &&
            (x > above || (or_equal && x == above)))
          return "";
        return "needs " + what + ", got '" + v + "'";
      },
      "X");
}

// --device cpu|cuda into `device`, cuda by default where there is a CUDA device; cuda refused where
// there is none.
inline void add_device(CLI::App& app, std::string& device) {
  device = torch::cuda::is_available() ? "cuda" : "cpu";
  app.add_option("--device", device, "cpu or cuda (default: cuda where there is one)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "cuda" && !torch::cuda::is_available() ? "no CUDA device" : "";
          },
          "DEVICE"));
}

// Parses the command line, or exits: 0 after --help, 2 after a bad argument (CLI11 has printed
// which, and what was wrong with it).
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
}

}  // namespace hotpath_cli
