#!/usr/bin/env bash
# Probe (issue "An honest governor": break-even <= 20 iterations after hot with a cold cache on the
# MLP+AdamW step): one binary, a new plan captured for replay after Config::replay_after fused
# iterations, two values in turns (HOTPATH_REPLAY_AFTER, default 3 against 10, the value before
# it was a setting). A discarded cold run first: a machine's first NVRTC compile takes 10x a later
# one's, and would fall on whichever variant ran first. Then each round: one plain-eager
# bench_breakeven process, and per value (which goes first alternating) a cold bench_breakeven run
# and a cold run of the MLP example, each into an empty cache of its own. The summary:
# bench_breakeven's break-even after hot per value (benchmarks/breakeven_summary.py, against the
# eager processes' step medians), and each example run's own report lines.
#   source .device-deps/gpu-env.sh; BUILD_DIR=/tmp/hb bash benchmarks/probes/replay_after_ab.sh
# Environment: BUILD_DIR (default build-gpu), OUT (./replay_after_out), PROBE_RUNS (rounds,
# default 6), PROBE_VALUES (default "3 10"), PROBE_STEPS (bench_breakeven's steps a process,
# default 60), PROBE_ITERATIONS (the example's, default 300), PROBE_BUDGET (seconds: no round
# starts after this many, default 300).
set -uo pipefail
BUILD=${BUILD_DIR:-build-gpu}
OUTD=${OUT:-$PWD/replay_after_out}
RUNS=${PROBE_RUNS:-6}
read -r -a VALUES <<<"${PROBE_VALUES:-3 10}"
STEPS=${PROBE_STEPS:-60}
ITERS=${PROBE_ITERATIONS:-300}
mkdir -p "$OUTD"
t0=$(date +%s)
cold_be() {  # cold_be AFTER FILE-STEM
  rm -rf /tmp/rab_cache
  HOTPATH_REPLAY_AFTER=$1 HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1 timeout 60 \
    "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" --label "after$1" --cache /tmp/rab_cache \
    --json "$OUTD/$2.json" >"$OUTD/$2.txt" 2>&1 || echo "$2: exit $?"
}
cold_mlp() {  # cold_mlp AFTER FILE-STEM
  rm -rf /tmp/rab_cache
  HOTPATH_REPLAY_AFTER=$1 HOTPATH_CACHE_DIR=/tmp/rab_cache HOTPATH_LOG_TIME=1 timeout 120 \
    "$BUILD"/examples/mlp_training --iterations "$ITERS" >"$OUTD/$2.txt" 2>&1 || echo "$2: exit $?"
}
cold_be "${VALUES[0]}" first_process
for i in $(seq "$RUNS"); do
  if (($(date +%s) - t0 > ${PROBE_BUDGET:-300})); then
    echo "round $i not run: over PROBE_BUDGET"
    break
  fi
  timeout 60 "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" --mode eager \
    --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  order=("${VALUES[@]}")
  ((i % 2 == 0)) && order=("${VALUES[1]}" "${VALUES[0]}")
  for v in "${order[@]}"; do
    cold_be "$v" "be_after${v}_$i"
    cold_mlp "$v" "mlp_after${v}_$i"
  done
done
echo "runs: $(($(date +%s) - t0)) s"
echo "== bench_breakeven (break-even after hot, against the eager processes' step medians)"
python3 benchmarks/breakeven_summary.py --show 0 --per-run "$OUTD"/be_eager_*.json \
  $(for v in "${VALUES[@]}"; do echo "$OUTD"/be_after"$v"_*.json; done) | grep -E "^after"
echo "== the machine's first process (discarded above)"
grep -E "compiled ahead|replayed as CUDA graphs" "$OUTD/first_process.txt" | head -3
for v in "${VALUES[@]}"; do
  echo "== HOTPATH_REPLAY_AFTER=$v: the MLP example (hot, fused from; break-even; cross-check)"
  for f in "$OUTD"/mlp_after"$v"_*.txt; do
    printf '%s: %s | %s | %s\n' "$(basename "$f" .txt)" \
      "$(grep -oE "hot at iteration [0-9]+, fused from iteration [0-9]+" "$f" | head -1)" \
      "$(grep -oE "break-even projected at iteration [0-9]+, reached at iteration [0-9]+ \([0-9]+ after hot\)" "$f" | head -1)" \
      "$(grep -oE ": [0-9.]+x \(what the report's steady state measures\)" "$f" | head -1)"
  done
done
