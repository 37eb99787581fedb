#!/usr/bin/env bash
# Call 2: after the scratch fix (the device time left after failed starts allowed one lean call).
# The GPU tests that run emulated collectives (emulated comm, engine, tp_invariant, trace, solo
# lanes); compute-sanitizer memcheck over the emulated comm tests (the staging slots'
# stream-ordered growth and reuse), bounded at 60 s; the GPU issue matrix with its gate, one
# scenario after another as ci/device-check.sh runs it; then the eager TP=8 cells at 4 lanes with
# 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS; 4 lanes' 36 streams share 8 by default).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
t=$(date +%s)
build-device/bih_gpu_tests \
  --gtest_filter='EmulatedGpu*:CudaEngine*:CudaTpInvariant*:*CudaEngineInvariance*:*CudaSoloLanes*:CudaTrace*' \
  >"$OUT/call2-gpu-tests.txt" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/call2-gpu-tests.txt" | paste -sd';')"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call2-gpu-tests.txt" | head
t=$(date +%s)
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  build-device/bih_gpu_tests --gtest_filter='EmulatedGpuCommTest.*' >"$OUT/call2-memcheck.txt" 2>&1
echo "memcheck EmulatedGpuCommTest: exit $? in $(( $(date +%s) - t )) s;" \
  "$(grep -E '^========= ERROR SUMMARY' "$OUT/call2-memcheck.txt" | tail -1);" \
  "$(grep -cE '^\[       OK \]' "$OUT/call2-memcheck.txt") tests OK"
t=$(date +%s)
build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$OUT/call2-matrix.txt" 2>&1
echo "matrix: exit $? in $(( $(date +%s) - t )) s"
build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >/tmp/gate.txt 2>&1
echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
python3 ci/matrix-timings.py /tmp/matrix >"$OUT/call2-matrix-timings.txt" 2>&1
tail -1 "$OUT/call2-matrix-timings.txt"
t=$(date +%s)
CUDA_DEVICE_MAX_CONNECTIONS=32 build-device/bih run scenarios/issue-56370-gpu.json \
  --only 'tp=8,*graph=none*' --out /tmp/connections32 >/tmp/l.txt 2>&1
echo "tp=8 eager cells, CUDA_DEVICE_MAX_CONNECTIONS=32: exit $? in $(( $(date +%s) - t )) s"
python3 ci/matrix-timings.py /tmp/connections32 | cut -c1-110 | tee "$OUT/call2-tp8-connections32.txt"
