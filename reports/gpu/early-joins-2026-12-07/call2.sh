#!/usr/bin/env bash
# Call 2 (issue 18, stop 49): main after the early joins were reverted ("new": the last arrival
# makes every hub wait, as 1b5bbab, plus one scatter predicate in the hub kernel) against the early
# joins ("base", .ab/base.tar = git archive of 31774c1), on one card. The whole GPU suite on new;
# compute-sanitizer memcheck on every emulated-collective test (the 16-rank bitwise test included:
# the 5 KB parameter block) but the one that asks for a bad device on purpose; the eager host
# profile per collective and the decode steps alternating new / base; the GPU matrix of new, then
# of base if time is left.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$R/summary.txt"
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
say "build new: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
(configure /tmp/base /tmp/base/build && cmake --build /tmp/base/build -j8 \
  --target bih bih_cuda_bench >"$R/build-base.log" 2>&1; echo "$?" >"$R/build-base-rc") &
base_build=$!
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 170 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
pack
t=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-device/bih_gpu_tests \
  --gtest_filter='EmulatedGpuCommTest.*-*RejectsBadConstruction*' >"$R/memcheck.txt" 2>&1
say "memcheck (EmulatedGpuCommTest but RejectsBadConstruction): exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$R/memcheck.txt" | paste -sd';')"
pack
wait $base_build
say "build base: exit $(cat "$R/build-base-rc"); $(tail -1 "$R/build-base.log")"
B='^BM_DecodeStep/qwen3-1.7b/tp:(4|8)/bs:1/graph:(full|none)/kernels:invariant/'
run=0
steps() {  # name, bench binary
  run=$((run + 1))
  local f="$R/steps-$run-$1.txt"
  timeout 100 "$2" --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "steps $run $1: exit $?"
  grep -E "^BM_DecodeStep" "$f" |
    grep -oE "^[^ ]+|device_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' | tee -a "$S"
}
profile() {  # name, bench binary, tp
  BIH_EMULATED_HOST_PROFILE=1 timeout 60 "$2" --ms=1 \
    --benchmark_filter="^BM_DecodeStep/qwen3-1.7b/tp:$3/bs:1/graph:none/kernels:invariant/" \
    >"$R/host-profile-$1-tp$3.txt" 2>&1
  say "host profile $1 tp=$3: exit $?"
  grep -h "emulated GPU group" "$R/host-profile-$1-tp$3.txt" | sort | uniq -c | sort -nr | head -1 | tee -a "$S"
}
for side in new base new base; do
  bin=build-device/bih_cuda_bench; [ $side = base ] && bin=/tmp/base/build/bih_cuda_bench
  steps $side $bin
  profile $side $bin 8
done
profile new build-device/bih_cuda_bench 4
profile base /tmp/base/build/bih_cuda_bench 4
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
