#!/usr/bin/env bash
# Call 1 (issue 18, stop 50): SiLU-mul in the gate_up GEMM's epilogue. Its GPU tests (bitwise the
# GEMM then silu_mul on every rank shape, ring and M); memcheck and racecheck on its small shapes;
# the decode steps with it (default) and without it (BIH_GEMM_FUSE_SILU_MUL=0), alternating; the
# bs=1 eager step op by op; the whole GPU suite; the GPU matrix with its gate, if time is left
# (LIMIT: the seconds the call may run, 580 by default).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call1-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call1.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
grep -E "error|warning" "$R/build.log" | head -5 | tee -a "$S"
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests --gtest_filter='CudaSiluMulFusion.*' \
  >"$R/fusion-tests.txt" 2>&1
say "fusion tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED)' "$R/fusion-tests.txt" | paste -sd' ')"
grep -E "Failure|Expected|Which is|first at" "$R/fusion-tests.txt" | head -12 | tee -a "$S"
for tool in memcheck racecheck; do
  t=$(date +%s)
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 build-device/bih_gpu_tests \
    --gtest_filter='CudaSiluMulFusion.SmallShapes*:CudaGemm.SkinnyStreamSmall*' >"$R/$tool.txt" 2>&1
  say "$tool (fusion and skinny small shapes): exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' "$R/$tool.txt" | paste -sd';')"
done
pack
B='^BM_DecodeStep/qwen3-1.7b/tp:(1/bs:(1|64)/graph:full/kernels:(invariant|vendor)|1/bs:1/graph:none/kernels:invariant|4/bs:1/graph:full/kernels:invariant)/'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 90 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $? in $(( $(date +%s) - t )) s"
  grep -E "^BM_Decode" "$f" |
    grep -oE "^[^ ]+|step_ms=[^ ]+|floor_ms=[^ ]+|device_ms=[^ ]+" | paste -sd' ' |
    sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
bench fused BIH_GEMM_FUSE_SILU_MUL=1
bench unfused BIH_GEMM_FUSE_SILU_MUL=0
bench fused BIH_GEMM_FUSE_SILU_MUL=1
bench unfused BIH_GEMM_FUSE_SILU_MUL=0
pack
BIH_CUDA_PROFILE=1 timeout 60 build-device/bih_cuda_bench \
  --benchmark_filter='BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:none/kernels:invariant/' >"$R/profile.txt" 2>&1
say "profile (fused): exit $?"; grep -A14 "GPU time of" "$R/profile.txt" | head -16 | tee -a "$S"
pack
t=$(date +%s)
BIH_REQUIRE_GPU=1 timeout 130 build-device/bih_gpu_tests >"$R/gpu-tests.txt" 2>&1
say "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
pack
left=$(( ${LIMIT:-580} - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 170 ]; then
  t=$(date +%s)
  timeout "$left" build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix \
    >"$R/matrix.txt" 2>&1
  say "matrix: exit $? in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >"$R/gate.txt" 2>&1
  say "gate: exit $? ($(tail -1 "$R/gate.txt"))"
  python3 ci/matrix-timings.py /tmp/matrix >"$R/matrix-timings.txt" 2>&1
  tail -1 "$R/matrix-timings.txt" | tee -a "$S"
fi
pack
