#!/usr/bin/env bash
# test/skip.sh RESULTS NAME NEED WHY: a make target's check that cannot run on this machine (NEED, one word, is
# missing: torch, nvcc, cuobjdump ...), as test/skip.h's PRISM_SKIP says it for a Catch2 test: prints
# "SKIPPED: NAME: WHY (needs NEED)" and writes the results file RESULTS with that skip for test/summary.sh; when
# NEED is one of the words of $PRISM_REQUIRE the skip is a failure instead ("FAILED: ..."), and it exits 1.
set -uo pipefail
results=$1 name=$2 need=$3 why=$4
mkdir -p "$(dirname "$results")"
if [[ " ${PRISM_REQUIRE:-} " == *" $need "* ]]; then
    echo "$name: FAILED: skipped, but PRISM_REQUIRE says this environment has $need: $why"
    printf 'passed 0\nfailed 1\nskipped 0\nfailed_case %s: skipped, but PRISM_REQUIRE has %s: %s\n' "$name" "$need" "$why" > "$results"
    exit 1
fi
echo "SKIPPED: $name: $why (needs $need)"
printf 'passed 0\nfailed 0\nskipped 1\nskipped_case %s: %s (needs %s)\n' "$name" "$why" "$need" > "$results"
