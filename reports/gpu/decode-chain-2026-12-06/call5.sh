#!/usr/bin/env bash
# Call 5: call 3 (simple) and call 4 (pipelined) TMA rings side by side, and one cold launch of
# o_proj and down timed per warp with %globaltimer (start, first stage, chain).
set -uo pipefail
d=reports/gpu/decode-chain-2026-12-06
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas -lcuda || exit 1
timeout 120 /tmp/chain_probe 2>&1 | tee "$OUT/call5-probe.txt"
