#!/usr/bin/env bash
# run.sh PADDLE UNIT_TESTS - the whole test suite: the C unit tests, then every
# tests/integration/*.sh against the real binary. Each integration script runs
# in its own scratch directory with a time limit and reports its cases with
# pass/fail (tests/integration/lib.sh). Ends with "N passed, N failed,
# N skipped" (cases that cannot run here, e.g. CUDA ones without a GPU, with why).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
paddle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
unit=$2
unit_abs=$(cd "$(dirname "$unit")" && pwd)/$(basename "$unit")
filter=${TEST_FILTER:-}
limit=${TEST_TIMEOUT:-300}

passed=0
failed=0
skipped=0
failures=()

echo "== unit tests ($unit)"
# (not `tee /dev/stderr`: reopening stderr truncates it when it is a log file)
unit_log=$(mktemp "${TMPDIR:-/tmp}/pd-unit.XXXXXX")
"$unit" >"$unit_log" 2>&1
cat "$unit_log"
out=$(cat "$unit_log")
rm -f "$unit_log"
line=$(grep -E '^unit: [0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
if [ -z "$line" ]; then
    echo "unit test runner crashed"
    failed=$((failed + 1))
    failures+=("unit runner")
else
    p=$(sed -E 's/unit: ([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    s=$(sed -nE 's/.* ([0-9]+) skipped.*/\1/p' <<<"$line")
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + ${s:-0}))
    while read -r name; do failures+=("unit $name"); done < <(awk '/^FAIL/ {print $2}' <<<"$out")
fi

echo "== integration tests ($paddle)"
for t in "$here"/integration/*.sh; do
    name=$(basename "$t" .sh)
    [[ "$name" = lib || "$name" = *_lib ]] && continue  # sourced helpers, not tests
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/pd-it-$name.XXXXXX")
    results="$scratch/.results"
    : >"$results"
    start=$(date +%s.%N)
    (cd "$scratch" && PADDLE="$paddle" UNIT="$unit_abs" ROOT="$root" T="$scratch" RESULTS="$results" \
        timeout -k 10 "$limit" bash "$t") >"$scratch/.log" 2>&1
    rc=$?
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    np=$(grep -c '^pass ' "$results")
    nf=$(grep -c '^fail ' "$results")
    ns=$(grep -c '^skip ' "$results")
    if [ "$rc" -ne 0 ] && [ "$nf" -eq 0 ]; then
        echo "fail $name (script exited $rc$([ $rc -eq 124 ] && echo ': timed out'))" >>"$results"
        nf=$((nf + 1))
    fi
    if [ "$np" -eq 0 ] && [ "$nf" -eq 0 ] && [ "$ns" -eq 0 ]; then
        echo "fail $name (no case ran)" >>"$results"
        nf=1
    fi
    passed=$((passed + np))
    failed=$((failed + nf))
    skipped=$((skipped + ns))
    if [ "$nf" -gt 0 ]; then
        printf 'FAIL   %-40s %3d passed, %d failed (%ss)\n' "$name" "$np" "$nf" "$secs"
        grep '^fail ' "$results" | sed 's/^/       /'
        echo "       --- log tail ---"
        tail -n 30 "$scratch/.log" | sed 's/^/       /'
        while read -r l; do failures+=("$name: ${l#fail }"); done < <(grep '^fail ' "$results")
    else
        printf 'ok     %-40s %3d passed%s (%ss)\n' "$name" "$np" "$([ "$ns" -gt 0 ] && echo ", $ns skipped")" "$secs"
    fi
    grep '^skip ' "$results" | sed 's/^skip /       skipped: /'
    rm -rf "$scratch"
done

echo
if [ "$failed" -gt 0 ]; then
    echo "failures:"
    printf '  %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
