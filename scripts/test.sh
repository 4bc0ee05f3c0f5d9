#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite against LibTorch 2.11 (build/),
# then the CPU tests against the newest LibTorch too (HOTPATH_SECOND_TORCH, default 2.15.0, in
# build-torch-<version>/; empty skips it), all of them on both.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# CTest runs nproc tests at once. Each test's LibTorch would also start an intra-op thread per
# core, whose OpenMP threads spin while they wait: on 2 cores train_diff_cpu took 30 s alone and
# 145-328 s beside the other tests, and the suite 278 s against 150 s with one thread a test.
# No test depends on intra-op threads; OMP_NUM_THREADS set by the caller is kept. Given to ctest
# alone: nproc (the builds' job count too) answers OMP_NUM_THREADS where it is set.
omp=${OMP_NUM_THREADS:-1}
OMP_NUM_THREADS=$omp ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"

second=${HOTPATH_SECOND_TORCH-2.15.0}
if [ -n "$second" ] && [ -z "${BUILD_DIR:-}" ]; then
  printf '\n== LibTorch %s\n' "$second"
  HOTPATH_TORCH_VERSION=$second HOTPATH_CMAKE_ARGS="-DHOTPATH_BUILD_BENCH=OFF" ./scripts/setup.sh
  OMP_NUM_THREADS=$omp ctest --test-dir "build-torch-$second" --output-on-failure -j"$(nproc)"
fi
