#!/usr/bin/env bash
# The stop's last device call (little device time left): the working tree alone, the decode steps
# at bs=1 with full graphs and the long-context attention first, then the GPU suite.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-out/last}
mkdir -p "$OUT"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null &&
  cmake --build build-device -j16 --target bih bih_gpu_tests bih_cuda_bench >/tmp/build.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"; nvidia-smi --query-gpu=name --format=csv,noheader
build-device/bih_cuda_bench \
  --benchmark_filter='^(Kernel/attention_long|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:full)' \
  >"$OUT/bench.txt" 2>&1
grep -E "^(Kernel|BM_)" "$OUT/bench.txt" | grep -oE "^[^ ]+ +[0-9.]+ [mu]s|step_ms=[^ ]+" | paste -sd' ' |
  sed 's/ Kernel/\nKernel/g; s/ BM_/\nBM_/g'
t=$(date +%s)
BIH_REQUIRE_GPU=1 build-device/bih_gpu_tests >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/gpu-tests.log" | paste -sd' ')"
grep -E '^\[  FAILED' "$OUT/gpu-tests.log" | head
