#!/usr/bin/env bash
# Stop the private SLURM that start.sh started in DIR (its jobs are cancelled first).
set -uo pipefail
DIR=$(realpath -m "${1:?usage: stop.sh DIR}")
export SLURM_CONF=$DIR/slurm.conf
scancel --user="$(id -un)" 2>/dev/null
# the three daemons stopped at once: each takes 1.5-2 s to exit, 5-6 s one after the other
pids=()
for daemon in slurmd slurmctld munge/munged; do
    pid=$(cat "$DIR/$daemon.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null && pids+=("$pid")
done
for pid in ${pids[@]+"${pids[@]}"}; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
exit 0
