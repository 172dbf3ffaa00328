"""ORNMF time per iteration against n (the ordered penalty must cost O(n d k), not O(n^3)).

    python benchmarks/bench_ornmf_scaling.py [--sizes 125000 250000 500000 1000000 2000000]
                                             [--out benchmarks/results/ornmf_scaling.md]

One LocalCluster (2 workers x 1 thread).  For each n: a Zarr array n x 64
(``make_zarr_blobs``; the cost of a pass does not depend on the values), one plain read pass
``X.sum()``, and ORNMF(k=10, alpha=0.3) for a fixed number of iterations; the seconds
per iteration come from the callback's timestamps (initialisation excluded).  Beside it,
scikit-learn's in-memory ``NMF(solver="mu")`` on the same rows (seconds per iteration =
fit time / n_iter_), the peer without an ordered term.  Numbers, not assertions.
"""

import argparse
import os
import platform
import tempfile
import time
import warnings

import dask.array as da
import numpy as np
from _report import Report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+",
                        default=[125_000, 250_000, 500_000, 1_000_000, 2_000_000])
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "ornmf_scaling.md"))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    from distributed import Client, LocalCluster
    from sklearn.decomposition import NMF as SkNMF

    from daskrnmf import ORNMF
    from daskrnmf.datasets import make_zarr_blobs

    warnings.simplefilter("ignore")
    emit = Report()

    d, k = 64, 10
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-bench-")
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster):
        for n in args.sizes:
            store = os.path.join(workdir, f"seq{n}.zarr")
            make_zarr_blobs(store, n_samples=n, n_features=d, n_clusters=k, outlier_fraction=0.01,
                            chunk_rows=50_000, random_state=0, overwrite=True)
            X = da.from_zarr(store, component="X")
            reads = []
            for _ in range(3):
                tic = time.perf_counter()
                X.sum().compute()
                reads.append(time.perf_counter() - tic)
            t_read = float(np.median(reads))
            stamps = []
            model = ORNMF(k, alpha=0.3, max_iter=args.iters, tol=0.0, random_state=0,
                          callback=lambda info: stamps.append(time.perf_counter()) and False)
            tic = time.perf_counter()
            model.fit(store + "/X")
            t_fit = time.perf_counter() - tic
            per_iter = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
            Xm = X.compute()
            tic = time.perf_counter()
            sk = SkNMF(k, init="nndsvda", solver="mu", max_iter=args.iters, tol=0.0,
                       random_state=0).fit(Xm)
            sk_iter = (time.perf_counter() - tic) / max(sk.n_iter_, 1)
            del Xm
            rows.append((n, X.nbytes / 1e9, t_read, t_fit, per_iter, sk_iter, model.n_passes_))

    emit("# ORNMF: time per iteration against n\n")
    emit(f"LocalCluster 2 workers x 1 thread ({platform.machine()}, {os.cpu_count()} cores); X n x {d} float64 Zarr, "
         f"chunks of 50000 rows; k = {k}, alpha = 0.3, {args.iters} iterations; "
         "one pass over X per iteration.\n")
    emit("| n | GB | read pass s | ORNMF s / iteration | per iteration / read pass | "
         "us / iteration / sample | sklearn NMF(mu) in memory s / iteration | ORNMF fit s | passes |")
    emit("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, gb, t_read, t_fit, per_iter, sk_iter, passes in rows:
        emit(f"| {n} | {gb:.2f} | {t_read:.2f} | {per_iter:.2f} | {per_iter / t_read:.2f} | "
             f"{per_iter / n * 1e6:.2f} | {sk_iter:.2f} | {t_fit:.1f} | {passes} |")
    ns = np.array([r[0] for r in rows], dtype=float)
    ts = np.array([r[4] for r in rows])
    slope = np.polyfit(np.log(ns), np.log(ts), 1)[0]
    emit(f"\nLog-log slope of s / iteration against n: {slope:.2f} (1 = linear).")
    emit.write(args.out)


if __name__ == "__main__":
    main()
