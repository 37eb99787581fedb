#!/usr/bin/env bash
# build-server.sh: build llama.cpp's `llama-server` from the source that node-llama-cpp ships
# (node_modules/node-llama-cpp/llama/gitRelease.bundle, a git bundle: no download), into bih's
# cache, once per source. Prints the binary's path on its last line.
#
# Cache: $BIH_CACHE_DIR, else $XDG_CACHE_HOME/bih, else ~/.cache/bih (as engines/model_handoff.hpp)
# /llama-server/<first 16 hex of the bundle's sha256>/bin/llama-server. A second run with the same
# bundle finds the binary and its stamp and only prints the path. Concurrent runs serialise on a
# flock beside the folder; the binary is copied to a temporary name and renamed, so a reader never
# sees a half-written file, and the stamp is written last.
#
# Build: CMake + Ninja, Release, llama-server only, static libraries (one self-contained binary),
# no tests/examples/UI download, no CURL/OpenSSL, the CPU backend for this machine
# (GGML_NATIVE); ccache as compiler launcher when installed (CCACHE_BASEDIR makes its entries
# path-independent). BIH_JOBS sets the parallelism (default: nproc).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fail() {
  echo "build-server.sh: $*" >&2
  exit 1
}

bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
info="$here/node_modules/node-llama-cpp/llama/llama.cpp.info.json"
[[ -f "$bundle" ]] || fail "no llama.cpp source bundle at $bundle (run adapters/llama-cpp/setup.sh first)"
for tool in git cmake ninja flock sha256sum; do
  command -v "$tool" >/dev/null || fail "'$tool' is not installed (needed to build llama-server)"
done

if [[ -n "${BIH_CACHE_DIR:-}" ]]; then
  cache="$BIH_CACHE_DIR"
elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
  cache="$XDG_CACHE_HOME/bih"
elif [[ -n "${HOME:-}" ]]; then
  cache="$HOME/.cache/bih"
else
  fail "no cache folder: set BIH_CACHE_DIR (or XDG_CACHE_HOME or HOME)"
fi
hash="$(sha256sum "$bundle" | cut -c1-16)"
root="$cache/llama-server/$hash"
binary="$root/bin/llama-server"
stamp="$root/bin/.complete"
mkdir -p "$cache/llama-server" || fail "cannot create $cache/llama-server"

exec 9>"$root.lock" || fail "cannot open the lock $root.lock"
flock 9

if [[ -x "$binary" && -f "$stamp" ]]; then
  echo "build-server.sh: cached build of $(tr -d '\n' <"$stamp")" >&2
  echo "$binary"
  exit 0
fi

# A previous build that did not finish (no stamp) is started over.
rm -rf "$root"
mkdir -p "$root/bin"
tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)"
echo "build-server.sh: building llama-server (llama.cpp ${tag:-unknown tag}, bundle $hash) in $root" >&2
git clone --quiet "$bundle" "$root/src" >&2 || fail "git clone of $bundle failed"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
fi
start=$(date +%s)
cmake -S "$root/src" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_BACKEND_DL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "${launcher[@]}" >&2 ||
  fail "cmake configure failed (log above)"
cmake --build "$root/build" --target llama-server -j "${BIH_JOBS:-$(nproc)}" >&2 ||
  fail "building llama-server failed (log above)"
built="$root/build/bin/llama-server"
[[ -x "$built" ]] || fail "the build finished without $built"
"$built" --version >&2 || fail "$built does not run (--version failed)"

cp "$built" "$binary.tmp.$$"
mv -f "$binary.tmp.$$" "$binary"
rm -rf "$root/build" "$root/src"
echo "llama.cpp ${tag:-unknown} bundle $hash built in $(($(date +%s) - start)) s" >"$stamp.tmp.$$"
mv -f "$stamp.tmp.$$" "$stamp"
echo "build-server.sh: built in $(($(date +%s) - start)) s" >&2
echo "$binary"
