#!/usr/bin/env bash
# Call 2: the probe with plain loads and a lane-private cp.async ring beside the asm loads of
# call 1, and the SASS of the asm variant's main loop (why call 1's register pipeline stalled).
set -uo pipefail
d=reports/gpu/decode-chain-2026-12-06
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/chain_probe $d/chain_probe.cu -lcublas || exit 1
/tmp/chain_probe 2>&1 | tee "$OUT/call2-probe.txt"
cuobjdump -sass /tmp/chain_probe > /tmp/all.sass
for f in _Z10chain_gemvILi32ELb1ELi4E _Z16chain_gemv_plainILi16ELi4E _Z15chain_gemv_ringILi32ELi4E; do
  awk -v f="$f" '$0 ~ "Function : "f {p=1} p {print} p && /EXIT/ && ++n > 3 {exit}' /tmp/all.sass | head -400
done > "$OUT/call2-sass.txt"
wc -l "$OUT/call2-sass.txt"
