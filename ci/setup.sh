#!/usr/bin/env bash
# Installs what bih builds against, from Debian's packages (idempotent; needs root or sudo).
set -euo pipefail
pkgs=(cmake ninja-build g++ git nlohmann-json3-dev libfmt-dev libcli11-dev libgtest-dev
      libbenchmark-dev libvalijson-dev libxml2-utils python3 libcpp-httplib-dev pkg-config ccache)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
