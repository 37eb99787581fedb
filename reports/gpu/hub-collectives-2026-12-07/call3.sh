#!/usr/bin/env bash
# Call 3 (issue 18, stop 48): call 2 cut to what fits the session's last device time. The tree
# with each rank joining its own input on the hub before the barrier (f2977b8): the engine tests
# that capture emulated collectives into graphs, several engines at once included, and the comm
# tests, repeated 3 times.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
R=$(mktemp -d)
S="$OUT/call3-summary.txt"
say() { echo "$*" | tee -a "$S"; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih_gpu_tests >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
G='*SoloLanes*:GraphModes*:CudaTpInvariantEngine*:CudaTpInvariantCollective*:TpAndGraphs*:CudaEngine.*:CudaTrace*:EmulatedGpuComm*'
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 100 build-device/bih_gpu_tests --gtest_filter="$G" --gtest_repeat=3 \
  >"$OUT/call3-repeat.txt" 2>&1
say "engine and comm tests x3: exit $? in $(( $(date +%s) - t )) s; $(grep -cE '^\[       OK \]' "$OUT/call3-repeat.txt") OK, $(grep -cE '^\[  FAILED  \] [A-Z]' "$OUT/call3-repeat.txt") failed"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call3-repeat.txt" | sort | uniq -c | head | tee -a "$S"
