#!/usr/bin/env bash
# Call 2: BIH_STEP_PDL's three modes side by side in one build on one card: 0 (ordinary
# launches), 1 (the step's norms, RoPE, SiLU-mul, attention and tp_invariant GEMVs launched early;
# the GEMMs let nothing start before they end) and 2 (call 1's: the GEMMs let the kernel after them
# start as they start). The chain test under 1 and 2, the bench 0/1/2 twice, the GPU suite under
# the default (1), then the matrix if the call has the time.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"; tail -1 /tmp/b.log
for pdl in 1 2; do
  BIH_STEP_PDL=$pdl BIH_REQUIRE_GPU=1 timeout 90 build-device/bih_gpu_tests \
    --gtest_filter='CudaStepChain.*' >/tmp/chain.txt 2>&1
  echo "step chain, BIH_STEP_PDL=$pdl: exit $?; $(grep -E '^\[step chain\]|^\[  (PASSED|FAILED)' /tmp/chain.txt | paste -sd';')"
  grep -E "Failure|round [0-9]+," /tmp/chain.txt | head -4
done
B='^(StepGemms/M=(1|64)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:(full|none)/kernels:(invariant|vendor)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:(full|none)/kernels:tp_invariant/)'
run=0
for pdl in 0 1 2 0 1 2; do
  run=$((run + 1))
  t=$(date +%s)
  BIH_STEP_PDL=$pdl timeout 60 build-device/bih_cuda_bench --ms=1,64 --benchmark_filter="$B" \
    >"$OUT/call2-bench-$run-pdl$pdl.txt" 2>&1
  echo "bench $run, BIH_STEP_PDL=$pdl: exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(StepGemms|BM_Decode)" "$OUT/call2-bench-$run-pdl$pdl.txt" |
    grep -oE "^[^ ]+|(inv|vendor|tpinv)_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:3.manual_time//g'
done
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests >"$OUT/call2-gpu-tests.txt" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/call2-gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call2-gpu-tests.txt" | head
left=$(( 440 - ($(date +%s) - start) ))
echo "time left for the matrix: $left s"
if [ "$left" -gt 185 ]; then
  t=$(date +%s)
  timeout "$left" build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix \
    >"$OUT/call2-matrix.txt" 2>&1
  echo "matrix: exit $? in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >/tmp/gate.txt 2>&1
  echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
  python3 ci/matrix-timings.py /tmp/matrix >"$OUT/call2-matrix-timings.txt" 2>&1
  tail -1 "$OUT/call2-matrix-timings.txt"
fi
