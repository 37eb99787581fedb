#!/usr/bin/env bash
# The README's second command: set up, build, and run every test that needs no GPU (label cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
ctest --test-dir "${BIH_BUILD_DIR:-build}" -L cpu --output-on-failure -j "$(nproc)"
