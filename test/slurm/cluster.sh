# test/slurm/cluster.sh: a single-node Slurm cluster for the tests, sourced by test/slurm/run.sh.
#   slurm_start DIR   starts munged, slurmctld and slurmd in the foreground of background jobs, everything under DIR
#                     (munge key and socket, slurm.conf, state, spool, logs), on 127.0.0.1 and two free ports, the
#                     machine's cores as the node's CPUs; returns when the node is idle (0), or 1 with the reason in
#                     $SLURM_START_ERROR. Exports SLURM_CONF, so sbatch, srun, squeue, ... talk to this cluster.
#   slurm_stop        cancels every job, waits for them to end, then stops the three daemons (by the pids it
#                     started) and waits for them. Safe to call twice, and after a failed start.
#   slurm_why_not     prints why this machine cannot start one ("" when it can): not root, or a program missing.
# Debian 12's slurm-wlm 22.05 (slurmctld, slurmd, slurm-client, munge: bash setup.sh --slurm). The settings that
# make a test cluster quick: AuthInfo's cred_expire=5 (the least Slurm takes; a requeued job waits that long before
# it may start again, 120 s by default) and a scheduling pass every second (sched_interval=1; the default 60 s would
# leave a requeued job pending for up to a minute after it became eligible). KillWait=5: a cancelled job's
# processes get SIGKILL 5 s after SIGTERM (30 by default).

slurm_why_not() {
    [[ "$(id -u)" -eq 0 ]] || { echo "not root (slurmd runs jobs as their users; the test cluster runs as root)"; return; }
    local p
    for p in munged slurmctld slurmd sbatch srun scontrol; do
        command -v "$p" > /dev/null || { echo "no $p (install with: bash setup.sh --slurm)"; return; }
    done
}

# Two TCP ports nobody listens on (the kernel's choice for a socket bound to port 0).
_slurm_free_ports() {
    python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))'
}

SLURM_PIDS=()

slurm_start() {
    local dir=$1 host ports
    SLURM_START_ERROR=""
    host=$(hostname -s)
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" || { SLURM_START_ERROR="cannot create $dir"; return 1; }
    chmod 755 "$dir"  # munged wants every directory above its socket searchable
    head -c 1024 /dev/urandom > "$dir/munge.key" && chmod 600 "$dir/munge.key"
    munged -F --force --socket="$dir/munge/socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
        --seed-file="$dir/munged.seed" --log-file="$dir/munged.log" > "$dir/munged.out" 2>&1 &
    SLURM_PIDS+=($!)
    read -r ctld_port slurmd_port < <(_slurm_free_ports) || { SLURM_START_ERROR="no free ports"; return 1; }
    cat > "$dir/slurm.conf" << EOF
ClusterName=prismtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    local i
    for ((i = 0; i < 50; i++)); do  # munged's socket first: slurmctld authenticates with it from the start
        [[ -S "$dir/munge/socket" ]] && break
        sleep 0.1
    done
    [[ -S "$dir/munge/socket" ]] || { SLURM_START_ERROR="munged did not start: $(tail -1 "$dir/munged.out")"; return 1; }
    slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
    SLURM_PIDS+=($!)
    slurmd -D -f "$SLURM_CONF" -N "$host" > "$dir/slurmd.out" 2>&1 &
    SLURM_PIDS+=($!)
    for ((i = 0; i < 150; i++)); do  # 15 s
        [[ "$(sinfo -h -o %t 2> /dev/null)" == idle ]] && return 0
        sleep 0.1
    done
    SLURM_START_ERROR="the node did not become idle within 15 s: $(tail -2 "$dir/slurmctld.out" "$dir/slurmd.out" | tr '\n' ' ')"
    return 1
}

slurm_stop() {
    if ((${#SLURM_PIDS[@]})) && [[ -n "${SLURM_CONF:-}" ]]; then
        local i
        scancel --full --quiet --user=root 2> /dev/null
        for ((i = 0; i < 150; i++)); do  # KillWait 5 s: every job has ended well within 15 s
            [[ -z "$(squeue -h 2> /dev/null)" ]] && break
            sleep 0.1
        done
    fi
    local p
    for p in "${SLURM_PIDS[@]}"; do kill "$p" 2> /dev/null; done
    for p in "${SLURM_PIDS[@]}"; do wait "$p" 2> /dev/null; done
    SLURM_PIDS=()
}
