#!/usr/bin/env bash
# Call 10: the committed tree with the stream instance serving M <= 8 by default (two rings,
# programmatic dependent launch): the whole GPU suite, the bench (decode steps and the M=1 GEMMs,
# default against BIH_GEMM_SKINNY_MAX_M=0, i.e. cuBLASLt's companions), compute-sanitizer memcheck
# on the stream test, then the issue matrix with its gate and JUnit.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
STAGES=tests bash ci/device-check.sh
cp "$OUT/summary.txt" "$OUT/call10-summary-tests.txt"
F='^(Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)'
build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call10-bench-default.txt" 2>&1
BIH_GEMM_SKINNY_MAX_M=0 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call10-bench-cublas.txt" 2>&1
for f in "$OUT"/call10-bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Gemm|BM_)" "$f" | grep -oE "^[^ ]+|[a-z_]+_us=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ Gemm/\nGemm/g; s/ BM_/\nBM_/g; s/iterations:[0-9]*\/manual_time//g'
  echo
done
timeout 100 compute-sanitizer --tool memcheck build-device/bih_gpu_tests \
  --gtest_filter='CudaGemm.SkinnyStream*' >/tmp/memcheck.log 2>&1
echo "memcheck: exit $?; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' /tmp/memcheck.log | paste -sd';')"
STAGES=matrix bash ci/device-check.sh
