#!/usr/bin/env bash
# Call 15 (the last device minutes): compute-sanitizer memcheck and racecheck on the stream
# instance's bitwise test (every rank shape, M = 1..8, both rings) with the fence.
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null &&
  cmake --build build-device -j16 --target bih_gpu_tests >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
for tool in memcheck racecheck; do
  t=$(date +%s)
  timeout 75 compute-sanitizer --tool $tool build-device/bih_gpu_tests \
    --gtest_filter='CudaGemm.SkinnyStreamGives*' >"$OUT/call15-$tool.txt" 2>&1
  echo "$tool: exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/call15-$tool.txt" | paste -sd';')"
done
