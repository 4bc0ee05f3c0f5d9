#!/usr/bin/env bash
# Probe (issue "An honest governor"): the MLP step's plain-eager figure as the governor times it
# (its plain blocks, debug log) against the suite's eager blocks (bench_suite's JSON), and the
# warm start's steps with and without CUDA graph replay (bench_breakeven). On the GPU machine:
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/eager_figures.sh
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}; mkdir -p "$OUTD"
B=${BUILD_DIR:-$PWD/build-gpu}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null 2>&1 || exit 1
cmake --build "$B" -j"$(nproc)" --target bench_suite bench_breakeven >"$OUTD/build.log" 2>&1 || { tail -30 "$OUTD/build.log"; exit 1; }
for i in 1 2 3; do
  rm -rf /tmp/ps; HOTPATH_LOG_LEVEL=debug timeout 120 "$B"/benchmarks/bench_suite --workloads mlp_training \
    --iters 300 --cache /tmp/ps --json "$OUTD/suite_$i.json" >"$OUTD/suite_$i.txt" 2>&1
  grep -E "x measured" "$OUTD/suite_$i.txt"
done
for i in 1 2 3; do
  timeout 60 "$B"/benchmarks/bench_breakeven --mode eager --steps 60 --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  rm -rf /tmp/pb; timeout 60 "$B"/benchmarks/bench_breakeven --label cold --cache /tmp/pb --json "$OUTD/be_cold_$i.json" >/dev/null 2>&1
  timeout 60 "$B"/benchmarks/bench_breakeven --label warm --cache /tmp/pb --json "$OUTD/be_warm_$i.json" >/dev/null 2>&1
  HOTPATH_REPLAY=0 timeout 60 "$B"/benchmarks/bench_breakeven --label warm-noreplay --cache /tmp/pb --json "$OUTD/be_warmnr_$i.json" >/dev/null 2>&1
done
python3 benchmarks/breakeven_summary.py --show 30 "$OUTD"/be_*.json > "$OUTD/breakeven.txt" 2>&1
tail -8 "$OUTD/breakeven.txt"
cd "$OUTD" && tar czf probe.tgz suite_* be_* && rm -f suite_*.txt be_*.json
