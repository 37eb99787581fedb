#!/usr/bin/env bash
# Call 3, on a warm machine with build-device: the tp_invariant M=1 GEMMs under each staged-GEMV
# shape (BIH_TPINV_STAGED, threads x steps a stage x stages) from 4096 columns (the default) and
# from 2048 (o_proj and down staged too): tpinv_us per shape and the step's GEMMs in a graph.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
cmake --build build-device -j16 --target bih_cuda_bench >/tmp/b3.log 2>&1 || { tail /tmp/b3.log; exit 1; }
B='^(Gemm/[a-z_]+/M=1/|StepGemms/M=1/)'
for run in 256x8x3:4096 256x4x3:4096 256x8x2:4096 128x8x3:4096 128x4x4:4096 \
  256x8x3:2048 128x8x3:2048 128x4x4:2048; do
  shape=${run%:*} min_n=${run#*:}
  {
    BIH_TPINV_STAGED=$shape BIH_TPINV_STAGED_MIN_N=$min_n timeout 60 build-device/bih_cuda_bench \
      --ms=1 --benchmark_filter="$B" >/tmp/t3.txt 2>&1
    code=$?
    { echo "=== BIH_TPINV_STAGED=$shape BIH_TPINV_STAGED_MIN_N=$min_n"; cat /tmp/t3.txt; } \
      >>"$OUT/call3-staged.txt"
    echo "$shape from N=$min_n (exit $code): $(grep -E '^Gemm/' /tmp/t3.txt | sed -E 's/^Gemm\/([a-z_]+).*tpinv_us=([0-9.k]+).*/\1 \2/' | paste -sd' ') | step $(grep -oE 'tpinv_ms=[0-9.]+|tpinv_copy=[0-9.]+' /tmp/t3.txt | paste -sd' ')"
  }
done
