#!/usr/bin/env bash
# Probe (issue "Launch-bound loops": the hook at <= 1 us an op while replaying): bench_overhead of
# the tree before (a worktree of it in .base) and of this one, in turns on one machine, and the
# lines that say what the hook cost an op while replaying and what the synced MLP step took.
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/overhead_ab.sh
# Environment: PROBE_RUNS (turns a tree, default 3), PROBE_ROUNDS and PROBE_ITERS
# (bench_overhead's --rounds and --iters, default 6 and 20).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
RUNS=${PROBE_RUNS:-3}
t0=$(date +%s)
source "$(dirname "$0")/two_trees.sh"
build_two_trees bench_overhead bench_overhead || exit 1
for i in $(seq "$RUNS"); do
  for t in base new; do
    timeout 200 "$(tree_bin "$t")"/benchmarks/bench_overhead --device cuda \
      --rounds "${PROBE_ROUNDS:-6}" --iters "${PROBE_ITERS:-20}" >"$OUTD/overhead_${t}_$i.txt" 2>&1 ||
      echo "overhead_${t}_$i: exit $?"
  done
done
echo "runs: $(($(date +%s) - t0)) s"
for t in base new; do
  echo "== $t"
  for i in $(seq "$RUNS"); do
    grep -hE "replayed \(host only\)  |replayed \(host only\):|replayed, (with the host profile[^:]*: )?the hook|^  replayed: " \
      "$OUTD/overhead_${t}_$i.txt"
  done
done
