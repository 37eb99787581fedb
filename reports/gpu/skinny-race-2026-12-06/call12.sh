#!/usr/bin/env bash
# Call 12: which part of the skinny stream instance made invariant TP=4 cells batch_variant
# (reports/gpu/decode-chain-2026-12-06, calls 10-11). The GPU tests of the instance (the
# many-streams one never ran before), then one failing cell, tp=4 without SP, eager, under each
# diagnostic: the instance on as in call 11; the register instance in its place; the decode ring
# only; a proxy fence before each slot's release; each launch checked against the register
# instance before and after it; one solo lane; M=1 alone; and the same cell at TP=1.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
conf="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
t=$(date +%s)
cmake -S . -B build-device $conf >/dev/null &&
  cmake --build build-device -j16 --target bih bih_gpu_tests >/tmp/b.log 2>&1
echo "build: exit $? in $(( $(date +%s) - t )) s"; tail -3 /tmp/b.log
build-device/bih_gpu_tests --gtest_filter='CudaGemm.SkinnyStream*' >"$OUT/call12-tests.txt" 2>&1
echo "tests: exit $?"; grep -E "^\[  (     OK|FAILED  ) \]|Expected|first at" "$OUT/call12-tests.txt" | head -20
CELL='tp=4,sp=off,ar=tree,rs=ring,graph=none*'
LOG="$OUT/call12-cells.txt"
: >"$LOG"
run() {  # label, then env assignments and bih arguments
  local label=$1; shift
  local envs=() args=() file=scenarios/issue-56370-gpu.json
  for a in "$@"; do
    case $a in BIH_*=*) envs+=("$a") ;; FILE=*) file=${a#FILE=} ;; *) args+=("$a") ;; esac
  done
  local t0=$(date +%s)
  env "${envs[@]}" build-device/bih run "$file" "${args[@]}" \
    --out "/tmp/r-$label" >/tmp/cell.txt 2>&1
  local rc=$?
  { echo "=== $label: ${envs[*]} ${args[*]} (exit $rc, $(( $(date +%s) - t0 )) s)"; cat /tmp/cell.txt
    grep -rh "skinny verify" "/tmp/r-$label" 2>/dev/null | tail -5; } >>"$LOG"
  echo "== $label (exit $rc, $(( $(date +%s) - t0 )) s): $(grep -E '^[✓✗]' /tmp/cell.txt | sed -E 's/ +/ /g' | cut -d' ' -f3-9 | paste -sd'|')"
  grep -h "skinny verify" /tmp/cell.txt | tail -2
  grep -rh "skinny verify" "/tmp/r-$label" 2>/dev/null | tail -2
}
run on-a      BIH_GEMM_SKINNY_MAX_M=8 --only "$CELL"
run registers BIH_GEMM_SKINNY_MAX_M=8 BIH_GEMM_SKINNY_STREAM=0 --only "$CELL"
run decode    BIH_GEMM_SKINNY_MAX_M=8 BIH_GEMM_SKINNY_RING=decode --only "$CELL"
run fence     BIH_GEMM_SKINNY_MAX_M=8 BIH_GEMM_SKINNY_FENCE=1 --only "$CELL"
run verify    BIH_GEMM_SKINNY_MAX_M=8 BIH_GEMM_SKINNY_VERIFY=1 --only "$CELL"
run lanes1    BIH_GEMM_SKINNY_MAX_M=8 --set plan.solo_lanes=1 --only "$CELL"
run m1        BIH_GEMM_SKINNY_MAX_M=1 --only "$CELL"
run tp1       BIH_GEMM_SKINNY_MAX_M=8 FILE=reports/gpu/skinny-race-2026-12-06/tp1-invariant.json
run registers-b BIH_GEMM_SKINNY_MAX_M=8 BIH_GEMM_SKINNY_STREAM=0 --only "$CELL"
run on-b      BIH_GEMM_SKINNY_MAX_M=8 --only "$CELL"
