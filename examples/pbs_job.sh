#!/usr/bin/env bash
# One PBS job: a Dask scheduler and workers on the job's nodes (started with pbsdsh, no
# ssh), connected through a scheduler file on the shared file system, then the fit as a
# batch command; at the end the scheduler and the workers are shut down in order.
#
#   qsub -v INPUT=/shared/data.zarr/X,OUTPUT=/shared/results/onmfo.zarr examples/pbs_job.sh
#   qsub -v INPUT=...,OUTPUT=...,DASKRNMF_ENV=/shared/venvs/daskrnmf examples/pbs_job.sh
#   qsub -v "INPUT=...,OUTPUT=...,MODEL=RFNMF,PARAMS=--n-clusters 10 --loss l1" examples/pbs_job.sh
#
# MODEL (default ONMFO) and PARAMS (its options, default the ONMFO ones below) choose the
# fit; NODE_MEMORY_GB, WORKERS_PER_NODE and THREADS_PER_WORKER size the workers;
# DASKRNMF_DEBUG=1 keeps Dask's INFO lines.
#
#PBS -N daskrnmf
#PBS -l select=4:ncpus=8:mem=32gb
#PBS -l walltime=02:00:00
#PBS -j oe
set -euo pipefail
cd "${PBS_O_WORKDIR:-$PWD}"
: "${INPUT:?qsub -v INPUT=...,OUTPUT=...}" "${OUTPUT:?qsub -v INPUT=...,OUTPUT=...}"

# ---- the Python environment with daskrnmf installed (pip install "daskrnmf[hpc]"), on a
# ---- file system every node sees. Change the default, or pass DASKRNMF_ENV with qsub -v.
DASKRNMF_ENV=${DASKRNMF_ENV:-$HOME/venvs/daskrnmf}
ACTIVATE=$DASKRNMF_ENV/bin/activate
if [ ! -f "$ACTIVATE" ]; then
    echo "pbs_job.sh: no environment at $DASKRNMF_ENV (set DASKRNMF_ENV)" >&2
    exit 1
fi
set +u                       # activate scripts (conda's too) may read unset variables
# shellcheck disable=SC1090
source "$ACTIVATE"
set -u

# ---- Dask's own INFO lines stay out of the job log (warnings and errors stay in)
DEBUG=""
if [ "${DASKRNMF_DEBUG:-0}" = 1 ]; then DEBUG="--debug"; else export DASK_LOGGING__DISTRIBUTED=warning; fi

# ---- workers: WORKERS_PER_NODE on every node of the allocation, each with its share of
# ---- the node's memory (keep these three in step with the select line above)
NODE_MEMORY_GB=${NODE_MEMORY_GB:-32}
WORKERS_PER_NODE=${WORKERS_PER_NODE:-4}
THREADS_PER_WORKER=${THREADS_PER_WORKER:-2}
MEMORY_LIMIT="$(( NODE_MEMORY_GB * 1024 * 85 / 100 / WORKERS_PER_NODE ))MiB"
MODEL=${MODEL:-ONMFO}
# PARAMS is split at white space (qsub -v passes one string); the default's checkpoint
# path is kept whole, spaces and all
if [ -n "${PARAMS:-}" ]; then
    read -r -a ARGS <<<"$PARAMS"
else
    ARGS=(--n-components 49 --max-iter 2 --random-state 0 --checkpoint "$OUTPUT.ckpt")
fi

SCHEDULER_FILE=$PWD/scheduler-${PBS_JOBID:-local}.json
SCRATCH=${TMPDIR:-/tmp}/daskrnmf-job-${PBS_JOBID:-local}
export DASK_TEMPORARY_DIRECTORY=$SCRATCH
rm -f "$SCHEDULER_FILE"

# a scheduler left without any worker (every worker task gone) fails the fit's work after
# this long, instead of holding it until the walltime
export DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT=${DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT:-10m}
# any free port (the address is in the scheduler file): the default, 8786, may be taken
# by another job or scheduler on the same node
dask scheduler --scheduler-file "$SCHEDULER_FILE" --port 0 --dashboard-address :0 &
SCHEDULER=$!
# one launcher per node through PBS's own task manager (pbsdsh -n INDEX: the node's first
# line in PBS_NODEFILE), no ssh. A task starts without this shell's environment: the
# command activates it itself.
WORKER=$(printf 'cd %q && set +u && source %q && set -u && export DASK_TEMPORARY_DIRECTORY=%q DASK_LOGGING__DISTRIBUTED=%q && exec dask worker --scheduler-file %q --nworkers %q --nthreads %q --memory-limit %q --local-directory %q' \
    "$PWD" "$ACTIVATE" "$SCRATCH" "${DASK_LOGGING__DISTRIBUTED:-info}" "$SCHEDULER_FILE" \
    "$WORKERS_PER_NODE" "$THREADS_PER_WORKER" "$MEMORY_LIMIT" "$SCRATCH")
LAUNCHERS=()
while read -r index node; do
    pbsdsh -n "$index" -- bash -c "$WORKER" &
    LAUNCHERS+=($!)
done < <(awk '!seen[$1]++ {print NR - 1, $1}' "${PBS_NODEFILE:-/dev/null}")

stop_cluster() {
    # the scheduler closes the workers, then itself; Dask's logging is silenced for the
    # shutdown only (connections closing in the wrong order are not errors of the fit)
    daskrnmf shutdown --scheduler-file "$SCHEDULER_FILE" || true
    for pid in "${LAUNCHERS[@]}" "$SCHEDULER"; do
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -f "$SCHEDULER_FILE"
    rm -rf "$SCRATCH"
}

# a resubmitted job continues the checkpoint its predecessor left (an earlier run's
# checkpoint is never overwritten silently: without --resume the fit would refuse it);
# the checkpoint is the one the fit's options name
CHECKPOINT=""
for ((i = 0; i < ${#ARGS[@]}; i++)); do
    case ${ARGS[$i]} in
        --checkpoint) CHECKPOINT=${ARGS[$((i + 1))]:-} ;;
        --checkpoint=*) CHECKPOINT=${ARGS[$i]#--checkpoint=} ;;
    esac
done
RESUME=""
if [ -n "$CHECKPOINT" ] && [ -e "$CHECKPOINT/.daskrnmf-checkpoint" ]; then RESUME="--resume"; fi
STATUS=0
# shellcheck disable=SC2086
daskrnmf fit "$MODEL" "$INPUT" --output "$OUTPUT" --scheduler-file "$SCHEDULER_FILE" \
    "${ARGS[@]}" --progress $RESUME $DEBUG || STATUS=$?
stop_cluster
exit "$STATUS"
