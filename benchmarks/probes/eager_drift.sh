#!/usr/bin/env bash
# Probe (issue "An honest governor"): plain eager's speed in processes without hotpath, with
# hotpath enabled and every step under Pause, and with hotpath running (every third block under
# Pause, as the example's cross-check runs eager), in turns, ROUNDS times; per process the median
# of its eager blocks and of its hotpath blocks, and each process's first and last 500 steps.
# Run on the GPU machine after a build in $BUILD (default /tmp/hb):
#   BUILD=/tmp/hb ROUNDS=3 STEPS=1500 bash benchmarks/probes/eager_drift.sh [--sync]
set -uo pipefail
BUILD=${BUILD:-/tmp/hb}
OUT=${OUT:-$PWD/drift_out}
mkdir -p "$OUT"
cmake --build "$BUILD" -j"$(nproc)" --target probe_eager_drift >/dev/null || exit 1
export HOTPATH_CACHE_DIR=${HOTPATH_CACHE_DIR:-/tmp/drift-cache}
summary() {  # summary FILE: medians of the eager and hotpath blocks, and of the first/last third
  python3 - "$1" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("block")]
side = {"eager": [], "hot": []}
for r in rows:
    side[r[4]].append(float(r[5]))
out = []
for k, v in side.items():
    if not v:
        continue
    third = max(1, len(v) // 3)
    out.append("%s %d blocks: median %.3f ms (first third %.3f, last third %.3f)" % (
        k, len(v), statistics.median(v), statistics.median(v[:third]), statistics.median(v[-third:])))
print("; ".join(out))
PY
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for m in none paused hot; do
    "$BUILD"/benchmarks/probe_eager_drift --mode "$m" --steps "${STEPS:-1500}" "$@" \
      >"$OUT/drift_${m}_$r.txt" 2>&1
    echo "round $r $m: $(summary "$OUT/drift_${m}_$r.txt")"
  done
done | tee "$OUT/drift_summary.txt"
