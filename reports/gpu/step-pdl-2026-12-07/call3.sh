#!/usr/bin/env bash
# Call 3 (what device time was left): BIH_STEP_PDL=3, the GEMMs letting the kernel after them start
# once each block has added its last product (before its stores), against 1 (never) and 0; the
# chain test under 3 first.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name --format=csv,noheader
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih_gpu_tests bih_cuda_bench >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
BIH_STEP_PDL=3 BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests \
  --gtest_filter='CudaStepChain.*' >/tmp/chain.txt 2>&1
echo "step chain, BIH_STEP_PDL=3: exit $?; $(grep -E '^\[step chain\]|^\[  (PASSED|FAILED)' /tmp/chain.txt | paste -sd';')"
B='^(StepGemms/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:(full|none)/kernels:(invariant|tp_invariant)/)'
run=0
for pdl in 1 3 0 1 3; do
  run=$((run + 1))
  BIH_STEP_PDL=$pdl timeout 40 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" \
    >"$OUT/call3-bench-$run-pdl$pdl.txt" 2>&1
  echo "bench $run, BIH_STEP_PDL=$pdl: exit $?"
  grep -E "^(StepGemms|BM_Decode)" "$OUT/call3-bench-$run-pdl$pdl.txt" |
    grep -oE "^[^ ]+|(inv|vendor|tpinv)_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:3.manual_time//g'
done
