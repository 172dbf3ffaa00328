#!/usr/bin/env bash
# One SLURM job: a Dask scheduler and one worker per task inside the allocation, then a
# daskrnmf fit as a batch command; at the end the scheduler and the workers are shut down
# in order (no killed job step, no traceback, no scratch left behind).
#
#   sbatch examples/slurm_job.sh MODEL INPUT OUTPUT [--PARAM VALUE ...]
#
#   sbatch examples/slurm_job.sh RFNMF /shared/data.zarr/X /shared/rfnmf.zarr \
#       --n-clusters 10 --loss l1 --random-state 0
#   sbatch -N2 --ntasks-per-node=8 --mem=64G -t 12:00:00 examples/slurm_job.sh ONMFO \
#       /shared/data.zarr/X /shared/onmfo.zarr --n-components 49 --checkpoint /shared/onmfo.ckpt
#
# Options given to sbatch override the #SBATCH lines below. Each worker gets its task's
# share of the allocation's memory (--mem per node, or --mem-per-cpu), less room for the
# worker's own process; the scheduler and the fit run in this batch shell.
#
# Walltime: SLURM sends SIGTERM to this script 120 s before the time limit (--signal
# below); the fit then stops (a model with --checkpoint DIR writes its checkpoint) and
# exits 143, and, when a checkpoint exists, the script submits the same job again, to
# start when this one has ended (at most DASKRNMF_RESUBMITS times, default 3); that job
# continues with --resume. Without --checkpoint the fit starts afresh.
#
# Environment (set when submitting: VAR=value sbatch ...):
#   DASKRNMF_ENV        virtual environment with daskrnmf (pip install "daskrnmf[hpc]") on a
#                       file system every node sees (default: $HOME/venvs/daskrnmf)
#   DASKRNMF_INTERFACE  network interface for the scheduler and workers (e.g. ib0)
#   DASKRNMF_DEBUG=1    keep Dask's own INFO log lines and show tracebacks
#
#SBATCH --job-name=daskrnmf
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --mem=32G
#SBATCH --time=02:00:00
#SBATCH --signal=B:TERM@120
#SBATCH --output=daskrnmf-%j.log
set -euo pipefail
usage="usage: sbatch slurm_job.sh MODEL INPUT OUTPUT [--PARAM VALUE ...]"
MODEL=${1:?$usage}
INPUT=${2:?$usage}
OUTPUT=${3:?$usage}
shift 3
PARAMS=("$@")

# ---- the Python environment
DASKRNMF_ENV=${DASKRNMF_ENV:-$HOME/venvs/daskrnmf}
if [ ! -f "$DASKRNMF_ENV/bin/activate" ]; then
    echo "slurm_job.sh: no environment at $DASKRNMF_ENV (set DASKRNMF_ENV)" >&2
    exit 1
fi
set +u                       # activate scripts (conda's too) may read unset variables
# shellcheck disable=SC1091
source "$DASKRNMF_ENV/bin/activate"
set -u

JOB=$(scontrol show job -o "${SLURM_JOB_ID:?not inside a SLURM job}" 2>/dev/null || true)
field() { tr ' ' '\n' <<<"$JOB" | sed -n "s/^$1=//p" | head -1; }
SCRIPT=$(field Command)
SCRIPT=${SCRIPT:-$0}

# ---- Dask's own INFO lines stay out of the job log (warnings and errors stay in)
DEBUG=()
if [ "${DASKRNMF_DEBUG:-0}" = 1 ]; then
    DEBUG=(--debug)
else
    export DASK_LOGGING__DISTRIBUTED=warning
fi
NET=()
if [ -n "${DASKRNMF_INTERFACE:-}" ]; then NET=(--interface "$DASKRNMF_INTERFACE"); fi

# ---- memory per worker: the task's share of the allocation, 85 % of it for the worker
# tasks on this node: --ntasks-per-node, else the first (largest) count of the node list,
# "4(x2),3" -> 4
TASKS_HERE=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%[(,]*}}
if [ -n "${SLURM_MEM_PER_NODE:-}" ]; then
    MB=$(( SLURM_MEM_PER_NODE / TASKS_HERE ))
elif [ -n "${SLURM_MEM_PER_CPU:-}" ]; then
    MB=$(( SLURM_MEM_PER_CPU * ${SLURM_CPUS_PER_TASK:-1} ))
else
    MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / TASKS_HERE ))
fi
MEMORY_LIMIT="$(( MB * 85 / 100 ))MiB"

SCRATCH=${TMPDIR:-/tmp}/daskrnmf-job-$SLURM_JOB_ID
export DASK_TEMPORARY_DIRECTORY=$SCRATCH     # everything Dask writes locally, removed at the end
SCHEDULER_FILE=${SLURM_SUBMIT_DIR:-$PWD}/scheduler-$SLURM_JOB_ID.json
rm -f "$SCHEDULER_FILE"

# a scheduler left without any worker (every worker task gone) fails the fit's work after
# this long, instead of holding it until the walltime
export DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT=${DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT:-10m}
# any free port (the address is in the scheduler file): the default, 8786, is taken by
# the scheduler of another job on the same node, or any other Dask scheduler there
dask scheduler --scheduler-file "$SCHEDULER_FILE" --port 0 --dashboard-address :0 "${NET[@]}" &
SCHEDULER=$!
# srun passes this shell's environment (the activated one, the logging setting) to the
# tasks (SLURM's default --export=ALL)
srun --ntasks="$SLURM_NTASKS" --kill-on-bad-exit=0 \
    dask worker --scheduler-file "$SCHEDULER_FILE" --nthreads "${SLURM_CPUS_PER_TASK:-1}" \
    --memory-limit "$MEMORY_LIMIT" --local-directory "$SCRATCH" "${NET[@]}" &
WORKERS=$!

stop_cluster() {
    # the scheduler closes the workers and their nannies, then itself: every task ends on
    # its own (exit 0). Connections closing in the wrong order while that happens are not
    # errors of the fit: Dask's logging is silenced for the shutdown only.
    daskrnmf shutdown --scheduler-file "$SCHEDULER_FILE" || true
    for pid in $WORKERS $SCHEDULER; do
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -f "$SCHEDULER_FILE"
    rm -rf "$SCRATCH"
    if [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then      # the other nodes' scratch folders
        srun --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES" rm -rf "$SCRATCH" || true
    fi
}

# ---- a checkpointed fit continues where its predecessor stopped
CHECKPOINT=""
for ((i = 0; i < ${#PARAMS[@]}; i++)); do
    case ${PARAMS[$i]} in
        --checkpoint) CHECKPOINT=${PARAMS[$((i + 1))]:-} ;;
        --checkpoint=*) CHECKPOINT=${PARAMS[$i]#--checkpoint=} ;;
    esac
done
RESUME=()
if [ -n "$CHECKPOINT" ] && [ -e "$CHECKPOINT/.daskrnmf-checkpoint" ]; then
    RESUME=(--resume)
    echo "slurm_job.sh: continuing the checkpoint $CHECKPOINT"
fi

# ---- the fit; SIGTERM (the walltime signal) is passed on to it
daskrnmf fit "$MODEL" "$INPUT" --output "$OUTPUT" --scheduler-file "$SCHEDULER_FILE" \
    --progress "${RESUME[@]}" "${DEBUG[@]}" "${PARAMS[@]}" &
FIT=$!
trap 'kill -TERM $FIT 2>/dev/null || true' TERM
STATUS=0
while true; do
    wait "$FIT" && STATUS=0 || STATUS=$?
    kill -0 "$FIT" 2>/dev/null || break                # wait returns early on a signal
done
trap - TERM
stop_cluster

if [ "$STATUS" = 143 ] && [ -n "$CHECKPOINT" ] && [ -e "$CHECKPOINT/.daskrnmf-checkpoint" ]; then
    LEFT=${DASKRNMF_RESUBMITS:-3}
    if [ "$LEFT" -gt 0 ]; then
        # the same resources as this job (options given to sbatch are not in the script)
        SAME=(--nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_NTASKS"
              --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --job-name="$SLURM_JOB_NAME")
        # the script's own --ntasks-per-node=4 would apply otherwise
        SAME+=(--ntasks-per-node="${SLURM_NTASKS_PER_NODE:-$TASKS_HERE}")
        for key in Partition Account QOS; do
            value=$(field "$key")
            if [ -n "$value" ] && [ "$value" != "(null)" ]; then
                SAME+=("--${key,,}=$value")
            fi
        done
        if [ -n "${SLURM_MEM_PER_NODE:-}" ]; then SAME+=(--mem="${SLURM_MEM_PER_NODE}M"); fi
        if [ -n "${SLURM_MEM_PER_CPU:-}" ]; then SAME+=(--mem-per-cpu="${SLURM_MEM_PER_CPU}M"); fi
        LIMIT=$(field TimeLimit)
        if [ -n "$LIMIT" ] && [ "$LIMIT" != UNLIMITED ]; then SAME+=(--time="$LIMIT"); fi
        LOG=$(field StdOut)
        if [ -n "$LOG" ]; then SAME+=(--output="$(dirname "$LOG")/$SLURM_JOB_NAME-%j.log"); fi
        NEXT=$(DASKRNMF_RESUBMITS=$((LEFT - 1)) sbatch --parsable "${SAME[@]}" \
               --dependency="afterany:$SLURM_JOB_ID" "$SCRIPT" "$MODEL" "$INPUT" "$OUTPUT" \
               "${PARAMS[@]}")
        echo "slurm_job.sh: stopped at the time limit; job $NEXT continues the checkpoint"
    else
        echo "slurm_job.sh: stopped at the time limit; no resubmission left" >&2
    fi
fi
exit "$STATUS"
