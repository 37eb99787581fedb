#!/usr/bin/env bash
# Call 2 (issue 18, stop 50): the fusion tests again after their operand check was fixed (x in
# [-6, 6) so that every width's gates reach silu's saturated end; call 1's bitwise checks had all
# passed), and the decode steps fused / unfused, alternating, once more.
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
  --target bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
BIH_REQUIRE_GPU=1 timeout 60 build-device/bih_gpu_tests --gtest_filter='CudaSiluMulFusion.*' \
  >"$R/fusion-tests.txt" 2>&1
say "fusion tests: exit $?; $(grep -E '^\[  (PASSED|FAILED)' "$R/fusion-tests.txt" | paste -sd' ')"
grep -E "Failure|Expected|Which is|first at|^\[silu fusion\]" "$R/fusion-tests.txt" | head -12 | tee -a "$S"
pack
B='^BM_DecodeStep/qwen3-1.7b/tp:(1/bs:1/graph:(full|none)/kernels:invariant|4/bs:1/graph:full/kernels:invariant)/'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  env "$@" timeout 60 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $?"
  grep -E "^BM_Decode" "$f" |
    grep -oE "^[^ ]+|step_ms=[^ ]+|device_ms=[^ ]+" | paste -sd' ' |
    sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
bench unfused BIH_GEMM_FUSE_SILU_MUL=0
bench fused BIH_GEMM_FUSE_SILU_MUL=1
bench unfused BIH_GEMM_FUSE_SILU_MUL=0
bench fused BIH_GEMM_FUSE_SILU_MUL=1
pack
