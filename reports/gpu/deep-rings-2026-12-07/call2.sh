#!/usr/bin/env bash
# Call 2: the stream GEMM's slot released after the stage's products without the proxy fence
# (BIH_GEMM_SKINNY_FENCE=2) against the fenced release (1, the default), alone and with
# BIH_STEP_PDL=3; the deep rings ("fit") under BIH_STEP_PDL=3; the staged tp_invariant GEMV for
# o_proj and down (BIH_TPINV_STAGED_NARROW). The SASS order of the consumer's arrive and mmas, the
# skinny tests under FENCE=2 (the concurrent-load test caught the race without the fence), Nsight
# Compute's warp states for down's GEMM (clocks left alone), the GPU suite and the matrix under
# FENCE=2 and BIH_STEP_PDL=3. Raw outputs in $OUT/call2.tgz, the summary in $OUT/call2-summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
R=$(mktemp -d)
S="$OUT/call2-summary.txt"
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/call2.tgz" -C "$R" .; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >/dev/null && cmake --build build-device -j16 \
  --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
obj=$(find build-device -name gemm_skinny_stream.cu.o | head -1)
cuobjdump -sass "$obj" >"$R/sass.txt" 2>&1
fn=$(grep -n "Function : .*skinny_stream_kernel.*Ring.*2.*4.*4" "$R/sass.txt" | head -1 | cut -d: -f1)
say "SASS of the decode ring (line $fn): the consumer's HMMA, SYNCS (mbarrier) and FENCE in order"
awk -v s="${fn:-1}" 'NR>s && /Function :/ {exit} NR>s' "$R/sass.txt" |
  grep -oE "HMMA[.A-Z0-9]*|SYNCS[.A-Z0-9]*|FENCE[.A-Z0-9]*|BRA|EXIT" | uniq -c | paste -sd' ' | tee -a "$S"
t=$(date +%s)
for i in 1 2; do
  BIH_GEMM_SKINNY_FENCE=2 BIH_REQUIRE_GPU=1 timeout 120 build-device/bih_gpu_tests \
    --gtest_filter='CudaGemm.Skinny*:CudaStepChain.*' >"$R/tests-fence2-$i.txt" 2>&1
  say "skinny + chain tests, FENCE=2, run $i: exit $?; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/tests-fence2-$i.txt" | paste -sd' ')"
  grep -E "^\[  FAILED  \] [A-Z]|differ|first at" "$R/tests-fence2-$i.txt" | head -6 | tee -a "$S"
done
say "tests: $(( $(date +%s) - t )) s"
B='^(StepGemms/M=1/|Gemm/[a-z_]+/M=1/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:1/graph:(full|none)/kernels:(invariant|vendor|tp_invariant)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:64/graph:full/kernels:invariant/)'
run=0
bench() {  # name, env...
  local name=$1; shift
  run=$((run + 1))
  local f="$R/bench-$run-$name.txt"
  t=$(date +%s)
  env "$@" timeout 90 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$f" 2>&1
  say "bench $run $name ($*): exit $? in $(( $(date +%s) - t )) s"
  grep -E "^(StepGemms|BM_Decode|Gemm/)" "$f" |
    grep -oE "^[^ ]+ +[0-9.]+ [mu]s|(inv|vendor|tpinv)_(ms|us)=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
    sed 's/ StepGemms/\nStepGemms/g; s/ BM_/\nBM_/g; s/ Gemm\//\nGemm\//g; s/BM_DecodeStep.qwen3-1.7b.tp:1.//g; s/.iterations:[0-9]*.manual_time//g' |
    tee -a "$S"
}
bench base BIH_STEP_PDL=1
bench fence2 BIH_GEMM_SKINNY_FENCE=2
bench pdl3 BIH_STEP_PDL=3
bench fence2-pdl3 BIH_GEMM_SKINNY_FENCE=2 BIH_STEP_PDL=3
bench fit-fence2-pdl3 BIH_GEMM_SKINNY_RING=fit BIH_GEMM_SKINNY_FENCE=2 BIH_STEP_PDL=3
bench narrow128x8x3 BIH_TPINV_STAGED_NARROW=128x8x3
bench narrow128x4x4 BIH_TPINV_STAGED_NARROW=128x4x4
bench base BIH_STEP_PDL=1
bench fence2 BIH_GEMM_SKINNY_FENCE=2
bench fence2-pdl3 BIH_GEMM_SKINNY_FENCE=2 BIH_STEP_PDL=3
pack
for fence in 1 2; do
  t=$(date +%s)
  BIH_GEMM_SKINNY_FENCE=$fence timeout 120 ncu --clock-control none \
    --kernel-name regex:skinny_stream_kernel --launch-skip 30 --launch-count 16 \
    --section LaunchStats --section WarpStateStats --section SpeedOfLight \
    build-device/bih_cuda_bench --ms=1 --benchmark_filter='^Skinny/down/M=1/' \
    >"$R/ncu-down-fence$fence.txt" 2>&1
  say "ncu down FENCE=$fence: exit $? in $(( $(date +%s) - t )) s"
  # The profiled launch of grid 128 (o_proj or down) with the longest duration: down's.
  python3 - "$R/ncu-down-fence$fence.txt" <<'PY' | tee -a "$S"
import re, sys
text = open(sys.argv[1], errors="replace").read()
blocks = re.split(r"\n(?=  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", text)
best, best_us = None, -1.0
for b in blocks:
    if "(128, 1, 1)x" not in b.splitlines()[0]:
        continue
    m = re.search(r"Duration\s+(\S+)\s+([\d.,]+)", b)
    if not m:
        continue
    v = float(m.group(2).replace(",", ""))
    us = v / 1000 if m.group(1) == "ns" else v * 1000 if m.group(1) == "ms" else v
    if us > best_us:
        best, best_us = b, us
print(best if best else "no grid-128 launch found among the profiled ones")
PY
done
pack
t=$(date +%s)
BIH_GEMM_SKINNY_FENCE=2 BIH_STEP_PDL=3 BIH_REQUIRE_GPU=1 timeout 150 build-device/bih_gpu_tests \
  >"$R/gpu-tests.txt" 2>&1
say "gpu tests (FENCE=2, PDL=3): exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$R/gpu-tests.txt" | paste -sd' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$R/gpu-tests.txt" | head | tee -a "$S"
pack
left=$(( 570 - ($(date +%s) - start) ))
say "time left for the matrix: $left s"
if [ "$left" -gt 190 ]; then
  t=$(date +%s)
  BIH_GEMM_SKINNY_FENCE=2 BIH_STEP_PDL=3 timeout "$left" build-device/bih run \
    scenarios/issue-56370-gpu.json --out /tmp/matrix >"$R/matrix.txt" 2>&1
  say "matrix (FENCE=2, PDL=3): exit $? in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >"$R/gate.txt" 2>&1
  say "gate: exit $? ($(tail -1 "$R/gate.txt"))"
  python3 ci/matrix-timings.py /tmp/matrix >"$R/matrix-timings.txt" 2>&1
  tail -1 "$R/matrix-timings.txt" | tee -a "$S"
fi
pack
