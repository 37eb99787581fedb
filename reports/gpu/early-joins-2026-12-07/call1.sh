#!/usr/bin/env bash
# Call 1 (issue 18, stop 49): early hub joins (each rank, eagerly, makes the hub stream wait for its
# own input before it arrives, so the last arrival only launches) against 1b5bbab (the last arrival
# makes every wait), on one card. Correctness first: the whole GPU suite, then compute-sanitizer
# memcheck on the emulated-collective tests (the hub kernels' first sanitizer run). Then the
# decode step at TP=1, 4, 8 in each graph mode alternating new / base / new / base, the eager host
# profile per collective, and the GPU matrix of each side with its gate and per-cell timings.
# Needs .ab/base.tar (git archive 1b5bbab), carried with the call.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$R/summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call1.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null
}
t=$(date +%s)
mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
(configure . build-device && cmake --build build-device -j10 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1; echo "new $?" >>"$R/build-rc") &
(configure /tmp/base /tmp/base/build && cmake --build /tmp/base/build -j6 \
  --target bih bih_cuda_bench >"$R/build-base.log" 2>&1; echo "base $?" >>"$R/build-rc") &
wait
say "builds in $(( $(date +%s) - t )) s: $(paste -sd' ' "$R/build-rc"); $(tail -1 "$R/build.log")"
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 170 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
grep -E "^\[       OK \] (EmulatedGpuComm|CudaEngineTp)" "$R/gpu-tests.txt" | tee -a "$S"
pack
t=$(date +%s)
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-device/bih_gpu_tests \
  --gtest_filter='EmulatedGpuCommTest.*-*BitwiseEqualToTheCpu*:*Overwritten*' >"$R/memcheck.txt" 2>&1
say "memcheck (EmulatedGpuCommTest): exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$R/memcheck.txt" | paste -sd';')"
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
steps new build-device/bih_cuda_bench
steps base /tmp/base/build/bih_cuda_bench
steps new build-device/bih_cuda_bench
steps base /tmp/base/build/bih_cuda_bench
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
[ "$left" -gt 160 ] && matrix new build-device/bih "$left"
pack
left=$(( 585 - ($(date +%s) - start) ))
[ "$left" -gt 160 ] && matrix base /tmp/base/build/bih "$left"
pack
