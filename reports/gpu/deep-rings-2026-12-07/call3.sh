#!/usr/bin/env bash
# Call 3: what lands. BIH_STEP_PDL=3 is the default; the deep rings, the late slot release and
# the staged GEMV's other shapes are gone again. The bench under the default against
# BIH_STEP_PDL=1 (the default before), alternating, two runs each; the whole GPU suite; the
# step chain under BIH_STEP_PDL=2; the matrix under the default only if the call has the time (it
# had not: two failed starts left 427 s of device time, so the call stops at about 280 s).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call3-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call3.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
B='^(StepGemms/M=1/|Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:(full|none)/kernels:(invariant|vendor)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:(full|none)/kernels:tp_invariant/)'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 90 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(StepGemms|BM_Decode|Gemm/)" "$f" |
    grep -oE "^[^ ]+ +[0-9.]+ [mu]s|(inv|vendor|tpinv)_(ms|us|copy)=[^ ]+|step_ms=[^ ]+|copy_TBps=[^ ]+|floor_ms=[^ ]+" |
    paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/ Gemm\//\nGemm\//g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
for i in 1 2; do
  bench pdl1 BIH_STEP_PDL=1
  bench default BIH_STEP_PDL_UNSET=1
done
pack
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]|^\[step chain\]|^\[skinny stream\]" "$R/gpu-tests.txt" | head | tee -a "$S"
BIH_STEP_PDL=2 BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests \
  --gtest_filter='CudaStepChain.*' >"$R/chain-pdl2.txt" 2>&1
say "step chain, BIH_STEP_PDL=2: exit $?; $(grep -E '^\[  (PASSED|FAILED)' "$R/chain-pdl2.txt" | paste -sd' ')"
pack
left=$(( 280 - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 180 ]; then
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
