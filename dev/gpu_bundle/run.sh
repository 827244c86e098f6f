#!/usr/bin/env bash
# run.sh OUT [STAGE...]: the GPU bundle's one command (make gpu-bundle builds the folder this file sits in;
# docs/gpu.md, "The GPU bundle", says how to take it to a GPU machine). Eight stages, ordered so that a window cut
# short still returns the most valuable answers first: is the whole step right, how far is it from PyTorch, then the detail. Each stage runs
# under its own time limits and ends in one summary line; the limits, with 2 s to kill each of the 22 commands, add
# up to 511 s (8.5 minutes). Writes OUT/summary.txt (the summary lines, also printed) and at most 11 logs: device.log
# tests.log tiny.log peer.log bench_attention.log sdpa.log bench_model.log sanitizer.log bench_gdn.log gdn_fla.log
# hybrid.log. Runs, checkpoints and scratch go to a temporary folder, removed at the end.
#   1 device     device, driver and runtime; a one-line diagnosis when the driver is older than the runtime
#   2 tests      the native GPU tests, each group its own process (executor fragment layouts first, then kernels,
#                attention, whole model, decoder): a crash leaves the other groups standing
#   3 tiny       20 steps of `tiny` on the GPU (fails unless the log names the CUDA engine) against the CPU
#                reference's losses, then 5 more resumed from the GPU's checkpoint on the CPU
#   4 peer       ours against PyTorch (dev/peer/bench_peer.py and peer_torch.py, in the bundle's peer/: the same
#                model, weights and real-text tokens): 124M uniform and Prism at B 16, T 1024 against the eager peer (bf16 autocast, SDPA), two
#                alternating repeats; then 124M uniform against the torch.compile'd peer, if it compiles in its
#                limit. Each line ends in the ratio ours / PyTorch tokens/s; the first-step losses must agree
#   5 attention  bench_attention: T 1024 and 4096, head_dim 64 .. 1024, forward and backward TFLOP/s; then SDPA at
#                the same B, T, h and head_dim 64, 128, 256 (dev/peer/sdpa_bench.py: which backend SDPA chose, and the
#                speed ratio ours / SDPA of each)
#   6 model      bench_model on the bundled real-text tokens: 124M uniform, Prism, X at B 16, T 1024 (tokens/s,
#                MFU, memory against --plan, every op against its roofline), Prism / uniform
#   7 sanitizer  compute-sanitizer memcheck, racecheck, synccheck on small attention forward/backward and one
#                small model step (the tests tagged [sanitize]); a runtime that refuses the device is reported as
#                such ("NOT RUN: ... refused"), not as a failure of our code
#   8 gdn        the chunked gated delta rule (issue 53): bench_gdn (our chunk kernels, forward + backward, T 1024 ..
#                16384, head_dim 64/128/256, against our flash attention at the same shapes: att/gdn ratios), then
#                flash-linear-attention's chunk_gated_delta_rule (dev/peer/gdn_fla.py in the bundle's peer/,
#                the fla-core wheel of wheels/ unpacked onto PYTHONPATH in the temporary folder) on bench_gdn's
#                dumped inputs (agreement with ours and with a float64 recurrence) and timed at the same shapes
#                (ours / fla ratios); then 124M steps of the 3:1 hybrid (--mixer gdn:3:1 --match mlp) against the
#                all-attention 124M (train_prism, B 16, T 1024, tok/s; each run must name the CUDA engine). A part
#                that skips says why: fla without torch or a GPU visible to it; the hybrid step without a GPU
#                (BUNDLE_FORCE=1), which runs one step of tiny's hybrid on train_prism's CPU fall-back instead
#   9 big        (only when asked for: run.sh OUT 9) one step of 757M and of 2B X at T 4096 at the largest B that
#                fits, memory against --plan
# Without a GPU (stage 1 finds none) every stage prints "skipped: no GPU" and the script exits 0. STAGE: run
# only these stage numbers. BUNDLE_FORCE=1 runs the stages even without a GPU (to try the script itself on a CPU
# machine: the binaries then fall back to the CPU or fail, and the stages say so; the peer stage then runs `tiny`
# at B 4, T 64 against the CPU peer, fp32). Exit status: 0 when no stage failed, 1 otherwise.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -lt 1 ]; then
    echo "usage: $0 OUT_DIR [STAGE...]   (writes OUT_DIR/summary.txt and the stage logs)" >&2
    exit 2
fi
mkdir -p "$1" || { echo "run.sh: cannot create $1" >&2; exit 2; }
OUT=$(cd "$1" && pwd)
shift
STAGES=${*:-1 2 3 4 5 6 7 8}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/prism-bundle.XXXXXX") || { echo "run.sh: no temporary folder" >&2; exit 2; }
trap 'rm -rf "$WORK"' EXIT
cd "$HERE" || exit 2
BIN=$HERE/bin
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc 2>/dev/null || echo 4)}
: > "$OUT/summary.txt"
failed=0
t_start=$(date +%s)

say() { echo "$1" | tee -a "$OUT/summary.txt"; }
fail() { failed=1; say "$1"; }
want() { [[ " $STAGES " == *" $1 "* ]]; }
# One command under a limit; its output appended to a log. Returns the command's status (124: the limit).
run_logged() {  # LIMIT LOG CMD...
    local limit=$1 log=$2
    shift 2
    echo "\$ $*" >> "$log"
    timeout --signal=TERM --kill-after=2 "$limit" "$@" >> "$log" 2>&1
}
status_word() {  # STATUS -> PASS / TIMEOUT / CRASH (signal) / FAIL (status)
    case $1 in
        0) echo PASS ;;
        124 | 137) echo "TIMEOUT" ;;
        13[0-9] | 1[4-5][0-9]) echo "CRASH (signal $(($1 - 128)))" ;;
        *) echo "FAIL (status $1)" ;;
    esac
}

# The CUDA toolkit's libraries (cuBLASLt) where the binaries' rpath does not find them: the usual folders, then
# the NVIDIA wheels of a Python installation.
if ! ldd "$BIN/train_prism" 2>/dev/null | grep -q 'libcublasLt.*=> /'; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/*/lib \
             $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null); do
        if ls "$d"/libcublasLt.so.* > /dev/null 2>&1; then export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; break; fi
    done
fi

# ---- 1. device --------------------------------------------------------------------------------------------
gpu=0
{
    echo "bundle: $(cat "$HERE/BUILD_INFO" 2>/dev/null)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /'
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    ldd "$BIN/train_prism" 2>&1 | grep -E 'not found|cublas' | sed 's/^/ldd train_prism: /'
} > "$OUT/device.log" 2>&1
info=$(timeout 20 "$BIN/gpu_info" 2>&1)
rc=$?
real_gpu=$([ $rc = 0 ] && echo 1 || echo 0)  # BUNDLE_FORCE=1 sets gpu below, not this
echo "gpu_info (status $rc): $info" >> "$OUT/device.log"
if want 1; then
    case $rc in
        0) say "1 device: $info"; gpu=1 ;;
        3) say "1 device: skipped: no GPU (${info#no GPU: })" ;;
        4) fail "1 device: FAIL: $info" ;;
        124) fail "1 device: FAIL: gpu_info did not answer in 20 s (a hung driver?)" ;;
        *) fail "1 device: FAIL: ${info:-gpu_info exited with status $rc (see device.log)}" ;;
    esac
else
    [ $rc = 0 ] && gpu=1
fi
[ "${BUNDLE_FORCE:-0}" = 1 ] && gpu=1
skip() { say "$1: skipped: no GPU"; }

# ---- 2. tests, one process per group ------------------------------------------------------------------------
if want 2; then
    if [ $gpu = 0 ]; then skip "2 tests"; else
        : > "$OUT/tests.log"
        line="2 tests:"
        deadline=$(($(date +%s) + 60))
        for g in "executor:[executor]" "kernels:[kernels]~[model]~[decode]" "attention:[attention]~[executor]" \
                 "model:[model]" "decoder:[decode]"; do
            name=${g%%:*} tags=${g#*:}
            left=$((deadline - $(date +%s)))
            if [ $left -lt 8 ]; then line="$line $name NOT RUN (stage time up);"; failed=1; continue; fi
            echo "==== $name: $tags" >> "$OUT/tests.log"
            run_logged $((left - 2 < 40 ? left - 2 : 40)) "$OUT/tests.log" "$BIN/gpu_tests" "$tags"
            st=$?
            counts=$(tail -5 "$OUT/tests.log" | grep -oE 'All tests passed \([0-9]+ assertions in [0-9]+ test cases\)|test cases: [^|]*\|[^|]*\|[^|]*failed' | tail -1)
            [ $st = 0 ] || failed=1
            line="$line $name $(status_word $st)${counts:+ ($counts)};"
        done
        say "${line%;}"
    fi
fi

# ---- 3. tiny on the GPU against the CPU, and a GPU checkpoint resumed on the CPU ------------------------------
if want 3; then
    if [ $gpu = 0 ]; then skip "3 tiny"; else
        L=$OUT/tiny.log
        : > "$L"
        run_logged 20 "$L" "$BIN/train_prism" -m tiny --steps 25 --stop-after 20 -o "$WORK/tiny_gpu"
        g=$?
        gpu_engine=$(grep -m1 '^engine: CUDA' "$L")
        run_logged 20 "$L" "$BIN/train_prism" --cpu -m tiny --steps 25 -o "$WORK/tiny_cpu"
        c=$?
        run_logged 10 "$L" "$BIN/train_prism" --cpu -m tiny --steps 25 --resume -o "$WORK/tiny_gpu"
        r=$?
        # The step lines of each run ("step    N/25 | loss X"), by the order the runs appended them to the log.
        losses() { awk -v run="$1" '/^\$ /{ n++ } n == run && /^step +[0-9]+\/25 \| loss/ { split($2, a, "/"); print a[1], $5 }' "$L"; }
        worst=$(awk 'NR == FNR { cpu[$1] = $2; next } ($1 in cpu) { d = $2 - cpu[$1]; if (d < 0) d = -d; if (d > m) m = d; n++ }
                     END { if (n == 25) printf "%.4f", m; else printf "only %d of 25 steps", n }' <(losses 2) <(losses 1; losses 3))
        last_g=$(losses 1 | awk '$1 == 20 { print $2 }') last_c=$(losses 2 | awk '$1 == 25 { print $2 }')
        last_r=$(losses 3 | awk '$1 == 25 { print $2 }')
        ok=PASS
        if [ -z "$gpu_engine" ]; then ok="FAIL: the GPU run did not name the CUDA engine (it fell back to the CPU?)"
        elif [ $g != 0 ] || [ $c != 0 ] || [ $r != 0 ]; then ok="FAIL: status GPU $g, CPU $c, resume $r"
        elif ! awk -v w="$worst" 'BEGIN { exit !(w + 0 == w && w <= 0.1) }'; then ok="FAIL: losses differ by $worst (> 0.1)"
        fi
        [ "$ok" = PASS ] || failed=1
        say "3 tiny $ok: GPU steps 1-20 and CPU-resumed 21-25 vs the CPU reference, worst |loss difference| $worst (<= 0.1, bf16 vs fp32); step 20 GPU ${last_g:-?}, step 25 resumed ${last_r:-?} vs CPU ${last_c:-?}; ${gpu_engine:-no CUDA engine line}"
    fi
fi

# ---- 4. peer: ours against PyTorch on the same model, weights and tokens ---------------------------------------
# dev/peer/bench_peer.py (the bundle's peer/) prints one line per model and arm, ending in "ours / PyTorch ARM median [min, max]"; its exit
# status is 1 when a first-step loss differs beyond bf16's tolerance (then the ratio compares two computations).
if want 4; then
    if [ $gpu = 0 ]; then skip "4 peer"; else
        P=$OUT/peer.log
        : > "$P"
        if ! torch=$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "cpu")' 2>&1); then
            fail "4 peer: FAIL: python3 cannot import torch ($(echo "$torch" | tail -1))"
        else
            tok=$(ls data/default/*_train_*.bin | head -1)
            peer=(python3 -u peer/bench_peer.py --prism "$BIN/train_prism" --export "$BIN/export" --train "$tok" --keep "$WORK/peer")
            if [ "${torch#* }" = cuda ]; then
                eager=(--device cuda --models 124M@16x1024,124M:prism@16x1024 --repeats 2 --steps 6 --warmup-steps 2)
                compiled=(--device cuda --models 124M@16x1024 --repeats 1 --steps 6 --warmup-steps 3 --arms compiled)
                limits=(70 45)
            else  # BUNDLE_FORCE=1 without a GPU: the same path on the CPU peer, small, with CPU-sized limits
                eager=(--device cpu --models tiny@4x64 --repeats 2 --steps 3 --warmup-steps 1)
                compiled=(--device cpu --models tiny@4x64 --repeats 1 --steps 3 --warmup-steps 1 --arms compiled)
                limits=(300 300)
            fi
            run_logged ${limits[0]} "$P" "${peer[@]}" "${eager[@]}"
            st1=$?
            run_logged ${limits[1]} "$P" "${peer[@]}" "${compiled[@]}"
            st2=$?
            ratios() { grep -E "^$1 .*ours / PyTorch $2" "$P" | tail -1 | sed -E "s/.*ours \/ PyTorch $2 ([^ ]+).*/\1/"; }
            first() { grep -E "^$1 .*PyTorch $2" "$P" | tail -1 | grep -oE 'first-step loss ours [0-9.]+ PyTorch [0-9.]+'; }
            m1=${eager[3]%%,*} m2=${eager[3]#*,}
            line="4 peer eager $(status_word $st1), compiled $( [ $st2 = 124 ] || [ $st2 = 137 ] && echo "did not compile and run in ${limits[1]} s" || status_word $st2) (torch $torch):"
            line="$line $m1 ours / PyTorch eager $(ratios "$m1" eager)"
            [ "$m2" != "$m1" ] && line="$line; $m2 ours / PyTorch eager $(ratios "$m2" eager)"
            line="$line; ${compiled[3]} ours / PyTorch compiled $(ratios "${compiled[3]}" compiled)"
            line="$line; $(first "$m1" eager)"
            [ $st1 = 0 ] || failed=1
            [ $st2 = 0 ] || [ $st2 = 124 ] || [ $st2 = 137 ] || failed=1
            say "$line"
        fi
    fi
fi

# ---- 5. attention benchmark, and SDPA at the same shapes -------------------------------------------------------
if want 5; then
    if [ $gpu = 0 ]; then skip "5 attention"; else
        : > "$OUT/bench_attention.log"
        run_logged 30 "$OUT/bench_attention.log" "$BIN/bench_attention" --T 1024,4096 --hd 64,72,128,256,512,1024 --reps 5
        st=$?
        row() { awk -v T="$1" -v hd="$2" '$1 == T && $2 == hd { printf "%s/%s", $6, $8 }' "$OUT/bench_attention.log"; }
        line="5 attention $(status_word $st) fwd/bwd TF/s at T 4096:"
        for hd in 64 72 128 256 512 1024; do line="$line hd $hd $(row 4096 $hd);"; done
        line="$line T 1024 hd 64 $(row 1024 64)"
        : > "$OUT/sdpa.log"
        run_logged 25 "$OUT/sdpa.log" python3 peer/sdpa_bench.py --ours "$OUT/bench_attention.log" --hd 64,128,256 --reps 5
        st2=$?
        sd=$(grep -E '^T 4096 hd' "$OUT/sdpa.log" | sed -E 's/^T 4096 hd ([0-9]+).*SDPA \(([^)]*)\).*speed ours\/SDPA fwd ([0-9.]+x) bwd ([0-9.]+x)/hd \1 \2 \3\/\4/' | paste -sd, | sed 's/,/; /g')
        line="$line | SDPA $(status_word $st2), speed ours/SDPA fwd/bwd at T 4096: ${sd:-n/a}"
        [ $st = 0 ] && [ $st2 = 0 ] || failed=1
        say "$line"
    fi
fi

# ---- 6. model benchmark --------------------------------------------------------------------------------------
meas() { grep -E "^$1 +measured" "$OUT/bench_model.log" | tail -1 | sed -E 's/ +measured:/:/'; }
if want 6; then
    if [ $gpu = 0 ]; then skip "6 model"; else
        : > "$OUT/bench_model.log"
        tok=$(ls data/default/*_train_*.bin | head -1)
        run_logged 50 "$OUT/bench_model.log" "$BIN/bench_model" --tokens "$tok" -b 16 -t 1024 --steps 5 \
            --models 124M,124M:prism,124M:x
        st1=$?
        tps() { meas "$1" | grep -oE '[0-9]+ tok/s' | awk '{ print $1 }'; }
        u=$(tps 124M) p=$(tps 124M:prism)
        frac=$([ -n "$u" ] && [ -n "$p" ] && awk -v p="$p" -v u="$u" 'BEGIN { printf "%.3f", p / u }')
        line="6 model $(status_word $st1): $(meas 124M); $(meas 124M:prism); $(meas 124M:x); Prism/uniform tok/s ${frac:-n/a} (target >= 0.97)"
        [ $st1 = 0 ] || failed=1
        say "$line"
    fi
fi

# ---- 7. compute-sanitizer ------------------------------------------------------------------------------------
if want 7; then
    if [ $gpu = 0 ]; then skip "7 sanitizer"; else
        CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | head -1)
        if [ -z "$CS" ]; then fail "7 sanitizer: FAIL: compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; else
            : > "$OUT/sanitizer.log"
            line="7 sanitizer:"
            for tool in memcheck racecheck synccheck; do
                echo "==== $tool" >> "$OUT/sanitizer.log"
                before=$(wc -l < "$OUT/sanitizer.log")
                run_logged 14 "$OUT/sanitizer.log" "$CS" --tool "$tool" --error-exitcode 9 "$BIN/gpu_tests" "[sanitize]"
                st=$?
                mine=$(tail -n +"$before" "$OUT/sanitizer.log")
                found=$(echo "$mine" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1 | sed 's/^=* *//')
                refused=$(echo "$mine" | grep -m1 -iE 'device not supported|not supported on this (device|platform)|unsupported (device|GPU)' | sed 's/^=* *//')
                if [ -n "$refused" ] && [ $st != 0 ]; then line="$line $tool NOT RUN: the runtime refused the device (\"$refused\");"
                elif [ $st = 0 ]; then line="$line $tool clean${found:+ ($found)};"
                else failed=1; line="$line $tool $( [ $st = 9 ] && echo "ERRORS" || status_word $st)${found:+ ($found)};"; fi
            done
            say "${line%;}"
        fi
    fi
fi

# ---- 8. gdn: our chunked delta rule against flash-linear-attention and our attention; the hybrid step ---------
# bench_gdn's shapes run shortest T first, fla's too under its own budget, so a limit cuts the longest shapes.
if want 8; then
    if [ $gpu = 0 ]; then skip "8 gdn"; else
        G=$OUT/bench_gdn.log F=$OUT/gdn_fla.log
        : > "$G"
        : > "$F"
        mkdir -p "$WORK/gdn_dumps"
        if [ $real_gpu = 0 ]; then  # BUNDLE_FORCE=1: bench_gdn has no CPU fall-back (build/bench_gdn_cpu is that)
            ours="ours skipped: no GPU (bench_gdn runs its kernels on one only)"
        else
            run_logged 16 "$G" "$BIN/bench_gdn" --dump "$WORK/gdn_dumps"
            st=$?
            [ $st = 0 ] || failed=1
            row() { awk -v T="$1" -v hd="$2" '$1 == T && $2 == hd { printf "%s", $11 }' "$G"; }
            ours="ours $(status_word $st), att/gdn fwd+bwd at T 4096:"
            for hd in 64 128 256; do ours="$ours hd $hd $(row 4096 $hd)"; done
            ours="$ours, T 16384 hd 128 $(row 16384 128)"
        fi
        if ! run_logged 5 "$F" python3 -c 'import zipfile, sys; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
                "$WORK/fla" wheels/fla_core-*.whl; then
            fla="fla FAIL: cannot unpack wheels/fla_core-*.whl (see gdn_fla.log)"
            failed=1
        else
            PYTHONPATH=$WORK/fla${PYTHONPATH:+:$PYTHONPATH} run_logged 36 "$F" python3 -u peer/gdn_fla.py \
                --ours "$G" --dumps "$WORK/gdn_dumps" --budget 28
            st2=$?
            case $st2 in
                3) fla="fla skipped: no GPU visible to torch" ;;
                5) fla="fla skipped: python3 cannot import torch" ;;
                4) fla="fla FAIL: $(grep -m1 'cannot import' "$F")"; failed=1 ;;
                *) [ $st2 = 0 ] || failed=1
                   fla="fla $(status_word $st2): $(grep -m1 '^summary:' "$F" | sed 's/^summary: //')" ;;
            esac
        fi
        # the hybrid's step against all-attention's: the median tok/s of steps 2..6 of one run each, each run's log
        # naming the CUDA engine (a fall-back to the CPU would time the wrong thing). Without a GPU (BUNDLE_FORCE=1)
        # no step is timed: one step of tiny's hybrid through the bundle's train_prism (the CUDA build's fall-back
        # to the CPU engine) shows that it takes --mixer and runs gdn layers.
        H=$OUT/hybrid.log
        : > "$H"
        engine() { awk -v run="$1" '/^==== /{ n++ } n == run && /^engine: / { print; exit }' "$H"; }
        if [ $real_gpu = 0 ]; then
            echo "==== hybrid probe (no GPU)" >> "$H"
            run_logged 12 "$H" "$BIN/train_prism" -m tiny --mixer gdn:3:1 --match mlp --steps 1 --val-every 0 \
                --sample-every 0 -o "$WORK/hybrid_probe"
            sp=$?
            [ $sp = 0 ] || failed=1
            e=$(engine 1 | awk '{ print $2 }')  # "engine: CPU reference (...)"
            hyb="hybrid step skipped: no GPU (tiny's 3:1 hybrid, 1 step on train_prism's ${e:-unnamed} engine: $(status_word $sp))"
        else
            step=(-m 124M -b 16 -t 1024 --total-batch 16384 --steps 6 --val-every 0 --sample-every 0)
            echo "==== hybrid step" >> "$H"
            run_logged 12 "$H" "$BIN/train_prism" "${step[@]}" --mixer gdn:3:1 --match mlp -o "$WORK/hybrid"
            sh=$?
            echo "==== all-attention step" >> "$H"
            run_logged 12 "$H" "$BIN/train_prism" "${step[@]}" -o "$WORK/attention"
            sa=$?
            median() { awk -v run="$1" '/^==== /{ n++ } n == run && /^step +[2-6]\/6 / { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") print $i }' "$H" | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
            th=$(median 1) ta=$(median 2)
            r=$([ -n "$th" ] && [ -n "$ta" ] && awk -v h="$th" -v a="$ta" 'BEGIN { printf "%.3f", h / a }')
            [ $sh = 0 ] && [ $sa = 0 ] || failed=1
            hyb="hybrid 3:1 $(status_word $sh) ${th:-?} tok/s, all-attention $(status_word $sa) ${ta:-?} tok/s, hybrid/attention ${r:-n/a}"
            for run in 1 2; do
                e=$(engine $run)
                if [[ "$e" != "engine: CUDA"* ]]; then
                    failed=1
                    hyb="$hyb; FAIL: the $([ $run = 1 ] && echo hybrid || echo all-attention) run did not name the CUDA engine (${e:-no engine line})"
                fi
            done
        fi
        say "8 gdn: $ours | $fla | $hyb"
    fi
fi

# ---- 9. big models' memory (only when asked for) ---------------------------------------------------------------
if want 9; then
    if [ $gpu = 0 ]; then skip "9 big"; else
        : >> "$OUT/bench_model.log"
        tok=$(ls data/default/*_train_*.bin | head -1)
        run_logged 65 "$OUT/bench_model.log" "$BIN/bench_model" --tokens "$tok" -b 0 -t 4096 --steps 1 --models 757M,2B:x
        st2=$?
        [ $st2 = 0 ] || failed=1
        say "9 big $(status_word $st2): $(meas 757M); $(meas 2B:x)"
    fi
fi

say "bundle: $(( $(date +%s) - t_start )) s, $([ $failed = 0 ] && echo "no stage failed" || echo "FAILED (see the lines above and the logs in $OUT)")"
exit $failed
