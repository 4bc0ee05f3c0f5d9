// The host profile (Config::host_profile) over a stretch of a benchmark: what hotpath's hook took
// per op between two stats() snapshots, and in which parts. bench_overhead and bench_lm print it.
#pragma once

#include <cstdio>
#include <string>

#include "hotpath/hotpath.h"

namespace bench {

struct HostShare {
  double ops = 0;  // ops timed in the stretch; 0: the profile was off
  // Microseconds per op: the hook's own, the ATen work it ran below itself, and the hook's parts.
  double hook = 0, below = 0;
  double record = 0, flow = 0, guard = 0, defer = 0, launch = 0, copies = 0, graphs = 0, commit = 0;
  // Config::replay_launcher: the launcher thread's time issuing graphs, per op (beside the hook's,
  // on another core; not in `hook`).
  double launcher = 0;
};

// The launcher threads' time issuing replayed graphs so far, over all signatures (ms).
inline double launcher_ms(const hotpath::Stats& s) {
  double ms = 0;
  for (const auto& sig : s.signatures) ms += sig.fusion.replay_launcher_ms;
  return ms;
}

inline HostShare host_share(const hotpath::Stats& a, const hotpath::Stats& b) {
  HostShare h;
  h.ops = static_cast<double>(b.host_ops - a.host_ops);
  if (h.ops <= 0) return HostShare{};
  auto per = [&](double before, double after) { return (after - before) / h.ops; };
  h.hook = per(a.host_hook_us, b.host_hook_us);
  h.below = per(a.host_below_us, b.host_below_us);
  h.record = per(a.host_record_us, b.host_record_us);
  h.flow = per(a.host_flow_us, b.host_flow_us);
  h.guard = per(a.host_guard_us, b.host_guard_us);
  h.defer = per(a.host_defer_us, b.host_defer_us);
  h.launch = per(a.host_launch_us, b.host_launch_us);
  h.copies = per(a.host_copy_us, b.host_copy_us);
  h.graphs = per(a.host_graph_us, b.host_graph_us);
  h.commit = per(a.host_commit_us, b.host_commit_us);
  h.launcher = per(launcher_ms(a) * 1e3, launcher_ms(b) * 1e3);
  return h;
}

// Adds `d` (another stretch) to `into`, each weighed by its ops.
inline void add_host_share(HostShare& into, const HostShare& d) {
  const double n = into.ops + d.ops;
  if (d.ops <= 0) return;
  auto mix = [&](double& a, double b) { a = (a * into.ops + b * d.ops) / n; };
  mix(into.hook, d.hook);
  mix(into.below, d.below);
  mix(into.record, d.record);
  mix(into.flow, d.flow);
  mix(into.guard, d.guard);
  mix(into.defer, d.defer);
  mix(into.launch, d.launch);
  mix(into.copies, d.copies);
  mix(into.graphs, d.graphs);
  mix(into.commit, d.commit);
  mix(into.launcher, d.launcher);
  into.ops = n;
}

inline std::string host_share_text(const HostShare& h) {
  char line[512];
  std::snprintf(line, sizeof line,
                "the hook's %.3f us an op: record %.3f, data flow %.3f, guard %.3f, defer %.3f, "
                "launch %.3f, copies %.3f, graphs %.3f, commit %.3f (the rest in the session); "
                "ATen below it %.3f (%.0f ops timed); the launcher thread beside it %.3f",
                h.hook, h.record, h.flow, h.guard, h.defer, h.launch, h.copies, h.graphs, h.commit,
                h.below, h.ops, h.launcher);
  return line;
}

}  // namespace bench
