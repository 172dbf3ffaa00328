"""ORNMF, RNMF, NMF (daskrnmf) and scikit-learn NMF + KMeans side by side (Wang et al., IJCNN 2017).

    python benchmarks/bench_ornmf.py [--out benchmarks/results/ornmf.md] [--repeats 3]

Section V-C synthetic sequences (``make_ordered_segments``: 8 segments of 20 identical
400-dimensional samples; noise 0, 20 % on every entry, 50 % of the entries) and the Yale
protocol (k = 2..10 random subject subsets of the shipped Yale 32x32 faces, samples
ordered by subject).  Labels: k-means on H (daskrnmf's RFNMF(loss="l2"), 20 restarts;
scikit-learn KMeans for scikit-learn's NMF).  In-process NumPy runs; numbers, not
assertions.
"""

import argparse
import os
import time
import warnings

import numpy as np
from _report import Report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "ornmf.md"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-iter", type=int, default=1000)
    args = parser.parse_args()

    from sklearn.cluster import KMeans
    from sklearn.decomposition import NMF as SkNMF

    from daskrnmf import NMF, ORNMF, RFNMF, RNMF
    from daskrnmf.datasets import load_yale, make_ordered_segments
    from daskrnmf.metrics import clustering_accuracy, normalized_mutual_info

    warnings.simplefilter("ignore")
    emit = Report()

    def methods(k, seed):
        it = args.max_iter
        yield "ORNMF a=0.3", lambda X: ORNMF(k, alpha=0.3, n_clusters=k, max_iter=it, random_state=seed).fit(X).labels_
        for name, Est in (("RNMF", RNMF), ("NMF", NMF)):
            yield name, lambda X, Est=Est: RFNMF(k, loss="l2", n_init=20, random_state=seed).fit(
                Est(k, max_iter=it, random_state=seed).fit_transform(X)).labels_
        yield "sklearn NMF+KMeans", lambda X: KMeans(k, n_init=20, random_state=seed).fit_predict(
            SkNMF(k, init="nndsvda", max_iter=it, random_state=seed).fit_transform(X))

    def run(X, y, k, seed, results, key):
        for name, fn in methods(k, seed):
            tic = time.perf_counter()
            labels = fn(X)
            results.setdefault((key, name), []).append(
                (clustering_accuracy(y, labels), normalized_mutual_info(y, labels),
                 time.perf_counter() - tic))

    results = {}
    sets = [("clean", 0.0, "every-entry"), ("20 % every entry", 0.2, "every-entry"),
            ("50 % of entries", 0.5, "fraction")]
    for label, noise, mode in sets:
        for seed in range(args.repeats):
            X, y = make_ordered_segments(noise=noise, noise_mode=mode, random_state=seed)
            run(X, y, 8, seed, results, f"synthetic, {label}")
    Xy, yy = load_yale()
    Xy = Xy / 255.0
    for k in range(2, 11):
        for seed in range(args.repeats):
            subj = np.sort(np.random.default_rng(seed + 100 * k).choice(np.unique(yy), k, replace=False))
            mask = np.isin(yy, subj)
            run(Xy[mask], yy[mask], k, seed, results, f"Yale k={k}")

    emit(f"# ORNMF benchmarks\n\nmean over {args.repeats} seeds; max_iter={args.max_iter}, "
         "tol=1e-4; labels = k-means on H (20 restarts).\n")
    emit("| data | method | ACC | NMI | time s |")
    emit("|---|---|---:|---:|---:|")
    avg = {}
    for (key, name), vals in results.items():
        a = np.mean(vals, axis=0)
        emit(f"| {key} | {name} | {a[0]:.3f} | {a[1]:.3f} | {a[2]:.2f} |")
        if key.startswith("Yale"):
            avg.setdefault(name, []).append(a[:2])
    emit("\nYale, mean over k = 2..10:\n")
    emit("| method | ACC | NMI |")
    emit("|---|---:|---:|")
    for name, vals in avg.items():
        a = np.mean(vals, axis=0)
        emit(f"| {name} | {a[0]:.3f} | {a[1]:.3f} |")
    emit.write(args.out)


if __name__ == "__main__":
    main()
