#!/usr/bin/env bash
# Call 7: the engine with the stream instance (gemm_skinny_stream.cu): the whole GPU suite,
# compute-sanitizer memcheck on its test, and the bench with skinny companions off (default) and
# on for M <= 8 (BIH_GEMM_SKINNY_MAX_M=8), alternating, twice each, on the same card.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null && cmake --build build-device -j16 --target bih bih_gpu_tests bih_cuda_bench >/tmp/build.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"; tail -n 3 /tmp/build.log
nvidia-smi --query-gpu=name --format=csv,noheader
t=$(date +%s)
BIH_REQUIRE_GPU=1 build-device/bih_gpu_tests >"$OUT/call7-gpu-tests.log" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/call7-gpu-tests.log" | paste -sd' ')"
grep -E '^\[  FAILED|Skinny' "$OUT/call7-gpu-tests.log" | head -20
t=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck build-device/bih_gpu_tests \
  --gtest_filter='CudaGemm.SkinnyStream*' >/tmp/memcheck.log 2>&1
echo "memcheck: exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' /tmp/memcheck.log | paste -sd';')"
F='^(Gemm/[a-z_]+/M=(1|8)/|Skinny/[a-z_]+/M=(1|8)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|8)/graph:full/kernels:(invariant|vendor))'
for run in 1 2; do
  build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call7-bench-off-$run.txt" 2>&1
  BIH_GEMM_SKINNY_MAX_M=8 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call7-bench-on-$run.txt" 2>&1
done
for f in "$OUT"/call7-bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Gemm|Skinny|BM_)" "$f" | grep -oE "^[^ ]+|[a-z_]+_us=[^ ]+|step_ms=[^ ]+|weight_TBps=[^ ]+" | paste -sd' ' |
    sed 's/ Gemm/\nGemm/g; s/ Skinny/\nSkinny/g; s/ BM_/\nBM_/g'
  echo
done
