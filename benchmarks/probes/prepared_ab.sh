#!/usr/bin/env bash
# Probe (issue "An honest governor": break-even <= 5 iterations after hot with a warm cache on the
# MLP+AdamW example): one binary, a known winner's plan built before its signature is seen
# (Config::prepare_known, the default) or at hot from the loop's trace (HOTPATH_PREPARE_KNOWN=0).
# Each round: one plain-eager bench_breakeven process; a cold bench_breakeven run and a cold run of
# the MLP example, each into an empty cache of its own (they leave a verdict, the kernels and the
# trace); then warm runs of both in turns, on and off, each on a fresh copy of that round's cold
# cache (a warm run writes its own verdict back: copies keep the turns apart). The summary:
# bench_breakeven's break-even after hot per variant (benchmarks/breakeven_summary.py, against the
# eager processes' step medians), and each example run's own report lines.
#   source .device-deps/gpu-env.sh; BUILD_DIR=/tmp/hb bash benchmarks/probes/prepared_ab.sh
# Environment: BUILD_DIR (default build-gpu), OUT (./prepared_out), PROBE_RUNS (rounds, default
# 4), PROBE_WARM (warm turns a variant a round, default 2), PROBE_STEPS (bench_breakeven's steps a
# process, default 60), PROBE_ITERATIONS (the example's, default 300), PROBE_BUDGET (seconds: no
# round starts after this many, default 400).
set -uo pipefail
BUILD=${BUILD_DIR:-build-gpu}
OUTD=${OUT:-$PWD/prepared_out}
RUNS=${PROBE_RUNS:-4}
WARM=${PROBE_WARM:-2}
STEPS=${PROBE_STEPS:-60}
ITERS=${PROBE_ITERATIONS:-300}
mkdir -p "$OUTD"
t0=$(date +%s)
be() {  # be PREPARE LABEL CACHE FILE-STEM
  HOTPATH_PREPARE_KNOWN=$1 HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1 timeout 60 \
    "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" --label "$2" --cache "$3" \
    --json "$OUTD/$4.json" >"$OUTD/$4.txt" 2>&1 || echo "$4: exit $?"
}
mlp() {  # mlp PREPARE CACHE FILE-STEM
  HOTPATH_PREPARE_KNOWN=$1 HOTPATH_CACHE_DIR=$2 HOTPATH_LOG_TIME=1 timeout 120 \
    "$BUILD"/examples/mlp_training --iterations "$ITERS" >"$OUTD/$3.txt" 2>&1 || echo "$3: exit $?"
}
for i in $(seq "$RUNS"); do
  if (($(date +%s) - t0 > ${PROBE_BUDGET:-400})); then
    echo "round $i not run: over PROBE_BUDGET"
    break
  fi
  timeout 60 "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" --mode eager \
    --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  rm -rf /tmp/pab_be /tmp/pab_mlp
  be 1 cold /tmp/pab_be "be_cold_$i"
  mlp 1 /tmp/pab_mlp "mlp_cold_$i"
  for w in $(seq "$WARM"); do
    order="1 0"
    (((i + w) % 2 == 0)) && order="0 1"
    for v in $order; do
      label=$([[ $v == 1 ]] && echo on || echo off)
      rm -rf /tmp/pab_copy && cp -r /tmp/pab_be /tmp/pab_copy
      be "$v" "$label-warm" /tmp/pab_copy "be_${label}_warm_${i}_$w"
      rm -rf /tmp/pab_copy && cp -r /tmp/pab_mlp /tmp/pab_copy
      mlp "$v" /tmp/pab_copy "mlp_${label}_warm_${i}_$w"
    done
  done
done
echo "runs: $(($(date +%s) - t0)) s"
echo "== bench_breakeven (break-even after hot, against the eager processes' step medians)"
python3 benchmarks/breakeven_summary.py --show 0 --per-run "$OUTD"/be_eager_*.json \
  "$OUTD"/be_cold_*.json "$OUTD"/be_on_warm_*.json "$OUTD"/be_off_warm_*.json |
  grep -E "^(cold|on-warm|off-warm):"
for v in on off; do
  echo "== $v: plans built before their signature was seen, taken at first sight"
  grep -lE "its plan, built before it was seen, is ready" "$OUTD"/be_"$v"_warm_*.txt \
    "$OUTD"/mlp_"$v"_warm_*.txt 2>/dev/null | wc -l
  echo "== $v: the MLP example (hot, fused from, break-even, cross-check)"
  for f in "$OUTD"/mlp_"$v"_warm_*.txt; do
    printf '%s: %s | %s | %s\n' "$(basename "$f" .txt)" \
      "$(grep -oE "hot at iteration [0-9]+, fused from iteration [0-9]+" "$f" | head -1)" \
      "$(grep -oE "break-even projected at iteration [0-9]+, reached at iteration [0-9]+ \([0-9]+ after hot\)" "$f" | head -1)" \
      "$(grep -oE "what the report's steady state measures\)|: [0-9.]+x \(what" "$f" | head -1)"
  done
done
