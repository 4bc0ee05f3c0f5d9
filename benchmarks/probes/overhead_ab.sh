#!/usr/bin/env bash
# Probe (issue "Launch-bound loops": the hook at <= 1 us an op while replaying): bench_overhead of
# the tree before (a worktree of it in .base) and of this one, in turns on one machine (which goes
# first alternates), and the lines that say what the hook cost an op while replaying and what the
# synced MLP step took.
# With PROBE_CONVNET=1, the DataLoader convnet example too (its plan kept on and replayed, the
# host profile on: a step's tail on the light lane), in the same turns.
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/overhead_ab.sh
# Environment: PROBE_RUNS (turns a tree, default 3), PROBE_ROUNDS and PROBE_ITERS
# (bench_overhead's --rounds and --iters, default 6 and 20), PROBE_BUDGET (seconds: no turn
# starts after this many, default 520), PROBE_NEW_TARGETS (more targets of this tree to build).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
RUNS=${PROBE_RUNS:-3}
CONVNET=${PROBE_CONVNET:-0}
t0=$(date +%s)
source "$(dirname "$0")/two_trees.sh"
targets=bench_overhead
[[ $CONVNET == 1 ]] && targets="$targets convnet_classifier"
build_two_trees "$targets ${PROBE_NEW_TARGETS:-}" "$targets" || exit 1
for i in $(seq "$RUNS"); do
  # The tree that goes first alternates: a host that drifts within a call favours neither.
  order="base new"
  ((i % 2 == 0)) && order="new base"
  for t in $order; do
    if (($(date +%s) - t0 > ${PROBE_BUDGET:-520})); then
      echo "turn $i of $t not run: over PROBE_BUDGET"
      continue
    fi
    timeout 200 "$(tree_bin "$t")"/benchmarks/bench_overhead --device cuda \
      --rounds "${PROBE_ROUNDS:-6}" --iters "${PROBE_ITERS:-20}" >"$OUTD/overhead_${t}_$i.txt" 2>&1 ||
      echo "overhead_${t}_$i: exit $?"
    if [[ $CONVNET == 1 ]]; then
      env HOTPATH_HOST_PROFILE=1 HOTPATH_REVERT_WINDOW=1000000 HOTPATH_STAND_ASIDE=0 \
        timeout 150 "$(tree_bin "$t")"/examples/convnet_classifier --epochs 1 --cross-check 200 \
        >"$OUTD/convnet_${t}_$i.txt" 2>&1 || echo "convnet_${t}_$i: exit $?"
    fi
  done
done
echo "runs: $(($(date +%s) - t0)) s"
for t in base new; do
  echo "== $t"
  for i in $(seq "$RUNS"); do
    grep -hE "replayed \(host only\)  |replayed \(host only\):|replayed, (with the host profile[^:]*: )?the hook|^  replayed: " \
      "$OUTD/overhead_${t}_$i.txt" 2>/dev/null
    [[ $CONVNET == 1 ]] && grep -hiE "cross-check|host: " "$OUTD/convnet_${t}_$i.txt" 2>/dev/null
  done
done
