#!/usr/bin/env bash
# test/summary.sh LABEL RESULTS_FILE...: the closing line of `make test` and `.ci/run`, added up from the
# results files that test/catch_main.cpp's listener writes (Catch2's own counts of passed and failed test
# cases). Prints every failed test case by name, then "LABEL: N passed, M failed". A missing file means its
# test binary did not build, did not run or crashed: that is reported and counts as a failure.
# Exits 1 when anything failed or is missing, else 0.
set -uo pipefail
label=$1
shift
passed=0 failed=0 missing=0
for f in "$@"; do
    name=$(basename "$f" .txt)
    if [[ ! -s "$f" ]]; then
        echo "$label: $name: no results (the test binary did not build, did not run, or crashed)"
        missing=$((missing + 1))
        continue
    fi
    p=$(awk '$1 == "passed" { print $2 }' "$f")
    q=$(awk '$1 == "failed" { print $2 }' "$f")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${q:-0}))
    sed -n "s/^failed_case /$label: FAILED ($name): /p" "$f"
done
if ((missing)); then
    echo "$label: $passed passed, $failed failed, $missing test binaries without results"
else
    echo "$label: $passed passed, $failed failed"
fi
((failed == 0 && missing == 0))
