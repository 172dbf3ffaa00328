"""Workers capped far below the data: do fits finish without restarts, and what do they cost?

    python benchmarks/bench_memory_limits.py [--rows 3000000] [--features 256]
                                             [--limits 300MB,450MB,700MiB] [--workdir DIR]
                                             [--out benchmarks/results/memory_limits.md]

A float32 Zarr array of ``rows x features`` (default 3.07 GB, stored in 20 000-row chunks,
``make_zarr_blobs``) is written first.  For every worker memory limit, a LocalCluster of
2 worker processes x 1 thread with that limit (dask's default pause/terminate fractions)
runs one plain read pass (``X.sum()``) and RFNMF(10, loss="l21", n_init=1, max_iter=3,
tol=0) on the Zarr path.  Reported: the row block daskrnmf chose from the limit, seconds
per read pass and per fit, worker restarts (worker process ids before and after), each
worker's peak RSS, or the error raised before any work.  Numbers, not assertions.

Before this change (issue #17): a Zarr path was cut into ~128 MiB blocks whatever the
limit; 3 GB with 300 or 450 MB workers ended in KilledWorker, with 700 MiB it finished
after 20 nanny restarts; a 300 MB worker paused forever on a 5 MB fit.
"""

import argparse
import os
import platform
import tempfile
import time
import warnings

import dask
from _report import Report, peak as _peak, start_sampler as _start_sampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--limits", default="300MB,450MB,700MiB")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "memory_limits.md"))
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from daskrnmf import RFNMF
    from daskrnmf.io import check_array
    from daskrnmf.datasets import make_zarr_blobs

    emit = Report()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        path = os.path.join(tmp, "X.zarr")
        with dask.config.set(scheduler="threads"):
            make_zarr_blobs(path, n_samples=args.rows, n_features=args.features, n_clusters=10,
                            chunk_rows=20_000, dtype="float32", random_state=0)
        nbytes = args.rows * args.features * 4
        emit("# Fits with workers capped far below the data")
        emit()
        emit(f"X: {args.rows:,} x {args.features} float32 = {nbytes / 1e9:.2f} GB in Zarr "
             f"(chunks of 20 000 rows); LocalCluster 2 workers x 1 thread per limit, dask's "
             f"default memory fractions; RFNMF(10, loss='l21', n_init=1, max_iter=3, tol=0). "
             f"{platform.machine()}, {os.cpu_count()} cores.")
        emit()
        emit("| worker limit | block rows (MiB) | read pass s | RFNMF fit s | fit / read | "
             "worker restarts | peak RSS MiB | outcome |")
        emit("|---|---:|---:|---:|---:|---:|---:|---|")
        for limit in args.limits.split(","):
            with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=limit,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                client.run(_start_sampler)
                pids = client.run(os.getpid)
                try:
                    X = check_array(path + "/X", estimator_name="RFNMF")
                    rows = X.chunks[0][0]
                    block = f"{rows:,} ({rows * args.features * 8 / 2**20:.1f})"
                    tic = time.perf_counter()
                    X.sum().compute()
                    read = time.perf_counter() - tic
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tic = time.perf_counter()
                        RFNMF(10, n_init=1, max_iter=3, tol=0.0, random_state=0).fit(path + "/X")
                        fit = time.perf_counter() - tic
                    restarts = len(set(pids.values()) - set(client.run(os.getpid).values()))
                    peak = max(client.run(_peak).values()) / 2**20
                    emit(f"| {limit} | {block} | {read:.1f} | {fit:.1f} | {fit / read:.2f} | "
                         f"{restarts} | {peak:.0f} | finished |")
                except Exception as exc:   # report, do not stop the table
                    msg = str(exc).splitlines()[0][:160]
                    emit(f"| {limit} | - | - | - | - | - | - | {type(exc).__name__}: {msg} |")
    emit.write(args.out)


if __name__ == "__main__":
    main()
