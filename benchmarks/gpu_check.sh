#!/usr/bin/env bash
# One call on the GPU machine: build, test, run the example and the benchmarks; results under
# $OUT (or ./gpu_out). Run through the device tool as:
#   source .device-deps/gpu-env.sh; bash benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
BUILD=${BUILD_DIR:-/tmp/hotpath-build}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) uncommitted files"
} | tee "$OUT/env.txt"

t0=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -m20 -A5 'error' "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

ctest --test-dir "$BUILD" --output-on-failure -j4 >"$OUT/ctest.log" 2>&1
echo "ctest: exit $?  $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"

HOTPATH_FUSE=1 "$BUILD"/examples/mlp_training --iterations 200 >"$OUT/mlp_training.txt" 2>&1
echo "mlp_training: exit $?"; cat "$OUT/mlp_training.txt"

"$BUILD"/benchmarks/bench_overhead --device cuda --csv "$OUT/overhead_cuda.csv" >"$OUT/overhead_cuda.txt" 2>&1
tail -4 "$OUT/overhead_cuda.txt"
"$BUILD"/benchmarks/bench_overhead --device cpu --csv "$OUT/overhead_cpu.csv" >"$OUT/overhead_cpu.txt" 2>&1
tail -4 "$OUT/overhead_cpu.txt"

HOTPATH_LOG_LEVEL=info "$BUILD"/benchmarks/bench_fusion --iters 200 --csv "$OUT/fusion.csv" >"$OUT/fusion.txt" 2>&1
echo "bench_fusion: exit $?"; cat "$OUT/fusion.txt"
# A second run finds every kernel in the on-disk cache.
"$BUILD"/benchmarks/bench_fusion --iters 50 >"$OUT/fusion_second_run.txt" 2>&1
echo "bench_fusion (second run): exit $?"; grep -E "^mlp|^chain|compile" "$OUT/fusion_second_run.txt" | head -8
