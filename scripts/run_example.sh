#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: the MLP + AdamW example.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
"${BUILD_DIR:-build}"/examples/mlp_training "$@"
