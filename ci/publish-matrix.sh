#!/usr/bin/env bash
# Regenerates the published compatibility matrix of scenarios/issue-56370.json on the CPU backend:
# reports into reports/cpu/issue-56370/, then reports/cpu/matrix.{md,csv,json,html}. Commit them.
#   bash ci/publish-matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh >/dev/null
build=${BIH_BUILD_DIR:-build}
rm -rf reports/cpu/issue-56370
# bih run exits 1 when a verdict misses its expectation: the matrix is still worth publishing, and
# it shows the miss. 2 (bad input) and 3 (infrastructure) stop here.
status=0
# localize=true: every variant cell also says which layer/op first moved the bits (bih explain).
"$build/bih" run scenarios/issue-56370.json --set localize=true --out reports/cpu/issue-56370 ||
  status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ]; then exit "$status"; fi
"$build/bih" matrix reports/cpu/issue-56370 --out reports/cpu \
  --title "bih compatibility matrix: scenarios/issue-56370.json, CPU backend"
