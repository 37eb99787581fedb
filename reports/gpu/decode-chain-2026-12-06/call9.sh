#!/usr/bin/env bash
# Call 9: how deep the stream instance's ring should be (4 or 8 stages of 256 k: 48 or 96 KiB of
# weights asked for before it waits for the kernel before it), in the decode step, against the
# cuBLASLt companions (skinny off), three rounds alternating; the eager step's profile with each.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null && cmake --build build-device -j16 --target bih_cuda_bench >/tmp/new.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
nvidia-smi --query-gpu=name --format=csv,noheader
F='^(Skinny/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:full/kernels:invariant)'
for run in 1 2 3; do
  build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call9-bench-off-$run.txt" 2>&1
  BIH_GEMM_SKINNY_MAX_M=8 BIH_SKINNY_STREAM_STAGES=4 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call9-bench-s4-$run.txt" 2>&1
  BIH_GEMM_SKINNY_MAX_M=8 BIH_SKINNY_STREAM_STAGES=8 build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/call9-bench-s8-$run.txt" 2>&1
done
P='DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:none/kernels:invariant'
BIH_CUDA_PROFILE=1 build-device/bih_cuda_bench --benchmark_filter="$P" >"$OUT/call9-profile-off.txt" 2>&1
BIH_CUDA_PROFILE=1 BIH_GEMM_SKINNY_MAX_M=8 BIH_SKINNY_STREAM_STAGES=8 build-device/bih_cuda_bench --benchmark_filter="$P" >"$OUT/call9-profile-s8.txt" 2>&1
for f in "$OUT"/call9-bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Skinny|BM_)" "$f" | grep -oE "^[^ ]+|[a-z_]+_us=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ Skinny/\nSkinny/g; s/ BM_/\nBM_/g; s/iterations:[0-9]*\/manual_time//g'
  echo
done
grep -E "gemm" "$OUT/call9-profile-off.txt" "$OUT/call9-profile-s8.txt" | head -20
