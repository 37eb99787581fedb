#!/usr/bin/env bash
# Call 4: the GPU issue matrix as shards side by side on the one GPU (bih run --shard I/N, each
# into its own folder, no localization, as call 2's 179 s one-after-another run): 2 shards with
# the file's 4 solo lanes, then 3 shards with 2 lanes; each gated over its shards' folders.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t=$(date +%s)
[ -x build-device/bih ] || { cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 \
  --target bih >/tmp/b.log 2>&1; echo "build: exit $? in $(( $(date +%s) - t )) s"; }
for run in 2:4 3:2; do
  jobs=${run%:*} lanes=${run#*:}
  t=$(date +%s)
  dirs=()
  for ((i = 1; i <= jobs; i++)); do
    dirs+=("/tmp/m$jobs/shard-$i")
    build-device/bih run scenarios/issue-56370-gpu.json --shard "$i/$jobs" \
      --set plan.solo_lanes=$lanes --out "/tmp/m$jobs/shard-$i" >"/tmp/m$jobs-$i.txt" 2>&1 &
  done
  code=0
  for ((i = 1; i <= jobs; i++)); do wait -n || code=$?; done
  echo "matrix, $jobs shards side by side, solo_lanes $lanes: exit $code in $(( $(date +%s) - t )) s"
  build-device/bih gate --expect ci/expectations-gpu.json "${dirs[@]}" >/tmp/gate.txt 2>&1
  echo "gate: exit $? ($(tail -1 /tmp/gate.txt))"
  for d in "${dirs[@]}"; do python3 ci/matrix-timings.py "$d" | tail -1; done
  cat /tmp/m$jobs-*.txt >"$OUT/call4-matrix-$jobs-shards.txt"
  [ $(( $(date +%s) - t )) -gt 250 ] && break
done
