#!/usr/bin/env bash
# test/attention_ptxas.sh LOG...: reads the `nvcc -Xptxas -v` output of test/attention_ptxas.cu (one log per
# GPU arch), prints each attention kernel instance's registers and spills, and fails if any instance spills
# or keeps a stack frame (local memory: a register array indexed at run time, just as slow as a spill).
set -euo pipefail
awk '
/Compiling entry function/ {
    k = $0; sub(/.*function .(_Z[0-9]+)?/, "", k); sub(/. for .*/, "", k)
    if (match(k, /I[0-9]+Att[A-Za-z0-9]+E/)) k = substr(k, 1, RSTART - 1) "<" substr(k, RSTART + 2 + (substr(k, RSTART + 2, 1) ~ /[0-9]/), RLENGTH - 3 - (substr(k, RSTART + 2, 1) ~ /[0-9]/)) ">"
    sub(/EvP.*|Pf.*/, "", k)
    arch = $NF; gsub(/\047/, "", arch)
}
/bytes stack frame/ { stack = $1; st = $5; ld = $9 }
/Used [0-9]+ registers/ {
    printf "  %-6s %-44s %4d registers, %s bytes stack, %s bytes spill stores, %s bytes spill loads\n", arch, k, $5, stack, st, ld
    n++
    if (stack + st + ld > 0) bad++
}
END {
    if (n == 0) { print "attention ptxas check: no kernels found in the log"; exit 1 }
    if (bad) { printf "attention ptxas check: FAILED: %d of %d kernel instances spill or use a stack frame\n", bad, n; exit 1 }
    printf "attention ptxas check: %d kernel instances (sm_80, sm_90), no spills, no stack\n", n
}' "$@"
