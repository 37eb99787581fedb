#!/usr/bin/env bash
# An A/B in one device call: the working tree against a base tree, on one card, so that both
# sides' timings come from the same GPU (device time is scarce and machines differ by a few %).
# The base is .ab/base.tar: `mkdir -p .ab && git archive -o .ab/base.tar <commit>` here (add
# /.ab/ to .git/info/exclude), carried with the call. Builds both
# (the base only bih_cuda_bench), runs the whole GPU suite on the new build, compute-sanitizer
# memcheck and racecheck on SANITIZE_FILTER (each bounded by SANITIZE_TIMEOUT s), the bench
# (BENCH_FILTER) RUNS times on each side (default 2), and the eager step profiles of the new build.
# With NCU_KERNEL (a kernel-name regex) set, Nsight Compute also profiles that kernel's first launch
# in the new build's bench under NCU_BENCH (a --benchmark_filter) into $OUT/ncu.txt, e.g.
#   NCU_KERNEL=chunk_tree_smem NCU_BENCH='^Gemm/gate_up/M=512/' bash ci/device-ab.sh
# Usage (device tool, carry [".ab"]):
#   BENCH_FILTER='^Kernel/attention' RUNS=2 bash ci/device-ab.sh
# Used for reports/gpu/fma-and-short-passes-2026-12-06.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-out/ab}
mkdir -p "$OUT"
F=${BENCH_FILTER:-'^(Kernel/attention/|Gemm/[a-z_]+/M=(64|512)/|BM_DecodeStep/qwen3-1.7b/tp:1/)'}
S=${SANITIZE_FILTER:-'CudaTpInvariantGemm.OutOfBand*:CudaAttentionReference.DecodeAndChunked*'}
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON"
rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
t=$(date +%s)
(cmake -S /tmp/base -B /tmp/base/b $conf >/dev/null &&
  cmake --build /tmp/base/b -j8 --target bih_cuda_bench >/tmp/base.log 2>&1) &
(cmake -S . -B build-device $conf >/dev/null &&
  cmake --build build-device -j8 --target bih bih_gpu_tests bih_cuda_bench >/tmp/new.log 2>&1) &
wait
echo "build: $(( $(date +%s) - t )) s; base: $(tail -n1 /tmp/base.log); new: $(tail -n1 /tmp/new.log)"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
t=$(date +%s)
BIH_REQUIRE_GPU=1 build-device/bih_gpu_tests >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/gpu-tests.log" | paste -sd' ')"
grep -E '^\[  FAILED' "$OUT/gpu-tests.log" | head
for tool in memcheck racecheck; do
  t=$(date +%s)
  timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool build-device/bih_gpu_tests --gtest_filter="$S" \
    >/tmp/sanitize-$tool.log 2>&1
  echo "$tool ($S): exit $? in $(( $(date +%s) - t )) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' /tmp/sanitize-$tool.log | paste -sd';')"
done
for run in $(seq 1 "${RUNS:-2}"); do
  /tmp/base/b/bih_cuda_bench --benchmark_filter="$F" >"$OUT/bench-base-$run.txt" 2>&1
  build-device/bih_cuda_bench --benchmark_filter="$F" >"$OUT/bench-new-$run.txt" 2>&1
done
if [ -n "${NCU_KERNEL:-}" ]; then
  timeout 200 ncu --kernel-name "regex:$NCU_KERNEL" --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section SourceCounters build-device/bih_cuda_bench --benchmark_filter="${NCU_BENCH:-.}" \
    >"$OUT/ncu.txt" 2>&1
  echo "ncu ($NCU_KERNEL under $NCU_BENCH): exit $?"
  grep -E "Duration|Issue Slots Busy|Registers Per|Achieved Occupancy|Issued Instructions  " "$OUT/ncu.txt"
fi
BIH_CUDA_PROFILE=1 build-device/bih_cuda_bench \
  --benchmark_filter='DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:none/kernels:invariant' \
  >"$OUT/profile-eager-new.txt" 2>&1
for f in "$OUT"/bench-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^(Kernel|Gemm|BM_)" "$f" | grep -oE "^[^ ]+|tpinv_us=[^ ]+|step_ms=[^ ]+|^Kernel[^ ]+ +[0-9.]+ [mu]s" |
    paste -sd' ' | sed 's/ Gemm/\nGemm/g; s/ BM_/\nBM_/g; s/ Kernel/\nKernel/g'
done
