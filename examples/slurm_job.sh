#!/usr/bin/env bash
# One SLURM job: a Dask scheduler and workers inside the allocation, connected through a
# scheduler file on the shared file system, then the fit as a batch command.
#
#   sbatch examples/slurm_job.sh /shared/data.zarr/X /shared/results/rfnmf.zarr
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
SCHEDULER_FILE=${SLURM_SUBMIT_DIR:-$PWD}/scheduler-${SLURM_JOB_ID:-local}.json
rm -f "$SCHEDULER_FILE"

dask scheduler --scheduler-file "$SCHEDULER_FILE" --dashboard-address :0 &
SCHEDULER=$!
# one worker per task, memory per worker = the task's share of the node
srun --ntasks=$SLURM_NTASKS dask worker --scheduler-file "$SCHEDULER_FILE" \
    --nthreads "$SLURM_CPUS_PER_TASK" --memory-limit 7GiB \
    --local-directory "${TMPDIR:-/tmp}" &
WORKERS=$!
trap 'kill $WORKERS $SCHEDULER 2>/dev/null || true' EXIT

# the command waits for the scheduler file; a non-zero exit fails the job
daskrnmf fit RFNMF "$INPUT" --output "$OUTPUT" --scheduler-file "$SCHEDULER_FILE" \
    --n-clusters 10 --loss l1 --n-init 10 --random-state 0 --progress
