#!/usr/bin/env bash
# Probe (issue "An honest governor": break-even ≤ 5 steps after hot with a warm cache): the tree
# before (a worktree of it in .base) and this one, side by side on one machine. Fresh
# bench_breakeven processes in turns: plain eager, then per tree a cold run (an empty cache of
# its own) and PROBE_WARM warm runs on what it left (a known winner, its kernels cached); the
# summary per tree (benchmarks/breakeven_summary.py) and the lines of the warm runs' logs that
# say when the plan was built, its kernels loaded and its capture let go.
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/breakeven_ab.sh
# Environment: PROBE_RUNS (rounds, default 5), PROBE_WARM (warm runs a tree a round, default 2),
# PROBE_STEPS (steps a process, default 60), PROBE_ALSO ("LABEL:VAR=VALUE ...": a third variant,
# this tree run with those environment variables, e.g. "ahead3:HOTPATH_COMPILE_AHEAD=3", to tell
# one of a change's parts from the rest in the same call).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
RUNS=${PROBE_RUNS:-5}
WARM=${PROBE_WARM:-2}
STEPS=${PROBE_STEPS:-60}
t0=$(date +%s)
source "$(dirname "$0")/two_trees.sh"
build_two_trees "bench_breakeven hotpath_kernels" "bench_breakeven hotpath_kernels" || exit 1

ALSO_LABEL=${PROBE_ALSO:+${PROBE_ALSO%%:*}}
ALSO=${PROBE_ALSO:-}
read -r -a ALSO_ENV <<<"${ALSO#*:}"
variants="base new${ALSO_LABEL:+ $ALSO_LABEL}"
be() {  # be VARIANT LABEL CACHE FILE-STEM
  local tree=$1 envs=()
  if [[ -n "$ALSO_LABEL" && $1 == "$ALSO_LABEL" ]]; then
    tree=new
    envs=("${ALSO_ENV[@]}")
  fi
  env "${envs[@]}" HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1 timeout 60 "$(tree_bin "$tree")"/benchmarks/bench_breakeven \
    --steps "$STEPS" --label "$2" --cache "$3" --json "$OUTD/$4.json" >"$OUTD/$4.txt" 2>&1 ||
    echo "$4: exit $?"
}
for i in $(seq "$RUNS"); do
  timeout 60 build-gpu/benchmarks/bench_breakeven --steps "$STEPS" --mode eager \
    --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  for t in $variants; do
    rm -rf "/tmp/ab_$t"
    be "$t" "$t-cold" "/tmp/ab_$t" "be_${t}_cold_$i"
    for w in $(seq "$WARM"); do be "$t" "$t-warm" "/tmp/ab_$t" "be_${t}_warm_${i}_$w"; done
  done
done
echo "runs: $(($(date +%s) - t0)) s"
for t in $variants; do
  echo "== $t"
  python3 benchmarks/breakeven_summary.py --show 0 --per-run "$OUTD"/be_eager_*.json \
    "$OUTD"/be_"$t"_*.json | grep -E "^[a-z0-9]+-(cold|warm):"
  grep -hoE "goes ahead \((the run is [0-9.]+ ms (ahead|behind) [a-z]+|the plan alone [a-z ]+|held)" \
    "$OUTD"/be_"$t"_warm_*.txt | sed -E 's/[0-9.]+ ms/N ms/' | sort | uniq -c
  grep -hoE "plan built in [0-9.]+ ms" "$OUTD"/be_"$t"_warm_*.txt | grep -oE "[0-9.]+" | sort -n | tr '\n' ' '
  echo
done
