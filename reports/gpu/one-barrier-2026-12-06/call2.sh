#!/usr/bin/env bash
# Call 2: after the scratch fix. The whole GPU suite; compute-sanitizer memcheck over the emulated
# comm tests (the staging slots' stream-ordered growth and reuse); the GPU issue matrix with its
# gate, one scenario after another as ci/device-check.sh runs it; the eager TP=8 cells again at
# plan.solo_lanes 2 and 1 (16 and 8 rank threads on 16 cores; a barrier spins only below 16), and
# at 4 lanes with 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS; 36 streams share 8 by default).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 200 build-device/bih_gpu_tests >"$OUT/call2-gpu-tests.txt" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/call2-gpu-tests.txt" | paste -sd';')"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call2-gpu-tests.txt" | head
t=$(date +%s)
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  build-device/bih_gpu_tests --gtest_filter='EmulatedGpuCommTest.*' >"$OUT/call2-memcheck.txt" 2>&1
echo "memcheck EmulatedGpuCommTest: exit $? in $(( $(date +%s) - t )) s;" \
  "$(grep -E '^========= ERROR SUMMARY' "$OUT/call2-memcheck.txt" | tail -1);" \
  "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/call2-memcheck.txt" | paste -sd';')"
t=$(date +%s)
build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$OUT/call2-matrix.txt" 2>&1
echo "matrix: exit $? in $(( $(date +%s) - t )) s"
build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >/tmp/gate.txt 2>&1
echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
python3 ci/matrix-timings.py /tmp/matrix >"$OUT/call2-matrix-timings.txt" 2>&1
tail -1 "$OUT/call2-matrix-timings.txt"
for run in 2: 1: 4:32; do
  lanes=${run%:*} connections=${run#*:}
  t=$(date +%s)
  ${connections:+env CUDA_DEVICE_MAX_CONNECTIONS=$connections} build-device/bih run scenarios/issue-56370-gpu.json --only 'tp=8,*graph=none*' \
    --set plan.solo_lanes=$lanes --out /tmp/lanes$lanes >/tmp/l.txt 2>&1
  echo "tp=8 eager cells, solo_lanes=$lanes${connections:+, CUDA_DEVICE_MAX_CONNECTIONS=$connections}: exit $? in $(( $(date +%s) - t )) s"
  python3 ci/matrix-timings.py /tmp/lanes$lanes | cut -c1-110 | tee -a "$OUT/call2-tp8-lanes.txt"
done
