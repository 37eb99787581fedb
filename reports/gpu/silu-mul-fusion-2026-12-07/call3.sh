#!/usr/bin/env bash
# Call 3 (issue 18, stop 50): the GEMM and fusion tests after their random operands moved to
# gpu_test_util (one copy instead of two; the same values).
set -uo pipefail
S="$OUT/call3-summary.txt"
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=OFF >/dev/null &&
  cmake --build build-device -j16 --target bih_gpu_tests >/tmp/build.log 2>&1
echo "build: exit $?; $(tail -1 /tmp/build.log)" | tee -a "$S"
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests \
  --gtest_filter='CudaGemm*:CudaSiluMulFusion.*' >/tmp/t.txt 2>&1
echo "tests: exit $?; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+' /tmp/t.txt | paste -sd' ')" | tee -a "$S"
grep -E "^\[  FAILED  \] [A-Z]" /tmp/t.txt | tee -a "$S"
