#!/usr/bin/env bash
# test/summary.sh LABEL RESULTS_FILE...: the closing line of `make test` and `.ci/run`, added up from the
# results files that test/catch_main.cpp's listener writes (Catch2's own counts of test cases that passed, failed
# and were skipped: test/skip.h), test/hf/test_hf.py writes (its checks) and test/skip.sh writes (a make target
# that could not run). Prints every failed test case and every skip by name, then
# "LABEL: N passed, M failed, K skipped". A missing file means its test binary did not build, did not run or
# crashed: that is reported and counts as a failure. A skip is not a failure here; a skip of what $PRISM_REQUIRE
# says the environment has was already counted as a failure by the test that skipped.
# Exits 1 when anything failed or is missing, else 0.
set -uo pipefail
label=$1
shift
passed=0 failed=0 skipped=0 missing=0
for f in "$@"; do
    name=$(basename "$f" .txt)
    if [[ ! -s "$f" ]]; then
        echo "$label: $name: no results (the test binary did not build, did not run, or crashed)"
        missing=$((missing + 1))
        continue
    fi
    p=$(awk '$1 == "passed" { print $2 }' "$f")
    q=$(awk '$1 == "failed" { print $2 }' "$f")
    k=$(awk '$1 == "skipped" { print $2 }' "$f")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${q:-0}))
    skipped=$((skipped + ${k:-0}))
    sed -n -e "s/^failed_case /$label: FAILED ($name): /p" -e "s/^skipped_case /$label: SKIPPED ($name): /p" "$f"
done
if ((missing)); then
    echo "$label: $passed passed, $failed failed, $skipped skipped, $missing test binaries without results"
else
    echo "$label: $passed passed, $failed failed, $skipped skipped"
fi
((failed == 0 && missing == 0))
