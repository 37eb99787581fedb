#!/usr/bin/env bash
# Call 1: the stream GEMM's ring chosen by how its grid covers the GPU (the deep rings) and the
# tp_invariant staged GEMV's block shape chosen the same way, A/B against the previous choice on
# one card; BIH_STEP_PDL=3 (the GEMMs release the kernel after them once every block has asked for
# its last weights); the staged GEMV for o_proj and down (BIH_TPINV_STAGED_MIN_N=2048). Then the
# GEMM, tp_invariant and step-chain tests, the whole GPU suite, and the matrix if time is left.
# Raw outputs go to $OUT/call1.tgz; the lines that matter to $OUT/call1-summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call1-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call1.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests \
  --gtest_filter='CudaGemm.Skinny*:CudaTpInvariant*:CudaStepChain.*' >"$R/tests-focused.txt" 2>&1
say "focused tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/tests-focused.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]|Failure|ring .*first" "$R/tests-focused.txt" | head -12 | tee -a "$S"
BIH_STEP_PDL=3 BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests \
  --gtest_filter='CudaStepChain.*' >"$R/tests-chain-pdl3.txt" 2>&1
say "step chain, BIH_STEP_PDL=3: exit $?; $(grep -E '^\[  (PASSED|FAILED)' "$R/tests-chain-pdl3.txt" | paste -sd' ')"
B='^(StepGemms/M=1/|Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:(full|none)/kernels:(invariant|vendor|tp_invariant)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:64/graph:full/kernels:invariant/)'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 90 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(StepGemms|BM_Decode|Gemm/)" "$f" |
    grep -oE "^[^ ]+|(inv|vendor|tpinv)_(ms|us)=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/ Gemm\//\nGemm\//g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
OLD=(BIH_GEMM_SKINNY_RING=shallow BIH_TPINV_STAGED=256x8x3)
bench old "${OLD[@]}"
bench new BIH_STEP_PDL=1
bench new-staged2048 BIH_TPINV_STAGED_MIN_N=2048
bench new-pdl3 BIH_STEP_PDL=3
bench old "${OLD[@]}"
bench new BIH_STEP_PDL=1
bench new-staged2048 BIH_TPINV_STAGED_MIN_N=2048
pack
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
pack
left=$(( 560 - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 185 ]; then
  t=$(date +%s)
  timeout "$left" build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix \
    >"$R/matrix.txt" 2>&1
  say "matrix: exit $? in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >"$R/gate.txt" 2>&1
  say "gate: exit $? ($(tail -1 "$R/gate.txt"))"
  python3 ci/matrix-timings.py /tmp/matrix >"$R/matrix-timings.txt" 2>&1
  tail -1 "$R/matrix-timings.txt" | tee -a "$S"
fi
pack
