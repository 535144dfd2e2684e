#!/usr/bin/env bash
# run.sh SECONDS HARNESS... - run each libFuzzer harness (built by make
# fuzz-build in build/fuzz/bin/) for SECONDS, one after the other, starting
# from its seeds in tests/fuzz/HARNESS/. Fails if any harness crashed, hung
# (-timeout) or any sanitizer reported; what it found is saved as
# build/fuzz/HARNESS/crash-*, timeout-*, leak-* or oom-* and named below.
#
#   tests/fuzz/run.sh 30 proto recipe
#
# Per harness: build/fuzz/HARNESS/log (libFuzzer's output) and
# build/fuzz/HARNESS/corpus (inputs it found, kept for the next run).
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:?usage: run.sh SECONDS HARNESS...}
shift
failed=()
for h in "$@"; do
    bin=build/fuzz/bin/$h
    out=build/fuzz/$h
    [ -x "$bin" ] || { echo "fuzz: $bin is not built (make fuzz-build)" >&2; exit 2; }
    mkdir -p "$out/corpus"
    opts=(-max_total_time="$secs" -rss_limit_mb=4096 -max_len=65536
          -artifact_prefix="$out/" -print_final_stats=1)
    case $h in
        # a recipe may use up to 1 GiB (the sandbox's limit) before it fails, and
        # runs up to its instruction limit (about 5 s here) or its CPU-time
        # limit (20 s) before it is stopped
        recipe) timeout=40; opts+=(-malloc_limit_mb=3072 -dict=tests/fuzz/recipe.dict) ;;
        # a pserver in a thread per input; the harness itself waits 10 s at most
        server_*) timeout=30 ;;
        *) timeout=10 ;;
    esac
    opts+=(-timeout=$timeout)
    start=$(date +%s)
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
        "$bin" "${opts[@]}" "$out/corpus" "tests/fuzz/$h" > "$out/log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "fuzz: $h: ${execs:-?} runs in $(( $(date +%s) - start )) s, nothing found"
        continue
    fi
    failed+=("$h")
    echo "fuzz: $h FAILED (exit $rc); log: $out/log" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error:|fuzz harness:|ALARM|==[0-9]+== ERROR)' "$out/log" | head -5 >&2
    for a in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out/log"); do
        echo "fuzz: $h: the input is saved as $a; reproduce with: $bin -timeout=$timeout $a" >&2
    done
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} harness(es) found something: ${failed[*]} (see docs/fuzzing.md)" >&2
    exit 1
fi
