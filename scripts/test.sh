#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
