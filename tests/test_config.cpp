#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "env_var.h"
#include "hotpath/hotpath.h"

namespace {
using hotpath_test::EnvVar;

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
  EnvVar lt("HOTPATH_LOG_TIME", "1");
  hotpath::Config base;
  base.threshold = 10;
  CHECK_FALSE(base.log_time);
  const auto c = hotpath::config_from_env(base);
  CHECK(c.threshold == 3);
  CHECK(c.log_level == hotpath::LogLevel::Warn);
  CHECK(c.log_time);
  CHECK_FALSE(c.auto_detect_period);
}

TEST_CASE("the governor's settings come from the environment too", "[config]") {
  hotpath::Config defaults;
  CHECK(defaults.fuse);  // fused kernels are on unless turned off
  CHECK(defaults.revert_window == 20);
  CHECK(defaults.revert_margin == Approx(0.03));
  CHECK(defaults.remember);
  EnvVar w("HOTPATH_REVERT_WINDOW", "40");
  EnvVar m("HOTPATH_REVERT_MARGIN", "0.1");
  EnvVar r("HOTPATH_REMEMBER", "0");
  EnvVar f("HOTPATH_FUSE", "0");
  CHECK(defaults.compile_kernels);
  EnvVar k("HOTPATH_COMPILE_KERNELS", "0");
  CHECK(defaults.compile_ahead == 2);
  EnvVar a("HOTPATH_COMPILE_AHEAD", "0");  // compile once hot
  CHECK(defaults.prepare_known);           // known winners' plans built at enable
  EnvVar pk("HOTPATH_PREPARE_KNOWN", "0");
  CHECK(defaults.replay);  // CUDA graph replay is on unless turned off
  EnvVar g("HOTPATH_REPLAY", "0");
  CHECK(defaults.replay_graph_ops == 16);
  EnvVar o("HOTPATH_REPLAY_GRAPH_OPS", "0");  // one graph per stretch
  CHECK(defaults.replay_fast_lane);
  EnvVar fl("HOTPATH_REPLAY_FAST_LANE", "0");
  CHECK(defaults.replay_launcher);
  EnvVar rl("HOTPATH_REPLAY_LAUNCHER", "0");
  CHECK_FALSE(defaults.host_profile);
  EnvVar h("HOTPATH_HOST_PROFILE", "1");
  const auto c = hotpath::config_from_env(defaults);
  CHECK(c.revert_window == 40);
  CHECK(c.revert_margin == Approx(0.1));
  CHECK_FALSE(c.remember);
  CHECK_FALSE(c.fuse);
  CHECK_FALSE(c.compile_kernels);
  CHECK(c.compile_ahead == 0);
  CHECK_FALSE(c.prepare_known);
  CHECK_FALSE(c.replay);
  CHECK(c.replay_graph_ops == 0);
  CHECK_FALSE(c.replay_fast_lane);
  CHECK_FALSE(c.replay_launcher);
  CHECK(c.host_profile);
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
  SECTION("log time") {
    EnvVar t("HOTPATH_LOG_TIME", "on");
    CHECK(error_of({}).find("HOTPATH_LOG_TIME='on'") != std::string::npos);
  }
  SECTION("prepare known") {
    EnvVar t("HOTPATH_PREPARE_KNOWN", "yes");
    CHECK(error_of({}).find("HOTPATH_PREPARE_KNOWN='yes'") != std::string::npos);
  }
  SECTION("auto period") {
    EnvVar t("HOTPATH_AUTO_PERIOD", "yes");
    CHECK(error_of({}).find("HOTPATH_AUTO_PERIOD") != std::string::npos);
  }
  SECTION("revert window too small") {
    EnvVar t("HOTPATH_REVERT_WINDOW", "1");
    CHECK(error_of({}).find("HOTPATH_REVERT_WINDOW='1'") != std::string::npos);
  }
  SECTION("revert margin not a fraction") {
    EnvVar t("HOTPATH_REVERT_MARGIN", "3%");
    CHECK(error_of({}).find("HOTPATH_REVERT_MARGIN='3%'") != std::string::npos);
  }
  SECTION("remember") {
    EnvVar t("HOTPATH_REMEMBER", "true");
    CHECK(error_of({}).find("HOTPATH_REMEMBER='true'") != std::string::npos);
  }
  SECTION("compile kernels") {
    EnvVar t("HOTPATH_COMPILE_KERNELS", "no");
    CHECK(error_of({}).find("HOTPATH_COMPILE_KERNELS='no'") != std::string::npos);
  }
  SECTION("replay") {
    EnvVar t("HOTPATH_REPLAY", "graphs");
    CHECK(error_of({}).find("HOTPATH_REPLAY='graphs'") != std::string::npos);
  }
  SECTION("host profile") {
    EnvVar t("HOTPATH_HOST_PROFILE", "yes");
    CHECK(error_of({}).find("HOTPATH_HOST_PROFILE='yes'") != std::string::npos);
  }
  SECTION("compile ahead") {
    EnvVar t("HOTPATH_COMPILE_AHEAD", "-1");
    CHECK(error_of({}).find("HOTPATH_COMPILE_AHEAD='-1'") != std::string::npos);
  }
  SECTION("ops per replayed graph") {
    EnvVar t("HOTPATH_REPLAY_GRAPH_OPS", "-4");
    CHECK(error_of({}).find("HOTPATH_REPLAY_GRAPH_OPS='-4'") != std::string::npos);
  }
}

TEST_CASE("a negative count of ops per replayed graph is rejected", "[config]") {
  hotpath::Config c;
  c.replay_graph_ops = -1;
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(c),
                    Catch::Contains("replay_graph_ops must be >= 0"));
  CHECK_FALSE(hotpath::is_enabled());
}

TEST_CASE("a negative compile-ahead count is rejected", "[config]") {
  hotpath::Config c;
  c.compile_ahead = -2;
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(c),
                    Catch::Contains("compile_ahead must be >= 0"));
  CHECK_FALSE(hotpath::is_enabled());
}

TEST_CASE("a threshold below 1 is rejected and nothing is enabled", "[config]") {
  CHECK_THROWS_AS(hotpath::enable_hot_path_detection(0), hotpath::Error);
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(-3),
                    Catch::Contains("threshold must be >= 1"));
  CHECK_FALSE(hotpath::is_enabled());
}
