#!/usr/bin/env bash
# Call 4: the TMA ring with the next stage's fragments read between the current stage's mmas,
# 1 or 2 chains per warp, 1 to 8 consumer warps per CTA, cold and L2-warm, beside cuBLAS.
set -uo pipefail
d=reports/gpu/decode-chain-2026-12-06
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas -lcuda || exit 1
timeout 120 /tmp/chain_probe 2>&1 | tee "$OUT/call4-probe.txt"
