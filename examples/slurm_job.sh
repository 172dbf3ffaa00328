#!/usr/bin/env bash
# One SLURM job: a Dask scheduler and workers inside the allocation, connected through a
# scheduler file on the shared file system, then the fit as a batch command.
#
#   sbatch examples/slurm_job.sh /shared/data.zarr/X /shared/results/rfnmf.zarr
#   DASKRNMF_ENV=/shared/venvs/daskrnmf sbatch examples/slurm_job.sh IN OUT   # another env
#
#SBATCH --job-name=daskrnmf
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --mem=32G
#SBATCH --time=02:00:00
#SBATCH --output=daskrnmf-%j.log
set -euo pipefail
INPUT=${1:?usage: sbatch slurm_job.sh INPUT OUTPUT}
OUTPUT=${2:?usage: sbatch slurm_job.sh INPUT OUTPUT}

# ---- the Python environment with daskrnmf installed (pip install "daskrnmf[hpc]"), on a
# ---- file system every node sees. Change the default, or set DASKRNMF_ENV when submitting.
DASKRNMF_ENV=${DASKRNMF_ENV:-$HOME/venvs/daskrnmf}
if [ ! -f "$DASKRNMF_ENV/bin/activate" ]; then
    echo "slurm_job.sh: no environment at $DASKRNMF_ENV (set DASKRNMF_ENV)" >&2
    exit 1
fi
set +u                       # activate scripts (conda's too) may read unset variables
# shellcheck disable=SC1091
source "$DASKRNMF_ENV/bin/activate"
set -u

SCHEDULER_FILE=${SLURM_SUBMIT_DIR:-$PWD}/scheduler-${SLURM_JOB_ID:-local}.json
rm -f "$SCHEDULER_FILE"

dask scheduler --scheduler-file "$SCHEDULER_FILE" --dashboard-address :0 &
SCHEDULER=$!
# one worker per task, memory per worker = the task's share of the node (32G / 4 tasks,
# less room for the worker's own process). srun passes this shell's environment, the
# activated one included, to the tasks (SLURM's default --export=ALL).
srun --ntasks="$SLURM_NTASKS" dask worker --scheduler-file "$SCHEDULER_FILE" \
    --nthreads "$SLURM_CPUS_PER_TASK" --memory-limit 7GiB \
    --local-directory "${TMPDIR:-/tmp}" &
WORKERS=$!
trap 'kill $WORKERS $SCHEDULER 2>/dev/null || true' EXIT

# the command waits for the scheduler file; a non-zero exit fails the job
daskrnmf fit RFNMF "$INPUT" --output "$OUTPUT" --scheduler-file "$SCHEDULER_FILE" \
    --n-clusters 10 --loss l1 --n-init 10 --random-state 0 --progress
