#!/usr/bin/env bash
# Call 2, on call 1's warm machine (its build-device): compute-sanitizer memcheck and racecheck on
# the stream instance's small shapes (each ring, pipelined and not); the GPU issue matrix's eager TP=8 cells
# (host-bound: 8 rank threads per engine) at plan.solo_lanes 4 (the file's), 8 and 2; the whole
# matrix with its gate (every scenario as expected, the TP=1 invariant case included); the GPU
# suite.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
[ -x build-device/bih ] || { cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests >/tmp/b.log 2>&1; echo "build: exit $?"; }
F='CudaGemm.SkinnyStreamSmall*'
for run in "memcheck decode 1" "memcheck wide 1" "racecheck decode 1" "racecheck wide 1" "racecheck decode 0"; do
  set -- $run
  t=$(date +%s)
  BIH_GEMM_SKINNY_RING=$2 BIH_GEMM_SKINNY_PIPELINE=$3 timeout 120 compute-sanitizer --tool $1 \
    --error-exitcode 9 --print-limit 20 build-device/bih_gpu_tests --gtest_filter="$F" >/tmp/s.txt 2>&1
  echo "$1 ring=$2 pipeline=$3: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' /tmp/s.txt | tail -1); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/s.txt | paste -sd';')"
  grep -E "^========= (Invalid|Race|Error|Program hit|Warn)" /tmp/s.txt | sort | uniq -c | head -5
  cat /tmp/s.txt >>"$OUT/call2-sanitizers.txt"
done
for lanes in 4 8 2; do
  t=$(date +%s)
  build-device/bih run scenarios/issue-56370-gpu.json --only 'tp=8,*graph=none*' \
    --set plan.solo_lanes=$lanes --out /tmp/lanes$lanes >/tmp/l.txt 2>&1
  echo "tp=8 eager cells, solo_lanes=$lanes: exit $? in $(( $(date +%s) - t )) s"
  python3 ci/matrix-timings.py /tmp/lanes$lanes | cut -c1-110
done
t=$(date +%s)
build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$OUT/call2-matrix.txt" 2>&1
echo "matrix: exit $? in $(( $(date +%s) - t )) s"
build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >/tmp/gate.txt 2>&1
echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
python3 ci/matrix-timings.py /tmp/matrix >"$OUT/call2-matrix-timings.txt" 2>&1
tail -1 "$OUT/call2-matrix-timings.txt"
grep -E "^[✓✗]" "$OUT/call2-matrix.txt" | grep -v "✓" | head
timeout 120 build-device/bih_gpu_tests >"$OUT/call2-gpu-tests.txt" 2>&1
echo "gpu tests: exit $?; $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/call2-gpu-tests.txt" | paste -sd';')"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/call2-gpu-tests.txt" | head
# The bs=1 step's GPU time op by op (eager, events around each op: they add a little).
cmake --build build-device -j16 --target bih_cuda_bench >/tmp/b2.log 2>&1
BIH_CUDA_PROFILE=1 timeout 60 build-device/bih_cuda_bench \
  --benchmark_filter='BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:none/' >"$OUT/call2-profile.txt" 2>&1
echo "profile: exit $?"; grep -A18 "GPU time of" "$OUT/call2-profile.txt" | head -24
