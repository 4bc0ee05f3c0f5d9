#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "hotpath/hotpath.h"

namespace {
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

std::string error_of(const hotpath::Config& base) {
  try {
    hotpath::config_from_env(base);
  } catch (const hotpath::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("environment overrides the configuration", "[config]") {
  EnvVar t("HOTPATH_THRESHOLD", "3");
  EnvVar l("HOTPATH_LOG_LEVEL", "warn");
  EnvVar a("HOTPATH_AUTO_PERIOD", "0");
  hotpath::Config base;
  base.threshold = 10;
  const auto c = hotpath::config_from_env(base);
  CHECK(c.threshold == 3);
  CHECK(c.log_level == hotpath::LogLevel::Warn);
  CHECK_FALSE(c.auto_detect_period);
}

TEST_CASE("unusable environment values are rejected by name", "[config]") {
  SECTION("threshold not a number") {
    EnvVar t("HOTPATH_THRESHOLD", "ten");
    const auto msg = error_of({});
    CHECK(msg.find("HOTPATH_THRESHOLD='ten'") != std::string::npos);
  }
  SECTION("threshold zero") {
    EnvVar t("HOTPATH_THRESHOLD", "0");
    CHECK(error_of({}).find("HOTPATH_THRESHOLD='0'") != std::string::npos);
  }
  SECTION("trailing garbage") {
    EnvVar t("HOTPATH_THRESHOLD", "12x");
    CHECK_FALSE(error_of({}).empty());
  }
  SECTION("log level") {
    EnvVar t("HOTPATH_LOG_LEVEL", "loud");
    CHECK(error_of({}).find("HOTPATH_LOG_LEVEL='loud'") != std::string::npos);
  }
  SECTION("auto period") {
    EnvVar t("HOTPATH_AUTO_PERIOD", "yes");
    CHECK(error_of({}).find("HOTPATH_AUTO_PERIOD") != std::string::npos);
  }
}

TEST_CASE("a threshold below 1 is rejected and nothing is enabled", "[config]") {
  CHECK_THROWS_AS(hotpath::enable_hot_path_detection(0), hotpath::Error);
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(-3),
                    Catch::Contains("threshold must be >= 1"));
  CHECK_FALSE(hotpath::is_enabled());
}
