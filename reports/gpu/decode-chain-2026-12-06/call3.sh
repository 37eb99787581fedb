#!/usr/bin/env bash
# Call 3: the probe with a tensor-copy (TMA) ring and a producer warp, cold (weights rotated
# through copies larger than L2) and L2-warm (one copy), beside plain register loads and cuBLAS.
set -uo pipefail
d=reports/gpu/decode-chain-2026-12-06
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas -lcuda || exit 1
timeout 120 /tmp/chain_probe 2>&1 | tee "$OUT/call3-probe.txt"
