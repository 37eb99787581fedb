#!/usr/bin/env bash
# Stop 40, call 4 (device tool, carry [".ab"]): as call 3, with the tp_invariant shared-memory GEMM
# now copying its pieces two slices ahead by cp.async into a ring (call 3 held one slice ahead in
# registers), then scenarios/rl-consistency-gpu.json on the new build (tp_invariant prefill and
# decode at TP 1/2/4 in the engine, split KV at max_model_len 256).
set -uo pipefail
export OUT=${OUT:-out/ab}
BENCH_FILTER='^(Kernel/attention/invariant|Kernel/attention_long/|Gemm/[a-z_]+/M=(64|512)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/)' \
SANITIZE_FILTER='CudaAttentionReference.SplitKvReuses*:CudaTpInvariantGemm.OutOfBand*' \
SANITIZE_TIMEOUT=150 RUNS=2 bash ci/device-ab.sh
t=$(date +%s)
build-device/bih run scenarios/rl-consistency-gpu.json --out /tmp/rl >"$OUT/rl-consistency-gpu.txt" 2>&1
echo "rl-consistency-gpu: exit $? in $(( $(date +%s) - t )) s"
tail -n 4 "$OUT/rl-consistency-gpu.txt"
