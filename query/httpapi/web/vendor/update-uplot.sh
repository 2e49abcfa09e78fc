#!/usr/bin/env bash
# Refetches the vendored uPlot (the dashboard's chart library) from the npm registry at a pinned
# exact version, checks the tarball against the pinned integrity, and copies the three files the
# dashboard embeds: dist/uPlot.iife.min.js, dist/uPlot.min.css and LICENSE, unmodified.
#
# Why vendored: the dashboard is embedded into the abacus binary with go:embed, so `abacus serve`
# and `go run ./cmd/abacus demo` work on a fresh machine with no npm step and no CDN.
#
# To move to another version: set UPLOT_VERSION, run with UPLOT_INTEGRITY= (empty) once to print the
# registry's integrity, check it against `npm view uplot@<version> dist.integrity`, pin it here,
# run again, and review the diff of uplot/ and the dashboard in a browser.
set -euo pipefail
UPLOT_VERSION=${UPLOT_VERSION:-1.6.32}
UPLOT_INTEGRITY=${UPLOT_INTEGRITY-sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "[update-uplot] npm pack uplot@$UPLOT_VERSION"
(cd "$tmp" && npm pack --silent --json "uplot@$UPLOT_VERSION" >pack.json)
got=$(node -e 'const p=require(process.argv[1]); console.log(p[0].integrity)' "$tmp/pack.json")
file=$(node -e 'const p=require(process.argv[1]); console.log(p[0].filename)' "$tmp/pack.json")
if [ -z "$UPLOT_INTEGRITY" ]; then
  echo "[update-uplot] integrity of uplot@$UPLOT_VERSION: $got (not checked: pin it in this script)"
elif [ "$got" != "$UPLOT_INTEGRITY" ]; then
  echo "[update-uplot] integrity mismatch for uplot@$UPLOT_VERSION: got $got, pinned $UPLOT_INTEGRITY" >&2
  exit 1
fi
tar -xzf "$tmp/$file" -C "$tmp"
mkdir -p "$here/uplot"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$here/uplot/"
cat >"$here/uplot/VERSION" <<NOTE
uplot $UPLOT_VERSION from the npm registry (https://www.npmjs.com/package/uplot), unmodified
integrity $got
files: dist/uPlot.iife.min.js, dist/uPlot.min.css, LICENSE (MIT)
refetch with ../update-uplot.sh
NOTE
echo "[update-uplot] wrote $here/uplot (uplot $UPLOT_VERSION)"
