#!/usr/bin/env bash
# Call 8: programmatic dependent launch for the stream instance (its first 4 stages of weights are
# asked for before it waits for the kernel before it; the norms, SiLU-mul, the row gather and
# attention allow it to start early). Base ffd51b5 (.ab/base.tar) against the working tree with
# skinny companions off (default) and on for M <= 8; the whole GPU suite on the new build with
# BIH_GEMM_SKINNY_MAX_M=8 (every engine test then runs the stream kernel) and without.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON"
rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
t=$(date +%s)
(cmake -S /tmp/base -B /tmp/base/b $conf >/dev/null && cmake --build /tmp/base/b -j8 --target bih_cuda_bench >/tmp/base.log 2>&1) &
(cmake -S . -B build-device $conf >/dev/null && cmake --build build-device -j8 --target bih bih_gpu_tests bih_cuda_bench >/tmp/new.log 2>&1) &
wait
echo "build: $(( $(date +%s) - t )) s; base: $(tail -n1 /tmp/base.log); new: $(tail -n1 /tmp/new.log)"
nvidia-smi --query-gpu=name --format=csv,noheader
for skinny in 8 0; do
  t=$(date +%s)
  BIH_GEMM_SKINNY_MAX_M=$skinny BIH_REQUIRE_GPU=1 build-device/bih_gpu_tests >"$OUT/call8-gpu-tests-skinny$skinny.log" 2>&1
  echo "gpu tests (skinny_max_m=$skinny): exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/call8-gpu-tests-skinny$skinny.log" | paste -sd' ')"
  grep -E '^\[  FAILED' "$OUT/call8-gpu-tests-skinny$skinny.log" | head -20
done
F='^(Skinny/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/kernels:(invariant|vendor))'
for run in 1 2; do
  /tmp/base/b/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call8-bench-base-$run.txt" 2>&1
  build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call8-bench-off-$run.txt" 2>&1
  BIH_GEMM_SKINNY_MAX_M=8 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call8-bench-on-$run.txt" 2>&1
done
for f in "$OUT"/call8-bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Skinny|BM_)" "$f" | grep -oE "^[^ ]+|[a-z_]+_us=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ Skinny/\nSkinny/g; s/ BM_/\nBM_/g; s/iterations:[0-9]*\/manual_time//g'
  echo
done
