#!/usr/bin/env bash
# Builds the CPU suite with AddressSanitizer and UBSan (BIH_SANITIZE=ON, at -O1 to keep CI short)
# into ${BIH_ASAN_BUILD_DIR:-build-asan} and runs it (ctest -L cpu). The bih binary the tests run,
# and the `bih worker` children it spawns, are instrumented too; they inherit the options below. A
# finding aborts the process that made it, so the test that ran it fails.
# The build is clang's with the fuzzers' coverage instrumentation too (BIH_FUZZ=ON), so that
# ci/fuzz.sh runs its targets from this build instead of compiling every library a third time.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BIH_ASAN_BUILD_DIR:-build-asan}
cxx=${BIH_ASAN_CXX:-clang++-14}
bash ci/install_clang.sh "$cxx"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DBIH_CUDA=OFF -DBIH_BUILD_BENCH=OFF -DBIH_SANITIZE=ON -DBIH_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" >/dev/null
cmake --build "$build" -j "${BIH_JOBS:-$(nproc)}"
# detect_leaks: a leak is a finding too. The Python and Node adapters the tests start are not
# instrumented; these variables reach them but mean nothing to them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Not run under the sanitizers: the two tests whose cost is the engine's arithmetic over a whole
# matrix (the issue's eleven scenarios at 64 prompts x 24 tokens each; the RL example's 96
# configurations): about 720 s of sanitized test time, 6 minutes of this stage on two cores.
# ci/test.sh runs them unsanitized. Each setting they use runs under ASan+UBSan in smaller tests:
# TP, SP and its threshold, every collective order, graphs, prefix caching and chunked prefill
# (AuditEngineOptions.*, TpInvariantEngine.*, ConfigMatrixRun.*, BisectCli.*, test_scenario's and
# test_reduce_order's cases).
not_sanitized=(
  'Scenarios/IssueMatrix\.'
  'ConfigCompareRlConsistency\.EveryConfigurationGivesWhatTheFileExpects'
)
exclude=$(IFS='|'; echo "${not_sanitized[*]}")
echo "ci/asan.sh: not under the sanitizers (ci/test.sh runs them): $exclude"
ctest --test-dir "$build" -L cpu -E "$exclude" --output-on-failure -j "$(nproc)"
