#!/usr/bin/env bash
# Configures and builds bih into ${BIH_BUILD_DIR:-build} with Ninja (CUDA too where nvcc is found).
# A unity build (eight C++ files to a unit, CMakeLists.txt says why): about half the fresh build
# time. For edit-compile work, where one changed file should recompile alone:
#   BIH_CMAKE_ARGS=-DCMAKE_UNITY_BUILD=OFF bash ci/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BIH_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON ${BIH_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "${BIH_JOBS:-$(nproc)}"
