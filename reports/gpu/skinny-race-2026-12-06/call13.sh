#!/usr/bin/env bash
# Call 13 (short: little device time was left): the fix (a proxy fence before each slot's release,
# on by default) with the stream instance serving M <= 8 by default (skinny_max_m 8). The new
# concurrent-load test without the fence (must fail, else it cannot catch the race) and with it;
# the TP=1 cell of call 12; the issue matrix with its gate; then, while time lasts, the GPU suite
# and the bs=1 / bs=64 decode steps against cuBLASLt's companions.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null &&
  cmake --build build-device -j16 --target bih bih_gpu_tests >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
T='CudaGemm.SkinnyStreamUnderConcurrentLoad*'
for fence in 0 1 0; do
  BIH_GEMM_SKINNY_FENCE=$fence build-device/bih_gpu_tests --gtest_filter="$T" >/tmp/t.txt 2>&1
  echo "concurrent-load test, fence=$fence: exit $?; $(grep -E '^\[skinny stream\]' /tmp/t.txt)"
  grep -m3 "first at" /tmp/t.txt
  cat /tmp/t.txt >>"$OUT/call13-load-test.txt"
done
build-device/bih run reports/gpu/skinny-race-2026-12-06/tp1-invariant.json --out /tmp/r-tp1 >/tmp/tp1.txt 2>&1
echo "tp1 cell: exit $?; $(grep -E '^[✓✗]' /tmp/tp1.txt | sed -E 's/ +/ /g' | cut -d' ' -f3-9)"
t=$(date +%s)
build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$OUT/call13-matrix.txt" 2>&1
echo "matrix: exit $? in $(( $(date +%s) - t )) s"
build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >/tmp/gate.txt 2>&1
echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
grep -E "^[✓✗]|scenario" "$OUT/call13-matrix.txt" | sed -E 's/ +/ /g' | cut -c1-160 | tail -36
python3 ci/matrix-timings.py /tmp/matrix >"$OUT/call13-matrix-timings.txt" 2>&1; tail -1 "$OUT/call13-matrix-timings.txt"
timeout 90 build-device/bih_gpu_tests >"$OUT/call13-gpu-tests.txt" 2>&1
echo "gpu tests: exit $?; $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/call13-gpu-tests.txt" | paste -sd';')"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call13-gpu-tests.txt" | head
