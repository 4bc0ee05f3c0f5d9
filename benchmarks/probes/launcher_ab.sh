#!/usr/bin/env bash
# Probe (issue "Launch-bound loops": the hook at <= 1 us an op while replaying): one binary, the
# replay's graphs launched by the launcher thread (Config::replay_launcher, the default) or by the
# loop's own thread (HOTPATH_REPLAY_LAUNCHER=0), in turns: bench_overhead (the hook's host time an
# op while replaying, the launcher thread's beside it, and the synced MLP step against plain
# eager), then the MLP example with a host sync each step (its cross-check against plain eager).
# Run on the GPU machine after a build:
#   source .device-deps/gpu-env.sh; BUILD_DIR=/tmp/hb bash benchmarks/probes/launcher_ab.sh
# Environment: BUILD_DIR (default build-gpu), OUT (./launcher_out), PROBE_RUNS (turns a variant,
# default 3), PROBE_ROUNDS and PROBE_ITERS (bench_overhead's, default 6 and 20), PROBE_BUDGET
# (seconds: no turn starts after this many, default 420), PROBE_EXAMPLE (0: no example runs),
# PROBE_OVERHEAD (0: no bench_overhead runs), PROBE_PROGRAMS (more examples run whole, each with its
# cross-check against plain eager, e.g. "transformer_lm dcgan convnet_classifier").
set -uo pipefail
BUILD=${BUILD_DIR:-build-gpu}
OUTD=${OUT:-$PWD/launcher_out}
RUNS=${PROBE_RUNS:-3}
mkdir -p "$OUTD"
t0=$(date +%s)
# The programs' kernels compiled and their verdicts kept first: every turn then starts warm.
for p in ${PROBE_PROGRAMS:-}; do
  HOTPATH_CACHE_DIR=/tmp/launcher_ab_cache timeout 200 "$BUILD"/examples/"$p" \
    >"$OUTD/${p}_warmup.txt" 2>&1 || echo "${p}_warmup: exit $?"
done
for i in $(seq "$RUNS"); do
  order="1 0"
  ((i % 2 == 0)) && order="0 1"
  for v in $order; do
    if (($(date +%s) - t0 > ${PROBE_BUDGET:-420})); then
      echo "turn $i of launcher=$v not run: over PROBE_BUDGET"
      continue
    fi
    if [[ ${PROBE_OVERHEAD:-1} == 1 ]]; then
      HOTPATH_REPLAY_LAUNCHER=$v timeout 200 "$BUILD"/benchmarks/bench_overhead --device cuda \
        --rounds "${PROBE_ROUNDS:-6}" --iters "${PROBE_ITERS:-20}" \
        >"$OUTD/overhead_l${v}_$i.txt" 2>&1 || echo "overhead_l${v}_$i: exit $?"
    fi
    if [[ ${PROBE_EXAMPLE:-1} == 1 ]]; then
      HOTPATH_REPLAY_LAUNCHER=$v timeout 120 "$BUILD"/examples/mlp_training --sync \
        --iterations 600 --cross-check 200 >"$OUTD/mlp_sync_l${v}_$i.txt" 2>&1 ||
        echo "mlp_sync_l${v}_$i: exit $?"
    fi
    for p in ${PROBE_PROGRAMS:-}; do
      HOTPATH_REPLAY_LAUNCHER=$v HOTPATH_CACHE_DIR=/tmp/launcher_ab_cache timeout 150 \
        "$BUILD"/examples/"$p" >"$OUTD/${p}_l${v}_$i.txt" 2>&1 || echo "${p}_l${v}_$i: exit $?"
    done
  done
done
echo "runs: $(($(date +%s) - t0)) s"
for v in 1 0; do
  echo "== launcher=$v"
  for f in "$OUTD"/overhead_l"${v}"_*.txt; do
    [[ -e $f ]] || continue
    echo "-- $(basename "$f")"
    grep -E "replayed \(host only\)|plain eager: step|  replayed:    step|replayed, with the host profile" "$f"
  done
  grep -hE "cross-check against|VERDICT" "$OUTD"/mlp_sync_l"${v}"_*.txt 2>/dev/null
  for p in ${PROBE_PROGRAMS:-}; do
    echo "-- $p"
    grep -hE "^cross-check, hotpath blocks|launch\(es\) issued" "$OUTD"/"${p}"_l"${v}"_*.txt 2>/dev/null |
      sed -E 's/.*(hotpath [0-9.]+ ms per iteration: [0-9.]+x).*/\1/; s/.*(launch\(es\) issued.*)/  \1/'
  done
done
