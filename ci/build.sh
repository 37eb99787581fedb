#!/usr/bin/env bash
# Configures and builds bih into ${BIH_BUILD_DIR:-build} with Ninja (CUDA too where nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BIH_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${BIH_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "${BIH_JOBS:-$(nproc)}"
