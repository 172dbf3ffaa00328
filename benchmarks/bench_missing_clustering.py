"""RFNMF with missing values: clustering accuracy with 10 % of the entries missing
completely at random against the complete-data fit, on the bundled sets.

    python benchmarks/bench_missing_clustering.py [--out benchmarks/results/missing_clustering.md]

In memory (NumPy) and out of core (a Dask array of 8 chunks, the histogram medians and
tree sums): the same labels.  Seeds 0-4; the aim is an accuracy within 0.03 of the
complete-data fit (mean over the seeds).  Numbers, not assertions.
"""

import argparse
import os
import platform
import time
import warnings

import dask.array as da
import numpy as np
from _report import Report, timed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "missing_clustering.md"))
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    from daskrnmf import RFNMF
    from daskrnmf.datasets import load_digits, load_orl, load_yale
    from daskrnmf.metrics import clustering_accuracy

    warnings.simplefilter("ignore")
    emit = Report()
    emit(f"# RFNMF with 10 % of the entries missing at random\n\nMachine: {os.cpu_count()} "
         f"cores, Python {platform.python_version()}; run {time.strftime('%Y-%m-%d')}; "
         f"n_init=10, seeds 0-{args.seeds - 1} (the missing entries and the fit use the "
         "same seed); ACC = clustering accuracy against the true classes.\n")
    emit("| data | loss | ACC complete | ACC 10 % missing | difference (aim >= -0.03) | "
         "s complete | s missing | out of core = in memory |")
    emit("|---|---|---:|---:|---:|---:|---:|---|")
    for name, (X, y) in (("digits (1797x64)", load_digits()), ("ORL (400x1024)", load_orl()),
                         ("Yale (165x1024)", load_yale())):
        X = np.asarray(X, dtype=np.float64)
        k = len(np.unique(y))
        for loss in ("l21", "l1"):
            a_full, a_miss, t_full, t_miss, same = [], [], 0.0, 0.0, True
            for seed in range(args.seeds):
                Xm = X.copy()
                Xm[np.random.default_rng(seed).random(X.shape) < 0.1] = np.nan
                t, full = timed(lambda: RFNMF(k, loss=loss, random_state=seed).fit(X))
                t_full += t
                t, miss = timed(lambda: RFNMF(k, loss=loss, random_state=seed,
                                              missing="mask").fit(Xm))
                t_miss += t
                a_full.append(clustering_accuracy(y, full.labels_))
                a_miss.append(clustering_accuracy(y, miss.labels_))
                if seed == 0:
                    ooc = RFNMF(k, loss=loss, random_state=seed, missing="mask").fit(
                        da.from_array(Xm, chunks=(-(-X.shape[0] // 8), X.shape[1])))
                    same = bool(np.array_equal(np.asarray(ooc.labels_), miss.labels_))
            f, m = np.mean(a_full), np.mean(a_miss)
            emit(f"| {name} | {loss} | {f:.3f} | {m:.3f} | {m - f:+.3f} | "
                 f"{t_full / args.seeds:.2f} | {t_miss / args.seeds:.2f} | "
                 f"{'yes' if same else 'NO'} (seed 0) |")
    emit.write(args.out)


if __name__ == "__main__":
    main()
