#!/usr/bin/env bash
# Call 5 (the session's last device seconds): one step's M=1 GEMMs in a graph (StepGemms) with the
# stream instance (BIH_GEMM_SKINNY_MAX_M=8, the default), with cuBLASLt's companions only (0), and
# with the instance launched without programmatic dependent launch (BIH_GEMM_SKINNY_PDL=0).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-device -j16 --target bih_cuda_bench >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
for run in "MAX_M=8" "MAX_M=0" "PDL=0" "MAX_M=8"; do
  env "BIH_GEMM_SKINNY_$run" timeout 40 build-device/bih_cuda_bench --ms=1 \
    --benchmark_filter='^StepGemms/M=1/' >/tmp/s.txt 2>&1
  echo "$run: exit $? $(grep -oE '(inv|vendor)_(ms|copy)=[0-9.]+' /tmp/s.txt | paste -sd' ')"
done
