#!/usr/bin/env bash
# The whole GPU check in one call, for a machine with NVIDIA GPUs (the `device` tool runs it as
# `bash ci/device-check.sh`): builds bih with CUDA for Hopper (ninja -j16, sm_90), runs the GPU tests
# (label gpu: CUDA kernels, pinned GEMM, emulated-on-GPU collectives, NCCL fingerprint), the GEMM
# benchmark (invariant vs cuBLAS defaults), the NCCL order fingerprint under several NCCL_ALGO
# settings and every op probe, and writes everything under $OUT (default out/device):
# summary.txt and device-results.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/device}
mkdir -p "$OUT/results"
R="$OUT/results"
# NVLink multicast stays off on shared machines (DESIGN.md, KINDS.md).
export NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

nvidia-smi >"$R/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >>"$R/nvidia-smi.txt" 2>&1
summary "gpus: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -)"

build=build-device
start=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >"$R/configure.log" 2>&1 ||
   ! cmake --build "$build" -j16 --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1; then
  summary "BUILD FAILED (see results/configure.log, results/build.log)"
  tail -30 "$R/build.log" "$R/configure.log" 2>/dev/null
  tar -czf "$OUT/device-results.tgz" -C "$OUT" results
  exit 1
fi
summary "build: $(( $(date +%s) - start )) s"

"$build/bih_gpu_tests" --gtest_output="json:$R/gpu-tests.json" >"$R/gpu-tests.log" 2>&1
summary "gpu tests: exit $? ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/gpu-tests.log" | paste -sd';' -))"

"$build/bih_cuda_bench" --benchmark_out="$R/bench-cuda-gemm.json" --benchmark_out_format=json \
  >"$R/bench-cuda-gemm.txt" 2>&1
summary "cuda gemm bench: exit $?"

for algo in default allreduce:ring allreduce:tree; do
  name=${algo//:/-}
  if [ "$algo" = default ]; then
    "$build/bih" probe nccl --json "$R/probe-nccl-$name.json" >"$R/probe-nccl-$name.txt" 2>&1
  else
    NCCL_ALGO=$algo "$build/bih" probe nccl --json "$R/probe-nccl-$name.json" \
      >"$R/probe-nccl-$name.txt" 2>&1
  fi
  summary "probe nccl ($algo): exit $?"
done
"$build/bih" probe all --json "$R/probe-all.json" >"$R/probe-all.txt" 2>&1
summary "probe all: exit $? ($(tail -1 "$R/probe-all.txt"))"

"$build/bih" run scenarios/issue-56370.json --out "$R/issue-56370" >"$R/issue-56370.txt" 2>&1
summary "issue-56370 (CPU engine on this host): exit $? ($(tail -2 "$R/issue-56370.txt" | head -1))"

tar -czf "$OUT/device-results.tgz" -C "$OUT" results
grep -E "^BM_|ratio" "$R/bench-cuda-gemm.txt" | head -60
cat "$R/probe-nccl-default.txt"
echo "-----"
cat "$OUT/summary.txt"
