#!/usr/bin/env bash
# Call 14, on call 13's warm machine (its build-device): the M=1 GEMMs and the decode steps with
# the stream instance (skinny_max_m 8, the default now, fenced) against cuBLASLt's companions
# (BIH_GEMM_SKINNY_MAX_M=0), 8 / 0 / 8 in one call.
export NCCL_NVLS_ENABLE=0
cmake --build build-device -j16 --target bih_cuda_bench >/tmp/b.log 2>&1; echo "build $?"
F='^(Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)'
for m in 8 0 8; do
  BIH_GEMM_SKINNY_MAX_M=$m timeout 60 build-device/bih_cuda_bench --benchmark_filter="$F" \
    >"$OUT/bench-$m-$RANDOM.txt" 2>&1
done
