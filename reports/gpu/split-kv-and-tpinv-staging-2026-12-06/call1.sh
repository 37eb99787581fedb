#!/usr/bin/env bash
# Stop 40, call 1 (device tool, one H100 or H200): main as it stands, validated and timed:
# the whole GPU suite and the issue matrix (ci/device-check.sh STAGES="tests matrix"), then
# Nsight Compute on the tp_invariant shared-memory GEMM at gate_up M=64 and M=512.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
STAGES="tests matrix" bash ci/device-check.sh
for m in 64 512; do
  timeout 150 ncu --kernel-name regex:chunk_tree_smem --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    build-device/bih_cuda_bench --benchmark_filter="^Gemm/gate_up/M=$m/" \
    >"$OUT/ncu-tpinv-gate_up-M$m.txt" 2>&1
  echo "ncu M=$m: exit $?"
  grep -vE "^\[(invariant|vendor)\]" "$OUT/ncu-tpinv-gate_up-M$m.txt" | grep -E "Duration|Throughput|Registers|Occupancy|Stall|Issue|Warp Cycles|Eligible|Executed Ipc|Bank" | head -40
done
