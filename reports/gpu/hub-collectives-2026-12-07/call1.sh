#!/usr/bin/env bash
# Call 1 (issue 18, stop 48): one hub kernel per emulated collective for every rank (this tree)
# against 42aad89 (a sum kernel per rank over staged copies eagerly, per-rank kernels and two
# barriers while capturing), on one card. The whole GPU suite on this tree; the decode step at
# TP=1, 4 and 8 in each graph mode, alternating this tree / 42aad89 / this tree; the eager host
# profile per collective at TP=4 and 8; the GPU matrix with its gate and per-cell timings, then
# 42aad89's matrix if time is left. Needs ./baseline-42aad89.tgz (git archive 42aad89).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call1-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call1.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null
}
t=$(date +%s)
configure . build-device && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
t=$(date +%s)
mkdir -p /tmp/base && tar -xzf baseline-42aad89.tgz -C /tmp/base && configure /tmp/base /tmp/base/build &&
  cmake --build /tmp/base/build -j16 --target bih bih_cuda_bench >"$R/build-base.log" 2>&1
say "build 42aad89: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build-base.log")"
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 170 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
grep -E "^\[       OK \] EmulatedGpuComm" "$R/gpu-tests.txt" | tee -a "$S"
pack
B='^BM_DecodeStep/qwen3-1.7b/tp:(1|4|8)/bs:1/graph:(full|piecewise|none)/kernels:invariant/'
run=0
steps() {  # name, bench binary
  run=$((run + 1))
  local f="$R/steps-$run-$1.txt"
  t=$(date +%s)
  timeout 100 "$2" --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "steps $run $1: exit $? in $(( $(date +%s) - t )) s"
  grep -E "^BM_DecodeStep" "$f" |
    grep -oE "^[^ ]+|device_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' | tee -a "$S"
}
steps hub build-device/bih_cuda_bench
steps 42aad89 /tmp/base/build/bih_cuda_bench
steps hub build-device/bih_cuda_bench
pack
for tp in 4 8; do
  BIH_EMULATED_HOST_PROFILE=1 timeout 60 build-device/bih_cuda_bench --ms=1 \
    --benchmark_filter="^BM_DecodeStep/qwen3-1.7b/tp:$tp/bs:1/graph:none/kernels:invariant/" \
    >"$R/host-profile-tp$tp.txt" 2>&1
  say "host profile tp=$tp: exit $?"
  grep -h "emulated GPU group" "$R/host-profile-tp$tp.txt" | sort | uniq -c | sort -nr | head -2 | tee -a "$S"
done
pack
matrix() {  # name, bih binary, limit
  t=$(date +%s)
  timeout "$3" "$2" run scenarios/issue-56370-gpu.json --out "/tmp/matrix-$1" >"$R/matrix-$1.txt" 2>&1
  say "matrix $1: exit $? in $(( $(date +%s) - t )) s"
  "$2" gate --expect ci/expectations-gpu.json "/tmp/matrix-$1" >"$R/gate-$1.txt" 2>&1
  say "gate $1: exit $? ($(tail -1 "$R/gate-$1.txt"))"
  python3 ci/matrix-timings.py "/tmp/matrix-$1" >"$R/matrix-timings-$1.txt" 2>&1
  tail -1 "$R/matrix-timings-$1.txt" | tee -a "$S"
}
left=$(( 575 - ($(date +%s) - start) ))
say "time left for the matrices: $left s"
[ "$left" -gt 170 ] && matrix hub build-device/bih "$left"
pack
left=$(( 580 - ($(date +%s) - start) ))
[ "$left" -gt 170 ] && matrix 42aad89 /tmp/base/build/bih "$left"
pack
