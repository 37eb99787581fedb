#!/usr/bin/env bash
# Call 3 (issue 18, stop 49): the GPU matrix of main as it lands, on whatever card comes (the
# issue's 120 s line is for one H200; calls 1-2 got an H100), with its gate and per-cell timings.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
R=$(mktemp -d)
S="$R/summary.txt"
say() { echo "$*" | tee -a "$S"; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader)"
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=OFF >/dev/null &&
  cmake --build build-device -j16 --target bih >"$R/build.log" 2>&1
say "build: exit $? in $(( $(date +%s) - t )) s; $(tail -1 "$R/build.log")"
t=$(date +%s)
timeout 300 build-device/bih run scenarios/issue-56370-gpu.json --out /tmp/matrix >"$R/matrix.txt" 2>&1
say "matrix: exit $? in $(( $(date +%s) - t )) s"
build-device/bih gate --expect ci/expectations-gpu.json /tmp/matrix >"$R/gate.txt" 2>&1
say "gate: exit $? ($(tail -1 "$R/gate.txt"))"
python3 ci/matrix-timings.py /tmp/matrix >"$R/matrix-timings.txt" 2>&1
tail -1 "$R/matrix-timings.txt" | tee -a "$S"
tar -czf "$OUT/call3.tgz" -C "$R" .
