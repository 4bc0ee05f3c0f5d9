// The governor alone, with a fake plan (FakePlans: what the executor says of how each iteration
// ran, and what the governor asked of it) and a fake clock (Feed): shared by the governor's
// tests that need no executor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exec/plan.h"
#include "policy/governor.h"
#include "policy/plan_control.h"

// After LibTorch's headers: c10's logging defines a CHECK of its own.
#include <catch2/catch.hpp>

namespace hotpath_test {

using hotpath::detail::PlanControl;

using hotpath::detail::PlanControl;

struct FakePlans : PlanControl {
  bool fused = false;        // the iterations from now on ran the plan
  bool final_tiers = false;  // ... with every group's own kernel
  // ... else, of the groups still compiling: some on the interpreter, some eagerly
  bool stand_in = false, waited = false;
  bool replayed = false;  // ... as CUDA graphs
  bool captured = false;  // ... was captured as CUDA graphs
  // Every group off (set_active), as the governor asks while it times eager again.
  bool all_off = false;
  int no_stand_in_calls = 0, keep_stand_in_calls = 0, reverts = 0, no_replay_calls = 0,
      release_replay_calls = 0;
  hotpath::detail::Plan trial_plan;  // takes the stand-in trial's turns (see trial)
  std::string why;
  // Iterations (by their first op) that started on signature 7's plan (10 ops) and left it.
  std::set<std::int64_t> left;
  Run ran(std::uint64_t, std::int64_t first) const override {
    Run r;
    r.fused = fused;
    r.final_tiers = final_tiers;
    r.stand_in = stand_in;
    r.waited = waited;
    r.replayed = replayed;
    r.captured = captured;
    if (left.count(first) > 0) {
      r.left_plan = 7;
      r.plan_ops = 10;
    }
    return r;
  }
  std::optional<std::vector<Group>> groups(std::uint64_t) const override {
    return std::vector<Group>{Group{"g", true}};
  }
  Pool pool;  // what replay_pool answers
  Pool replay_pool(std::uint64_t) const override { return pool; }
  std::int64_t set_active(std::uint64_t, const std::vector<bool>& active,
                          const std::string&) override {
    all_off = std::none_of(active.begin(), active.end(), [](bool on) { return on; });
    return 0;
  }
  void revert(std::uint64_t, const std::string& reason) override {
    ++reverts;
    why = reason;
  }
  void no_stand_in(std::uint64_t, const std::string& reason) override {
    ++no_stand_in_calls;
    why = reason;
  }
  void keep_stand_in(std::uint64_t, const std::string& reason) override {
    ++keep_stand_in_calls;
    why = reason;
  }
  void no_replay(std::uint64_t, const std::string& reason) override {
    ++no_replay_calls;
    why = reason;
  }
  void release_replay(std::uint64_t, const std::string& reason) override {
    ++release_replay_calls;
    why = reason;
  }
};

// Feeds iterations to the governor that take `ms` each: of signature 7 (ten ops each) unless
// told otherwise (`ops` of them, under `signature`).
struct Feed {
  hotpath::detail::Governor& gov;
  double now = 0;
  std::int64_t count = 0, next_op = 0;
  std::int64_t hot_from = 3;    // the signature is hot from its hot_from-th iteration on
  std::int64_t closed_at = -1;  // where the iterations are cut (-1: at their end)
  void run(int n, double ms, std::uint64_t signature = 7, std::int64_t ops = 10) {
    for (int i = 0; i < n; ++i) {
      if (count == 0) gov.stamp(0);
      now += ms;
      ++count;
      hotpath::detail::IterationEvent e;
      e.signature = signature;
      e.first = next_op;
      next_op += ops;
      gov.stamp(next_op);
      e.end = e.core_end = next_op;
      e.count = count;
      e.hot = count >= hot_from;
      e.closed_at = closed_at >= 0 ? closed_at : e.end;
      gov.on_iteration(e);
    }
  }
};

inline hotpath::Config config() {
  hotpath::Config c;
  c.remember = false;
  c.revert_margin = 0.03;
  c.revert_window = 20;
  return c;
}

// The governor's report of signature 7 (hot, `count` iterations), with what the executor would
// say of its plan (planned, built).
inline hotpath::SignatureReport report_of(hotpath::detail::Governor& gov, std::int64_t count,
                                          bool planned = false, bool ready = false) {
  hotpath::Stats stats;
  hotpath::SignatureStats sig;
  sig.id = 7;
  sig.hex = "7";
  sig.count = count;
  sig.hot = true;
  sig.fusion.planned = planned;
  sig.fusion.ready = ready;
  stats.signatures.push_back(sig);
  hotpath::Report report;
  gov.fill_report(stats, report);
  REQUIRE(report.signatures.size() == 1);
  return report.signatures[0];
}

}  // namespace hotpath_test
