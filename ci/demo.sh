#!/usr/bin/env bash
# The README's first command: set up, build, and replay the motivating vLLM issue's measurement
# setting on the tiny synthetic model (CPU backend, TP emulated with threads).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
./build/bih run scenarios/issue-56370.json --out "${BIH_OUT:-out/issue-56370}" "$@"
