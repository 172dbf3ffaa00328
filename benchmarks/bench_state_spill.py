"""What spilling chained per-block state to the scratch directory costs.

    python benchmarks/bench_state_spill.py [--sizes 500000 1000000] [--iters 5]
                                           [--out benchmarks/results/state_spill.md]

On a distributed cluster, the per-block state a pass computes from the previous pass's
state (H; H and R for RobustNMF) is written to ``daskrnmf.scratch-directory`` and read
back by the next pass, so that a lost worker's blocks can be recomputed (see
``daskrnmf/_blocks.py``).  This runs the same fits with the state spilled and with it kept
in worker memory (the behaviour before; a lost worker then ends the fit), on one
LocalCluster (2 workers x 1 thread) and the same Zarr data, and reports seconds per
iteration (from the callback's timestamps), their ratio, the bytes written per pass, and
that both give the same components.  Numbers, not assertions.
"""

import argparse
import os
import platform
import shutil
import tempfile
import time
import warnings

import dask
import dask.array as da
import numpy as np
from _report import Report


def _fit(make, store, mode, scratch):
    from daskrnmf import _blocks

    stamps = []
    model = make(lambda info: stamps.append(time.perf_counter()) and False)
    original = _blocks._choose_scratch
    if mode == "memory":
        _blocks._choose_scratch = lambda: None
    try:
        with dask.config.set({"daskrnmf.scratch-directory": scratch}):
            tic = time.perf_counter()
            model.fit(store + "/X")
            total = time.perf_counter() - tic
    finally:
        _blocks._choose_scratch = original
    return model, (stamps[-1] - stamps[0]) / (len(stamps) - 1), total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 1_000_000])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "state_spill.md"))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from daskrnmf import ORNMF, RobustNMF
    from daskrnmf.datasets import make_zarr_blobs

    warnings.simplefilter("ignore")
    emit = Report()
    d, k = 64, 10
    models = {
        "ORNMF": (lambda cb: ORNMF(k, alpha=0.3, max_iter=args.iters, tol=0.0, random_state=0,
                                   callback=cb), k),
        "RobustNMF": (lambda cb: RobustNMF(k, max_iter=args.iters, tol=0.0, max_inner_iter=20,
                                           random_state=0, callback=cb), k + d),
    }
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-bench-")
    scratch = os.path.join(workdir, "scratch")
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster):
        # warm-up (imports, compilation on the workers), untimed
        warm = os.path.join(workdir, "warm.zarr")
        make_zarr_blobs(warm, n_samples=50_000, n_features=d, n_clusters=k, chunk_rows=25_000,
                        random_state=0, overwrite=True)
        for make, _ in models.values():
            for mode in ("memory", "spill"):
                _fit(make, warm, mode, scratch)
        for n in args.sizes:
            store = os.path.join(workdir, f"blobs{n}.zarr")
            make_zarr_blobs(store, n_samples=n, n_features=d, n_clusters=k, chunk_rows=50_000,
                            random_state=0, overwrite=True)
            X = da.from_zarr(store, component="X")
            tic = time.perf_counter()
            X.sum().compute()
            t_read = time.perf_counter() - tic
            for name, (make, width) in models.items():
                out = {mode: _fit(make, store, mode, scratch) for mode in ("memory", "spill")}
                a, b = out["memory"][0].components_, out["spill"][0].components_
                diff = float(np.abs(a - b).max() / np.abs(a).max())
                rows.append((n, name, t_read, out["memory"][1], out["spill"][1],
                             out["memory"][2], out["spill"][2], n * width * 8 / 2**20, diff))
            shutil.rmtree(store, ignore_errors=True)

    emit("# Spilling chained per-block state to the scratch directory: its cost\n")
    emit(f"LocalCluster 2 workers x 1 thread ({platform.machine()}, {os.cpu_count()} cores); "
         f"X n x {d} float64 Zarr, chunks of 50000 rows; k = {k}; {args.iters} iterations; "
         "scratch directory on the local disk. *memory*: state persisted in worker memory "
         "(a lost worker ends the fit); *spill*: written per block and read back by the next "
         "pass (a lost worker's blocks are recomputed). RobustNMF with max_inner_iter=20; "
         "its state is H and R (n x (k + d)).\n")
    emit("| n | model | read pass s | memory s / iteration | spill s / iteration | spill / memory "
         "| memory fit s | spill fit s | state written per pass MiB | components max rel. diff |")
    emit("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, name, t_read, it_m, it_s, fit_m, fit_s, mib, diff in rows:
        emit(f"| {n} | {name} | {t_read:.2f} | {it_m:.2f} | {it_s:.2f} | {it_s / it_m:.2f} | "
             f"{fit_m:.1f} | {fit_s:.1f} | {mib:.0f} | {diff:.1e} |")
    emit.write(args.out)


if __name__ == "__main__":
    main()
