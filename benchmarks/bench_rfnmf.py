"""RFNMF (l1, l21) side by side with scikit-learn KMeans / NMF and dask-ml KMeans.

    python benchmarks/bench_rfnmf.py [--n-samples 1000000] [--out benchmarks/results/rfnmf.md]

One process, one LocalCluster (2 workers x 1 thread), the same data for every method.
Prints and saves a Markdown table of wall time, iterations, passes over X, ACC and NMI,
plus the ratios the core issue aims at.  Numbers, not assertions.
"""

import argparse
import os
import platform
import tempfile
import warnings

import dask
import dask.array as da
import numpy as np
from _report import Report, cpu, timed, timed_median


# the figures before the clustering-speed work, for the tables' `previous` columns
PREVIOUS_IN_MEMORY = {"digits (1797x64)": ("1.08", "5.76"), "ORL (400x1024)": ("2.58", "17.9"),
                      "Yale (165x1024)": ("2.98", "19.9"), "outlier blobs (203x2)": ("0.35", "1.0")}
PREVIOUS_OOC = {("l21", 1): "5.5", ("l1", 1): "12.5"}
PREVIOUS_RESTARTS = {"l21": "3.3", "l1": "4.0"}
# the last committed tables (2026-11-25, before the driver stopped taking a rise of the
# objective for convergence; in memory: l21 and l1 ratios, medians of 5 fits; out of
# core: ratio, passes), for the `last` columns
LAST_IN_MEMORY = {"digits (1797x64)": ("1.11", "1.85"), "ORL (400x1024)": ("0.38", "0.68"),
                  "Yale (165x1024)": ("0.27", "0.54"), "outlier blobs (203x2)": ("0.52", "0.61")}
LAST_OOC = {("l21", 1): "0.98 (10)", ("l21", 10): "1.07 (9)", ("l1", 1): "1.53 (6)",
            ("l1", 10): "1.87 (5)"}


def _labels_nmf(X, k, seed):
    from sklearn.decomposition import NMF

    W = NMF(k, init="nndsvda", max_iter=500, random_state=seed).fit_transform(X)
    return W.argmax(axis=1), None


def small_sets():
    from daskrnmf import datasets

    X, y = datasets.load_digits()
    yield "digits (1797x64)", X / 16.0, y
    X, y = datasets.load_orl()
    yield "ORL (400x1024)", X / 255.0, y
    X, y = datasets.load_yale()
    yield "Yale (165x1024)", X / 255.0, y
    X, y = datasets.make_outlier_blobs(random_state=0)
    yield "outlier blobs (203x2)", X, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-samples", type=int, default=1_000_000)
    parser.add_argument("--n-init", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "rfnmf.md"))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    import dask_ml.cluster
    import sklearn
    from distributed import Client, LocalCluster
    from sklearn.cluster import KMeans

    import daskrnmf
    from daskrnmf import RFNMF
    from daskrnmf.datasets import make_zarr_blobs
    from daskrnmf.io import open_dask_array
    from daskrnmf.metrics import clustering_accuracy, normalized_mutual_info

    warnings.simplefilter("ignore")
    emit = Report()

    header = "| data | method | time s | iter | passes | ACC | NMI |"
    rule = "|---|---|---:|---:|---:|---:|---:|"

    def row(data, method, t, it, passes, y, labels, mask=None):
        if mask is not None:
            y, labels = y[mask], labels[mask]
        acc = clustering_accuracy(y, labels)
        nmi = normalized_mutual_info(y, labels)
        emit(f"| {data} | {method} | {t:.2f} | {it if it is not None else '-'} | "
             f"{passes if passes is not None else '-'} | {acc:.3f} | {nmi:.3f} |")
        return acc

    n_init = args.n_init
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster):
        emit(f"# RFNMF benchmarks\n\nMachine: {cpu()}, Python {platform.python_version()}; "
             f"daskrnmf {daskrnmf.__version__}, dask {dask.__version__}, scikit-learn {sklearn.__version__}; "
             f"LocalCluster 2 workers x 1 thread; n_init={n_init} wherever a method has restarts.\n")
        emit("## Small in-memory sets (NumPy input; dask-ml gets the same data as a Dask array)\n")
        emit("ACC/NMI on all samples; on the outlier blobs, on the 200 inliers. NMF labels are "
             "argmax of W (data shifted to be non-negative where needed). RFNMF and KMeans "
             "times are the median of 5 fits, the others one fit.\n")
        emit(header)
        emit(rule)
        ratios = {}
        # load (or compile) the compiled kernels before any timing, as a session would
        # have: the first fit of a process otherwise pays Numba's cache load / JIT
        warm = np.random.default_rng(0).random((200, 8))
        for loss in ("l1", "l21"):
            RFNMF(3, loss=loss, n_init=2, random_state=0).fit(warm)
            RFNMF(3, loss=loss, random_state=0).fit(da.from_array(warm, chunks=(50, 8)))
            # the Zarr array is float32: its kernels too
            RFNMF(3, loss=loss, random_state=0).fit(
                da.from_array(warm.astype(np.float32), chunks=(50, 8)))
        KMeans(3, n_init=2, random_state=0).fit(warm)
        for name, X, y in small_sets():
            k = len(np.unique(y[y >= 0]))
            mask = y >= 0
            for loss in ("l1", "l21"):
                t, m = timed_median(lambda: RFNMF(k, loss=loss, n_init=n_init,
                                                  random_state=0).fit(X))
                row(name, f"RFNMF {loss}", t, m.n_iter_, m.n_passes_, y, m.labels_, mask)
                ratios.setdefault(name, {})[loss] = t
            t, km = timed_median(lambda: KMeans(k, n_init=n_init, random_state=0).fit(X))
            row(name, "sklearn KMeans", t, km.n_iter_, None, y, km.labels_, mask)
            ratios[name]["kmeans"] = t
            t, (lab, _) = timed(lambda: _labels_nmf(X - min(0.0, X.min()), k, 0))
            row(name, "sklearn NMF", t, None, None, y, lab, mask)
            Xd = da.from_array(X, chunks=(max(1, X.shape[0] // 4), X.shape[1]))
            t, dk = timed(lambda: dask_ml.cluster.KMeans(k, random_state=0).fit(Xd))
            row(name, "dask-ml KMeans", t, dk.n_iter_, None, y, np.asarray(dk.labels_), mask)

        emit("\nRFNMF end-to-end time / scikit-learn KMeans time, same n_init (aims: l21 <= 1.5, "
             "l1 <= 2.5), each the median of 5 fits in this run (single fits of either vary "
             "up to 2x between runs: KMeans on ORL took 0.31-0.72 s); `previous` is the committed table before the clustering-speed work "
             "(2026-11, same machine; measured without the warm-up fit that now precedes the "
             "timings, which keeps Numba's one-time kernel loading out of the first set); "
             "`last` the last committed table (2026-11-25, before an increase of the objective stopped "
             "being taken for convergence; medians of 5 fits):\n")
        emit("| data | KMeans s | RFNMF l21 s | l21 ratio | previous | last | RFNMF l1 s | "
             "l1 ratio | previous | last |")
        emit("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in ratios.items():
            old = PREVIOUS_IN_MEMORY.get(name, ("-", "-"))
            last = LAST_IN_MEMORY.get(name, ("-", "-"))
            emit(f"| {name} | {r['kmeans']:.2f} | {r['l21']:.2f} | {r['l21'] / r['kmeans']:.2f} | "
                 f"{old[0]} | {last[0]} | {r['l1']:.2f} | {r['l1'] / r['kmeans']:.2f} | "
                 f"{old[1]} | {last[1]} |")

        workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-bench-")
        store = os.path.join(workdir, "blobs.zarr")
        n, d, k = args.n_samples, 64, 10
        t, _ = timed(lambda: make_zarr_blobs(store, n_samples=n, n_features=d, n_clusters=k,
                                             outlier_fraction=0.05, chunk_rows=50_000, random_state=0,
                                             dtype="float32", overwrite=True))
        X = da.from_zarr(store, component="X")
        y = da.from_zarr(store, component="y").compute()  # benchmark bookkeeping only
        emit(f"\n## Out of core: {n} x {d} float32 Zarr array ({X.nbytes / 1e9:.2f} GB, "
             f"{X.numblocks[0]} chunks of {X.chunks[0][0]} rows), {k} clusters, 5 % gross outliers "
             f"(25 % of an outlier row's entries replaced by U[0, 100]); written in {t:.1f} s\n")
        read = [timed(lambda: X.sum().compute())[0] for _ in range(3)]
        t_read = float(np.median(read))
        own = open_dask_array(store, component="X")      # X as the estimators read it
        t_own = float(np.median([timed(lambda: own.sum().compute())[0] for _ in range(3)]))
        emit(f"One plain read pass `X.sum().compute()` (`X = da.from_zarr(...)`): {t_read:.2f} s; "
             f"the same pass over X as the estimators read it (`daskrnmf.io.open_dask_array`: "
             f"chunks decoded into reused buffers, 32 MiB blocks): {t_own:.2f} s (medians of 3).\n")
        emit(header)
        emit(rule)
        for loss in ("l21", "l1"):
            for restarts in (1, n_init):
                t, model = timed(lambda: RFNMF(k, loss=loss, n_init=restarts, random_state=0).fit(store + "/X"))
                row(f"{n} x {d} Zarr", f"RFNMF {loss} n_init={restarts} (defaults)", t, model.n_iter_,
                    model.n_passes_, y, np.asarray(model.labels_))
        # each fit is timed right after a plain read pass and a pass of daskrnmf's reader,
        # and its ratios are taken to those: this shared machine's speed drifts between
        # runs by more than the aims' margins (the plain read pass took 0.52-0.71 s in
        # this benchmark's runs of one afternoon), so a fit is compared with reads made
        # under the same conditions; three such triples, medians and ranges reported
        whole = {}
        for loss in ("l21", "l1"):
            for restarts in (1, n_init):
                model = RFNMF(k, loss=loss, n_init=restarts, random_state=0, max_iter=8, tol=0.0)
                trips = []
                for _ in range(3):
                    r_plain, _ = timed(lambda: X.sum().compute())
                    r_own, _ = timed(lambda: own.sum().compute())
                    t, _ = timed(lambda: model.fit(store + "/X"))
                    it = model.n_iter_
                    trips.append((t, t / it / r_plain, t / it / r_own))
                whole[(loss, restarts)] = (trips, model.n_iter_, model.n_passes_)
        t, dk = timed(lambda: dask_ml.cluster.KMeans(k, random_state=0).fit(X))
        row(f"{n} x 64 Zarr", "dask-ml KMeans", t, dk.n_iter_, None, y, np.asarray(dk.labels_))
        Xm = X.compute()
        t, km = timed(lambda: KMeans(k, n_init=n_init, random_state=0).fit(Xm))
        row(f"{n} x 64 (in memory)", f"sklearn KMeans n_init={n_init}", t, km.n_iter_, None, y, km.labels_)
        emit("\nWhat a user pays per iteration: the whole fit (first pass, seeding, final labels "
             "included) at `max_iter=8, tol=0`, divided by its iterations (8, or fewer when the labels stop changing, which ends a fit even at tol=0), over the plain read pass "
             "(aims: l21 <= 1.3, l1 <= 2.2; n_init=10 <= 2x n_init=1), and over the read pass "
             "of daskrnmf's reader (what the fit adds to its own reads); each fit timed right after "
             "one read pass of each kind, three times: the median ratio and its range; "
             "`previous` is the "
             "issue's measurement of the code before this work on a quiet machine, `last` the "
             "last committed table (ratio to the plain read pass, passes):\n")
        emit("| model | whole fit s | passes | s / iteration | ratio to read pass | ratio to "
             "daskrnmf's read pass | previous | last |")
        emit("|---|---:|---:|---:|---:|---:|---:|---:|")
        for (loss, restarts), (trips, it, passes) in whole.items():
            t, plain, mine = (np.array(v) for v in zip(*trips))
            emit(f"| RFNMF {loss} n_init={restarts} | {np.median(t):.2f} | {passes} | "
                 f"{np.median(t) / it:.2f} | {np.median(plain):.2f} ({plain.min():.2f}-"
                 f"{plain.max():.2f}) | {np.median(mine):.2f} ({mine.min():.2f}-{mine.max():.2f}) | "
                 f"{PREVIOUS_OOC.get((loss, restarts), '-')} | "
                 f"{LAST_OOC.get((loss, restarts), '-')} |")
        emit("\n| loss | n_init=10 / n_init=1 (whole fit) | previous |")
        emit("|---|---:|---:|")
        for loss in ("l21", "l1"):
            r = (np.median([w[0] for w in whole[(loss, n_init)][0]])
                 / np.median([w[0] for w in whole[(loss, 1)][0]]))
            emit(f"| {loss} | {r:.2f} | {PREVIOUS_RESTARTS[loss]} |")

    emit.write(args.out)
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
