#!/usr/bin/env bash
# setup.sh: install the llama.cpp adapter's one dependency, node-llama-cpp 3.21.1 exactly (as
# package-lock.json pins it), with its prebuilt llama.cpp binaries from npm
# (@node-llama-cpp/linux-x64 for the CPU). Idempotent: a second run with the same lock file only
# checks that the binary loads.
#
# --ignore-scripts skips node-llama-cpp's postinstall, which would try to download the llama.cpp
# source and build it when no prebuilt binary fits; the adapter loads with build: "never" and
# skipDownload, so it never builds or downloads at run time either.
set -euo pipefail
cd "$(dirname "$0")"

stamp=node_modules/.bih-setup-stamp
want="$(sha256sum package-lock.json | cut -d' ' -f1) $(node --version)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  rm -f "$stamp"
  npm ci --ignore-scripts --no-audit --no-fund >&2
fi

# The prebuilt CPU binary must load without a build (the adapter's --check: a dry-run load).
node adapter.mjs --check >&2
echo "$want" > "$stamp"
