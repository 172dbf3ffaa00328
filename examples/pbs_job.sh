#!/usr/bin/env bash
# One PBS job: a Dask scheduler and workers on the job's nodes, connected through a
# scheduler file on the shared file system, then the fit as a batch command.
#
#   qsub -v INPUT=/shared/data.zarr/X,OUTPUT=/shared/results/onmfo.zarr examples/pbs_job.sh
#   qsub -v INPUT=...,OUTPUT=...,DASKRNMF_ENV=/shared/venvs/daskrnmf examples/pbs_job.sh
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

SCHEDULER_FILE=$PWD/scheduler-${PBS_JOBID:-local}.json
rm -f "$SCHEDULER_FILE"

dask scheduler --scheduler-file "$SCHEDULER_FILE" --dashboard-address :0 &
SCHEDULER=$!
# four workers of two threads on every node of the allocation. ssh starts a fresh login
# shell there, without this job's environment: the remote command activates it itself.
# ${TMPDIR:-/tmp} is left for the node to expand (its own local disk).
WORKER=$(printf 'cd %q && set +u && source %q && set -u && exec dask worker --scheduler-file %q --nworkers 4 --nthreads 2 --memory-limit 7GiB --local-directory "${TMPDIR:-/tmp}"' \
    "$PWD" "$ACTIVATE" "$SCHEDULER_FILE")
for node in $(sort -u "${PBS_NODEFILE:-/dev/null}"); do
    ssh "$node" "$WORKER" &
done
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

# a resubmitted job continues the checkpoint its predecessor left (an earlier run's
# checkpoint is never overwritten silently: without --resume the fit would refuse it)
RESUME=""
if [ -e "$OUTPUT.ckpt/.daskrnmf-checkpoint" ]; then RESUME="--resume"; fi
daskrnmf fit ONMFO "$INPUT" --output "$OUTPUT" --scheduler-file "$SCHEDULER_FILE" \
    --n-components 49 --max-iter 2 --random-state 0 --checkpoint "$OUTPUT.ckpt" --progress $RESUME
