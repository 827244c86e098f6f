#!/usr/bin/env bash
# test/ptxas_check.sh LOG...: reads `nvcc -Xptxas -v` output and prints one line per kernel and architecture
# (registers, stack frame, spill stores / loads); exits 1 when any kernel spills (marked FAIL), 0 otherwise. A
# stack frame without spills (a local array the compiler could not keep in registers) is marked as a note. Used by `make test-ptxas`. Plain POSIX
# awk (Debian's default is mawk).
set -uo pipefail
awk '
/Compiling entry function/ {
    k = $0; sub(/.*function ./, "", k); sub(/. for .*/, "", k)
    a = $0; sub(/.* for ./, "", a); sub(/.$/, "", a)
    next
}
/bytes stack frame/ {
    split($0, w, " "); st = w[1]; ss = w[5]; sl = w[9]   # "N bytes stack frame, S bytes spill stores, L bytes spill loads"
    stack[k, a] = st; spill[k, a] = ss "/" sl; bad[k, a] = (ss + sl > 0); note[k, a] = (st > 0)
    next
}
/Used [0-9]+ registers/ {
    r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
    regs[k, a] = r; order[++n] = k SUBSEP a
}
END {
    fails = 0
    for (i = 1; i <= n; i++) {
        key = order[i]; split(key, p, SUBSEP)
        cmd = "c++filt " p[1]; name = p[1]; cmd | getline name; close(cmd); sub(/\(.*/, "", name)
        printf "%-48s %s  %3d registers  stack %s  spill %s%s\n", name, p[2], regs[key], stack[key], spill[key], bad[key] ? "  <-- FAIL: spills" : note[key] ? "  (note: stack frame)" : ""
        fails += bad[key]
    }
    if (n == 0) { print "ptxas_check: no kernels found in the log"; exit 1 }
    exit fails > 0
}' "$@"
