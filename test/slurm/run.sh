#!/usr/bin/env bash
# test/slurm/run.sh [RESULTS_FILE]: every Slurm launch docs/training.md shows, run under a real single-node Slurm
# cluster (test/slurm/cluster.sh) that this script starts on loopback and stops at the end, even when a check
# fails or the script is interrupted. `make test-slurm` runs it (after building train_prism and study with MPI).
# The micro model of the unit tests (2 layers, width 32, vocabulary 256) on synthetic shards, a few steps each:
#   sbatch      docs/training.md's batch script, as printed there (the model flags swapped for the micro model's):
#               the job trains, finishes COMPLETED, its output where the docs say (out/124M, slurm-JOB.out);
#   requeue     the same script signalled mid-run as the time limit would (scancel --signal=TERM: what
#               --signal=TERM@300 does): the trainer checkpoints and exits 75, the script requeues the job, the
#               second part resumes, and the final model.bin equals the uninterrupted job's bit for bit;
#   srun        srun -n 2 --mpi=pmix: 2 ranks over PMIx, losses equal mpirun -np 2's (and its model.bin bit for
#               bit) and one process's within 1e-5 relative (test/test_dist.cpp's bound: measured 3e-7 there);
#   killed      a task of srun -n 2 killed (SIGKILL) mid-step: the step ends, no rank left running, within 30 s;
#   no-pmix     srun -n 2 without PMIx, and PRISM_RENDEZVOUS on CPU ranks: exit 1 and one error each (every task
#               prints it), saying what to do;
#   env         SLURM_* values missing or malformed (srun's own variables overridden in the task): one line
#               naming the variable;
#   study       study --launcher "srun -n 2 --mpi=pmix" in a batch job: its grid runs under Slurm; scancel of
#               the whole job mid-grid; the rerun keeps the finished runs (their model.bin untouched) and redoes
#               the rest (resumed from a checkpoint, or started again), and completes.
# Prints what it runs and what that printed, then "slurm: N passed, M failed, K skipped"; with RESULTS_FILE, the
# counts in test/summary.sh's format too. A machine that cannot start the cluster (not root, Slurm not
# installed: bash setup.sh --slurm) skips every check by name (SKIPPED) and exits 0. Exit 1 when a check failed.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
results=${1:-}
source "$repo/test/slurm/cluster.sh"

passed=0 failed=0 skipped=0 failed_names=()
pass() { echo "slurm: PASSED $1"; passed=$((passed + 1)); }
fail() { echo "slurm: FAILED $1: $2"; failed=$((failed + 1)); failed_names+=("$1"); }
skipped_names=()
# A skip is a failure where $PRISM_REQUIRE says this environment has Slurm (.ci/run installs it).
skip() {
    if [[ " ${PRISM_REQUIRE:-} " == *" slurm "* ]]; then
        fail "$1" "skipped, but PRISM_REQUIRE says this environment has slurm: $2"
    else
        echo "slurm: SKIPPED $1: $2"; skipped=$((skipped + 1)); skipped_names+=("$1: $2")
    fi
}
checks=(cluster sbatch requeue srun killed no-pmix env study)

finish() {
    echo "slurm: $passed passed, $failed failed, $skipped skipped"
    if [[ -n "$results" ]]; then
        mkdir -p "$(dirname "$results")"
        { echo "passed $passed"; echo "failed $failed"; echo "skipped $skipped"
          for n in "${failed_names[@]}"; do echo "failed_case slurm $n"; done
          for n in "${skipped_names[@]}"; do echo "skipped_case slurm $n"; done; } \
            > "$results"
    fi
    ((failed == 0))
}

why=$(slurm_why_not)
for b in train_prism study; do
    [[ -z "$why" && ! -x "$repo/$b" ]] && why="no ./$b (make CPU_ONLY=1 train_prism study)"
done
if [[ -n "$why" ]]; then
    for c in "${checks[@]}"; do skip "$c" "$why"; done
    finish
    exit
fi

t_start=$(date +%s.%N)
W=$(mktemp -d /tmp/prism_slurm.XXXXXX)
cleanup() {
    slurm_stop
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

# ---- the cluster ----
if ! slurm_start "$W/cluster"; then
    fail cluster "$SLURM_START_ERROR"
    for c in "${checks[@]:1}"; do skip "$c" "the cluster did not start"; done
    finish
    exit
fi
echo "slurm: $(slurmctld -V) cluster up in $(elapsed "$t_start") s: $(sinfo -h -N -o '%N %c CPUs %t')"
pass cluster

# Synthetic shards (test/train_util.h's make_data_dir: a counting pattern with some noise, 36000 + 4000 tokens) in
# the format of dataloader.h's write_shard.
mkdir -p "$W/data"
python3 - "$W/data" << 'EOF'
import struct, sys
s, train, val = 7, [], []
for i in range(40000):
    s = (s * 6364136223846793005 + 1442695040888963407) % 2**64
    tok = (s >> 33) % 256 if (s >> 60) < 3 else (i * 7) % 256
    (val if i < 4000 else train).append(tok)
for name, toks in (("syn_val_000000.bin", val), ("syn_train_000001.bin", train)):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))
EOF
export OMP_NUM_THREADS=1  # every rank one thread: the node's 2 CPUs are 2 ranks (sbatch and srun pass it on)
M="--vocab 256 --d 32 --layers 2 --heads 2 --seq-len 32 --lr 1e-2 --val-tokens 256 --sample-every 0 \
--train $W/data/syn_train_*.bin --val $W/data/syn_val_*.bin"

# A job directory: the trainer and study beside the script, as the docs' commands expect (./train_prism).
jobdir() {
    mkdir -p "$1"
    ln -sf "$repo/train_prism" "$1/train_prism"
    ln -sf "$repo/study" "$1/study"
}
# The job's state and exit code once it has left the queue (at most $2 seconds): "COMPLETED 0:0".
wait_job() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [[ -z "$(squeue -h -j "$1" 2> /dev/null)" ]] && break
        sleep 0.1
    done
    scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p; s/.*[^a-zA-Z]ExitCode=\([0-9:]*\).*/\1/p' | tr '\n' ' '
}
# The number of steps OUT/log.jsonl has logged.
steps_logged() {
    local n
    n=$(grep -c '"step"' "$1/log.jsonl" 2> /dev/null)
    echo "${n:-0}"
}
# Waits (at most $3 s) until OUT ($1) has logged $2 steps.
wait_steps() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        (($(steps_logged "$1") >= $2)) && return 0
        sleep 0.05
    done
    return 1
}
# sha256 of a model.bin's contents from byte 1024 on (the layer table and the parameters).
body_hash() { tail -c +1025 "$1" | sha256sum | cut -c1-16; }
show() { sed 's/^/    | /' "$@"; }
# A trainer's output without its step lines but the first and last of each part (the log shows what happened).
brief() { awk '/^step / { if (!s) print; s = 1; last = $0; next } { if (last != "") print last; last = ""; s = 0; print }
               END { if (last != "") print last }' "$@" | show; }

# ---- sbatch of docs/training.md's batch script, and the same script stopped by the time-limit signal ----
# The script as the docs print it; only the model flags change (the 124M model on the default corpus would take
# hours here), and the steps: 3000, so that the signal lands mid-run: the job is over a second long (300 steps took
# 0.4 s, and a signal sent after 20 of them landed once after the last, under CI's load).
steps=3000
script=$(awk '/^#!\/bin\/bash$/ { on = 1 } on && /^```/ { exit } on' "$repo/docs/training.md")
if ! grep -q -- '-m 124M -s prism' <<< "$script"; then
    fail sbatch "docs/training.md's batch script (the block from #!/bin/bash) has no 'srun ./train_prism -m 124M -s prism'"
    skip requeue "no batch script"
else
    script=${script/-m 124M -s prism/$M -b 4 --steps $steps --val-every 100}
    jobdir "$W/a" && echo "$script" > "$W/a/train.sbatch"
    jobdir "$W/b" && echo "$script" > "$W/b/train.sbatch"
    echo "slurm: docs/training.md's batch script, model flags swapped:"
    show "$W/a/train.sbatch"
    ja=$(cd "$W/a" && sbatch --parsable train.sbatch)
    jb=$(cd "$W/b" && sbatch --parsable train.sbatch)
    echo "slurm: sbatch train.sbatch: jobs $ja (runs through) and $jb (signalled)"
    # Job b: SIGTERM to its steps once it has logged 20 steps, as --signal=TERM@300 does before the time limit.
    if wait_steps "$W/b/out/124M" 20 60; then
        scancel --signal=TERM "$jb"
        echo "slurm: scancel --signal=TERM $jb (after $(steps_logged "$W/b/out/124M") steps logged)"
    fi
    sa=$(wait_job "$ja" 60)
    echo "slurm: job $ja: $sa; $W/a:"; (cd "$W/a" && ls out/124M slurm-$ja.out | tr '\n' ' '); echo
    brief "$W/a/slurm-$ja.out"
    if [[ "$sa" == "COMPLETED 0:0 " && -s "$W/a/out/124M/model.bin" && $(steps_logged "$W/a/out/124M") -eq $steps ]]; then
        pass sbatch
    else
        fail sbatch "job $ja ended $sa with $(steps_logged "$W/a/out/124M") steps logged (want COMPLETED 0:0, $steps)"
    fi
    sb=$(wait_job "$jb" 60)
    echo "slurm: job $jb: $sb, restarts $(scontrol show job "$jb" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p'); its output:"
    brief "$W/b/slurm-$jb.out"
    ha=$(body_hash "$W/a/out/124M/model.bin" 2> /dev/null) hb=$(body_hash "$W/b/out/124M/model.bin" 2> /dev/null)
    echo "slurm: model.bin from byte 1024: sha256 $ha (job $ja, uninterrupted), $hb (job $jb, stopped and requeued);" \
        "whole files: $(cmp "$W/a/out/124M/model.bin" "$W/b/out/124M/model.bin" 2>&1 || true)"
    out_b=$(cat "$W/b/slurm-$jb.out" 2> /dev/null)
    if ! grep -q "stopped by SIGTERM after step" <<< "$out_b"; then
        fail requeue "job $jb's output has no 'stopped by SIGTERM after step' (the signal did not land mid-run?)"
    elif ! grep -q "srun: error: .*Exited with exit code 75" <<< "$out_b"; then
        fail requeue "job $jb's srun did not report exit code 75"
    elif ! grep -q "resumed from " <<< "$out_b"; then
        fail requeue "job $jb's second part did not resume"
    elif [[ "$sb" != "COMPLETED 0:0 " ]]; then
        fail requeue "job $jb ended $sb (want COMPLETED 0:0 after the requeue)"
    elif ! cmp -i 1024 "$W/a/out/124M/model.bin" "$W/b/out/124M/model.bin"; then
        fail requeue "the requeued job's model.bin differs from the uninterrupted job's"
    else
        pass requeue
    fi
fi

# ---- srun -n 2 with PMIx: the losses of mpirun -np 2 bit for bit, and of one process of the same batch ----
losses() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    print(json.loads(l)["train_loss"])' "$1/log.jsonl"; }
S="$M --steps 8 --val-every 0"
jobdir "$W/dp"
(
    cd "$W/dp"
    ./train_prism $S -b 4 -o one > one.txt 2>&1
    timeout 60 mpirun --oversubscribe --allow-run-as-root -np 2 ./train_prism $S -b 2 -o mpi > mpi.txt 2>&1
) &
ref=$!
(cd "$W/dp" && timeout 60 srun -n 2 --mpi=pmix ./train_prism $S -b 2 -o srun > srun.txt 2>&1)
rc=$?
wait $ref
echo "slurm: srun -n 2 --mpi=pmix ./train_prism ... -b 2 -o srun: exit $rc"
show <(grep -E "ranks|^step +[0-9]+ " "$W/dp/srun.txt" | head -4)
paste <(losses "$W/dp/one") <(losses "$W/dp/mpi") <(losses "$W/dp/srun") > "$W/dp/losses.txt" 2> /dev/null
echo "slurm: train_loss by step: one process -b 4 | mpirun -np 2 -b 2 | srun -n 2 -b 2"
show <(awk '{ printf "%2d  %s  %s  %s\n", NR, $1, $2, $3 }' "$W/dp/losses.txt")
verdict=$(python3 - "$W/dp/losses.txt" << 'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
if len(rows) != 8 or any(len(r) != 3 for r in rows):
    print(f"{len(rows)} steps with 3 losses each, not 8"); sys.exit()
worst = max(abs(float(r[2]) - float(r[0])) / abs(float(r[0])) for r in rows)
if any(r[1] != r[2] for r in rows): print("srun's logged losses differ from mpirun's"); sys.exit()
if worst > 1e-5: print(f"srun's losses differ from one process's by {worst:.2e} relative (bound 1e-5)"); sys.exit()
print(f"ok {worst:.1e}")
EOF
)
same=$(cmp -i 1024 "$W/dp/mpi/model.bin" "$W/dp/srun/model.bin" 2>&1) || verdict="srun's model.bin is not mpirun's: $same"
if [[ $rc -eq 0 && "$verdict" == ok* ]] && grep -q "2 ranks over MPI" "$W/dp/srun.txt"; then
    echo "slurm: srun = mpirun (the logged losses, and model.bin bit for bit: $(body_hash "$W/dp/srun/model.bin"));" \
        "srun vs one process: at most ${verdict#ok } relative"
    pass srun
else
    show "$W/dp/srun.txt"
    fail srun "exit $rc; ${verdict:-no losses}"
fi

# ---- a task of srun -n 2 killed mid-step ----
(cd "$W/dp" && exec timeout 120 srun -n 2 --mpi=pmix ./train_prism $M --steps 100000 --val-every 0 -b 2 -o kill \
    > kill.txt 2>&1) &
srun_pid=$!
if wait_steps "$W/dp/kill" 3 60; then
    victim=""
    for p in $(pgrep -x train_prism); do  # the task of rank 1 of this step
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx SLURM_PROCID=1 &&
            tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "-o kill " && victim=$p
    done
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    wait $srun_pid
    rc=$?
    took=$(elapsed "$t0")
    left=$(for p in $(pgrep -x train_prism); do tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "-o kill " && echo $p; done)
    echo "slurm: kill -KILL rank 1 (pid $victim) at step $(steps_logged "$W/dp/kill"): srun exited $rc after $took s"
    show <(grep -v "^step " "$W/dp/kill.txt" | tail -6)
    if [[ -n "$left" ]]; then
        fail killed "ranks still running after srun ended: $left"
        kill -KILL $left 2> /dev/null
    elif [[ $rc -eq 124 ]] || python3 -c "import sys; sys.exit(float(sys.argv[1]) < 30)" "$took"; then
        fail killed "srun took $took s to end (rc $rc)"
    elif [[ $rc -ne 137 ]]; then
        fail killed "srun exited $rc, not 137 (128 + SIGKILL, the highest exit code of its tasks)"
    else
        pass killed
    fi
else
    kill $srun_pid 2> /dev/null
    wait $srun_pid
    show "$W/dp/kill.txt"
    fail killed "the run did not log 3 steps"
fi

# ---- srun without PMIx, and the environment rendezvous on CPU ranks: refused in one line ----
one_line() {  # $1: the command's output; $2: what its error line must say. One distinct error line, naming it.
    local errs
    errs=$(grep "train_prism: error: " <<< "$1" | sed 's/error: rank [0-9]*: /error: /' | sort -u)
    [[ $(wc -l <<< "$errs") -eq 1 && "$errs" == *"$2"* ]]
}
ok=1
o1=$(cd "$W/dp" && timeout 60 srun -n 2 ./train_prism $S -b 2 -o nopmix 2>&1)
r1=$?
echo "slurm: srun -n 2 ./train_prism ... (no --mpi): exit $r1"
show <(echo "$o1")
one_line "$o1" "without PMIx (PMIX_RANK is not set)" && [[ $r1 -eq 1 ]] || ok=0
mkdir -p "$W/rdv"
o2=$(cd "$W/dp" && PRISM_RENDEZVOUS=$W/rdv timeout 60 srun -n 2 ./train_prism $S -b 2 -o rdv 2>&1)
r2=$?
echo "slurm: PRISM_RENDEZVOUS=DIR srun -n 2 ./train_prism ...: exit $r2"
show <(echo "$o2")
one_line "$o2" "CPU ranks need MPI for their collectives" && [[ $r2 -eq 1 ]] || ok=0
((ok)) && pass no-pmix || fail no-pmix "not one line each, exit 1 (see above)"

# ---- SLURM_* values missing or malformed: one line naming the variable ----
ok=1
while IFS='|' read -r envs want; do
    o=$(cd "$W/dp" && timeout 60 srun -n 1 env $envs ./train_prism $S -o env 2>&1 < /dev/null)
    r=$?
    echo "slurm: srun -n 1 env $envs ./train_prism ...: exit $r: $(grep error: <<< "$o")"
    one_line "$o" "$want" && [[ $r -eq 1 ]] || { ok=0; show <(echo "$o"); }
done << EOF
SLURM_STEP_NUM_TASKS=two|SLURM_STEP_NUM_TASKS=two in the environment is not a number of processes
SLURM_STEP_NUM_TASKS=0|SLURM_STEP_NUM_TASKS=0 in the environment is not a number of processes
PRISM_RENDEZVOUS=$W/rdv SLURM_PROCID=1x|SLURM_PROCID=1x in the environment is not a whole number
-u SLURM_PROCID PRISM_RENDEZVOUS=$W/rdv|neither RANK nor SLURM_PROCID is in the environment
PRISM_RENDEZVOUS=$W/rdv SLURM_PROCID=1|SLURM_PROCID=1 in the environment is not below SLURM_STEP_NUM_TASKS=1
-u SLURM_LOCALID PRISM_RENDEZVOUS=$W/rdv|neither LOCAL_RANK nor SLURM_LOCALID is in the environment
PRISM_RENDEZVOUS=$W/rdv SLURM_LOCALID=-1|SLURM_LOCALID=-1 in the environment is below 0
PRISM_RENDEZVOUS=$W/rdv SLURM_STEP_TASKS_PER_NODE=x|SLURM_STEP_TASKS_PER_NODE=x in the environment is not a whole number
PRISM_RENDEZVOUS=$W/rdv SLURM_JOB_ID=../../etc|SLURM_JOB_ID=../../etc in the environment is not a whole number
PRISM_RENDEZVOUS=$W/rdv SLURM_STEP_ID=0;x|SLURM_STEP_ID=0;x in the environment is not a whole number
EOF
((ok)) && pass env || fail env "a value was not refused in one line naming it (see above)"

# ---- study --launcher "srun -n 2 --mpi=pmix" in a batch job, cancelled and resubmitted ----
jobdir "$W/st"
study_cmd="./study runs --heads uniform,1/2 --seeds 2 --eval-data none --launcher \"srun -n 2 --mpi=pmix\" -- $M -b 2 --steps 40 --ckpt-every 10 --val-every 0"
printf '#!/bin/bash\n#SBATCH -n 2\nexec %s\n' "$study_cmd" > "$W/st/study.sbatch"
echo "slurm: the study's batch script:"
show "$W/st/study.sbatch"
j1=$(cd "$W/st" && sbatch --parsable study.sbatch)
# Cancelled while its second run (1_2-uniform-s1: seeds outermost) trains.
for ((i = 0; i < 1200; i++)); do
    (($(steps_logged "$W/st/runs/1_2-uniform-s1") >= 15)) && break
    sleep 0.05
done
scancel "$j1"
s1=$(wait_job "$j1" 30)
echo "slurm: scancel $j1 at step $(steps_logged "$W/st/runs/1_2-uniform-s1") of run 2 (1_2-uniform-s1): job $s1; its output:"
show "$W/st/slurm-$j1.out"
declare -A before
for r in uniform-uniform-s1 1_2-uniform-s1 uniform-uniform-s2 1_2-uniform-s2; do
    before[$r]=$(body_hash "$W/st/runs/$r/model.bin" 2> /dev/null)
done
list=$(cd "$W/st" && eval "${study_cmd/.\/study runs/./study runs --list}" 2> /dev/null)
echo "slurm: study --list after the cancel:"
show <(cut -f1-2 <<< "$list")
j2=$(cd "$W/st" && sbatch --parsable study.sbatch)
s2=$(wait_job "$j2" 60)
echo "slurm: the same batch script again: job $j2: $s2; its output:"
show "$W/st/slurm-$j2.out"
kept="" redone="" bad=""
for r in uniform-uniform-s1 1_2-uniform-s1 uniform-uniform-s2 1_2-uniform-s2; do
    state=$(awk -F'\t' -v r="runs/$r" 'index($3, r " ") || index($3, r "\n") { print $2 }' <<< "$list")
    h=$(body_hash "$W/st/runs/$r/model.bin" 2> /dev/null)
    [[ "$state" == done ]] && { kept+="$r "; [[ "$h" == "${before[$r]}" ]] || bad+="$r changed; "; }
    [[ "$state" != done ]] && redone+="$r ($state) "
    [[ $(steps_logged "$W/st/runs/$r") -eq 40 ]] || bad+="$r has $(steps_logged "$W/st/runs/$r") steps; "
done
echo "slurm: kept: ${kept:-none}; redone: ${redone:-none}"
if [[ "$s1" != CANCELLED* ]]; then
    fail study "the first job ended $s1, not CANCELLED (was it cancelled mid-grid?)"
elif [[ "$s2" != "COMPLETED 0:0 " || -n "$bad" || -z "$kept" || -z "$redone" ]]; then
    fail study "the resubmitted job ended $s2; ${bad:-kept $kept, redone $redone}"
elif ! grep -q "2 ranks over MPI" "$W/st/runs/1_2-uniform-s2/train.log"; then
    fail study "the runs did not train as 2 ranks under srun"
else
    pass study
fi

slurm_stop
echo "slurm: the group took $(elapsed "$t_start") s (cluster start, checks, cluster stop)"
finish
