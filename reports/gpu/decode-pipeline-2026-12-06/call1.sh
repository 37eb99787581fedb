#!/usr/bin/env bash
# Call 1: the stream instance's pipelined consumer loop (stage s + 1's shared loads issued before
# stage s's chain steps). Its bits (the skinny GEMM tests, and the tp_invariant staged GEMV's
# every block shape), then the bench with the loop on, off, on: the M=1 GEMMs alone, one step's
# GEMMs in a graph (StepGemms) and the decode steps; then call3.sh (the staged GEMV's shapes).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null &&
  cmake --build build-device -j16 --target bih bih_gpu_tests bih_cuda_bench >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"; tail -3 /tmp/b.log
for pipe in 1 0; do
  BIH_GEMM_SKINNY_PIPELINE=$pipe timeout 120 build-device/bih_gpu_tests \
    --gtest_filter='CudaGemm.Skinny*:CudaTpInvariantGemm.Staged*' >/tmp/t.txt 2>&1
  echo "skinny tests, pipeline=$pipe: exit $?; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[skinny' /tmp/t.txt | paste -sd';')"
  grep -E "^\[  FAILED  \] [A-Z]|Failure|first at" /tmp/t.txt | head -5
done
B='^(Gemm/[a-z_]+/M=1/|StepGemms/M=(1|8|64)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)'
for pipe in 1 0 1; do
  t=$(date +%s)
  BIH_GEMM_SKINNY_PIPELINE=$pipe timeout 150 build-device/bih_cuda_bench --ms=1,8,64 \
    --benchmark_filter="$B" >/tmp/bench.txt 2>&1
  echo "bench pipeline=$pipe: exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(Gemm|StepGemms|BM_Decode)|^\[step\]" /tmp/bench.txt | sed -E 's/ +/ /g'
  cp /tmp/bench.txt "$OUT/call1-bench-pipeline$pipe-$RANDOM.txt"
done
bash reports/gpu/decode-pipeline-2026-12-06/call3.sh
