# A single-node Slurm cluster for tests, on loopback, from Debian's slurm-wlm and munge: munged,
# slurmctld and slurmd with their configuration, state, sockets and logs in one directory.
# Sourced by slurm_test.sh. Runs as root (SlurmUser=root); nothing outside $1 is written.
#   slurm_start DIR    starts the cluster (exports SLURM_CONF); 1 if it does not come up
#   slurm_stop         stops what slurm_start started
#   slurm_wait JOBID.. waits until the jobs have left the queue
slurm_free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_start() {
    SLURM_DIR="$1"
    mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool" "$SLURM_DIR/munge"
    chmod 700 "$SLURM_DIR/munge"
    dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$SLURM_DIR/munge/munge.key"
    local sock="$SLURM_DIR/munge/munge.socket"
    # --force: munged refuses to run as root otherwise.
    munged --force --key-file="$SLURM_DIR/munge/munge.key" --socket="$sock" \
        --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/munge/munged.log" \
        --seed-file="$SLURM_DIR/munge/munged.seed" || return 1
    local host cpus
    host=$(hostname -s)
    cpus=$(nproc)
    cat >"$SLURM_DIR/slurm.conf" <<CONF
ClusterName=kvectest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldParameters=enable_configless
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
    export SLURM_CONF="$SLURM_DIR/slurm.conf"
    slurmctld -f "$SLURM_CONF" || return 1
    slurmd -f "$SLURM_CONF" || return 1
    local i
    for i in $(seq 1 60); do
        if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then return 0; fi
        sleep 0.5
    done
    echo "the Slurm node did not become idle: sinfo says '$(sinfo -h -o '%t %E' 2>&1)'"
    return 1
}

slurm_stop() {
    [ -n "${SLURM_DIR:-}" ] || return 0
    local f pid
    for f in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
    return 0
}

slurm_wait() {
    local left
    while :; do
        left=$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null | wc -l)
        [ "$left" -eq 0 ] && return 0
        sleep 1
    done
}
