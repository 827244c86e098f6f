#!/bin/bash
# dev/redteam.sh: a red-team campaign against train_prism, prepare_shards and the inspection tools (issue 19):
# filesystem oddities, signals at every phase of a run, launcher behaviour; issue 34's outputs aimed at inputs,
# stops during evals, empty and root paths, the live bridge's hostile files, near-linear planning; issue 43's
# bounded readers, two spellings of one output, a flag taken as a value, SIGPIPE, a grid's bound, a resume's
# identity and lineage, data found from anywhere; issue 50's refusals that leave OUT as it was, a hand-edited record, a
# branch killed at each of its renames. Each case prints one line,
#   PASS name: what happened        (handled as the README promises)
#   FAIL name: what happened        (a fault: data lost, a hang, a silent wrong result, a misleading word)
#   SKIP name: why                  (a prerequisite is missing: mpirun, the tokenizer)
# then the counts. Tiny models and data, OMP_NUM_THREADS=1; a few minutes on two cores. Needs train_prism,
# build/prepare_shards, build/prepare_eval, generate, analyze, report, eval_zeroshot, export, import, study built
# (CPU_ONLY=1 make ...) and python3 (for writing shards and driving tools/prism_live.py; the C++ tools never need it).
#   bash dev/redteam.sh [--results FILE] [FILTER]     only the cases whose name contains FILTER
# --results FILE: also the counts and each failed or skipped case, as test/summary.sh reads them (make test-redteam,
# which CI runs); a skip for a prerequisite that $PRISM_REQUIRE names (mpirun; default-corpus: the tokenizer file
# setup.sh fetches with the corpus) is a failure there, as test/skip.sh makes it.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export OMP_NUM_THREADS=1
W=$(mktemp -d /tmp/prism_redteam_XXXXXX)
RESULTS=""
if [ "${1:-}" = --results ]; then RESULTS=${2:?--results needs a file}; shift 2; fi
FILTER=${1:-}
pass=0 fail=0 skip=0
cases=""  # failed_case and skipped_case lines for --results
MAIN=$BASHPID  # a background child killed before its exec would run the EXIT trap too: only the script's own
trap '[ "$BASHPID" = "$MAIN" ] && rm -rf "$W"' EXIT

say() {  # say PASS|FAIL name text, or say SKIP name text NEED (NEED: what is missing, as $PRISM_REQUIRE names it)
    local what=$1
    if [ "$what" = SKIP ] && [[ " ${PRISM_REQUIRE:-} " == *" $4 "* ]]; then
        what=FAIL
        set -- FAIL "$2" "skipped, but PRISM_REQUIRE says this environment has $4: $3"
    fi
    case $what in
        PASS) pass=$((pass + 1)) ;;
        FAIL) fail=$((fail + 1)) cases+="failed_case redteam $2: ${3:0:300}"$'\n' ;;
        SKIP) skip=$((skip + 1)) cases+="skipped_case redteam $2: $3 (needs $4)"$'\n' ;;
    esac
    printf '%s %s: %s\n' "$what" "$2" "$3"
}
want() { [ -z "$FILTER" ] || [[ $1 == *"$FILTER"* ]]; }
# check NAME CONDITION TEXT: PASS when the shell condition holds
check() { if eval "$2"; then say PASS "$1" "$3"; else say FAIL "$1" "$3"; fi; }
lastline() { tail -n 1 "$1" | cut -c1-220; }
one_error() { [ "$(grep -c 'error:' "$1")" = 1 ] && tail -n 1 "$1" | grep -q 'error:'; }

python3 - "$W" <<'EOF'
import struct, sys, random
d = sys.argv[1]
def shard(path, toks, setid=0):
    h = [20240520, 1, len(toks)] + [0] * 253
    if setid:
        h[3] = 0x54455350; h[4] = setid & 0xffffffff; h[5] = setid >> 32
    with open(path, 'wb') as f:
        f.write(struct.pack('<256I', *h)); f.write(struct.pack('<%dH' % len(toks), *toks))
r = random.Random(7)
tok = lambda n: [(i * 7) % 256 if r.random() > 0.2 else r.randrange(256) for i in range(n)]
shard(d + '/syn_val_000000.bin', tok(4000)); shard(d + '/syn_train_000001.bin', tok(36000))
shard(d + '/mix_val_000000.bin', tok(4000), 0x1111); shard(d + '/mix_train_000001.bin', tok(36000), 0x2222)
shard(d + '/short_train_000001.bin', tok(36000))
with open(d + '/short_train_000001.bin', 'r+b') as f: f.truncate(5000)
EOF
TP="$ROOT/train_prism --vocab 256 --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --lr 1e-2 --val-every 10 --val-tokens 256 --sample-every 0"
DATA="--train $W/syn_train_*.bin --val $W/syn_val_*.bin"
run() { local out=$1; shift; $TP $DATA -o "$out" "$@"; }
# bg LOG CMD...: starts CMD in the background, sets $pid
bg() { local log=$1; shift; "$@" > "$log" 2>&1 & pid=$!; }
# wait_for CONDITION [SECONDS]: polls every 10 ms
wait_for() { local n=0 max=$(( ${2:-30} * 100 )); while ! eval "$1" && [ $n -lt $max ]; do sleep 0.01; n=$((n + 1)); done; }
logged() { [ "$(cat "$1/log.jsonl" 2>/dev/null | wc -l)" -ge "$2" ]; }
catches_term() { local m; m=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2> /dev/null); [ -n "$m" ] && (( (16#$m >> 14) & 1 )); }
resumable() { [ -f "$1/latest" ] && [ -f "$1/$(cat "$1/latest")/model.bin" ] && run "$1" --steps 100000 --resume --allow-batch-change --stop-after 1 > /dev/null 2>&1; }

# A finished run to copy from and to point links at.
run "$W/base" --steps 2 > /dev/null 2>&1 || { echo "cannot train at all; build first"; exit 1; }
BASE_SUM=$(cd "$W/base" && md5sum step_00000002/* model.bin latest)
base_intact() { [ "$(cd "$W/base" && md5sum step_00000002/* model.bin latest 2>&1)" = "$BASE_SUM" ]; }
fresh() { rm -rf "$1"; mkdir -p "$1"; }

# ---------------------------------------------------------------- filesystem oddities
if want fs-out-file; then echo x > "$W/ofile"; run "$W/ofile" --steps 1 > "$W/o" 2>&1; check fs-out-file "one_error $W/o" "$(lastline "$W/o")"; fi
if want fs-out-proc; then run /proc/prism_out --steps 1 > "$W/o" 2>&1; check fs-out-proc "one_error $W/o" "$(lastline "$W/o")"; fi
if want fs-out-symlink; then rm -rf "$W/real"; mkdir "$W/real"; ln -sfn "$W/real" "$W/olink"; run "$W/olink" --steps 1 > "$W/o" 2>&1
    check fs-out-symlink "[ -f $W/real/step_00000001/model.bin ]" "an OUT that is a link to a directory is used as that directory (the user's choice)"; fi
for kind in dir symlink empty huge; do
    want "fs-latest-$kind" || continue
    fresh "$W/l"; run "$W/l" --steps 1 > /dev/null 2>&1; rm -f "$W/l/latest"
    case $kind in dir) mkdir "$W/l/latest" ;; symlink) ln -s "$W/base/latest" "$W/l/latest" ;; empty) : > "$W/l/latest" ;;
                  huge) head -c 1000000 /dev/urandom > "$W/l/latest" ;; esac
    timeout 20 $TP $DATA -o "$W/l" --steps 3 --resume > "$W/o" 2>&1
    check "fs-latest-$kind" "one_error $W/o && [ -d $W/l/step_00000001 ]" "$(lastline "$W/o")"
done
if want fs-model-link; then fresh "$W/m"; ln -s "$W/base/model.bin" "$W/m/model.bin"; run "$W/m" --steps 1 > "$W/o" 2>&1; a=$(lastline "$W/o")
    run "$W/m" --steps 1 --overwrite > "$W/o2" 2>&1; b=$(lastline "$W/o2")
    check fs-model-link "one_error $W/o && one_error $W/o2 && base_intact" "fresh: $a | --overwrite: $b"; fi
for kind in fifo zero full dir; do
    want "fs-log-$kind" || continue
    fresh "$W/g"; case $kind in fifo) mkfifo "$W/g/log.jsonl" ;; zero) ln -s /dev/zero "$W/g/log.jsonl" ;;
                                  full) ln -s /dev/full "$W/g/log.jsonl" ;; dir) mkdir "$W/g/log.jsonl" ;; esac
    timeout 20 $TP $DATA -o "$W/g" --steps 2 > "$W/o" 2>&1; rc=$?
    check "fs-log-$kind" "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"
done
for kind in fifo dir; do
    want "fs-lock-$kind" || continue
    fresh "$W/k"; if [ $kind = fifo ]; then mkfifo "$W/k/lock"; else mkdir "$W/k/lock"; fi
    timeout 20 $TP $DATA -o "$W/k" --steps 2 > "$W/o" 2>&1; rc=$?
    check "fs-lock-$kind" "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"
done
if want fs-step-file; then fresh "$W/f"; echo mine > "$W/f/step_00000007"; run "$W/f" --steps 1 > "$W/o" 2>&1
    check fs-step-file "one_error $W/o && [ \"\$(cat $W/f/step_00000007)\" = mine ]" "$(lastline "$W/o")"; fi
if want fs-inner-link; then fresh "$W/i"; run "$W/i" --steps 5 --stop-after 3 --ckpt-every 1 --keep 3 > /dev/null 2>&1; rm "$W/i/step_00000001/model.bin"
    ln -s "$W/base/step_00000002/model.bin" "$W/i/step_00000001/model.bin"; run "$W/i" --steps 5 --resume --ckpt-every 1 --keep 1 > "$W/o" 2>&1 || true
    check fs-inner-link "base_intact && [ ! -e $W/i/step_00000001 ]" "a link inside a pruned checkpoint is unlinked, its target kept"; fi
if want fs-inner-subdir; then fresh "$W/s"; run "$W/s" --steps 3 --stop-after 1 > /dev/null 2>&1; mkdir "$W/s/step_00000001/mine"
    run "$W/s" --steps 3 --resume --ckpt-every 1 --keep 1 > "$W/o" 2>&1
    check fs-inner-subdir "[ -d $W/s/step_00000001/mine ] && grep -q 'not pruned' $W/o" "$(grep -m1 'not pruned' "$W/o" | cut -c1-160)"; fi
if want fs-step-link; then fresh "$W/sl"; run "$W/sl" --steps 3 --stop-after 1 > /dev/null 2>&1; ln -s "$W/base/step_00000002" "$W/sl/step_00000000"
    run "$W/sl" --steps 3 --resume --ckpt-every 1 --keep 1 > /dev/null 2>&1; run "$W/sl" --steps 1 --overwrite > /dev/null 2>&1
    check fs-step-link "base_intact && [ ! -L $W/sl/step_00000000 ]" "pruning skips a link under a checkpoint name, --overwrite unlinks it, the target is whole"; fi
for t in step_00000009.tmp latest.tmp model.bin.tmp log.jsonl.tmp; do
    want "fs-leftover-$t" || continue
    fresh "$W/t"; run "$W/t" --steps 2 --stop-after 1 > /dev/null 2>&1; echo precious > "$W/precious"
    if [ $t = step_00000009.tmp ]; then mkdir -p "$W/pdir"; echo precious > "$W/pdir/model.bin"; ln -s "$W/pdir" "$W/t/$t"
    else ln -s "$W/precious" "$W/t/$t"; fi
    run "$W/t" --steps 2 --resume > "$W/o" 2>&1; rc=$?
    check "fs-leftover-$t" "[ $rc = 0 ] && [ \"\$(cat $W/precious)\" = precious ] && { [ $t != step_00000009.tmp ] || [ -f $W/pdir/model.bin ]; }" "a link left as $t: unlinked, its target untouched (exit $rc)"
done
if want fs-shard-dir; then run "$W/x" --steps 1 --train "$W" > "$W/o" 2>&1; check fs-shard-dir "one_error $W/o" "$(lastline "$W/o")"; fi
if want fs-shard-fifo; then rm -f "$W/ff_train_000001.bin"; mkfifo "$W/ff_train_000001.bin"
    timeout 20 $TP --train "$W/ff_train_*.bin" --val-every 0 -o "$W/x" --steps 1 > "$W/o" 2>&1; rc=$?
    check fs-shard-fifo "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-shard-zero; then ln -sf /dev/zero "$W/zz_train_000001.bin"; timeout 20 $TP --train "$W/zz_train_*.bin" --val-every 0 -o "$W/x" --steps 1 > "$W/o" 2>&1; rc=$?
    check fs-shard-zero "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-shard-short; then $TP --train "$W/short_train_*.bin" --val-every 0 -o "$W/x" --steps 1 > "$W/o" 2>&1; check fs-shard-short "one_error $W/o" "$(lastline "$W/o")"; fi
if want fs-shard-mixture; then rm -rf "$W/x"; $TP --train "$W/mix_train_*.bin" --val "$W/mix_val_*.bin" -o "$W/x" --steps 1 > "$W/o" 2>&1
    check fs-shard-mixture "one_error $W/o" "$(lastline "$W/o")"; fi
if want fs-shard-llmc; then rm -rf "$W/x"; run "$W/x" --steps 1 > "$W/o" 2>&1; check fs-shard-llmc "[ -f $W/x/model.bin ]" "shards without a set id (llm.c's) train"; fi
if want fs-eval-fifo; then mkdir -p "$W/ev"; rm -f "$W/ev/piqa.bin"; mkfifo "$W/ev/piqa.bin"; rm -rf "$W/x"
    timeout 20 $TP $DATA -o "$W/x" --steps 2 --eval-every 1 --eval-task piqa --eval-data "$W/ev" > "$W/o" 2>&1; rc=$?
    check fs-eval-fifo "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-eval-dir; then mkdir -p "$W/ev2/piqa.bin"; rm -rf "$W/x"
    $TP $DATA -o "$W/x" --steps 2 --eval-every 1 --eval-task piqa --eval-data "$W/ev2" > "$W/o" 2>&1
    check fs-eval-dir "one_error $W/o && grep -q 'is a directory' $W/o" "$(lastline "$W/o")"; fi
if want fs-tokenizer-fifo; then rm -f "$W/tok.fifo"; mkfifo "$W/tok.fifo"; rm -rf "$W/x"
    timeout 20 $TP $DATA -o "$W/x" --steps 2 --sample-every 1 --tokenizer "$W/tok.fifo" > "$W/o" 2>&1; rc=$?
    check fs-tokenizer-fifo "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-generate-fifo; then rm -f "$W/model.fifo"; mkfifo "$W/model.fifo"; timeout 20 "$ROOT/generate" "$W/model.fifo" --prompt hi --cpu > "$W/o" 2>&1; rc=$?
    check fs-generate-fifo "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-analyze-zero; then timeout 20 "$ROOT/analyze" /dev/zero -o "$W/a.json" > "$W/o" 2>&1; rc=$?
    check fs-analyze-zero "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-report-logdir; then fresh "$W/rd"; mkdir "$W/rd/log.jsonl"; timeout 20 "$ROOT/report" "$W/rd" -o "$W/r.html" > "$W/o" 2>&1; rc=$?
    check fs-report-logdir "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-report-fifo; then fresh "$W/rf"; mkfifo "$W/rf/log.jsonl"; timeout 20 "$ROOT/report" "$W/rf" -o "$W/r.html" > "$W/o" 2>&1; rc=$?
    check fs-report-fifo "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-report-outdir; then mkdir -p "$W/real"; timeout 20 "$ROOT/report" "$W/base" -o "$W/real" > "$W/o" 2>&1; rc=$?
    check fs-report-outdir "[ $rc = 1 ] && one_error $W/o && ! ls $W/real.tmp $W/real/*.tmp > /dev/null 2>&1" "exit $rc: $(lastline "$W/o")"; fi
if want fs-evalzs-json-dir; then mkdir -p "$W/real"; timeout 60 "$ROOT/eval_zeroshot" "$W/base/model.bin" --cpu --json "$W/real" > "$W/o" 2>&1; rc=$?
    check fs-evalzs-json-dir "[ $rc = 1 ] && one_error $W/o && ! ls $W/real.tmp > /dev/null 2>&1" "exit $rc: $(lastline "$W/o")"; fi
PS="$ROOT/build/prepare_shards --quiet"
if [ -f data/cache/gpt2.tiktoken ]; then HAVE_TOK=1; else HAVE_TOK=0; fi
for kind in dir zero nodir bom ulimit; do
    want "prep-$kind" || continue
    [ $HAVE_TOK = 1 ] || { say SKIP "prep-$kind" "no data/cache/gpt2.tiktoken" default-corpus; continue; }
    mkdir -p "$W/p"; rm -f "$W/p/"*
    case $kind in
        dir) $PS -o "$W/p/x" "$W" > "$W/o" 2>&1; check prep-dir "one_error $W/o" "$(lastline "$W/o")" ;;
        zero) timeout 20 $PS -o "$W/p/x" /dev/zero > "$W/o" 2>&1; rc=$?; check prep-zero "[ $rc = 1 ] && one_error $W/o" "exit $rc: $(lastline "$W/o")" ;;
        nodir) $PS -o "$W/nope/x" "$W/o" > "$W/o3" 2>&1; check prep-nodir "one_error $W/o3" "$(lastline "$W/o3")" ;;
        bom) printf '\xef\xbb\xbf{"text": "hello there"}\n{"text": "again"}\n' > "$W/bom.jsonl"; $PS -o "$W/p/x" "$W/bom.jsonl" > "$W/o" 2>&1; rc=$?
             check prep-bom "[ $rc = 0 ]" "a JSONL file starting with a byte-order mark: exit $rc $(lastline "$W/o")" ;;
        ulimit) head -c 3000000 /dev/urandom | base64 > "$W/big.txt"; (ulimit -f 100; $PS -o "$W/p/x" --shard-tokens 100000 "$W/big.txt") > "$W/o" 2>&1; rc=$?
             check prep-ulimit "[ $rc = 1 ] && one_error $W/o && ! ls $W/p/*.partial > /dev/null 2>&1" "exit $rc: $(lastline "$W/o")" ;;
    esac
done
if want prep-kill9; then
    if [ $HAVE_TOK = 1 ]; then
        mkdir -p "$W/pk"; head -c 6000000 /dev/urandom | base64 -w 60 > "$W/k.txt"; bad=0 whole=0 refused=0
        for i in 1 2 3 4 5 6; do
            rm -f "$W/pk/"*; $PS -o "$W/pk/x" --format lines --shard-tokens 65536 --val-tokens 65536 "$W/k.txt" > /dev/null 2>&1
            head -c 3000000 /dev/urandom | base64 -w 50 > "$W/k2.txt"
            bg "$W/o" $PS -o "$W/pk/x" --overwrite --format lines --shard-tokens 65536 --val-tokens 65536 "$W/k2.txt"
            sleep "0.$((i * 15))"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
            $ROOT/train_prism --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --sample-every 0 --train "$W/pk/x_train_*.bin" --val "$W/pk/x_val_*.bin" -o "$W/pko$i" --steps 1 > "$W/o" 2>&1
            if grep -q 'not written together' "$W/o"; then refused=$((refused + 1)); elif [ -f "$W/pko$i/model.bin" ]; then whole=$((whole + 1)); else bad=$((bad + 1)); fi
        done
        check prep-kill9 "[ $bad = 0 ]" "6 kills: $whole trained on one whole set, $refused mixtures refused, $bad other"
    else say SKIP prep-kill9 "no tokenizer" default-corpus; fi
fi
if want fs-ulimit-ckpt; then fresh "$W/u"; (ulimit -f 60; run "$W/u" --steps 40 --ckpt-every 20) > "$W/o" 2>&1; rc=$?
    check fs-ulimit-ckpt "[ $rc = 1 ] && one_error $W/o && grep -q 'File too large' $W/o" "exit $rc: $(lastline "$W/o")"; fi
if want fs-out-spaces; then rm -rf "$W/sp ace é"; run "$W/sp ace é" --steps 1 > "$W/o" 2>&1; check fs-out-spaces "[ -f '$W/sp ace é/model.bin' ]" "an OUT with spaces and UTF-8 trains"; fi
if want fs-out-newline; then o="$W/new
line"; rm -rf "$o"; run "$o" --steps 1 > "$W/o" 2>&1; check fs-out-newline "[ -f \"\$o/model.bin\" ]" "an OUT with a newline in its name trains"; fi
if want fs-out-toolong; then o=$W; while [ ${#o} -lt 4060 ]; do o="$o/$(printf 'y%.0s' $(seq 200))"; done; o=${o:0:4060}; mkdir -p "$o" 2>/dev/null
    run "$o" --steps 3 > "$W/o" 2>&1; check fs-out-toolong "one_error $W/o && ! grep -q 'step     1/3' $W/o" "$(lastline "$W/o" | cut -c1-120)"; fi
if want fs-out-longname; then run "$W/$(printf 'z%.0s' $(seq 300))" --steps 1 > "$W/o" 2>&1; check fs-out-longname "one_error $W/o" "$(lastline "$W/o" | cut -c1-60)...$(lastline "$W/o" | tail -c 80)"; fi

# ---------------------------------------------------------------- signals at every phase
sig_case() {  # sig_case NAME SIGNAL CONDITION EXPECT_RC [run flags...]: signal once CONDITION holds
    local name=$1 sig=$2 cond=$3 expect=$4; shift 4
    want "$name" || return
    fresh "$W/$name"; local out="$W/$name"
    bg "$W/$name.txt" $TP $DATA -o "$out" "$@"
    wait_for "$cond" 60
    local t0=$(date +%s.%N); kill -$sig $pid 2>/dev/null; wait $pid; local rc=$?
    local secs=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }")
    local line=$(grep -m1 'stopped by' "$W/$name.txt" | cut -c1-150)
    check "$name" "[ $rc = $expect ] && (( \$(echo \"$secs < 10\" | bc) ))" "exit $rc after ${secs:0:4} s: ${line:-$(lastline "$W/$name.txt")}"
}
# A signal before the program's first instruction (while the kernel and the dynamic loader start it) takes its
# default action; that is the one window no program can close: then nothing may have been written.
# The signal goes to the trainer the moment it has replaced bash's child (/proc/PID/exe is train_prism): before
# that it would reach the shell, not the trainer. That child has this script's handler for SIGTERM (bash catches it
# to run the EXIT trap) until it execs: it dies of it (143, and its EXIT trap printed bash's "wait_for: No record of
# process"), or, now and then, notes it and execs the trainer with the signal dropped (exit 0: 4 in 3000 under load).
if want sig-term-at-once; then rm -rf "$W/ao"; bg "$W/ao.txt" $TP $DATA -o "$W/ao" --steps 5; t0=$SECONDS
    until [ /proc/$pid/exe -ef "$ROOT/train_prism" ] || [ $((SECONDS - t0)) -gt 10 ]; do :; done; kill -TERM $pid; wait $pid; rc=$?
    check sig-term-at-once "[ $rc = 75 ] || { [ $rc = 143 ] && [ ! -e $W/ao/log.jsonl ]; }" "exit $rc: $( [ $rc = 143 ] && echo 'killed before main, nothing written' || grep -m1 'stopped by' "$W/ao.txt" | cut -c1-120)"; fi
python3 - "$W" <<'EOF2'
import struct, sys
for i in range(60):
    with open(sys.argv[1] + '/big_train_%06d.bin' % (i + 1), 'wb') as f:
        f.write(struct.pack('<256I', *([20240520, 1, 300000] + [0] * 253))); f.write(bytes(600000))
EOF2
if want sig-term-startup; then fresh "$W/su"; bg "$W/su.txt" $TP --train "$W/big_train_*.bin" --val "$W/syn_val_*.bin" -o "$W/su" --steps 5
    wait_for "ls -l /proc/\$pid/fd 2>/dev/null | grep -q lock" 30; kill -TERM $pid; wait $pid; rc=$?
    check sig-term-startup "[ $rc = 75 ]" "exit $rc: $(grep -m1 'stopped by' "$W/su.txt" | cut -c1-150)"; fi
sig_case sig-term-step TERM "logged \$out 3" 75 --steps 100000
# A background job of a script starts with SIGINT ignored (and an ignored signal stays ignored, as under nohup):
# env --default-signal gives it the default disposition, as a terminal's foreground job has.
if want sig-int-step; then fresh "$W/si"; env --default-signal=INT $TP $DATA -o "$W/si" --steps 100000 > "$W/si.txt" 2>&1 & pid=$!
    wait_for "logged $W/si 3" 30; kill -INT $pid; wait $pid; rc=$?
    check sig-int-step "[ $rc = 75 ]" "exit $rc: $(grep -m1 'stopped by' "$W/si.txt" | cut -c1-150)"; fi
sig_case sig-hup-step HUP "logged \$out 3" 75 --steps 100000
sig_case sig-usr1-step USR1 "logged \$out 3" 75 --steps 100000
sig_case sig-term-validation TERM "logged \$out 2 && sleep 0.2" 75 --steps 100 --val-every 3 --val-tokens 1000000000000 --val "$W/big_train_*.bin"
sig_case sig-term-ckpt-every TERM "logged \$out 5" 75 --steps 100000 --ckpt-every 1
if [ $HAVE_TOK = 1 ]; then
    TPV="$ROOT/train_prism --d 32 --layers 2 --heads 2 --seq-len 64 -b 4 --val-every 0"
    if want sig-term-sample; then fresh "$W/ss"; bg "$W/ss.txt" $TPV $DATA -o "$W/ss" --steps 100 --sample-every 2 --sample-tokens 1000000
        wait_for "logged $W/ss 2 && sleep 0.5" 60; t0=$(date +%s); kill -TERM $pid; wait $pid; rc=$?
        check sig-term-sample "[ $rc = 75 ] && [ \$(( \$(date +%s) - $t0 )) -lt 10 ]" "exit $rc: $(grep -m1 'stopped by' "$W/ss.txt")"; fi
else say SKIP sig-term-sample "no tokenizer" default-corpus; fi
if want sig-term-twice; then fresh "$W/tw"; run "$W/tw" --steps 100000 --stop-after 2 > /dev/null 2>&1
    bg "$W/tw.txt" $TP $DATA -o "$W/tw" --steps 100000 --resume; wait_for "logged $W/tw 4" 30; kill -TERM $pid; kill -TERM $pid; wait $pid; rc=$?
    check sig-term-twice "{ [ $rc = 143 ] || [ $rc = 75 ]; } && resumable $W/tw" "exit $rc, OUT/latest resumable"; fi
if want sig-term-resume-startup; then fresh "$W/rs"; run "$W/rs" --steps 100000 --stop-after 2 > /dev/null 2>&1
    bg "$W/rs.txt" $TP $DATA -o "$W/rs" --steps 100000 --resume; wait_for "ls -l /proc/\$pid/fd 2>/dev/null | grep -q lock" 30; kill -TERM $pid; wait $pid; rc=$?
    check sig-term-resume-startup "[ $rc = 75 ] && resumable $W/rs" "exit $rc: $(grep -m1 'stopped by' "$W/rs.txt" | cut -c1-150)"; fi
if want sig-kill-random; then fresh "$W/kr"; ok=0
    for i in 1 2 3 4 5; do bg "$W/kr.txt" $TP $DATA -o "$W/kr" --steps 100000 --ckpt-every 3 $( [ -f "$W/kr/latest" ] && echo --resume )
        sleep "0.$((i * 17))"; kill -9 $pid; wait $pid 2>/dev/null; { [ ! -f "$W/kr/latest" ] || resumable "$W/kr"; } && ok=$((ok + 1)); done
    check sig-kill-random "[ $ok = 5 ]" "5 kill -9 at random moments: $ok left a resumable OUT"; fi
if want sig-stop-cont; then fresh "$W/sc"; bg "$W/sc.txt" $TP $DATA -o "$W/sc" --steps 200; wait_for "logged $W/sc 2" 30
    kill -STOP $pid; sleep 1; kill -CONT $pid; wait $pid; rc=$?; check sig-stop-cont "[ $rc = 0 ]" "SIGSTOP then SIGCONT: exit $rc"; fi

# ---------------------------------------------------------------- launchers and rank variables
if want env-rank; then RANK=1 WORLD_SIZE=2 $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; check env-rank "one_error $W/o" "$(lastline "$W/o")"; fi
if want env-rank0-world2; then RANK=0 WORLD_SIZE=2 $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; check env-rank0-world2 "one_error $W/o" "$(lastline "$W/o")"; fi
if want env-rendezvous-norank; then PRISM_RENDEZVOUS=$W $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; check env-rendezvous-norank "one_error $W/o" "$(lastline "$W/o")"; fi
if want lock-two-writers; then fresh "$W/two"; bg "$W/two.txt" $TP $DATA -o "$W/two" --steps 100000; first=$pid; wait_for "logged $W/two 2" 30
    run "$W/two" --steps 10 --resume > "$W/o" 2>&1; kill -TERM $first; wait $first
    check lock-two-writers "one_error $W/o && grep -q \"pid $first\" $W/o" "$(lastline "$W/o" | cut -c1-200)"; fi
if want flags-conflict; then $TP $DATA -o "$W/x" --steps 3 --epochs 2 > "$W/o" 2>&1; check flags-conflict "one_error $W/o" "$(lastline "$W/o")"; fi
MPI="timeout 120 mpirun --oversubscribe --allow-run-as-root"
MPIRUN="mpirun --oversubscribe --allow-run-as-root"  # in the background: $pid is mpirun itself, the ranks its children
# guard PID: a hung case ends after 2 minutes, its processes' states kept in $W/hung.txt first (for the case's line);
# unguard: the guard ends with its case, so it never kills a later process given the same pid (pid_max may be 32768,
# and this script's polling forks hundreds of processes a second)
guard() { rm -f "$W/hung.txt"; ( sleep 120; ps -o pid=,stat=,wchan:20=,etime=,comm= --ppid "$1" -p "$1" 2> /dev/null |
    tr -s ' ' | paste -sd ';' > "$W/hung.txt"; kill -9 "$1" $(pgrep -P "$1") 2> /dev/null ) > /dev/null 2>&1 & gpid=$!; }
unguard() { kill "$gpid" 2> /dev/null; wait "$gpid" 2> /dev/null; [ -s "$W/hung.txt" ] && echo "; hung 120 s: $(cat "$W/hung.txt")"; }
rank1() { pgrep -P "$1" | tail -n 1; }
alive() { local p; for p in "$@"; do ps -o stat= -p "$p" 2> /dev/null | grep -qv Z && return 0; done; return 1; }
# Open MPI 4.1's mpirun (PMIx 3) now and then crashes (exit 139) or hangs in its own finalize, in
# PMIx_server_finalize, after the job it was told to end has ended (how often: docs/training.md), its ranks'
# checkpoint whole each time. end_of MP NAME waits for mpirun (at most 30 s after its ranks
# ended) and sets $rc, and $fault to what mpirun did when it was that: its own backtrace naming orte_finalize, or a
# hang that gdb finds there. Anything else (a hang elsewhere, a crash without that frame) is not excused.
end_of() {
    fault=""
    wait_for "! alive $1" 30
    if alive "$1"; then
        gdb -batch -p "$1" -ex 'thread apply all bt' 2> /dev/null | grep -q 'orte_finalize' &&
            fault="; mpirun itself hung in its finalize (orte_finalize) after its ranks ended, killed"
        kill -9 "$1"
    fi
    wait "$1"; rc=$?
    [ $rc = 139 ] && grep -q 'orte_finalize' "$W/$2.txt" &&
        fault="; mpirun itself crashed in its finalize (orte_finalize, PMIx_server_finalize) after its ranks ended"
}
if command -v mpirun > /dev/null; then
    mpi_sig() {  # mpi_sig NAME SIGNAL TARGET(mpirun|rank1) EXPECT
        want "$1" || return
        fresh "$W/$1"; bg "$W/$1.txt" $MPIRUN -np 2 $TP $DATA -o "$W/$1" --steps 100000; local mp=$pid; guard $mp
        local t0=$SECONDS; wait_for "logged $W/$1 3" 60; local rows ranks; rows=$(cat "$W/$1/log.jsonl" 2> /dev/null | wc -l)
        ranks=$(pgrep -P $mp | paste -sd ' ')
        if [ "$3" = mpirun ]; then kill -$2 $mp; else kill -$2 "$(rank1 $mp)"; fi
        local t1=$SECONDS; wait_for "! alive $ranks" 60; local ended=$((SECONDS - t1)) gone=1; alive $ranks && gone=0
        end_of $mp "$1"; local hung; hung=$(unguard)
        check "$1" "[ $gone = 1 ] && { [ $rc = $4 ] || [ -n '$fault' ]; } && resumable $W/$1" "mpirun exit $rc, its ranks ended $ended s after the signal, sent at $rows log rows after $((t1 - t0)) s (ranks: $(grep -o 'stopped by [A-Z0-9]* after step [0-9]*' "$W/$1.txt" | head -n 1)); OUT/latest resumable$fault$hung"
    }
    mpi_sig mpi-term-mpirun TERM mpirun 1
    mpi_sig mpi-usr1-mpirun USR1 mpirun 75
    mpi_sig mpi-term-one-rank TERM rank1 75
    if want mpi-kill9-rank; then fresh "$W/mk"; bg "$W/mk.txt" $MPIRUN -np 2 $TP $DATA -o "$W/mk" --steps 100000 --ckpt-every 5; mp=$pid; guard $mp
        wait_for "logged $W/mk 12" 60; kill -9 "$(rank1 $mp)"; wait $mp; rc=$?; hung=$(unguard)
        check mpi-kill9-rank "[ $rc != 0 ] && resumable $W/mk" "mpirun exit $rc; OUT/latest resumable$hung"; fi
    if want mpi-rank-never-joins; then t0=$(date +%s)
        $MPI -np 2 bash -c "[ \$OMPI_COMM_WORLD_RANK = 1 ] && sleep 60; exec $TP $DATA -o $W/nj --steps 2 --comm-timeout 3" > "$W/o" 2>&1; rc=$?
        secs=$(( $(date +%s) - t0 )); check mpi-rank-never-joins "[ $rc != 0 ] && [ $secs -lt 40 ]" "exit $rc after $secs s: $(grep -m1 'error:' "$W/o" | cut -c1-160)"; fi
    if want mpi-rank-stopped; then fresh "$W/st"; bg "$W/st.txt" $MPIRUN -np 2 $TP $DATA -o "$W/st" --steps 100000 --comm-timeout 3; mp=$pid; guard $mp
        wait_for "logged $W/st 3" 60; r1=$(rank1 $mp); kill -STOP $r1; t0=$(date +%s); wait $mp; rc=$?; secs=$(( $(date +%s) - t0 )); hung=$(unguard)
        [ "$(ps -o comm= -p $r1)" = train_prism ] && kill -9 $r1  # left stopped (not a later process given its pid)
        check mpi-rank-stopped "[ $rc != 0 ] && [ $secs -lt 40 ]" "exit $rc after $secs s: $(grep -m1 'waited' "$W/st.txt" | cut -c1-160)$hung"; fi
    if want mpi-two-jobs; then fresh "$W/mj"; bg "$W/mj.txt" $MPIRUN -np 2 $TP $DATA -o "$W/mj" --steps 100000; mp=$pid; guard $mp; wait_for "logged $W/mj 2" 60
        $MPI -np 2 $TP $DATA -o "$W/mj" --steps 10 --resume > "$W/o" 2>&1; rc=$?; kill -USR1 $mp; wait $mp; hung=$(unguard)
        check mpi-two-jobs "[ $rc != 0 ] && grep -q 'in use by another train_prism' $W/o" "second job exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-160)$hung"; fi
    if want mpi-np1-world2; then WORLD_SIZE=2 $MPI -np 1 $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; rc=$?
        check mpi-np1-world2 "[ $rc = 1 ] && grep -q 'WORLD_SIZE=2 are set' $W/o" "exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-160)"; fi
    # README (Resume): a recorded run keeps its recorded --total-batch across rank changes where it divides evenly.
    if want mpi-resume-fewer-ranks; then fresh "$W/fr"; $MPI -np 2 $TP $DATA -o "$W/fr" --steps 6 --stop-after 2 > /dev/null 2>&1
        $ROOT/train_prism -o "$W/fr" --resume > "$W/o" 2>&1; a=$?
        check mpi-resume-fewer-ranks "[ $a = 0 ] && grep -q '\"total_batch\": 256' $W/fr/run.json" "2 ranks -> 1, -o OUT --resume alone: exit $a, the recorded total batch 256 kept ($(grep -o '"micro_steps": [0-9]*' $W/fr/run.json))"; fi
    if want mpi-error-last; then $MPI -np 2 $TP $DATA -o "$W/x" --steps 1 --bogus > "$W/o" 2>&1; rc=$?
        before=$(awk '/^-----|^Primary job|^mpirun/ {exit} {l = $0} END {print l}' "$W/o")
        last_ok=0; [[ $before == *error:* ]] && last_ok=1
        check mpi-error-last "[ $rc != 0 ] && [ \$(grep -c 'error:' $W/o) = 1 ] && [ $last_ok = 1 ]" "exit $rc: the one error line is the last line before mpirun's own summary: $(echo "$before" | cut -c1-100)"; fi
    if want mpi-resume-more-ranks; then fresh "$W/mr"; $TP $DATA -o "$W/mr" --steps 6 --stop-after 2 -b 4 > /dev/null 2>&1
        $MPI -np 2 $TP $DATA -o "$W/mr" --steps 6 --resume -b 2 > "$W/o" 2>&1; rc=$?
        check mpi-resume-more-ranks "[ $rc = 0 ]" "1 rank of B 4 -> 2 ranks of B 2 (the same global batch): exit $rc"; fi
    if want mpi-state-mixture; then fresh "$W/sm1"; fresh "$W/sm2"
        $MPI -np 2 $TP $DATA -o "$W/sm1" --steps 2 > /dev/null 2>&1; $MPI -np 2 $TP $DATA -o "$W/sm2" --steps 2 > /dev/null 2>&1
        cp "$W/sm2/step_00000002/state_rank1.bin" "$W/sm1/step_00000002/"; $MPI -np 2 $TP $DATA -o "$W/sm1" --steps 4 --resume > "$W/o" 2>&1; rc=$?
        check mpi-state-mixture "[ $rc != 0 ] && grep -q 'mixes two runs' $W/o" "exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-170)"; fi
else
    for n in mpi-term-mpirun mpi-usr1-mpirun mpi-term-one-rank mpi-kill9-rank mpi-rank-never-joins mpi-rank-stopped mpi-two-jobs \
             mpi-np1-world2 mpi-resume-fewer-ranks mpi-error-last mpi-resume-more-ranks mpi-state-mixture; do say SKIP $n "no mpirun" mpirun; done
fi

# ---------------------------------------------------------------- run directory, data and messages (issue 25)
# bgrun NAME FLAGS...: a long run into $W/NAME in the background ($pid), once it has a checkpoint
bgrun() { local n=$1; shift; fresh "$W/$n"; bg "$W/$n.txt" $TP $DATA -o "$W/$n" --steps 100000 --ckpt-every 20 "$@"; wait_for "[ -s $W/$n/latest ]" 60; }
stop_bg() { kill -TERM $pid 2> /dev/null; wait $pid 2> /dev/null; }
if want lock-rm; then bgrun lr; rm "$W/lr/lock"; run "$W/lr" --steps 5 --resume > "$W/o" 2>&1; rc=$?; stop_bg
    check lock-rm "[ $rc = 1 ] && one_error $W/o && grep -q 'in use by another' $W/o" "after rm OUT/lock: $(lastline "$W/o" | cut -c1-150)"; fi
if want lock-replace; then bgrun lp; rm "$W/lp/lock"; echo 'pid 1 on elsewhere' > "$W/lp/lock"; run "$W/lp" --steps 5 --overwrite > "$W/o" 2>&1; rc=$?; stop_bg
    check lock-replace "[ $rc = 1 ] && one_error $W/o && [ -s $W/lp/latest ]" "OUT/lock replaced, then --overwrite: $(lastline "$W/o" | cut -c1-150)"; fi
if want lock-link-out; then bgrun ll; ln -sfn "$W/ll" "$W/ll.link"; run "$W/ll.link" --steps 5 --resume > "$W/o" 2>&1; rc=$?; stop_bg
    check lock-link-out "[ $rc = 1 ] && one_error $W/o" "-o through a link to a live OUT: $(lastline "$W/o" | cut -c1-150)"; fi
if want lock-symlink-planted; then bgrun lk; cp /etc/hostname "$W/hn"; rm "$W/lk/lock"; ln -s "$W/hn" "$W/lk/lock"; sleep 1
    run "$W/lk" --steps 5 --resume > "$W/o" 2>&1; rc=$?; stop_bg
    check lock-symlink-planted "[ $rc = 1 ] && cmp -s /etc/hostname $W/hn" "a link planted as OUT/lock is never written through; intruder: $(lastline "$W/o" | cut -c1-120)"; fi
if want lock-moved-out; then bgrun mo; mv "$W/mo" "$W/mo.moved"; wait $pid; rc=$?
    check lock-moved-out "[ $rc = 1 ] && one_error $W/mo.txt && [ ! -e $W/mo ] && resumable $W/mo.moved" "exit $rc: $(lastline "$W/mo.txt" | cut -c1-150)"; fi
if want lock-moved-parent; then mkdir -p "$W/par"; rm -rf "$W/par/o"; bg "$W/mp.txt" $TP $DATA -o "$W/par/o" --steps 100000 --ckpt-every 20
    wait_for "[ -s $W/par/o/latest ]" 60; mv "$W/par" "$W/par.moved"; wait $pid; rc=$?
    check lock-moved-parent "[ $rc = 1 ] && one_error $W/mp.txt && resumable $W/par.moved/o" "OUT's parent renamed: exit $rc"; fi
if want lock-replaced-out; then bgrun ro; mv "$W/ro" "$W/ro.old"; mkdir "$W/ro"; run "$W/ro" --steps 3 > "$W/o" 2>&1; b=$?; wait $pid; rc=$?
    check lock-replaced-out "[ $rc = 1 ] && [ $b = 0 ] && resumable $W/ro.old && [ \"\$(cat $W/ro/latest)\" = step_00000003 ]" "OUT moved aside and a new run started at its path: the old run stops (exit $rc), the new one is whole (exit $b)"; fi
if want lock-out-becomes-file; then bgrun of; mv "$W/of" "$W/of.d"; echo x > "$W/of"; wait $pid; rc=$?
    check lock-out-becomes-file "[ $rc = 1 ] && one_error $W/of.txt && [ \"\$(cat $W/of)\" = x ]" "OUT replaced by a file: exit $rc"; fi
if want lock-moved-back; then fresh "$W/mb"; bg "$W/mb.txt" $TP $DATA -o "$W/mb" --steps 300 --ckpt-every 100; wait_for "logged $W/mb 5" 60
    mv "$W/mb" "$W/mb.x"; mv "$W/mb.x" "$W/mb"; wait $pid; rc=$?
    check lock-moved-back "[ $rc = 0 ]" "OUT renamed and back between checkpoints: the same directory, exit $rc"; fi
if want empty-out; then fresh "$W/eo/out/tiny"; cp -r "$W/base/." "$W/eo/out/tiny/"; RUNV=
    (cd "$W/eo" && $TP $DATA --steps 1 --overwrite -o "$RUNV") > "$W/o" 2>&1; rc=$?
    check empty-out "[ $rc = 1 ] && one_error $W/o && [ -f $W/eo/out/tiny/step_00000002/model.bin ]" "RUN=; --overwrite -o \"\$RUN\": $(lastline "$W/o" | cut -c1-150)"; fi
for f in "--train=" "--val=" "--tokenizer=" "--eval-data="; do n="empty-flag${f%=}"; want "$n" || continue
    run "$W/x" --steps 1 "$f" > "$W/o" 2>&1; check "$n" "one_error $W/o && grep -q 'was given an empty' $W/o" "$(lastline "$W/o" | cut -c1-120)"; done
for name in step_9999999999999999999 step_99999999999999999999999 step_-0000001 step_1 step_０００００００１; do n="odd-name-${name:0:12}-${#name}"; want "$n" || continue
    fresh "$W/on"; run "$W/on" --steps 2 > /dev/null 2>&1; mkdir "$W/on/$name"; touch "$W/on/$name/mine"
    run "$W/on" --steps 3 --resume > "$W/o" 2>&1; a=$?; run "$W/on" --steps 2 --overwrite > "$W/o2" 2>&1; b=$?
    check "$n" "[ $a = 0 ] && [ $b = 0 ] && [ -f '$W/on/$name/mine' ] && [ -f $W/on/latest ]" "a directory $name in OUT: --resume exit $a, --overwrite exit $b, it stays"; done
if want odd-name-huge-tmp; then fresh "$W/ot"; mkdir "$W/ot/step_9999999999999999999.tmp"; touch "$W/ot/step_9999999999999999999.tmp/mine"; run "$W/ot" --steps 1 > "$W/o" 2>&1; rc=$?
    check odd-name-huge-tmp "[ $rc = 0 ] && [ -f $W/ot/step_9999999999999999999.tmp/mine ]" "a huge step_N.tmp is not a crash's leftover: kept, exit $rc"; fi
if want odd-latest-huge-step; then fresh "$W/oh"; run "$W/oh" --steps 1 > /dev/null 2>&1; echo step_9999999999999999999 > "$W/oh/latest"
    run "$W/oh" --steps 2 --resume > "$W/o" 2>&1; check odd-latest-huge-step "one_error $W/o && grep -q corrupt $W/o" "$(lastline "$W/o" | cut -c1-150)"; fi
if want odd-latest-sparse; then fresh "$W/os"; run "$W/os" --steps 1 > /dev/null 2>&1; truncate -s 3G "$W/os/latest"
    run "$W/os" --steps 2 --resume > "$W/o" 2>&1; check odd-latest-sparse "one_error $W/o" "a 3 GB latest: $(lastline "$W/o" | cut -c1-120)"; fi
if want out-symlink-loop; then ln -sfn "$W/loop2" "$W/loop1"; ln -sfn "$W/loop1" "$W/loop2"; run "$W/loop1" --steps 1 > "$W/o" 2>&1
    check out-symlink-loop "one_error $W/o" "$(lastline "$W/o" | cut -c1-150)"; fi
if want out-parent-link; then mkdir -p "$W/realp"; ln -sfn "$W/realp" "$W/plink"; rm -rf "$W/realp/o"; run "$W/plink/o" --steps 1 > "$W/o" 2>&1
    check out-parent-link "[ -f $W/realp/o/model.bin ]" "an OUT under a linked parent trains there"; fi
# The data under a run (a set as prepare_shards writes it: one id on all its shards)
python3 - "$W" <<'EOF3'
import struct, sys
d = sys.argv[1]
def shard(path, toks, setid):
    h = [20240520, 1, len(toks)] + [0] * 253; h[3] = 0x54455350; h[4] = setid
    with open(path, 'wb') as f: f.write(struct.pack('<256I', *h)); f.write(struct.pack('<%dH' % len(toks), *toks))
import os
for sub, sid, k in (('d1', 0x1111, 7), ('d2', 0x2222, 3)):
    os.makedirs(d + '/' + sub, exist_ok=True)
    shard(d + '/%s/s_val_000000.bin' % sub, [(i * k) % 256 for i in range(4000)], sid)
    shard(d + '/%s/s_train_000001.bin' % sub, [(i * k) % 256 for i in range(36000)], sid)
    shard(d + '/%s/s_train_000002.bin' % sub, [(i * k + 1) % 256 for i in range(36000)], sid)
EOF3
trs() { $TP --train "$W/ds/s_train_*.bin" --val "$W/ds/s_val_*.bin" "$@"; }  # the globs reach train_prism unexpanded
dset() { rm -rf "$W/ds"; cp -r "$W/d1" "$W/ds"; }
if want data-swap-val; then dset; fresh "$W/dv"; bg "$W/dv.txt" trs -o "$W/dv" --steps 100000 --ckpt-every 20; wait_for "[ -s $W/dv/latest ]" 60
    rm -rf "$W/ds.new"; cp -r "$W/d2" "$W/ds.new"; mv "$W/ds.new/"* "$W/ds/"; wait $pid; rc=$?  # renamed over, as prepare_shards --overwrite does
    check data-swap-val "[ $rc = 1 ] && one_error $W/dv.txt && grep -q 'changed while the run used it' $W/dv.txt && [ -s $W/dv/latest ] && trs -o $W/dv --steps 100000 --resume --allow-data-change --stop-after 1 > /dev/null 2>&1" "exit $rc: $(lastline "$W/dv.txt" | cut -c1-160)"; fi
if want data-swap-second-shard; then dset; fresh "$W/d2s"; bg "$W/d2s.txt" trs -o "$W/d2s" --steps 100000 --ckpt-every 20 --val-every 0 --no-shuffle; wait_for "[ -s $W/d2s/latest ]" 60
    cp "$W/d2/s_train_000002.bin" "$W/ds/s_train_000002.bin.new"; mv "$W/ds/s_train_000002.bin.new" "$W/ds/s_train_000002.bin"; wait $pid; rc=$?
    check data-swap-second-shard "[ $rc = 1 ] && one_error $W/d2s.txt && grep -q 's_train_000002.bin changed while' $W/d2s.txt" "a shard not yet reached replaced: stops on entering it, exit $rc"; fi
if want data-truncate-midrun; then dset; fresh "$W/dt"; bg "$W/dt.txt" trs -o "$W/dt" --steps 100000 --ckpt-every 20; wait_for "[ -s $W/dt/latest ]" 60
    truncate -s 2000 "$W/ds/s_val_000000.bin"; wait $pid; rc=$?
    check data-truncate-midrun "[ $rc = 1 ] && one_error $W/dt.txt" "a shard truncated in place: exit $rc: $(lastline "$W/dt.txt" | cut -c1-140)"; fi
if want data-resume-other; then dset; fresh "$W/dr"; trs -o "$W/dr" --steps 4 --stop-after 2 > /dev/null 2>&1; cp "$W/d2/"* "$W/ds/"
    $TP -o "$W/dr" --resume > "$W/o" 2>&1; a=$?; $TP -o "$W/dr" --resume --allow-data-change > "$W/o2" 2>&1; b=$?
    check data-resume-other "[ $a = 1 ] && one_error $W/o && grep -q allow-data-change $W/o && [ $b = 0 ]" "other shards, same counts: $(lastline "$W/o" | cut -c1-120)...; with --allow-data-change: exit $b"; fi
if want data-resume-old-record; then dset; fresh "$W/do"; trs -o "$W/do" --steps 4 --stop-after 2 > /dev/null 2>&1; sed -i '/^ "data": /d' "$W/do/run.json"
    $TP -o "$W/do" --resume > "$W/o" 2>&1; rc=$?; check data-resume-old-record "[ $rc = 0 ] && grep -q 'records no fingerprint' $W/o" "a run.json without a fingerprint: exit $rc, with a note"; fi
if want val-tokens-huge; then t0=$(date +%s); run "$W/x" --steps 2 --overwrite --val-tokens 100000000000 > "$W/o" 2>&1; rc=$?; secs=$(( $(date +%s) - t0 ))
    check val-tokens-huge "[ $rc = 0 ] && [ $secs -lt 30 ] && grep -q 'note: --val-tokens' $W/o" "exit $rc after $secs s: $(grep -m1 'note: --val' "$W/o" | cut -c1-150)"; fi
if want msg-seq-len; then fresh "$W/sl2"; run "$W/sl2" --steps 2 > /dev/null 2>&1; sed -i 's/\["--seq-len", "32"\]/["--seq-len", "48"]/' "$W/sl2/run.json"
    $ROOT/train_prism -o "$W/sl2" --resume --steps 4 > "$W/o" 2>&1; check msg-seq-len "one_error $W/o && grep -q 'seq-len' $W/o && ! grep -q total-batch $W/o" "$(lastline "$W/o" | cut -c1-160)"; fi
if want msg-no-runjson; then fresh "$W/nr"; run "$W/nr" --steps 2 > /dev/null 2>&1; rm "$W/nr/run.json"
    $ROOT/train_prism -o "$W/nr" --resume --steps 4 > "$W/o" 2>&1; check msg-no-runjson "one_error $W/o && grep -q 'run.json is missing' $W/o" "$(lastline "$W/o" | cut -c1-200)"; fi
for v in RANK=abc RANK= RANK=99999999999 WORLD_SIZE=2x; do n="env-${v%%=*}-${v#*=}"; want "$n" || continue
    env "$v" $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; check "$n" "one_error $W/o && grep -q '${v%%=*}=' $W/o" "$(lastline "$W/o" | cut -c1-150)"; done
if want env-rendezvous-local-abc; then PRISM_RENDEZVOUS=$W RANK=0 WORLD_SIZE=1 LOCAL_RANK=abc $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1
    check env-rendezvous-local-abc "one_error $W/o && grep -q 'LOCAL_RANK=abc' $W/o" "$(lastline "$W/o" | cut -c1-150)"; fi
if want big-runjson; then fresh "$W/bj"; run "$W/bj" --steps 1 > /dev/null 2>&1; truncate -s 3G "$W/bj/run.json"
    $ROOT/train_prism -o "$W/bj" --resume --steps 2 > "$W/o" 2>&1; check big-runjson "one_error $W/o && grep -q 'run.json is 3221225472 bytes' $W/o" "$(lastline "$W/o" | cut -c1-150)"; fi
if want big-log; then fresh "$W/bl"; run "$W/bl" --steps 1 > /dev/null 2>&1; truncate -s 3G "$W/bl/log.jsonl"
    /usr/bin/time -f 'maxrss %M' $ROOT/train_prism -o "$W/bl" --resume --steps 2 > "$W/o" 2>&1; rc=$?; kb=$(grep -o 'maxrss [0-9]*' "$W/o" | cut -d' ' -f2)
    check big-log "[ $rc = 0 ] && [ ${kb:-9999999} -lt 500000 ] && [ \$(wc -l < $W/bl/log.jsonl) = 2 ]" "a 3 GB log.jsonl: exit $rc, ${kb:-?} KB resident, the log's 2 lines kept"; fi

# ---------------------------------------------------------------- issue 34: outputs never replace inputs, every
# stop exits 75, empty and root paths, advice that never loops, the live bridge's hostile files, near-linear work
sums() { sha256sum "$@" 2>&1 | cut -c1-64 | tr '\n' ' '; }
# out_rule NAME INPUT CMD...: CMD (an output aimed at INPUT) exits 1 in one line naming the rule; INPUT unchanged
out_rule() { local n=$1 in=$2; shift 2; want "$n" || return 0; local a b rc; a=$(sums "$in"); timeout 120 "$@" > "$W/o" 2>&1; rc=$?; b=$(sums "$in")
    check "$n" "[ $rc = 1 ] && one_error $W/o && grep -q 'which this command reads' $W/o && [ '$a' = '$b' ]" "exit $rc, sha256 ${a:0:12} before, ${b:0:12} after: $(lastline "$W/o" | cut -c1-150)"; }
if want out-rule; then
    fresh "$W/or"; cp -r "$W/base/." "$W/or/"; mkdir -p "$W/orev"; head -c 4096 /dev/urandom > "$W/orev/piqa.bin"
    cp "$W/base/model.bin" "$W/lone.bin"; ln -sfn "$W/or/model.bin" "$W/or.link"
    EZ="$ROOT/eval_zeroshot --cpu --tasks piqa --data $W/orev"
    for t in model.bin step_00000002/model.bin step_00000002/state_rank0.bin run.json log.jsonl latest lock; do
        out_rule "out-rule-evalz-json-${t//\//-}" "$W/or/$t" $EZ "$W/or" --json "$W/or/$t"
        out_rule "out-rule-evalz-samples-${t//\//-}" "$W/or/$t" $EZ "$W/or" --log-samples "$W/or/$t"
        out_rule "out-rule-analyze-json-${t//\//-}" "$W/or/$t" "$ROOT/analyze" "$W/or" --data "$W/syn_val_*.bin" --json "$W/or/$t"
        out_rule "out-rule-report-o-${t//\//-}" "$W/or/$t" "$ROOT/report" "$W/or" -o "$W/or/$t"
    done
    out_rule out-rule-evalz-lone "$W/lone.bin" $EZ "$W/lone.bin" --json "$W/lone.bin"
    out_rule out-rule-evalz-link "$W/or/model.bin" $EZ "$W/or" --json "$W/or.link"
    out_rule out-rule-evalz-dotdot "$W/or/model.bin" $EZ "$W/or/step_00000002/model.bin" --json "$W/or/./step_00000002/../model.bin"
    out_rule out-rule-evalz-evalfile "$W/orev/piqa.bin" $EZ "$W/or" --json "$W/orev/piqa.bin"
    out_rule out-rule-analyze-shard "$W/syn_val_000000.bin" "$ROOT/analyze" "$W/or" --data "$W/syn_val_*.bin" --json "$W/syn_val_000000.bin"
    out_rule out-rule-analyze-o-run "$W/or/model.bin" "$ROOT/analyze" "$W/or" --data "$W/syn_val_*.bin" -o "$W/or"
    out_rule out-rule-export-o-run "$W/or/model.bin" "$ROOT/export" "$W/or" -o "$W/or" --overwrite
    rm -rf "$W/orhf"; "$ROOT/export" "$W/or" -o "$W/orhf" > /dev/null 2>&1
    out_rule out-rule-import-self "$W/orhf/model.safetensors" "$ROOT/import" "$W/orhf" -o "$W/orhf/model.safetensors" --overwrite
    out_rule out-rule-train-shard "$W/syn_train_000001.bin" $TP $DATA -o "$W/syn_train_000001.bin" --steps 1 --overwrite
    out_rule out-rule-train-holds "$W/syn_val_000000.bin" $TP $DATA -o "$W" --steps 1 --overwrite
    if [ $HAVE_TOK = 1 ]; then
        out_rule out-rule-prepare-shards "$W/syn_train_000001.bin" "$ROOT/build/prepare_shards" "$W/syn_train_000001.bin" -o "$W/syn" --overwrite
        printf '{"goal": "g", "sol1": "a.", "sol2": "b."}\n' > "$W/valid.jsonl"; echo 0 > "$W/labels.lst"
        out_rule out-rule-prepare-eval "$W/valid.jsonl" "$ROOT/build/prepare_eval" piqa "$W/valid.jsonl" "$W/labels.lst" -o "$W/valid.jsonl"
    else say SKIP out-rule-prepare "no data/cache/gpt2.tiktoken" default-corpus; fi
fi
if want out-rule-report-latest; then fresh "$W/rl"; cp -r "$W/base/." "$W/rl/"; a=$(sums "$W/rl/latest")
    "$ROOT/report" "$W/rl" -o "$W/rl/latest" > "$W/o" 2>&1; rc=$?; b=$(sums "$W/rl/latest")
    run "$W/rl" --steps 3 --resume > "$W/o2" 2>&1; r2=$?
    check out-rule-report-latest "[ $rc = 1 ] && one_error $W/o && [ '$a' = '$b' ] && [ $r2 = 0 ]" "report -o RUN/latest: exit $rc, latest unchanged, then --resume exit $r2"; fi
for d in "''" / //; do n="study-dir-${d//\//root}"; want "$n" || continue
    eval "timeout 20 $ROOT/study $d -m tiny --list" > "$W/o" 2>&1; rc=$?
    check "$n" "[ $rc = 1 ] && one_error $W/o" "study $d: exit $rc: $(lastline "$W/o" | cut -c1-150)"; done
if want advice-no-loop; then fresh "$W/al"; cp "$W/base/log.jsonl" "$W/al/"; run "$W/al" --steps 2 > "$W/o" 2>&1; a=$?; run "$W/al" --steps 2 --resume > "$W/o2" 2>&1; b=$?
    run "$W/al" --steps 2 --overwrite > /dev/null 2>&1; c=$?
    check advice-no-loop "[ $a = 1 ] && [ $b = 1 ] && grep -q -- --overwrite $W/o && ! grep -q 'pass --resume' $W/o && grep -q -- --overwrite $W/o2 && [ $c = 0 ]" "a log, no checkpoint: fresh: $(lastline "$W/o" | cut -c1-110) | --resume: $(lastline "$W/o2" | cut -c1-110)"; fi
if want analyze-data-empty; then "$ROOT/analyze" "$W/base" --data '' > "$W/o" 2>&1; rc=$?
    check analyze-data-empty "[ $rc = 1 ] && one_error $W/o && grep -q 'was given an empty path' $W/o" "$(lastline "$W/o" | cut -c1-150)"; fi
if want plan-match-3000; then t0=$(date +%s.%N); "$ROOT/train_prism" --plan --layers 3000 --match mlp > /dev/null 2>&1; rc=$?; secs=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }")
    check plan-match-3000 "[ $rc = 0 ] && awk 'BEGIN { exit !($secs < 10) }'" "--plan --layers 3000 --match mlp: exit $rc in $secs s (48 s before)"; fi
if want study-list-sigterm; then lrs=$(python3 -c "print(','.join('%.6g' % (1e-4 * (1 + i / 3000)) for i in range(3000)))")
    # The signal goes once study catches SIGTERM (its handler installed, /proc's SigCgt), early in a listing of about
    # a second on a quiet machine: a fixed "sleep 1" came after the listing had ended there (exit 0, nothing measured).
    bg "$W/sl.txt" "$ROOT/study" "$W/sl" -m tiny --grid "lr=$lrs" --list; wait_for "catches_term $pid" 10; t0=$(date +%s.%N); kill -TERM $pid; wait $pid; rc=$?; secs=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }")
    check study-list-sigterm "[ $rc = 75 ] && awk 'BEGIN { exit !($secs < 1) }'" "SIGTERM to study --grid lr=<3000 values> --list once it catches it: exit $rc in $secs s"; fi
if want live-hostile; then mkdir -p "$W/lv"; { echo '{"step": 1, "train_loss": 2.5}'; echo "{\"step\": 2, \"train_loss\": 1$(printf '0%.0s' $(seq 400))}"
        echo '{"step": 3, "train_loss": NaN}'; echo '{"step": 4, "val_loss": Infinity}'; } > "$W/lv/log.jsonl"
    echo '{"prism_run": 1, "model": {"layers": [{"layer": 1, "width": NaN}]}}' > "$W/lv/run.json"; echo '{"step": NaN, "results": []}' > "$W/lv/eval.json"
    python3 - "$ROOT/tools/prism_live.py" "$W/lv" > "$W/o" 2>&1 <<'EOFL'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("live", sys.argv[1]); live = importlib.util.module_from_spec(spec); spec.loader.exec_module(live)
class H:
    def __getattr__(self, name): return lambda *a: print(name, *a[:2]) if name in ("scalars", "config", "final_eval") else "h"
class S:
    def open(self, run): return H()
r = live.Run(sys.argv[2], "lv", None, [S()], []); r.poll(); r.close()
EOFL
    rc=$?; check live-hostile "[ $rc = 0 ] && [ \$(grep -c 'not a finite number' $W/o) = 5 ] && grep -q '^scalars 1' $W/o && ! grep -q Traceback $W/o" "10^400, NaN, Infinity in log.jsonl, run.json, eval.json: exit $rc, $(grep -c 'not a finite number' "$W/o") warnings"; fi
if want live-sparse-log; then mkdir -p "$W/ls"; truncate -s 3G "$W/ls/log.jsonl"
    /usr/bin/time -f 'maxrss %M' python3 - "$ROOT/tools/prism_live.py" "$W/ls" > "$W/o" 2>&1 <<'EOFS'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("live", sys.argv[1]); live = importlib.util.module_from_spec(spec); spec.loader.exec_module(live)
print(len(live.LogTail(sys.argv[2] + "/log.jsonl").poll()), "lines")
EOFS
    rc=$?; kb=$(grep -o 'maxrss [0-9]*' "$W/o" | cut -d' ' -f2)
    check live-sparse-log "[ $rc = 0 ] && [ ${kb:-9999999} -lt 200000 ]" "a 3 GB sparse log.jsonl: exit $rc, ${kb:-?} KB resident"; fi
if want stop-eval-75; then
    if [ $HAVE_TOK = 1 ]; then
        python3 -c "
import json
with open('$W/hs.jsonl', 'w') as f:
    for i in range(10000): f.write(json.dumps({'ind': i, 'activity_label': 'A', 'ctx_a': 'The man walks to the door and', 'ctx_b': 'then', 'endings': ['opens it.', 'sits down.', 'runs away.', 'eats.'], 'label': 1}) + '\n')"
        mkdir -p "$W/sev"; "$ROOT/build/prepare_eval" hellaswag "$W/hs.jsonl" -o "$W/sev/hellaswag.bin" > /dev/null 2>&1
        fresh "$W/sv"; $ROOT/train_prism --vocab 50257 --d 32 --layers 2 --heads 2 --seq-len 64 -b 4 --steps 1 --val-every 0 --sample-every 0 $DATA -o "$W/sv" > /dev/null 2>&1
        bg "$W/se.txt" "$ROOT/eval_zeroshot" "$W/sv" --cpu --tasks hellaswag --data "$W/sev" --json "$W/sv/eval.json"
        wait_for "grep -q '^task' $W/se.txt" 60; sleep 0.5; kill -USR1 $pid; wait $pid; rc=$?
        check stop-eval-75 "[ $rc = 75 ] && [ ! -e $W/sv/eval.json ]" "SIGUSR1 to eval_zeroshot mid-task: exit $rc, no eval.json: $(lastline "$W/se.txt" | cut -c1-120)"
        if want study-stop-evals-75; then rm -rf "$W/st"
            bg "$W/st.txt" "$ROOT/study" "$W/st" --trainer "$ROOT/train_prism" --eval-zeroshot "$ROOT/eval_zeroshot" -m tiny --heads uniform --widths uniform --seeds 1 --eval-data "$W/sev" -- --vocab 50257 --d 32 --layers 2 --heads 2 --seq-len 64 -b 4 --steps 1 --val-every 0 --sample-every 0 --cpu $DATA
            wait_for "[ -s $W/st/uniform-uniform-s1/eval.log ] && grep -q '^task' $W/st/uniform-uniform-s1/eval.log" 120; sleep 0.5; kill -TERM $pid; wait $pid; rc=$?
            check study-stop-evals-75 "[ $rc = 75 ] && [ ! -e $W/st/uniform-uniform-s1/eval.json ]" "SIGTERM to study during its evals: exit $rc (138 before), no eval.json, rerun scores it"; fi
    else say SKIP stop-eval-75 "no data/cache/gpt2.tiktoken" default-corpus; say SKIP study-stop-evals-75 "no data/cache/gpt2.tiktoken" default-corpus; fi
fi

# ---------------------------------------------------------------- issue 43: bounded readers, one file by two paths
if want big-log-report; then fresh "$W/bl"; cp -r "$W/base/." "$W/bl/"; truncate -s 3G "$W/bl/log.jsonl"
    /usr/bin/time -f 'maxrss %M' timeout 120 "$ROOT/report" "$W/bl" -o "$W/bl.html" > "$W/o" 2>&1; rc=$?; kb=$(grep -o 'maxrss [0-9]*' "$W/o" | cut -d' ' -f2)
    check big-log-report "[ $rc = 0 ] && [ ${kb:-9999999} -lt 100000 ]" "report on a 3 GB sparse log.jsonl: exit $rc, ${kb:-?} KB resident"
    /usr/bin/time -f 'maxrss %M' timeout 120 "$ROOT/export" "$W/bl" -o "$W/blx" > "$W/o" 2>&1; rc=$?; kb=$(grep -o 'maxrss [0-9]*' "$W/o" | cut -d' ' -f2)
    check big-log-export "[ $rc = 0 ] && [ ${kb:-9999999} -lt 100000 ]" "export on a 3 GB sparse log.jsonl: exit $rc, ${kb:-?} KB resident"; rm -rf "$W/bl" "$W/blx"; fi
if want live-hostile-study; then fresh "$W/lh/a"; mkdir -p "$W/lh/b" "$W/lh/c"; mkfifo "$W/lh/b/log.jsonl"
    python3 -c "
d='$W/lh'; deep='['*1000+']'*1000
open(d+'/a/log.jsonl','w').write('{\"step\": 1, \"train_loss\": 2.5}\n{\"step\": 2, \"x\": %s}\n' % deep)
open(d+'/a/run.json','w').write('{\"prism_run\": 1, \"args\": [[\"--lr\", \"1%s\"], [\"--steps\", \"%s\"]]}' % ('0'*400, '7'*5000))
open(d+'/a/eval.json','w').write('{\"step\": 1, \"results\": %s}' % deep)
open(d+'/c/log.jsonl','w').write('{\"step\": 1, \"train_loss\": 4.5}\n')"
    timeout 60 python3 - "$ROOT/tools/prism_live.py" "$W/lh" > "$W/o" 2>&1 <<'EOFS'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("live", sys.argv[1]); live = importlib.util.module_from_spec(spec); spec.loader.exec_module(live)
class H:
    def __init__(s, n): s.n = n
    def config(s, cfg, start): print("config", s.n)
    def scalars(s, step, v, w): print("scalars", s.n, step)
    def final_eval(s, step, v): print("final", s.n)
    def branch(s, step, e): pass
    def flush(s): pass
    def close(s): pass
    def describe(s): return "recorder"
class S:
    def __init__(s, d): pass
    def open(s, run): return H(run.name)
live.TensorBoardSink = S
sys.exit(live.main([sys.argv[2], "--tensorboard", "/tmp/unused", "--once"]))
EOFS
    rc=$?; check live-hostile-study "[ $rc = 0 ] && ! grep -q Traceback $W/o && grep -q 'scalars c 1' $W/o && grep -q 'the run b is skipped' $W/o" "nesting 1000 deep, 10^400 and 5000 digits, a FIFO log in a study: exit $rc, $(grep -c warning: $W/o) warnings, run c logged"; fi
if want evalzs-two-spellings; then timeout 60 "$ROOT/eval_zeroshot" "$W/base" --cpu --json "$W/e2.json" --log-samples "$W/./e2.json" > "$W/o" 2>&1; rc=$?
    check evalzs-two-spellings "[ $rc = 1 ] && one_error $W/o && grep -q 'is also the --json file' $W/o" "--json e.json --log-samples ./e.json: exit $rc: $(lastline "$W/o")"; fi
if want json-under-file; then timeout 60 "$ROOT/eval_zeroshot" "$W/base" --cpu --json "$W/base/model.bin/" > "$W/o" 2>&1; rc=$?
    check json-under-file "[ $rc = 1 ] && grep -q 'model.bin is a regular file, not a directory' $W/o" "--json model.bin/: exit $rc: $(lastline "$W/o")"; fi
if want flag-as-value; then fresh "$W/fv"; (cd "$W/fv" && $TP $DATA --steps 1 -o --plan > "$W/o" 2>&1); rc=$?
    check flag-as-value "[ $rc = 1 ] && one_error $W/o && [ ! -e $W/fv/--plan ] && grep -q 'needs a value (DIR), not the flag' $W/o" "-o --plan: exit $rc: $(lastline "$W/o")"
    $TP $DATA --no-rope --plan > "$W/o" 2>&1; rc=$?
    check no-rope-flag-as-value "[ $rc = 1 ] && grep -q 'flag --no-rope needs a value' $W/o" "--no-rope --plan: exit $rc: $(lastline "$W/o")"; fi
if want sigpipe-75; then fresh "$W/sp"; ( run "$W/sp" --steps 100000 2> "$W/sp.err"; echo $? > "$W/sp.rc" ) | head -n 3 > /dev/null; rc=$(cat "$W/sp.rc")
    check sigpipe-75 "[ $rc = 75 ] && [ -s $W/sp/latest ] && resumable $W/sp" "train_prism | head -n 3: exit $rc, checkpoint $(cat $W/sp/latest 2>/dev/null), resumable"; fi
SARGS="--trainer $ROOT/train_prism --eval-zeroshot $ROOT/eval_zeroshot --heads uniform --eval-data $W/none"
if want study-grid-bound; then lr=$(seq -s, 1 100 | sed 's/[0-9]*/&e-5/g'); wd=$(seq -s, 1 100 | sed 's/[0-9]*/&e-4/g'); ws=$(seq -s, 1 100 | sed 's/[0-9]*/&e-3/g')
    /usr/bin/time -f 'maxrss %M' timeout 60 "$ROOT/study" "$W/gb" $SARGS --grid "lr=$lr" --grid "wd=$wd" --grid "warmup-frac=$ws" --list > "$W/o" 2>&1; rc=$?
    check study-grid-bound "[ $rc = 1 ] && grep -q 'the grid has 3000000 runs' $W/o && [ ! -e $W/gb ]" "three axes of 100 values: exit $rc: $(grep error: $W/o | cut -c1-160)"; fi
if want study-grid-empty-value; then timeout 60 "$ROOT/study" "$W/ge" $SARGS --seeds 1 --grid no-rope=,1 --list -- $DATA > "$W/o" 2> /dev/null; rc=$?
    check study-grid-empty-value "[ $rc = 0 ] && [ \$(wc -l < $W/o) = 2 ] && grep -q -- \"--no-rope ''\" $W/o" "--grid no-rope=,1: exit $rc, $(wc -l < $W/o) runs"; fi
if want study-grid-newline; then timeout 60 "$ROOT/study" "$W/gn" $SARGS --seeds 1 --grid "tokenizer=a
b" --list > "$W/o" 2>&1; rc=$?
    check study-grid-newline "[ $rc = 1 ] && one_error $W/o && grep -q 'control character' $W/o" "a newline in a grid value: exit $rc: $(lastline "$W/o")"; fi

# Issue 43, round five, in the run type: a resume's identity is its whole model, a run's lineage is one line, data
# found from anywhere.
if want resume-no-rope-unrecorded; then fresh "$W/nr"; run "$W/nr" --steps 2 --no-rope 2 > /dev/null 2>&1; rm -f "$W/nr/run.json"
    run "$W/nr" --steps 3 --resume > "$W/o" 2>&1; rc=$?
    check resume-no-rope-unrecorded "[ $rc = 1 ] && one_error $W/o && grep -q 'layer 2 rope 0 vs 1 asked for' $W/o && [ ! -e $W/nr/step_00000003 ]" "no run.json, --no-rope left out: exit $rc: $(lastline "$W/o")"; fi
if want cosine-stretch-branch; then fresh "$W/cs"; run "$W/cs" --steps 6 > /dev/null 2>&1; run "$W/cs" --steps 8 --resume > "$W/o" 2>&1; rc=$?
    check cosine-stretch-branch "[ $rc = 0 ] && grep -q 'stretches the cosine decay' $W/o && grep -q '\"flag\": \"--steps\", \"old\": \"6\", \"new\": \"8\"' $W/cs/run.json" "a finished cosine run resumed to 8 steps: exit $rc, recorded as a branch"; fi
if want branch-lineage; then fresh "$W/bl"; run "$W/bl" --steps 6 --ckpt-every 2 --keep 5 > /dev/null 2>&1; echo step_00000002 > "$W/bl/latest"
    run "$W/bl" --steps 6 --resume > "$W/o" 2>&1; rc=$?
    run "$W/bl" --steps 6 --resume --branch-from step_00000002 > "$W/o2" 2>&1; rc2=$?
    run "$W/bl" --steps 9 --ckpt-every 3 --resume --branch-from step_00000004 > "$W/o3" 2>&1; rc3=$?  # and another length
    rc2=$((rc2 + rc3))
    check branch-lineage "[ $rc = 1 ] && grep -q 'a later checkpoint of another lineage' $W/o && [ $rc2 = 0 ] && ls -d $W/bl/lineage_*/step_00000006 > /dev/null 2>&1 && [ \"\$(cat $W/bl/latest)\" = step_00000009 ]" "latest written back by hand: exit $rc; --branch-from, the same and another length: exit $rc2, the old lineage moved aside"; fi
if want resume-from-elsewhere; then fresh "$W/re"; cp "$W"/syn_*.bin "$W/re/"; (cd "$W/re" && $TP --train 'syn_train_*.bin' --val 'syn_val_*.bin' -o run --steps 4 --stop-after 2 > /dev/null 2>&1)
    $TP -o "$W/re/run" --resume --stop-after 1 > "$W/o" 2>&1; rc=$?
    $TP -o "$W/re/run" --resume --train "$W/re/syn_train_*.bin" --val "$W/re/syn_val_*.bin" > "$W/o2" 2>&1; rc2=$?
    check resume-from-elsewhere "[ $rc = 0 ] && [ $rc2 = 0 ]" "relative globs resumed from elsewhere: exit $rc; the same shards by absolute path: exit $rc2"; fi
if want layer-list-words; then $TP $DATA --no-rope -1 --plan > "$W/o" 2>&1; rc=$?; $TP $DATA --no-attention 2-1 --plan > "$W/o2" 2>&1; rc2=$?
    check layer-list-words "[ $rc = 1 ] && grep -q 'is not a layer number or range' $W/o && [ $rc2 = 1 ] && grep -q 'runs backwards; write 1-2' $W/o2" "--no-rope -1: $(lastline "$W/o"); --no-attention 2-1: $(lastline "$W/o2")"; fi
if want plan-outside-checkout; then (cd "$W" && "$ROOT/train_prism" --plan -m 124M > "$W/o" 2>&1); rc=$?
    check plan-outside-checkout "[ $rc = 0 ]" "train_prism --plan -m 124M outside the checkout: exit $rc"; fi

# Issue 50, round six, in the run type: a command decides everything before it changes anything, a branch stopped
# half way is completed by the next command, and the record is checked like the checkpoint.
snap() { (cd "$1" && find . ! -name lock -printf '%p %y %l %s\n' | sort && find . -type f ! -name lock -exec md5sum {} + | sort); }
if want branch-refused-unchanged; then fresh "$W/br"; run "$W/br" --steps 12 --ckpt-every 4 --keep 10 --lr-schedule wsd --decay-frac 0.25 > /dev/null 2>&1
    before=$(snap "$W/br"); bad=""
    for f in "--branch-from step_00000008 --steps 6" "--branch-from step_00000012 --decay-frac 0.5" "--branch-from step_00000004 --warmup 3"; do
        run "$W/br" --resume $f > "$W/o" 2>&1; rc=$?
        { [ $rc = 1 ] && one_error "$W/o" && [ "$(snap "$W/br")" = "$before" ]; } || bad="$bad [$f: exit $rc]"
    done
    printf X | dd of="$W/br/step_00000008/model.bin" bs=1 seek=3000 conv=notrunc 2> /dev/null
    before=$(snap "$W/br"); run "$W/br" --resume --branch-from step_00000008 > "$W/o" 2>&1; rc=$?
    { [ $rc = 1 ] && one_error "$W/o" && [ "$(snap "$W/br")" = "$before" ]; } || bad="$bad [a corrupt target: exit $rc]"
    check branch-refused-unchanged "[ -z \"$bad\" ]" "a shorter --steps, a --decay-frac or --warmup changing steps done, a corrupt target: each refused in one line, OUT byte for byte as it was${bad:+; not:$bad}"; fi
if want record-edited; then fresh "$W/rj"; run "$W/rj" --steps 4 > /dev/null 2>&1; cp "$W/rj/run.json" "$W/rj.json"; bad=""
    for e in 's/"lr": 0.01,/"lr": 0.02,/' 's/"steps": 4,/"steps": 5,/' 's/"warmup": 0,/"warmup": 1e300,/' \
             's/\["--lr", "0.01"\]/["--lr", "fast"]/'; do
        cp "$W/rj.json" "$W/rj/run.json"; sed -i "$e" "$W/rj/run.json"; run "$W/rj" --steps 6 --resume > "$W/o" 2>&1; rc=$?
        { [ $rc = 1 ] && one_error "$W/o" && grep -q 'run.json' "$W/o" && [ ! -e "$W/rj/step_00000006" ]; } || bad="$bad [$e: exit $rc]"
    done
    check record-edited "[ -z \"$bad\" ]" "run.json's plan lr, steps, a warmup of 1e300, a word for the lr in its args: each refused naming run.json, nothing trained${bad:+; not:$bad}"; fi
if want branch-killed; then if ! command -v strace > /dev/null; then say SKIP branch-killed "no strace to kill at a rename" strace; else
    fresh "$W/bk"; run "$W/bk" --steps 8 --ckpt-every 4 --keep 10 > /dev/null 2>&1; bad=""
    for n in 1 2 3 4 5 6 7; do rm -rf "$W/bk$n"; cp -a "$W/bk" "$W/bk$n"
        strace -f -o /dev/null -e trace=rename,renameat,renameat2 -e inject=rename,renameat,renameat2:signal=KILL:when=$n \
            $TP $DATA -o "$W/bk$n" --resume --branch-from step_00000004 > /dev/null 2>&1
        run "$W/bk$n" --resume > "$W/o" 2>&1; rc=$?
        nb=$(grep -o '"flag": "--branch-from"' "$W/bk$n/run.json" | wc -l)
        { [ $rc = 0 ] && [ ! -e "$W/bk$n/branch.json" ] && [ "$(cat "$W/bk$n/latest")" = step_00000008 ] &&
          { [ $nb = 0 ] || { [ $nb = 1 ] && ls -d "$W/bk$n"/lineage_*/step_00000008 > /dev/null 2>&1; }; }; } || bad="$bad [$n: exit $rc, $nb branches]"
    done
    check branch-killed "[ -z \"$bad\" ]" "a branch killed at each of its first 7 renames, then a plain --resume: completed and recorded once, or nothing of it begun${bad:+; not:$bad}"; fi; fi

echo "redteam: $((pass + fail + skip)) cases: $pass pass, $fail fail, $skip skipped"
if [ -n "$RESULTS" ]; then
    mkdir -p "$(dirname "$RESULTS")" && printf 'passed %d\nfailed %d\nskipped %d\n%s' $pass $fail $skip "$cases" > "$RESULTS"
fi
[ $fail = 0 ]
