#!/usr/bin/env bash
# Call 1 (issue 18, stop 47): what stop 46 landed, checked in exactly that form. BIH_STEP_PDL=3
# with the fenced slot release is the default. The whole GPU suite; the step chain under
# BIH_STEP_PDL=2; the bench under the default against BIH_STEP_PDL=1, alternating; the bs=1 eager
# step's GPU time op by op; the GPU matrix under the default with its gate and per-cell timings.
# The TP=8 eager cell alone and two at once in two processes. Sized for about 460 s of a
# 560 s limit.
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
BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]|^\[step chain\]|^\[skinny stream\]" "$R/gpu-tests.txt" | head | tee -a "$S"
BIH_STEP_PDL=2 BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests \
  --gtest_filter='CudaStepChain.*' >"$R/chain-pdl2.txt" 2>&1
say "step chain, BIH_STEP_PDL=2: exit $?; $(grep -E '^\[  (PASSED|FAILED)' "$R/chain-pdl2.txt" | paste -sd' ')"
pack
B='^(StepGemms/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/kernels:(invariant|vendor)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:full/kernels:tp_invariant/)'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 90 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(StepGemms|BM_Decode)" "$f" |
    grep -oE "^[^ ]+ +[0-9.]+ [mu]s|(inv|vendor|tpinv)_(ms|us|copy)=[^ ]+|step_ms=[^ ]+|copy_TBps=[^ ]+|floor_ms=[^ ]+" |
    paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
bench default BIH_STEP_PDL_UNSET=1
bench pdl1 BIH_STEP_PDL=1
bench default BIH_STEP_PDL_UNSET=1
pack
BIH_CUDA_PROFILE=1 timeout 60 build-device/bih_cuda_bench \
  --benchmark_filter='BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:none/kernels:invariant/' >"$R/profile.txt" 2>&1
say "profile: exit $?"; grep -A20 "GPU time of" "$R/profile.txt" | head -24 | tee -a "$S"
pack
# Is an eager emulated cell bound by its process (one CUDA context's driver lock over every lane's
# and rank's calls)? The TP=8 eager SP-fixed cell alone, then two copies of it at once in two
# processes: if the pair takes about as long as one, processes scale where lanes did not.
cell='tp=8,sp=on(min=1),ar=tree,rs=fixed,graph=none,prefix=off'
t=$(date +%s)
BIH_EMULATED_HOST_PROFILE=1 timeout 60 build-device/bih run scenarios/issue-56370-gpu.json \
  --only "$cell" --out /tmp/one >"$R/tp8-eager-one.txt" 2>&1
say "tp8 eager cell, one process: exit $? in $(( $(date +%s) - t )) s"
t=$(date +%s)
for i in 1 2; do
  timeout 90 build-device/bih run scenarios/issue-56370-gpu.json --only "$cell" \
    --out /tmp/two-$i >"$R/tp8-eager-two-$i.txt" 2>&1 &
done
wait
say "tp8 eager cell, two processes at once: $(( $(date +%s) - t )) s"
grep -h "emulated GPU group" "$R"/tp8-eager-one.txt | head -3 | tee -a "$S"
pack
left=$(( 550 - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 190 ]; then
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
