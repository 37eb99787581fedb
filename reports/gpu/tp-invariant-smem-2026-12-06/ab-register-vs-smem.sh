#!/usr/bin/env bash
# One-off A/B (not committed): HEAD's tp_invariant kernels (baseline) against the working tree's
# shared-memory kernel, and the FMA experiment, on one card in one call.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
F='^(Gemm/[a-z_]+/M=(64|512)/|BM_DecodeStep/qwen3-1.7b/tp:1/bs:(1|64)/graph:full/kernels:tp_invariant)'
mkdir -p /tmp/base
tar --exclude=./build-device --exclude=./.base -cf - . | tar -xf - -C /tmp/base
cp .base/gemm_chunk_tree.cu /tmp/base/models/cuda/; rm -f /tmp/base/models/cuda/gemm_chunk_tree_tiled.*
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON"
(cmake -S /tmp/base -B /tmp/base/b $conf >/dev/null && cmake --build /tmp/base/b -j8 --target bih_cuda_bench >/tmp/base.log 2>&1) &
(cmake -S . -B build-device $conf >/dev/null && cmake --build build-device -j8 --target bih_cuda_bench >/tmp/new.log 2>&1) &
wait; tail -2 /tmp/base.log /tmp/new.log
nvidia-smi --query-gpu=name --format=csv,noheader
for run in 1 2; do
  /tmp/base/b/bih_cuda_bench --benchmark_filter="$F" >$OUT/base-$run.txt 2>&1
  build-device/bih_cuda_bench --benchmark_filter="$F" >$OUT/new-$run.txt 2>&1
  BIH_EXPERIMENT_FMA=1 build-device/bih_cuda_bench --benchmark_filter="$F" >$OUT/fma-$run.txt 2>&1
done
for f in $OUT/*.txt; do echo "== $(basename $f)"; grep -E "^(Gemm|BM_)" $f | sed -E 's/ +[0-9.]+ [mu]s +[0-9.]+ [mu]s +[0-9]+ / /' | grep -oE "^[^ ]+|tpinv_us=[^ ]+|step_ms=[^ ]+" | paste -sd' ' | sed 's/ Gemm/\nGemm/g; s/ BM_/\nBM_/g'; done
