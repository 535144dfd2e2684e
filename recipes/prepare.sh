#!/usr/bin/env bash
# prepare.sh - fetch the demo data once.
#
# UCI housing (the fit_a_line demo): Debian's python3-sklearn package ships
# the same 506 rows as boston_house_prices.csv. We download the package (not
# install it), take the CSV out of it, check it, and write the
# whitespace-separated housing.data the uci_housing reader takes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/data/uci_housing
csv_sha=d98212636026544fc9b9c0f372e5f819872e6fa6fa757ab025efdda22180f2d6

[ -s "$out/housing.data" ] && exit 0
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "prepare: downloading Debian's python3-sklearn for the UCI housing data" >&2
if ! apt-get download python3-sklearn >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get download python3-sklearn >/dev/null 2>&1 ||
        { echo "prepare: cannot download python3-sklearn with apt-get" >&2; exit 1; }
fi
dpkg -x python3-sklearn_*.deb x
csv=$(find x -name boston_house_prices.csv | head -n 1)
[ -n "$csv" ] || { echo "prepare: boston_house_prices.csv not found in python3-sklearn" >&2; exit 1; }
echo "$csv_sha  $csv" | sha256sum -c --quiet - ||
    { echo "prepare: boston_house_prices.csv has an unexpected checksum" >&2; exit 1; }
# two header lines, then 506 rows of 14 comma-separated numbers
tail -n +3 "$csv" | tr ',' ' ' >"$out/housing.data.tmp"
rows=$(wc -l <"$out/housing.data.tmp")
[ "$rows" -eq 506 ] || { echo "prepare: expected 506 rows, got $rows" >&2; exit 1; }
mv "$out/housing.data.tmp" "$out/housing.data"
echo "prepare: wrote $out/housing.data (506 rows)" >&2

# The recommendation and CTR demos need no download: their data is
# generated, e.g.
#   paddle gen movielens --out recipes/data/ml-gen
#   paddle gen criteo --out recipes/data/criteo-gen --rows 1000000
