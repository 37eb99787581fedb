#!/usr/bin/env bash
# Call 2 (issue 18, stop 48): the hub collectives under the tools and repeated. compute-sanitizer
# memcheck and racecheck over the emulated comm's tests (the hub kernels at 2..16 ranks, in place
# and not); then the engine tests that capture emulated collectives into graphs, several engines
# at once included (solo lanes, TP sizes, graph modes, the tp_invariant tree collectives),
# repeated 5 times.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
R=$(mktemp -d)
S="$OUT/call2-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call2.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null && cmake --build build-device -j16 \
  --target bih_gpu_tests >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
F='EmulatedGpuCommTest.*-EmulatedGpuCommTest.RejectsBadConstructionAndRanks'
for tool in memcheck racecheck; do
  t=$(date +%s)
  timeout 170 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
    build-device/bih_gpu_tests --gtest_filter="$F" >"$R/sanitize-$tool.txt" 2>&1
  say "compute-sanitizer $tool: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$R/sanitize-$tool.txt" | tail -1); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/sanitize-$tool.txt" | paste -sd';' -)"
  grep -E "^========= (Invalid|Race|Error|Program hit)" "$R/sanitize-$tool.txt" | sort | uniq -c | head -5 | tee -a "$S"
  pack
done
G='*SoloLanes*:GraphModes*:CudaTpInvariant*:TpAndGraphs*:CudaEngine.*:CudaTrace*'
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 200 build-device/bih_gpu_tests --gtest_filter="$G" --gtest_repeat=5 \
  >"$R/repeat.txt" 2>&1
say "engine graph tests x5: exit $? in $(( $(date +%s) - t )) s; $(grep -cE '^\[       OK \]' "$R/repeat.txt") OK, $(grep -cE '^\[  FAILED  \] [A-Z]' "$R/repeat.txt") failed"
grep -E "^\[  FAILED  \] [A-Z]" "$R/repeat.txt" | sort | uniq -c | head | tee -a "$S"
pack
