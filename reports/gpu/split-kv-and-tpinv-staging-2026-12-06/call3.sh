#!/usr/bin/env bash
# Stop 40, call 3 (device tool, carry [".ab"]): the working tree (one-launch split KV in its own
# kernel instances; the tp_invariant shared-memory GEMM staging fp32 transposed slices) against
# b0b3671 (.ab/base.tar) on one card: the whole GPU suite, memcheck and racecheck on the split-KV
# scratch test and the tp_invariant out-of-band test, then the attention kernels, the GEMMs at
# M = 64 and 512 and the decode steps, twice on each side.
set -uo pipefail
export OUT=${OUT:-out/ab}
BENCH_FILTER='^(Kernel/attention/invariant|Kernel/attention_long/|Gemm/[a-z_]+/M=(64|512)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)' \
SANITIZE_FILTER='CudaAttentionReference.SplitKvReuses*:CudaTpInvariantGemm.OutOfBand*' \
SANITIZE_TIMEOUT=150 RUNS=2 bash ci/device-ab.sh
