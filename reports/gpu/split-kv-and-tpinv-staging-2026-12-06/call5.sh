#!/usr/bin/env bash
# Stop 40, call 5 (device tool, what was left of the device time): the committed tree (657bb77,
# whose tp_invariant GEMM factors the item loop after call 4) built and its tp_invariant and
# split-KV tests run, then the GEMM rows once.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-out/c5}
mkdir -p "$OUT"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null &&
  cmake --build build-device -j16 --target bih_gpu_tests bih_cuda_bench >"$OUT/build.log" 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
BIH_REQUIRE_GPU=1 build-device/bih_gpu_tests --gtest_filter='CudaTpInvariant*:CudaAttentionReference.SplitKv*' \
  >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests: exit $?; $(grep -E '^\[  (PASSED|FAILED) +\]' "$OUT/gpu-tests.log" | paste -sd' ')"
build-device/bih_cuda_bench --benchmark_filter='^Gemm/(o_proj|down|gate_up)/M=(64|512)/' >"$OUT/bench.txt" 2>&1
grep -E "^Gemm" "$OUT/bench.txt" | grep -oE "^[^ ]+|tpinv_us=[^ ]+" | paste -sd' ' | sed 's/ Gemm/\nGemm/g'
