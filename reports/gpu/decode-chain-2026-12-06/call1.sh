#!/usr/bin/env bash
# Call 1: the chain probe (chain_probe.cu), standalone: mma.sync chain latency, register-pipelined
# chain GEMVs against cublasGemmEx's default at M=1 and 8, and their bits against cuBLAS.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
d=reports/gpu/decode-chain-2026-12-06
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t=$(date +%s)
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas || exit 1
echo "compile: $(( $(date +%s) - t )) s"
/tmp/chain_probe 2>&1 | tee "$OUT/call1-probe.txt"
