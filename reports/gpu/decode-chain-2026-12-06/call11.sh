#!/usr/bin/env bash
# Call 11: which part of the stream instance broke call 10's invariant matrix cells: three of the
# failing cells with the skinny companions off, on with programmatic dependent launch (twice: is it
# the same rows each time?), and on without it.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null && cmake --build build-device -j16 --target bih >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"
run() {  # label skinny pdl
  BIH_GEMM_SKINNY_MAX_M=$2 BIH_GEMM_SKINNY_PDL=$3 build-device/bih run scenarios/issue-56370-gpu.json \
    --only 'tp=4,sp=off,ar=tree,rs=ring,graph=full*' --only 'tp=4,sp=off,ar=tree,rs=ring,graph=none*' \
    --only 'tp=8,sp=on(min=1),ar=tree,rs=fixed,graph=piecewise*' --out "/tmp/r-$1" >"$OUT/call11-$1.txt" 2>&1
  echo "== $1 (skinny_max_m=$2, pdl=$3): exit $?"
  grep -E "^[✓✗]" "$OUT/call11-$1.txt" | sed -E 's/ +/ /g' | cut -c1-230
}
run off 0 1
run pdl-a 8 1
run nopdl 8 0
run pdl-b 8 1
