#!/usr/bin/env bash
# Probe (issue "An honest governor"): where a warm run's first steps go, function by function.
# One cold bench_breakeven run fills a cache; then PROBE_RUNS rounds of one plain-eager and one
# warm hotpath probe_first_steps process (steps 2-8 sampled every PROBE_PERIOD us), and
# first_steps.py sums them. Each process's step times go to its .steps file; the medians per step
# are printed. Run on the GPU machine from the project root:
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/first_steps.sh
# Environment: BUILD_DIR (default build-gpu), OUT (default ./first_steps_out), PROBE_RUNS (20),
# PROBE_PERIOD (50). PROBE_ALIGN=capture: the cache keeps its kernels and loses its decisions,
# and PROBE_RUNS hotpath processes (no plain eager) are sampled over steps 12-45 and summed
# around the step each captured its CUDA graphs in, against the step before it.
set -uo pipefail
BUILD=${BUILD_DIR:-build-gpu}
OUTD=${OUT:-$PWD/first_steps_out}
RUNS=${PROBE_RUNS:-20}
PERIOD=${PROBE_PERIOD:-50}
mkdir -p "$OUTD/samples"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH" \
    >"$OUTD/configure.log" 2>&1 || { tail -20 "$OUTD/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$BUILD" -j"$(nproc)" --target probe_first_steps bench_breakeven hotpath_kernels \
  >"$OUTD/build.log" 2>&1 || { tail -30 "$OUTD/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
CACHE=/tmp/first_steps_cache
rm -rf "$CACHE"
"$BUILD"/benchmarks/bench_breakeven --steps 60 --cache "$CACHE" --json "$OUTD/cold.json" \
  >"$OUTD/cold.txt" 2>&1 || echo "cold run: exit $?"
ALIGN=${PROBE_ALIGN:-}
if [[ $ALIGN == capture ]]; then
  rm -rf "$CACHE/decisions"
  modes=hotpath
  span=(--steps 45 --from 12 --to 45 --no-remember)
else
  modes="eager hotpath"
  span=(--steps 10 --from 2 --to 8)
fi
for i in $(seq "$RUNS"); do
  for mode in $modes; do
    timeout 60 "$BUILD"/benchmarks/probe_first_steps --mode "$mode" --cache "$CACHE" "${span[@]}" \
      --period-us "$PERIOD" --out "$OUTD/samples/${mode}_$i.txt" \
      >"$OUTD/samples/${mode}_$i.steps" 2>&1 || echo "$mode $i: exit $?"
  done
done
echo "runs: $(($(date +%s) - t0)) s"
python3 - "$OUTD/samples" <<'PY'
import glob, statistics, sys
for mode in ("eager", "hotpath"):
    per = {}
    for f in glob.glob(sys.argv[1] + "/%s_*.steps" % mode):
        for line in open(f):
            p = line.split()
            if len(p) == 4 and p[0] == "step":
                per.setdefault(int(p[1]), []).append(float(p[2]))
    print("%s step medians (ms): %s" % (mode, " ".join(
        "%d:%.2f" % (s, statistics.median(v)) for s, v in sorted(per.items()))))
PY
if [[ $ALIGN == capture ]]; then
  grep -h "^captured" "$OUTD"/samples/hotpath_*.txt | sort | uniq -c
  python3 benchmarks/probes/first_steps.py --period-us "$PERIOD" --align capture \
    --hotpath "$OUTD"/samples/hotpath_*.txt --steps -2:2
else
  python3 benchmarks/probes/first_steps.py --period-us "$PERIOD" \
    --eager "$OUTD"/samples/eager_*.txt --hotpath "$OUTD"/samples/hotpath_*.txt --steps 2-8
fi
