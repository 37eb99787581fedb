#!/usr/bin/env bash
# Installs clang and its sanitizer/libFuzzer runtime from Debian when missing (ci/asan.sh and
# ci/fuzz.sh build with them). $1: the compiler, clang++-14 by default.
set -euo pipefail
cxx=${1:-clang++-14}
if ! command -v "$cxx" >/dev/null || ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] && sudo="" || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends clang-14 libclang-rt-14-dev >/dev/null
fi
