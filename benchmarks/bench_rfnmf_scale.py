"""RFNMF (L2,1) on a Zarr array several times larger than the cluster's memory.

    python benchmarks/bench_rfnmf_scale.py [--rows 40000000] [--features 128] [--max-iter 4]
                                           [--workdir DIR] [--out benchmarks/results/rfnmf_scale.md]

A float32 Zarr array of ``rows x features`` (default 20.5 GB; ``make_zarr_blobs``: 10
non-negative clusters, 5 % gross outlier rows, chunks of 100 000 rows) is written first
(threaded scheduler), then a LocalCluster of 2 worker processes x 1 thread, each capped at
2 GiB, runs one plain read pass ``X.sum()``, the same pass over X as the estimators read
it (``daskrnmf.io.open_dask_array``), and RFNMF(10) at its defaults (loss="l21",
n_init=10: restarts screened on the first pass's sample, one run on X) for at most
``--max-iter`` iterations.  Reported: the whole fit, its passes, the time per iteration
from the callback's timestamps and per pass, each over the read pass, and each worker's
peak RSS.  Numbers, not assertions.
"""

import argparse
import os
import shutil
import tempfile
import time
import warnings

from _report import Report, blob_store, capped_cluster, cpu, peak as _peak, reset_peak as _reset_peak

LIMIT = 2 * 2**30


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=40_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--max-iter", type=int, default=4)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the store afterwards")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "rfnmf_scale.md"))
    args = parser.parse_args()
    from daskrnmf import RFNMF
    from daskrnmf.io import open_dask_array

    warnings.simplefilter("ignore")
    emit = Report()
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-scale-")
    store = os.path.join(workdir, "rfnmf-scale.zarr")
    n, d = args.rows, args.features
    X = blob_store(store, n, d, outlier_fraction=0.05, chunk_rows=100_000)
    gb = X.nbytes / 1e9
    with capped_cluster(LIMIT) as client:
        client.run(_reset_peak)
        tic = time.perf_counter()
        X.sum().compute()
        t_read = time.perf_counter() - tic
        read_peak = max(client.run(_peak).values()) / 2**20
        print(f"read pass {t_read:.1f} s", flush=True)
        own = open_dask_array(store, component="X")      # X as the estimators read it
        tic = time.perf_counter()
        own.sum().compute()
        t_own = time.perf_counter() - tic
        print(f"daskrnmf's read pass {t_own:.1f} s", flush=True)
        client.run(_reset_peak)
        stamps = []
        model = RFNMF(10, max_iter=args.max_iter, random_state=0,
                      callback=lambda info: stamps.append(time.perf_counter()) and False)
        tic = time.perf_counter()
        model.fit(store + "/X")
        t_fit = time.perf_counter() - tic
        fit_peak = max(client.run(_peak).values()) / 2**20
    per_iter = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
    emit("# RFNMF (L2,1) on a Zarr array larger than the cluster's memory")
    emit()
    emit(f"X: {n:,} x {d} float32 = {gb:.2f} GB in Zarr (chunks of 100 000 rows), 10 clusters, "
         f"5 % gross outlier rows; LocalCluster 2 workers x 1 thread, {LIMIT / 2**30:.0f} GiB "
         f"each (together {2 * LIMIT / 1e9:.1f} GB, {gb / (2 * LIMIT / 1e9):.1f}x less than X). "
         f"RFNMF(10) defaults (loss='l21', n_init=10), max_iter={args.max_iter}. "
         f"{cpu()}; "
         f"run {time.strftime('%Y-%m-%d')}.")
    emit()
    emit("| run | seconds | passes | per pass / read pass | peak worker RSS (MiB) |")
    emit("|---|---:|---:|---:|---:|")
    emit(f"| plain read pass `X.sum()` | {t_read:.1f} | 1 | 1.00 | {read_peak:.0f} |")
    emit(f"| daskrnmf's read pass `open_dask_array(...).sum()` | {t_own:.1f} | 1 | "
         f"{t_own / t_read:.2f} | - |")
    emit(f"| RFNMF whole fit ({model.n_iter_} iterations) | {t_fit:.1f} | {model.n_passes_} | "
         f"{t_fit / model.n_passes_ / t_read:.2f} | {fit_peak:.0f} |")
    emit()
    emit(f"Time per iteration (callback timestamps): {per_iter:.1f} s = "
         f"{per_iter / t_read:.2f}x the read pass; whole fit per iteration "
         f"{t_fit / max(model.n_iter_, 1) / t_read:.2f}x (first pass with the seeding sample, "
         f"the restarts screened in memory and the final labels included). Objective "
         f"{model.objective_:.4g}.")
    emit()
    emit("Last committed run (2026-11-24, a 2-core AMD EPYC Zen 5; through zarr's reader, "
         "X in 100 000-row blocks): read pass 32.2 s; whole fit 172.4 s, 5 passes, 1.07x the "
         "read pass per pass, peak 729 MiB; per iteration 1.11x, whole fit per iteration "
         "1.79x. The run before (2026-11-23, before the compiled first pass, the thresholded "
         "seeding sample and the float32 kernels): whole fit 305.6 s, 1.88x per pass.")
    emit.write(args.out)
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
