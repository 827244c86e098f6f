#!/usr/bin/env bash
# dev/gpu_bundle/check.sh BUNDLE MAX_MIB ALLOWED_LIBS SCRATCH FLA_WHEEL FLA_SHA256: make gpu-bundle-check's checks
# of a built bundle, on this machine: its size, the libraries ldd finds for every binary (each must match
# ALLOWED_LIBS, an extended regex of library names, and none may be missing), the newest glibc symbol version they
# need (printed: the GPU machine's glibc must be at least that), that the gdn stage's gdn_fla.py is there and its
# fla-core wheel is wheels/FLA_WHEEL with the pinned sha256 FLA_SHA256 (the Makefile's), and,
# without a GPU, that run.sh prints every stage's "skipped: no GPU" line and exits 0 within 30 s, and that the CUDA
# builds of the products fall back to the CPU: train_prism, eval_zeroshot and generate print their help, and
# train_prism trains tiny for 2 steps on the CPU engine (CI builds its products CPU_ONLY, so these are its runs of
# nvcc-built products). With a GPU the last checks are left to run.sh itself (8.5 minutes). Exits 1 on any failure,
# naming it.
set -uo pipefail
B=$1 max=$2 allowed=$3 scratch=$(realpath -m "$4") fla_wheel=$5 fla_sha256=$6
bad=0
fail() { echo "gpu-bundle-check: FAILED: $1"; bad=1; }
bytes=$(du -sb "$B" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ "$bytes" -gt $((max * 1048576)) ]; then fail "$B is $mib MiB, over $max MiB"; fi
glibc=""
for f in "$B"/bin/*; do
    libs=$(ldd "$f" 2>&1)
    if echo "$libs" | grep -q 'not found'; then fail "$(basename "$f"): $(echo "$libs" | grep 'not found' | tr -s ' \t' ' ')"; fi
    other=$(echo "$libs" | awk '{ print $1 }' | sed 's|.*/||' | grep -vE "^($allowed)\.so" | tr '\n' ' ')
    [ -z "$other" ] || fail "$(basename "$f") links $other(allowed: $allowed)"
    glibc="$glibc $(objdump -T "$f" 2>/dev/null | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1)"
done
# The gdn stage's Python side: gdn_fla.py and flash-linear-attention's wheel (no network on the GPU machine).
[ -f "$B/peer/gdn_fla.py" ] || fail "$B/peer/gdn_fla.py is missing (the gdn stage's fla comparison)"
if [ ! -f "$B/wheels/$fla_wheel" ]; then fail "no $B/wheels/$fla_wheel (the gdn stage's fla; make gpu-bundle downloads it)"
elif ! echo "$fla_sha256  $B/wheels/$fla_wheel" | sha256sum --check --status; then
    fail "$B/wheels/$fla_wheel has sha256 $(sha256sum "$B/wheels/$fla_wheel" | cut -c1-64), not the pinned $fla_sha256"
fi
others=$(ls "$B"/wheels 2>/dev/null | grep -vxF "$fla_wheel" | tr '\n' ' ')
[ -z "$others" ] || fail "$B/wheels/ holds other files: $others(run.sh unpacks every fla_core-*.whl there)"
newest=$(echo $glibc | tr ' ' '\n' | sort -uV | tail -1)
[ $bad = 0 ] && echo "gpu-bundle-check: $B: $mib MiB (at most $max); the $(ls "$B"/bin | wc -l) binaries' libraries (ldd) all allowed; newest glibc symbol they need: $newest"
if "$B/bin/gpu_info" > /dev/null 2>&1; then
    echo "gpu-bundle-check: this machine has a GPU: run bash $B/run.sh OUT for the bundle's full check (8.5 minutes)"
else
    rm -rf "$scratch"
    t0=$(date +%s%N)
    out=$(timeout 30 bash "$B/run.sh" "$scratch" 2>&1)
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    echo "$out" | sed 's/^/  run.sh: /'
    [ $rc = 0 ] || fail "run.sh without a GPU exited with status $rc"
    for s in "1 device" "2 tests" "3 tiny" "4 peer" "5 attention" "6 model" "7 sanitizer" "8 gdn"; do
        echo "$out" | grep -q "^$s: skipped: no GPU" || fail "run.sh printed no \"$s: skipped: no GPU\" line"
    done
    [ -s "$scratch/summary.txt" ] || fail "run.sh wrote no $scratch/summary.txt"
    [ $ms -lt 30000 ] || fail "run.sh without a GPU took $ms ms"
    [ $bad = 0 ] && echo "gpu-bundle-check: run.sh without a GPU: every stage skipped, exit 0, in $ms ms"
    for b in train_prism eval_zeroshot generate; do
        "$B/bin/$b" --help > "$scratch/$b.help" 2>&1 || fail "$b --help without a GPU exited with status $?"
    done
    log=$scratch/cpu_fallback.log
    (cd "$B" && OMP_NUM_THREADS=2 timeout 60 ./bin/train_prism -m tiny --steps 2 --val-every 0 -o "$scratch/tiny_cpu") \
        > "$log" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
        sed 's/^/  train_prism: /' "$log" | tail -5
        fail "train_prism -m tiny --steps 2 without a GPU exited with status $rc"
    elif ! grep -q '^engine: CPU' "$log"; then fail "train_prism without a GPU printed no \"engine: CPU\" line ($log)"
    elif ! grep -qE '^step +2/2 ' "$log"; then fail "train_prism without a GPU printed no step 2 ($log)"
    else
        echo "gpu-bundle-check: the CUDA builds without a GPU: train_prism, eval_zeroshot, generate --help;" \
            "train_prism -m tiny: $(grep -m1 -o '^engine: CPU[^(]*' "$log")and $(grep -E '^step +2/2 ' "$log" | cut -d'|' -f1-2)"
    fi
fi
exit $bad
