#!/usr/bin/env bash
# Call 13: the fix (a proxy fence before each slot's release, on by default) with the stream
# instance serving M <= 8 by default (skinny_max_m 8): the whole GPU suite and the issue matrix;
# the new concurrent-load test without the fence (must fail, else it cannot catch the race) and
# with it; the TP=1 cell of call 12; the bench of the M=1 GEMMs and decode steps against
# cuBLASLt's companions.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
STAGES="tests matrix" bash ci/device-check.sh
T='CudaGemm.SkinnyStreamUnderConcurrentLoad*'
for fence in 0 1 0; do
  BIH_GEMM_SKINNY_FENCE=$fence build-device/bih_gpu_tests --gtest_filter="$T" >/tmp/t.txt 2>&1
  echo "concurrent-load test, fence=$fence: exit $?; $(grep -E '^\[skinny stream\]' /tmp/t.txt)"
  grep -m3 "first at" /tmp/t.txt
  cat /tmp/t.txt >>"$OUT/call13-load-test.txt"
done
build-device/bih run reports/gpu/skinny-race-2026-12-06/tp1-invariant.json --out /tmp/r-tp1 >/tmp/tp1.txt 2>&1
echo "tp1 cell: exit $?; $(grep -E '^[✓✗]' /tmp/tp1.txt | sed -E 's/ +/ /g' | cut -d' ' -f3-9)"
F='^(Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)'
build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call13-bench-default.txt" 2>&1
BIH_GEMM_SKINNY_MAX_M=0 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call13-bench-cublas.txt" 2>&1
for f in "$OUT"/call13-bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Gemm|BM_)" "$f" | grep -oE "^[^ ]+|[a-z_]+_us=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ Gemm/\nGemm/g; s/ BM_/\nBM_/g; s/iterations:[0-9]*\/manual_time//g'
  echo
done
