#!/usr/bin/env bash
# Call 6: the simple TMA ring with 1, 2 or 4 boxes of 64 k per stage (one wait, one release
# and 4 to 16 mmas per stage), and one cold launch of o_proj and down timed per warp.
set -uo pipefail
d=reports/gpu/decode-chain-2026-12-06
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas -lcuda || exit 1
timeout 120 /tmp/chain_probe 2>&1 | tee "$OUT/call6-probe.txt"
