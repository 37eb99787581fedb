#!/usr/bin/env bash
# Call 4: where an eager emulated rank's host time goes in its collectives
# (BIH_EMULATED_HOST_PROFILE=1), one lane, one TP=8 and one TP=4 eager cell.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-device -j16 --target bih \
  >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
for cell in 'tp=8,sp=on(min=1),ar=tree,rs=fixed,graph=none,*' 'tp=4,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off*'; do
  rm -rf /tmp/p
  t=$(date +%s)
  BIH_EMULATED_HOST_PROFILE=1 build-device/bih run scenarios/issue-56370-gpu.json --only "$cell" \
    --set plan.solo_lanes=1 --keep-work --out /tmp/p >/tmp/p.txt 2>&1
  echo "$cell, one lane: exit $? in $(( $(date +%s) - t )) s"
  python3 ci/matrix-timings.py /tmp/p | head -1 | cut -c1-100
  grep -rh "emulated GPU group" /tmp/p | cut -c1-400
done 2>&1 | tee "$OUT/call4-host-profile.txt"
