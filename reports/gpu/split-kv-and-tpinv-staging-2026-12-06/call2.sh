#!/usr/bin/env bash
# Stop 40, call 2 (device tool, carry [".ab"]): the one-launch split KV (attention_split_fold.cuh)
# against b0b3671 (.ab/base.tar) on one card: the whole GPU suite, memcheck and racecheck on the
# split-KV scratch test, the attention kernels and the decode steps twice on each side.
set -uo pipefail
export OUT=${OUT:-out/ab}
BENCH_FILTER='^(Kernel/attention/invariant|Kernel/attention_long/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)' \
SANITIZE_FILTER='CudaAttentionReference.SplitKvReuses*:CudaAttentionReference.SplitKvRefuses*' \
SANITIZE_TIMEOUT=150 RUNS=2 bash ci/device-ab.sh
