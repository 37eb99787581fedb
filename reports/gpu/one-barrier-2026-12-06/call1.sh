#!/usr/bin/env bash
# Call 1: the emulated GPU group's one-barrier eager collectives (staged inputs) against c0285e2's
# two barriers, A/B/A in one call on one GPU: builds both (base from .ab/base), runs the emulated
# comm and engine GPU tests on the new build, then the matrix's eager cells (graph=none) on each.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
( cmake -S . -B build-device $cfg >/dev/null && cmake --build build-device -j10 \
    --target bih bih_gpu_tests >/tmp/new.log 2>&1 ) &
( cmake -S .ab/base -B .ab/build $cfg >/dev/null && cmake --build .ab/build -j6 \
    --target bih >/tmp/base.log 2>&1 ) &
wait
echo "builds: $(( $(date +%s) - t )) s; new $([ -x build-device/bih ] && echo ok || echo FAILED)," \
  "base $([ -x .ab/build/bih ] && echo ok || echo FAILED)"
grep -E "error" /tmp/new.log /tmp/base.log | head
t=$(date +%s)
build-device/bih_gpu_tests --gtest_filter='EmulatedGpu*:CudaEngine*:CudaTpInvariant*:*CudaEngineInvariance*:*CudaSoloLanes*:CudaTrace*' \
  >"$OUT/call1-tests.txt" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t )) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' \
  "$OUT/call1-tests.txt" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$OUT/call1-tests.txt" | head
for side in new base new; do
  bin=build-device/bih
  [ "$side" = base ] && bin=.ab/build/bih
  rm -rf /tmp/eager
  t=$(date +%s)
  $bin run scenarios/issue-56370-gpu.json --only '*graph=none*' --out /tmp/eager \
    >"/tmp/eager-$side.txt" 2>&1
  echo "eager cells, $side: exit $? in $(( $(date +%s) - t )) s"
  python3 ci/matrix-timings.py /tmp/eager | tee -a "$OUT/call1-eager-$side.txt" | \
    awk '{print "  " $1, $2, $5, $6, $(NF-1)}' | head -12
done
