"""daskrnmf.choose_k on planted clusters: is the planted k recommended?

    python benchmarks/bench_choose_k.py [--n-samples 1500] [--large 2000000]
                                        [--out benchmarks/results/choose_k.md]

Planted problems as ``daskrnmf.datasets.make_zarr_blobs`` makes them (centres uniform in
[2, 10]^16, unit Gaussian noise, values clipped at 0), k = 3 .. 12, clean and with 5 %
gross outlier rows (a quarter of an outlier row's entries replaced by values uniform in
[0, 100]).  ``choose_k(RFNMF(loss="l1", n_init=3), X, range(2, 16), n_seeds=5)`` runs
in-process on NumPy; the data seeds (100 + k) differ from the ones the rule was tuned on.
Then one case through a LocalCluster on a Zarr store (the out-of-core path), and one
larger than ``max_samples`` (2M x 16: fitted on a sample, two passes over X).  Prints and
saves a Markdown table: planted k, recommended k, the scores at both, time.  Numbers,
not assertions.
"""

import argparse
import datetime
import os
import platform
import tempfile
import time
import warnings

import numpy as np
from _report import Report, timed


def planted(k, n, d=16, outliers=0.0, seed=0):
    """Blobs as make_zarr_blobs makes them, in memory."""
    rng = np.random.default_rng([seed, k])
    centres = rng.uniform(2.0, 10.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    X = centres[y] + rng.normal(size=(n, d))
    rows = np.flatnonzero(rng.random(n) < outliers)
    n_bad = max(1, round(0.25 * d))
    cols = np.argsort(rng.random((rows.size, d)), axis=1)[:, :n_bad]
    X[rows[:, None], cols] = rng.uniform(0.0, 100.0, size=(rows.size, n_bad))
    return np.maximum(X, 0.0), y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-samples", type=int, default=1500)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "choose_k.md"))
    parser.add_argument("--large", type=int, default=2_000_000,
                        help="rows of the larger-than-max_samples case (0: skip it)")
    args = parser.parse_args()

    from daskrnmf import RFNMF, choose_k

    warnings.simplefilter("ignore")
    ks = range(2, 16)
    emit = Report()
    emit("# choose_k: recommended k on planted clusters")
    emit()
    emit(f"{datetime.date.today().isoformat()}, {platform.node()} ({platform.machine()}, "
         f"{os.cpu_count()} cores shared with other jobs), Python {platform.python_version()}: "
         "`python benchmarks/bench_choose_k.py`.")
    emit()
    emit(f"Planted blobs, {args.n_samples} x 16, centres uniform in [2, 10]^16, unit noise; "
         "outliers: 5 % of the rows have a quarter of their entries replaced by values "
         "uniform in [0, 100]. `choose_k(RFNMF(loss=\"l1\", n_init=3), X, range(2, 16), "
         "n_seeds=5, random_state=0)`: the 5 seeds' 15 restarts stacked in one fit per k. "
         "Rule: among the k with stability (mean ARI between seeds) >= 0.9, the largest "
         "whose silhouette (mean of cluster medians) is within 5 % of the best. "
         "Data seeds 100 + k (the rule was tuned on other seeds).")
    emit()
    emit("| planted k | outliers | recommended k | ok | stability at planted | silhouette at "
         "planted | best silhouette at | passes over X | time (s) |")
    emit("|---:|---:|---:|:---:|---:|---:|---:|---:|---:|")
    n_ok = n_all = 0
    for frac in (0.0, 0.05):
        for k in range(3, 13):
            X, _ = planted(k, args.n_samples, outliers=frac, seed=100 + k)
            sec, res = timed(lambda: choose_k(RFNMF(loss="l1", n_init=3), X, ks, n_seeds=5,
                                              random_state=0))
            i = list(res.ks).index(k)
            s = res.scores
            ok = res.k == k
            n_ok += ok
            n_all += 1
            emit(f"| {k} | {frac:.0%} | {res.k} | {'yes' if ok else '**no**'} | "
                 f"{s['stability'][i]:.3f} | {s['silhouette'][i]:.3f} | "
                 f"{res.ks[int(np.nanargmax(s['silhouette']))]} | {int(np.sum(s['n_passes']))} | "
                 f"{sec:.1f} |")
    emit()
    emit(f"Planted k recommended in {n_ok} of {n_all} cases.")
    emit()

    # the out-of-core path: a Zarr store through a LocalCluster
    import dask.array as da
    from distributed import Client, LocalCluster

    k = 8
    X, _ = planted(k, 20_000, outliers=0.05, seed=200)
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster):
        path = os.path.join(tmp, "X.zarr")
        da.from_array(X, chunks=(2500, 16)).to_zarr(path)
        tic = time.perf_counter()
        res = choose_k(RFNMF(loss="l1", n_init=3), path, range(2, 13), n_seeds=5,
                       random_state=0)
        sec = time.perf_counter() - tic
    emit(f"Out of core: 20,000 x 16 Zarr store in 8 chunks, planted k = {k} with 5 % outliers, "
         f"LocalCluster of 2 workers x 1 thread, ks 2..12: recommended k = {res.k} in "
         f"{sec:.1f} s ({res.n_passes} passes over X; the fits on all {res.n_fitted} rows, "
         "drawn as the sample in the first pass).")
    emit()
    emit(res.to_markdown())
    emit()
    if args.large:
        large(emit, args.large)
    emit.write(args.out)


def large(emit, n):
    """Data larger than max_samples: a make_zarr_blobs store of n x 16 float32 rows,
    planted k = 8 with 5 % gross rows, ks 2..11 x 5 seeds, through a LocalCluster of two
    workers; passes over X counted, time against a plain read pass in the same run."""
    from distributed import Client, LocalCluster

    from daskrnmf import RFNMF, choose_k
    from daskrnmf.datasets import make_zarr_blobs
    from daskrnmf.io import open_dask_array

    k = 8
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="3GiB",
                         dashboard_address=None) as cluster, Client(cluster):
        path = make_zarr_blobs(os.path.join(tmp, "blobs.zarr"), n_samples=n, n_features=16,
                               n_clusters=k, outlier_fraction=0.05, chunk_rows=100_000,
                               dtype="float32", random_state=3)
        X = open_dask_array(path, "X")
        read, _ = timed(lambda: float(X.sum().compute()))
        sec, res = timed(lambda: choose_k(RFNMF(loss="l1", n_init=3), path + "/X",
                                          range(2, 12), n_seeds=5, random_state=0))
    emit(f"Larger than max_samples: {n:,} x 16 float32 Zarr store (make_zarr_blobs, planted "
         f"k = {k}, 5 % gross rows, chunks of 100,000 rows), LocalCluster of 2 workers x 1 "
         f"thread (3 GiB each), ks 2..11 x 5 seeds, default max_samples=20,000: recommended "
         f"k = {res.k} in {sec:.1f} s, **{res.n_passes} passes over X** (a plain read pass "
         f"X.sum(): {read:.1f} s; choose_k = {sec / read:.1f} read passes of time, the fits "
         f"on the {res.n_fitted:,}-row sample in memory).")
    emit()
    emit(res.to_markdown())


if __name__ == "__main__":
    main()
