#!/bin/bash
# dev/redteam.sh: a red-team campaign against train_prism, prepare_shards and the inspection tools (issue 19):
# filesystem oddities, signals at every phase of a run, launcher behaviour. Each case prints one line,
#   PASS name: what happened        (handled as the README promises)
#   FAIL name: what happened        (a fault: data lost, a hang, a silent wrong result, a misleading word)
#   SKIP name: why                  (a prerequisite is missing: mpirun, the tokenizer)
# then the counts. Tiny models and data, OMP_NUM_THREADS=1; a few minutes on two cores. Needs train_prism,
# build/prepare_shards, generate, analyze, report, eval_zeroshot built (CPU_ONLY=1 make ...) and python3 (for
# writing shards only; the tools themselves never need it).
#   bash dev/redteam.sh [FILTER]     only the cases whose name contains FILTER
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export OMP_NUM_THREADS=1
W=$(mktemp -d /tmp/prism_redteam_XXXXXX)
FILTER=${1:-}
pass=0 fail=0 skip=0
MAIN=$BASHPID  # a background child killed before its exec would run the EXIT trap too: only the script's own
trap '[ "$BASHPID" = "$MAIN" ] && rm -rf "$W"' EXIT

say() {  # say PASS|FAIL|SKIP name text
    case $1 in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; SKIP) skip=$((skip + 1)) ;; esac
    printf '%s %s: %s\n' "$1" "$2" "$3"
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
    [ $HAVE_TOK = 1 ] || { say SKIP "prep-$kind" "no data/cache/gpt2.tiktoken"; continue; }
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
        mkdir -p "$W/pk"; head -c 2000000 /dev/urandom | base64 -w 60 > "$W/k.txt"; bad=0 whole=0 refused=0
        for i in 1 2 3 4 5 6; do
            rm -f "$W/pk/"*; $PS -o "$W/pk/x" --format lines --shard-tokens 3000 --val-tokens 3000 "$W/k.txt" > /dev/null 2>&1
            head -c 1000000 /dev/urandom | base64 -w 50 > "$W/k2.txt"
            bg "$W/o" $PS -o "$W/pk/x" --overwrite --format lines --shard-tokens 2000 --val-tokens 2000 "$W/k2.txt"
            sleep "0.$((i * 15))"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
            $ROOT/train_prism --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --sample-every 0 --train "$W/pk/x_train_*.bin" --val "$W/pk/x_val_*.bin" -o "$W/pko$i" --steps 1 > "$W/o" 2>&1
            if grep -q 'not written together' "$W/o"; then refused=$((refused + 1)); elif [ -f "$W/pko$i/model.bin" ]; then whole=$((whole + 1)); else bad=$((bad + 1)); fi
        done
        check prep-kill9 "[ $bad = 0 ]" "6 kills: $whole trained on one whole set, $refused mixtures refused, $bad other"
    else say SKIP prep-kill9 "no tokenizer"; fi
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
    local secs=$(echo "$(date +%s.%N) - $t0" | bc)
    local line=$(grep -m1 'stopped by' "$W/$name.txt" | cut -c1-150)
    check "$name" "[ $rc = $expect ] && (( \$(echo \"$secs < 10\" | bc) ))" "exit $rc after ${secs:0:4} s: ${line:-$(lastline "$W/$name.txt")}"
}
# A signal before the program's first instruction (while the kernel and the dynamic loader start it) takes its
# default action; that is the one window no program can close: then nothing may have been written.
if want sig-term-at-once; then fresh "$W/ao"; rm -rf "$W/ao"; bg "$W/ao.txt" $TP $DATA -o "$W/ao" --steps 5; kill -TERM $pid; wait $pid; rc=$?
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
sig_case sig-term-validation TERM "logged \$out 2 && sleep 0.2" 75 --steps 100 --val-every 3 --val-tokens 1000000000000
sig_case sig-term-ckpt-every TERM "logged \$out 5" 75 --steps 100000 --ckpt-every 1
if [ $HAVE_TOK = 1 ]; then
    TPV="$ROOT/train_prism --d 32 --layers 2 --heads 2 --seq-len 64 -b 4 --val-every 0"
    if want sig-term-sample; then fresh "$W/ss"; bg "$W/ss.txt" $TPV $DATA -o "$W/ss" --steps 100 --sample-every 2 --sample-tokens 1000000
        wait_for "logged $W/ss 2 && sleep 0.5" 60; t0=$(date +%s); kill -TERM $pid; wait $pid; rc=$?
        check sig-term-sample "[ $rc = 75 ] && [ \$(( \$(date +%s) - $t0 )) -lt 10 ]" "exit $rc: $(grep -m1 'stopped by' "$W/ss.txt")"; fi
else say SKIP sig-term-sample "no tokenizer"; fi
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
guard() { ( sleep 120; kill -9 "$1" 2> /dev/null ) > /dev/null 2>&1 & }  # a hung case ends after 2 minutes
rank1() { pgrep -P "$1" | tail -n 1; }
if command -v mpirun > /dev/null; then
    mpi_sig() {  # mpi_sig NAME SIGNAL TARGET(mpirun|rank1) EXPECT
        want "$1" || return
        fresh "$W/$1"; bg "$W/$1.txt" $MPIRUN -np 2 $TP $DATA -o "$W/$1" --steps 100000; local mp=$pid; guard $mp
        wait_for "logged $W/$1 3" 60
        if [ "$3" = mpirun ]; then kill -$2 $mp; else kill -$2 "$(rank1 $mp)"; fi
        wait $mp; local rc=$?
        check "$1" "[ $rc = $4 ] && resumable $W/$1" "mpirun exit $rc (ranks: $(grep -o 'stopped by [A-Z0-9]* after step [0-9]*' "$W/$1.txt" | head -n 1)); OUT/latest resumable"
    }
    mpi_sig mpi-term-mpirun TERM mpirun 1
    mpi_sig mpi-usr1-mpirun USR1 mpirun 75
    mpi_sig mpi-term-one-rank TERM rank1 75
    if want mpi-kill9-rank; then fresh "$W/mk"; bg "$W/mk.txt" $MPIRUN -np 2 $TP $DATA -o "$W/mk" --steps 100000 --ckpt-every 5; mp=$pid; guard $mp
        wait_for "logged $W/mk 12" 60; kill -9 "$(rank1 $mp)"; wait $mp; rc=$?
        check mpi-kill9-rank "[ $rc != 0 ] && resumable $W/mk" "mpirun exit $rc; OUT/latest resumable"; fi
    if want mpi-rank-never-joins; then t0=$(date +%s)
        $MPI -np 2 bash -c "[ \$OMPI_COMM_WORLD_RANK = 1 ] && sleep 60; exec $TP $DATA -o $W/nj --steps 2 --comm-timeout 3" > "$W/o" 2>&1; rc=$?
        secs=$(( $(date +%s) - t0 )); check mpi-rank-never-joins "[ $rc != 0 ] && [ $secs -lt 40 ]" "exit $rc after $secs s: $(grep -m1 'error:' "$W/o" | cut -c1-160)"; fi
    if want mpi-rank-stopped; then fresh "$W/st"; bg "$W/st.txt" $MPIRUN -np 2 $TP $DATA -o "$W/st" --steps 100000 --comm-timeout 3; mp=$pid; guard $mp
        wait_for "logged $W/st 3" 60; r1=$(rank1 $mp); kill -STOP $r1; t0=$(date +%s); wait $mp; rc=$?; secs=$(( $(date +%s) - t0 ))
        kill -9 $r1 2> /dev/null
        check mpi-rank-stopped "[ $rc != 0 ] && [ $secs -lt 40 ]" "exit $rc after $secs s: $(grep -m1 'waited' "$W/st.txt" | cut -c1-160)"; fi
    if want mpi-two-jobs; then fresh "$W/mj"; bg "$W/mj.txt" $MPIRUN -np 2 $TP $DATA -o "$W/mj" --steps 100000; mp=$pid; guard $mp; wait_for "logged $W/mj 2" 60
        $MPI -np 2 $TP $DATA -o "$W/mj" --steps 10 --resume > "$W/o" 2>&1; rc=$?; kill -USR1 $mp; wait $mp
        check mpi-two-jobs "[ $rc != 0 ] && grep -q 'in use by another train_prism' $W/o" "second job exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-160)"; fi
    if want mpi-np1-world2; then WORLD_SIZE=2 $MPI -np 1 $TP $DATA -o "$W/x" --steps 1 > "$W/o" 2>&1; rc=$?
        check mpi-np1-world2 "[ $rc = 1 ] && grep -q 'WORLD_SIZE=2 are set' $W/o" "exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-160)"; fi
    if want mpi-resume-fewer-ranks; then fresh "$W/fr"; $MPI -np 2 $TP $DATA -o "$W/fr" --steps 6 --stop-after 2 > /dev/null 2>&1
        run "$W/fr" --steps 6 --resume > "$W/o" 2>&1; a=$?; run "$W/fr" --steps 6 --resume --total-batch 256 > "$W/o2" 2>&1; b=$?
        check mpi-resume-fewer-ranks "[ $a = 1 ] && [ $b = 0 ] && grep -q 'global batch of 256' $W/o" "2 ranks -> 1: exit $a ($(lastline "$W/o" | cut -c1-110)...), with --total-batch 256: exit $b"; fi
    if want mpi-resume-more-ranks; then fresh "$W/mr"; $TP $DATA -o "$W/mr" --steps 6 --stop-after 2 -b 4 > /dev/null 2>&1
        $MPI -np 2 $TP $DATA -o "$W/mr" --steps 6 --resume -b 2 > "$W/o" 2>&1; rc=$?
        check mpi-resume-more-ranks "[ $rc = 0 ]" "1 rank of B 4 -> 2 ranks of B 2 (the same global batch): exit $rc"; fi
    if want mpi-state-mixture; then fresh "$W/sm1"; fresh "$W/sm2"
        $MPI -np 2 $TP $DATA -o "$W/sm1" --steps 2 > /dev/null 2>&1; $MPI -np 2 $TP $DATA -o "$W/sm2" --steps 2 > /dev/null 2>&1
        cp "$W/sm2/step_00000002/state_rank1.bin" "$W/sm1/step_00000002/"; $MPI -np 2 $TP $DATA -o "$W/sm1" --steps 4 --resume > "$W/o" 2>&1; rc=$?
        check mpi-state-mixture "[ $rc != 0 ] && grep -q 'mixes two runs' $W/o" "exit $rc: $(grep -m1 'error:' "$W/o" | cut -c1-170)"; fi
else
    for n in mpi-term-mpirun mpi-usr1-mpirun mpi-term-one-rank mpi-kill9-rank mpi-rank-never-joins mpi-rank-stopped mpi-two-jobs \
             mpi-np1-world2 mpi-resume-fewer-ranks mpi-resume-more-ranks mpi-state-mixture; do say SKIP $n "no mpirun"; done
fi

echo "redteam: $((pass + fail + skip)) cases: $pass pass, $fail fail, $skip skipped"
[ $fail = 0 ]
