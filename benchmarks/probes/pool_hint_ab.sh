#!/usr/bin/env bash
# Probe (issue "An honest governor": a known winner's capture cost): one binary, two kinds of
# warm run. Per round, a cold bench_breakeven run fills a cache (its verdict remembers the
# graphs' pool size, PlanPrior::replay_pool_bytes); a copy of that cache with the pool size
# struck from the verdict gives the warm run as it was before the pool was grown first ("nohint");
# the cache as it is gives the warm run that grows its pool to that size first ("hint"). Both
# run with debug logs, so each capture's cost and its allocator segments are in the log. Plain
# eager processes in turns give the break-even's reference. Run on the GPU machine:
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/pool_hint_ab.sh
# Environment: BUILD_DIR (default build-gpu), OUT (./pool_hint_out), PROBE_RUNS (8), PROBE_STEPS
# (60).
set -uo pipefail
BUILD=${BUILD_DIR:-build-gpu}
OUTD=${OUT:-$PWD/pool_hint_out}
RUNS=${PROBE_RUNS:-8}
STEPS=${PROBE_STEPS:-60}
mkdir -p "$OUTD"
t0=$(date +%s)
for i in $(seq "$RUNS"); do
  timeout 60 "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" --mode eager \
    --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1 || echo "eager $i: exit $?"
  rm -rf /tmp/ph_hint /tmp/ph_nohint
  HOTPATH_LOG_LEVEL=info timeout 60 "$BUILD"/benchmarks/bench_breakeven --steps "$STEPS" \
    --label cold --cache /tmp/ph_hint --json "$OUTD/be_cold_$i.json" >"$OUTD/be_cold_$i.txt" 2>&1 ||
    echo "cold $i: exit $?"
  cp -r /tmp/ph_hint /tmp/ph_nohint
  sed -i '/^pool_bytes /d' /tmp/ph_nohint/decisions/*.txt
  grep -h "^pool_bytes" /tmp/ph_hint/decisions/*.txt | sed "s/^/round $i: /"
  # In turns, which goes first alternating between rounds.
  order="hint nohint"
  ((i % 2 == 0)) && order="nohint hint"
  for v in $order; do
    HOTPATH_LOG_LEVEL=debug HOTPATH_LOG_TIME=1 timeout 60 "$BUILD"/benchmarks/bench_breakeven \
      --steps "$STEPS" --label "$v" --cache "/tmp/ph_$v" --json "$OUTD/be_${v}_$i.json" \
      >"$OUTD/be_${v}_$i.txt" 2>&1 || echo "$v $i: exit $?"
  done
done
echo "runs: $(($(date +%s) - t0)) s"
for v in hint nohint; do
  echo "== $v"
  python3 benchmarks/breakeven_summary.py --show 0 --per-run "$OUTD"/be_eager_*.json \
    "$OUTD"/be_"$v"_*.json | grep -E "^[a-z]+:"
  echo "captures (host ms, segments):"
  grep -hoE "captured [0-9]+ graph\(s\) in [0-9.]+ ms|growing the pool first [0-9.]+ ms \([0-9]+ new allocator segment" \
    "$OUTD"/be_"$v"_*.txt | grep -oE "[0-9.]+ ms|[0-9]+ new" | paste -sd' ' | sed 's/ new/ seg/g'
done
