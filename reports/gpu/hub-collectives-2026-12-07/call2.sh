#!/usr/bin/env bash
# Call 2 (issue 18, stop 48): the hub collectives with each rank joining its own input on the hub
# before the barrier (this tree) against the last arrival joining them all (5f0644c), on one card.
# First what must hold: the engine tests that capture emulated collectives into graphs, several
# engines at once included, and the comm tests, repeated 5 times; compute-sanitizer memcheck over
# the emulated comm's tests (the hub kernels at 2..16 ranks, in place and not). Then the decode
# step at TP=4 and 8 in each graph mode, alternating with 5f0644c, with the eager host profile per
# collective; racecheck; and the GPU matrix with its gate if time is left. Sized for a short
# budget: each part is packed as it ends. Needs ./baseline-5f0644c.tgz (git archive 5f0644c).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call2-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call2.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null
}
t=$(date +%s)
configure . build-device && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
G='*SoloLanes*:GraphModes*:CudaTpInvariant*:TpAndGraphs*:CudaEngine.*:CudaTrace*:EmulatedGpuComm*'
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 100 build-device/bih_gpu_tests --gtest_filter="$G" --gtest_repeat=5 \
  >"$R/repeat.txt" 2>&1
say "engine and comm tests x5: exit $? in $(( $(date +%s) - t )) s; $(grep -cE '^\[       OK \]' "$R/repeat.txt") OK, $(grep -cE '^\[  FAILED  \] [A-Z]' "$R/repeat.txt") failed"
grep -E "^\[  FAILED  \] [A-Z]" "$R/repeat.txt" | sort | uniq -c | head | tee -a "$S"
pack
sanitize() {  # tool
  local tool=$1
  local F='EmulatedGpuCommTest.*-EmulatedGpuCommTest.RejectsBadConstructionAndRanks'
  t=$(date +%s)
  timeout 70 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
    build-device/bih_gpu_tests --gtest_filter="$F" >"$R/sanitize-$tool.txt" 2>&1
  say "compute-sanitizer $tool: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$R/sanitize-$tool.txt" | tail -1); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/sanitize-$tool.txt" | paste -sd';' -)"
  grep -E "^========= (Invalid|Race|Error|Program hit)" "$R/sanitize-$tool.txt" | sort | uniq -c | head -5 | tee -a "$S"
  grep -E "^\[       OK \]" "$R/sanitize-$tool.txt" | tail -3 | tee -a "$S"
  pack
}
sanitize memcheck
t=$(date +%s)
mkdir -p /tmp/base && tar -xzf baseline-5f0644c.tgz -C /tmp/base && configure /tmp/base /tmp/base/build &&
  cmake --build /tmp/base/build -j16 --target bih_cuda_bench >"$R/build-base.log" 2>&1
say "build 5f0644c: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build-base.log")"
B='^BM_DecodeStep/qwen3-1.7b/tp:(4|8)/bs:1/graph:(full|piecewise|none)/kernels:invariant/'
run=0
steps() {  # name, bench binary, env...
  local name=$1 bin=$2; shift 2
  run=$((run + 1))
  local f="$R/steps-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 100 "$bin" --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "steps $run $name: exit $? in $(( $(date +%s) - t )) s"
  grep -E "^BM_DecodeStep" "$f" |
    grep -oE "^[^ ]+|device_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' | tee -a "$S"
  grep -h "emulated GPU group" "$f" | sort | uniq -c | sort -nr | head -2 | cut -c1-260 | tee -a "$S"
}
steps early build-device/bih_cuda_bench BIH_EMULATED_HOST_PROFILE=1
steps 5f0644c /tmp/base/build/bih_cuda_bench BIH_EMULATED_HOST_PROFILE=1
steps early build-device/bih_cuda_bench BIH_EMULATED_HOST_PROFILE=1
pack
sanitize racecheck  # the hub kernels use no shared memory: racecheck has least to find there
left=$(( 450 - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 140 ]; then
  t=$(date +%s)
  timeout "$left" build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$R/matrix.txt" 2>&1
  say "matrix: exit $? in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >"$R/gate.txt" 2>&1
  say "gate: exit $? ($(tail -1 "$R/gate.txt"))"
  python3 ci/matrix-timings.py /tmp/matrix >"$R/matrix-timings.txt" 2>&1
  tail -1 "$R/matrix-timings.txt" | tee -a "$S"
fi
pack
