#!/usr/bin/env bash
# A private single-node SLURM for the tests (and for trying the job scripts by hand), from
# Debian's packages (apt-get install slurm-wlm munge), run as root:
#
#   sudo tests/slurm/start.sh DIR [PORT]     # prints: export SLURM_CONF=DIR/slurm.conf
#   sudo tests/slurm/stop.sh DIR
#
# Everything lives in DIR: its own munge key and socket, state, spool, logs; controller and
# node daemon on 127.0.0.1, ports PORT and PORT+1 (default 16817). No accounting, no
# cgroups: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none.
set -euo pipefail
DIR=$(realpath -m "${1:?usage: start.sh DIR [PORT]}")
PORT=${2:-16817}
for cmd in munged slurmctld slurmd sinfo; do
    command -v "$cmd" >/dev/null || { echo "start.sh: $cmd not found (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
mkdir -p "$DIR"/state "$DIR"/spool "$DIR"/munge
chmod 0700 "$DIR/munge"
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 0600 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.sock" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
HOST=$(hostname -s)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > "$DIR/slurm.conf" <<CONF
ClusterName=daskrnmf-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
# a batch job is scheduled as it is submitted (the default lets its start wait up to 3 s)
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
KillWait=10
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc --all) RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$DIR/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.1
done
echo "start.sh: SLURM did not come up; see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
exit 1
