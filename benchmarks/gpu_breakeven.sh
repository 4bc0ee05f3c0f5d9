#!/usr/bin/env bash
# Break-even of the MLP+AdamW example over repeated runs, cold and warm cache, with the times of
# the iterations around the switch to fused kernels; and a kernel-time profile of bench_fusion's
# rows workload when nsys is there. Results under $OUT. Run through the device tool as:
#   source .device-deps/gpu-env.sh; HOTPATH_COMMIT=<commit> bash benchmarks/gpu_breakeven.sh
set -uo pipefail
FINAL=${OUT:-$PWD/gpu_out}
mkdir -p "$FINAL"
BUILD=${BUILD_DIR:-/tmp/hotpath-build}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ) device: $(nvidia-smi --query-gpu=name --format=csv,noheader) git: ${HOTPATH_COMMIT:-unknown}" | tee "$FINAL/env.txt"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$FINAL/configure.log" 2>&1 || { tail -30 "$FINAL/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target mlp_training bench_fusion hotpath_kernels >"$FINAL/build.log" 2>&1 || { grep -m20 -A5 error "$FINAL/build.log"; exit 1; }
export HOTPATH_CACHE_DIR=/tmp/hotpath-breakeven-cache
for run in cold1 warm1 cold2 warm2 cold3 warm3 cold4 warm4; do
  [[ $run == cold* ]] && rm -rf "$HOTPATH_CACHE_DIR"
  HOTPATH_LOG_LEVEL=debug "$BUILD"/examples/mlp_training --iterations 300 >"$FINAL/mlp_$run.log" 2>&1
  echo "$run: $(grep -m1 -o 'reached at iteration [0-9]* ([0-9]* after hot)' "$FINAL/mlp_$run.log") | $(grep -m1 'VERDICT' "$FINAL/mlp_$run.log")"
done | tee "$FINAL/breakeven.txt"
grep -h " iteration [0-9]*: " "$FINAL"/mlp_cold*.log | head -80 >"$FINAL/switch_iterations.txt"
unset HOTPATH_CACHE_DIR
if command -v nsys >/dev/null; then
  nsys profile -o /tmp/rows_prof --force-overwrite true "$BUILD"/benchmarks/bench_fusion --only rows --iters 100 >"$FINAL/rows.txt" 2>&1 || echo "bench_fusion: exit $?"
  nsys stats --report cuda_gpu_kern_sum --format csv /tmp/rows_prof.nsys-rep >"$FINAL/rows_kernels.csv" 2>&1
  head -30 "$FINAL/rows_kernels.csv" | cut -c1-250
else
  echo "no nsys"; "$BUILD"/benchmarks/bench_fusion --only rows --iters 100 >"$FINAL/rows.txt" 2>&1 || echo "bench_fusion: exit $?"
fi
grep -E "^rows" "$FINAL/rows.txt"
grep -A30 -i "signal\|backtrace" "$FINAL/rows.txt" | head -40
rm -f "$FINAL"/mlp_warm*.log "$FINAL"/mlp_cold[34].log "$FINAL"/configure.log "$FINAL"/build.log
