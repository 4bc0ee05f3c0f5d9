#!/usr/bin/env bash
# Installs everything hotpath needs on a fresh Debian 12 machine with the CUDA 13 toolkit at
# /usr/local/cuda, then configures and builds it. Safe to run again: each step is skipped when
# already done.
#   Debian: spdlog (+fmt), Catch2, CLI11, nlohmann-json, gloo's headers (ddp_training), ccache.
#   PyPI: torch (LibTorch), HOTPATH_TORCH_VERSION.
# HOTPATH_TORCH_VERSION (default 2.11.0, the GPU machine's) picks the LibTorch: the default goes
# into $PYTHON's site-packages and builds into build/; another version goes into a virtual
# environment of its own ($HOTPATH_VENVS/torch-<version>, default ~/.cache/hotpath/venvs) and
# builds into build-torch-<version>/. BUILD_DIR overrides the build directory, HOTPATH_CMAKE_ARGS
# adds CMake arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

PY=${PYTHON:-python3}
DEFAULT_TORCH_VERSION=2.11.0
TORCH_VERSION=${HOTPATH_TORCH_VERSION:-$DEFAULT_TORCH_VERSION}

need_debs=()
for pkg in libspdlog-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libgloo-dev ccache cmake g++; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_debs+=("$pkg")
done
if [ ${#need_debs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_debs[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_debs[@]}" >/dev/null
fi

if [ "$TORCH_VERSION" != "$DEFAULT_TORCH_VERSION" ]; then
  venv=${HOTPATH_VENVS:-$HOME/.cache/hotpath/venvs}/torch-$TORCH_VERSION
  if [ ! -x "$venv/bin/python" ]; then
    dpkg -s python3-venv >/dev/null 2>&1 || "$PY" -m venv --help >/dev/null 2>&1 || {
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    }
    log "creating $venv for LibTorch $TORCH_VERSION"
    "$PY" -m venv "$venv"
  fi
  PY=$venv/bin/python
fi
have=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${have%%+*}" != "$TORCH_VERSION" ]; then
  log "installing torch==$TORCH_VERSION from PyPI (LibTorch; pip keeps the download in its cache)"
  "$PY" -m pip install -q "torch==$TORCH_VERSION"
fi

# matplotlib draws the benchmark suite's plots (benchmarks/plot_suite.py, tested under CTest).
if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  log "installing matplotlib from PyPI (the suite's plots)"
  python3 -m pip install -q matplotlib
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: the CUDA 13 toolkit is expected at /usr/local/cuda (NVRTC, Driver API stubs)" >&2
  exit 1
fi

TORCH_PREFIX=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
if [ "$TORCH_VERSION" = "$DEFAULT_TORCH_VERSION" ]; then
  BUILD_DIR=${BUILD_DIR:-build}
else
  BUILD_DIR=${BUILD_DIR:-build-torch-$TORCH_VERSION}
fi
log "configuring ($BUILD_DIR, LibTorch $TORCH_VERSION)"
# shellcheck disable=SC2086 # HOTPATH_CMAKE_ARGS is a list of arguments
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  ${HOTPATH_CMAKE_ARGS:-} >/dev/null
log "building"
cmake --build "$BUILD_DIR" -j"$(nproc)"
