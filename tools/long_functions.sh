#!/usr/bin/env bash
# long_functions.sh [LIMIT] - list the functions in src/ longer than LIMIT
# lines (default 120), longest first: a function starts at a line holding
# only "{" after its signature and ends at the next "}" in column 0. Exits 1
# if there is one (make test runs it).
set -u
cd "$(dirname "$0")/.."
limit=${1:-120}
out=$(find src -name '*.c' -o -name '*.cu' | sort | xargs awk -v limit="$limit" '
    FNR == 1 { start = 0 }
    /^\{/ && prev ~ /\)[[:space:]]*$/ { start = FNR; name = prev; next }
    /^\}/ && start { n = FNR - start + 1; if (n > limit) printf "%d %s:%d %s\n", n, FILENAME, start, name; start = 0 }
    { prev = $0 }' | sort -rn)
if [ -n "$out" ]; then
    echo "functions longer than $limit lines:"
    echo "$out"
    exit 1
fi
echo "long_functions: no function in src/ is longer than $limit lines"
