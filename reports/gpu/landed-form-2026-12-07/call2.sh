#!/usr/bin/env bash
# Call 2 (issue 18, stop 47): where an emulated TP=4 or TP=8 step's time goes, for the matrix's
# next lever. The decode step at TP=1, 4 and 8 (bs=1, invariant kernels) in each graph mode, one
# engine alone: device_ms is the GPU's time per step, step_ms the host's. The eager TP=4 and TP=8
# steps again under BIH_EMULATED_HOST_PROFILE=1: the host time per collective per rank, before,
# at and after the barrier.
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
  --target bih_cuda_bench >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
B='^BM_DecodeStep/qwen3-1.7b/tp:(1|4|8)/bs:1/graph:(full|piecewise|none)/kernels:invariant/'
t=$(date +%s)
timeout 150 build-device/bih_cuda_bench --ms=1 --benchmark_filter="$B" >"$R/steps.txt" 2>&1
say "steps: exit $? in $(( $(date +%s) - t )) s"
grep -E "^BM_DecodeStep" "$R/steps.txt" |
  grep -oE "^[^ ]+|device_ms=[^ ]+|step_ms=[^ ]+" | paste -sd' ' |
  sed 's/ BM_/\nBM_/g; s/BM_DecodeStep.qwen3-1.7b.//g; s/.iterations:[0-9]*.manual_time//g' | tee -a "$S"
pack
for tp in 4 8; do
  BIH_EMULATED_HOST_PROFILE=1 timeout 90 build-device/bih_cuda_bench --ms=1 \
    --benchmark_filter="^BM_DecodeStep/qwen3-1.7b/tp:$tp/bs:1/graph:none/kernels:invariant/" \
    >"$R/host-profile-tp$tp.txt" 2>&1
  say "host profile tp=$tp: exit $?"
  grep -h "emulated GPU group" "$R/host-profile-tp$tp.txt" | sort | uniq -c | sort -nr | head -3 | tee -a "$S"
done
pack
