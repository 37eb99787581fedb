#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, CPU only) into
# ${BIH_FUZZ_BUILD_DIR:-build-fuzz} and runs each for a bounded time from its seed corpus
# (fuzz/corpus/<target>/), then prints executions per target. New corpus units go to
# out/fuzz/corpus/ (the seeds in the repo are never modified); a crash leaves its input as
# out/fuzz/<target>-crash-* and makes this script fail after every target has run.
# Knobs: BIH_FUZZ_SECONDS (30 per target), BIH_FUZZ_TARGETS (all).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BIH_FUZZ_BUILD_DIR:-build-fuzz}
seconds=${BIH_FUZZ_SECONDS:-30}
targets=${BIH_FUZZ_TARGETS:-scenarios safetensors gguf generation report expectations protocol}
cxx=${BIH_FUZZ_CXX:-clang++-14}
# clang with libFuzzer's runtime (Debian ships it apart from the compiler).
bash ci/install_clang.sh "$cxx"
# A build that already has the fuzz targets configured (ci/asan.sh's) is reused as it is.
if ! grep -qs '^BIH_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_FLAGS=-O1 -DBIH_CUDA=OFF -DBIH_BUILD_TESTS=OFF -DBIH_BUILD_BENCH=OFF \
    -DBIH_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j "${BIH_JOBS:-$(nproc)}" --target bih_fuzz

out=out/fuzz
mkdir -p "$out"
failed=()
summary=()
for t in $targets; do
  work="$out/corpus/$t"
  mkdir -p "$work"
  log="$out/$t.log"
  echo "fuzz_$t: ${seconds} s"
  if "$build/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/$t-" \
    >"$log" 2>&1; then
    status=ok
  else
    status=CRASH
    failed+=("$t")
    tail -n 40 "$log"
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  summary+=("$(printf '%-14s %-6s %10s execs %8s execs/s' "$t" "$status" "${runs:-?}" "${rate:-?}")")
done
rm -f /dev/shm/bih-fuzz-* /tmp/bih-fuzz-* 2>/dev/null || true
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: crashes in: ${failed[*]} (inputs in $out/)" >&2
  exit 1
fi
