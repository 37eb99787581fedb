#!/usr/bin/env bash
# The README's second command: set up (Debian packages, the llama.cpp adapter's npm package,
# llama-server), build, and run every test that needs no GPU (label cpu). CI (.ci/run) then runs
# the same tests built with ASan and UBSan (ci/asan.sh) and each libFuzzer target for a bounded time
# (ci/fuzz.sh): about 21 more minutes on two cores, which a person running the tests need not
# wait for.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# The llama.cpp adapter's one package (node-llama-cpp, pinned by its lock file): the end-to-end
# llama.cpp tests run the real engine.
if ! command -v npm >/dev/null; then
  [ "$(id -u)" -eq 0 ] && sudo="" || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends nodejs npm
fi
bash adapters/llama-cpp/setup.sh
# llama-server, built from the llama.cpp source that node-llama-cpp ships (no download) into bih's
# cache by the source's hash: 6 min from scratch on two cores, a path print once cached. The
# llama-server tests find it through BIH_LLAMA_SERVER (the profile's program).
SECONDS=0
BIH_LLAMA_SERVER="$(bash adapters/llama-cpp/build-server.sh | tail -n1)"
export BIH_LLAMA_SERVER
echo "adapters/llama-cpp/build-server.sh: ${SECONDS} s (${BIH_LLAMA_SERVER})"
bash ci/build.sh
ctest --test-dir "${BIH_BUILD_DIR:-build}" -L cpu --output-on-failure -j "$(nproc)"
