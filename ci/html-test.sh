#!/usr/bin/env bash
# The matrix page as a user sees it: renders the fixture reports (tests/data/matrix) with
# `bih matrix`, opens matrix.html in headless Chromium (Debian's chromium package, never a
# downloaded browser) and checks every cell's verdict, counts and colour, the missing scenarios,
# and that expanding a cell shows its heat map. Screenshot: out/html-test/matrix.png.
# Not part of `ctest -L cpu` (installing Chromium is too slow for every CI run):
#   bash ci/html-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# playwright-core drives the system Chromium; it never downloads a browser of its own.
if [ ! -d tests/html/node_modules/playwright-core ]; then
  (cd tests/html && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --silent)
fi

bash ci/build.sh >/dev/null
build=${BIH_BUILD_DIR:-build}
out=out/html-test
rm -rf "$out" && mkdir -p "$out"
"$build/bih" matrix tests/data/matrix --out "$out" --title "bih matrix (test fixtures)"
BIH_REQUIRE_ERROR_CELL=1 node tests/html/matrix_page.test.mjs "$out" "$out/matrix.png"
