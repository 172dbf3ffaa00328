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

    python benchmarks/bench_rfnmf_scale.py --aims [--rows 1000000] [--features 64]
                                           [--json OUT.json] [--compare OLD.json]

Issue 38's aims instead: two float32 stores of ``rows x features`` (chunks of 100 000
rows), gross outliers as whole rows (``make_zarr_blobs``' defaults: 5 % of the rows, a
quarter of their entries) or as 5 % of the entries of every row; on the same capped
cluster, the plain read pass ``X.sum()`` (the best of three), a small fit of each loss
first (kernels compiled on the workers), then RFNMF(10, loss, max_iter=8, tol=0) per
store and loss ("l21", "l1"): the whole fit per iteration over the read pass, its passes
(and passes per iteration), its median rounds (0: a step that made no pass: it repeated
the last pass, or a certified collection round had shown that no row would move) and each
pass's seconds (debug log).  ``--json`` saves the figures;
``--compare OLD.json`` (the same run of an older checkout, e.g. with PYTHONPATH at it)
puts them beside the new in the section this writes into ``--out``, replacing the
section of an earlier ``--aims`` run and keeping the rest of the file.

    python benchmarks/bench_rfnmf_scale.py --profile [--rows 300000] [--features 64]

Where a pass's time goes, per 100 000-row block, in this process (Dask's synchronous
scheduler, no cluster): the ``--aims`` stores' fits (whole-row and entry outliers,
``RFNMF(10, loss, max_iter=8, tol=0, random_state=0)``, l21 and l1) with the block
functions of the fused pass timed call by call (the assignment, worst-fit rows,
reweighted sums, the first median round, the median collection), beside the time to
read and decompress one block.  Printed, not written; seconds of a loaded machine move.
"""

import argparse
import json
import logging
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
    parser.add_argument("--aims", action="store_true", help="issue 38's 1M x 64 aims")
    parser.add_argument("--json", default=None, help="--aims: save the figures here")
    parser.add_argument("--compare", default=None, help="--aims: an older run's --json")
    parser.add_argument("--profile", action="store_true",
                        help="per-block seconds of the fused pass's functions")
    args = parser.parse_args()
    if args.profile:
        return profile(args)
    if args.aims:
        return aims(args)
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


AIMS_SECTION = "## Issue 38's aims: whole fit per iteration over a plain read pass"


def _aims_store(workdir, kind, n, d):
    import dask
    import dask.array as da

    from daskrnmf.datasets import make_zarr_blobs

    store = os.path.join(workdir, f"rfnmf-aims-{kind}-{n}x{d}.zarr")
    if not os.path.exists(store):
        outliers = ({"outlier_fraction": 0.05} if kind == "rows"
                    else {"outlier_fraction": 0.9999, "corrupt_fraction": 0.05})
        with dask.config.set(scheduler="threads"):
            make_zarr_blobs(store, n_samples=n, n_features=d, n_clusters=10, dtype="float32",
                            chunk_rows=100_000, random_state=0, **outliers)
    return store, da.from_zarr(store, component="X")


class _PassLog(logging.Handler):
    """Each pass's seconds, from daskrnmf._blocks' debug lines."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.passes = []

    def emit(self, record):
        if record.args and str(record.msg).startswith("pass %d (%s) over %d blocks"):
            n_blocks, seconds = record.args[2], record.args[3]
            if n_blocks > 1:        # not the in-memory screening on the seeding sample
                self.passes.append((record.args[1], round(float(seconds), 3)))


def aims(args):
    import daskrnmf
    from daskrnmf import RFNMF

    warnings.simplefilter("ignore")
    n = args.rows if args.rows != 40_000_000 else 1_000_000
    d = args.features if args.features != 128 else 64
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-aims-")
    stores = {kind: _aims_store(workdir, kind, n, d) for kind in ("rows", "entries")}
    log = _PassLog()
    logger = logging.getLogger("daskrnmf")
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    out = {"library": os.path.dirname(daskrnmf.__file__), "runs": []}
    with capped_cluster(LIMIT):
        for kind, (store, X) in stores.items():
            X.sum().compute()
            reads = []
            for _ in range(3):
                tic = time.perf_counter()
                X.sum().compute()
                reads.append(time.perf_counter() - tic)
            t_read = min(reads)
            for loss in ("l21", "l1"):
                RFNMF(10, loss=loss, max_iter=2, tol=0, random_state=1).fit(store + "/X")
                t_fit = float("inf")
                for _ in range(2):          # the better of two fits (a shared machine)
                    log.passes = []
                    model = RFNMF(10, loss=loss, max_iter=8, tol=0, random_state=0)
                    tic = time.perf_counter()
                    model.fit(store + "/X")
                    seconds = time.perf_counter() - tic
                    if seconds < t_fit:
                        t_fit, passes = seconds, list(log.passes)
                run = {"kind": kind, "loss": loss, "read": t_read, "fit": t_fit,
                       "n_iter": model.n_iter_, "n_passes": model.n_passes_,
                       "median_rounds": list(getattr(model, "median_rounds_", [])),
                       "passes": passes,
                       "ratio": t_fit / model.n_iter_ / t_read}
                print(run, flush=True)
                out["runs"].append(run)
    logger.removeHandler(log)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    old = None
    if args.compare:
        with open(args.compare) as fh:
            old = {(r["kind"], r["loss"]): r for r in json.load(fh)["runs"]}
    _write_aims(args.out, out, old, n, d)
    if args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)


def profile(args):
    """``--profile``: see the module's docstring."""
    import functools
    from collections import Counter, defaultdict

    import dask
    import numpy as np

    import daskrnmf
    from daskrnmf import RFNMF, _median_search, reductions
    from daskrnmf.models import _clustering

    warnings.simplefilter("ignore")
    n = args.rows if args.rows != 40_000_000 else 300_000
    d = args.features if args.features != 128 else 64
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-profile-")
    seconds, calls = defaultdict(float), Counter()

    def timed(module, name, also=()):
        fn = getattr(module, name)

        @functools.wraps(fn)
        def run(*a, **kw):
            tic = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[name] += time.perf_counter() - tic
                calls[name] += 1
        for m in (module, *also):
            setattr(m, name, run)

    for name in ("nearest", "worst_fit", "cluster_sums", "median_round", "assign_chunk"):
        timed(reductions, name, also=(_clustering,) if name == "assign_chunk" else ())
    timed(_median_search, "median_refine_chunk", also=(_clustering,))
    print(f"{os.path.dirname(daskrnmf.__file__)}; {cpu()}; load {os.getloadavg()[0]:.2f}")
    with dask.config.set(scheduler="synchronous"):
        for kind in ("rows", "entries"):
            store, X = _aims_store(workdir, kind, n, d)
            reads = []
            for _ in range(3):
                tic = time.perf_counter()
                for i in range(X.numblocks[0]):
                    np.asarray(X.blocks[i])
                reads.append((time.perf_counter() - tic) / X.numblocks[0])
            print(f"{kind}: read + decompress a block {min(reads) * 1e3:.1f} ms")
            for loss in ("l21", "l1"):
                RFNMF(10, loss=loss, max_iter=2, tol=0, random_state=1).fit(store + "/X")
                seconds.clear()
                calls.clear()
                model = RFNMF(10, loss=loss, max_iter=8, tol=0, random_state=0)
                tic = time.perf_counter()
                model.fit(store + "/X")
                print(f"  {loss}: fit {time.perf_counter() - tic:.2f} s, {model.n_iter_} "
                      f"iterations, {model.n_passes_} passes; per call: " + ", ".join(
                          f"{name} {seconds[name] / calls[name] * 1e3:.2f} ms ({calls[name]})"
                          for name in seconds))
    if args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)


def _write_aims(path, new, old, n, d):
    emit = Report()
    emit(AIMS_SECTION)
    emit()
    emit(f"X: {n:,} x {d} float32 in Zarr on local disk (chunks of 100 000 rows), 10 "
         "clusters; gross outliers as whole rows (5 % of the rows, a quarter of their "
         "entries) or as 5 % of the entries of every row. LocalCluster 2 workers x 1 "
         f"thread, {LIMIT / 2**30:.0f} GiB each; RFNMF(10, loss, max_iter=8, tol=0, "
         "random_state=0), the better of two fits, after a small fit of each loss (kernels "
         "compiled); the read pass `X.sum()` the best of three on the same cluster in the same run. "
         f"{cpu()}; run {time.strftime('%Y-%m-%d %H:%M')} UTC, the machine shared with "
         "other work (ratios moved by up to ~30 % between runs).")
    emit()
    emit("Aims: whole fit per iteration <= 1.1x the read pass with L2,1, <= 1.5x with L1.")
    emit()
    head = ("| outliers | loss | read pass (s) | whole fit (s) | iterations | passes | passes "
            "per iteration | median rounds | whole fit per iteration / read |")
    emit(head if old is None else head + " before (read, fit, iterations, passes: ratio) |")
    emit("|---|---|---:|---:|---:|---:|---:|---|---:|" + ("" if old is None else "---|"))
    for r in new["runs"]:
        row = (f"| {r['kind']} | {r['loss']} | {r['read']:.2f} | {r['fit']:.2f} | "
               f"{r['n_iter']} | {r['n_passes']} | {r['n_passes'] / r['n_iter']:.2f} | "
               f"{r['median_rounds'] or '-'} | {r['ratio']:.2f} |")
        o = None if old is None else old.get((r["kind"], r["loss"]))
        if o is not None:
            row += (f" {o['read']:.2f} s, {o['fit']:.2f} s, {o['n_iter']} it., "
                    f"{o['n_passes']} passes: {o['ratio']:.2f} |")
        emit(row)
    emit()
    emit("Seconds of each pass over X (first: the feature statistics and seeding sample):")
    emit()
    for r in new["runs"]:
        emit(f"- {r['kind']}, {r['loss']}: " + ", ".join(f"{s:.2f} ({name})"
                                                     for name, s in r["passes"]))
    text = open(path).read() if os.path.exists(path) else ""
    if AIMS_SECTION in text:
        text = text[:text.index(AIMS_SECTION)]
    with open(path, "w") as fh:
        fh.write(text.rstrip("\n") + "\n\n" + "\n".join(emit.lines) + "\n")


if __name__ == "__main__":
    main()
