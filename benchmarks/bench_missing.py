"""Missing values: ORL faces with 10 % of the pixels missing completely at random.

    python benchmarks/bench_missing.py [--seeds 2] [--k 16 49] [--frac 0.1]
                                       [--out benchmarks/results/missing.md]

The 400 ORL faces (32 x 32) scaled to a maximum grey level of 50 (the ONMFO protocol);
a fraction ``--frac`` of the pixels, drawn independently, is set to NaN.  NMF, RobustNMF
and ONMFO (their defaults, K components for each ``--k``, ``missing="mask"``) are fitted on
the faces with
holes; the codes of every face are then solved from its observed pixels (``transform``)
and ``inverse_transform`` fills the holes.  Reported, against the true pixels:

* the mean squared error on the missing pixels and on the observed ones, and their ratio
  (the aim: at most 1.3);
* the same model fitted on the complete faces (``missing="raise"``): its error over all
  pixels, and the time of the masked fit relative to it;
* a baseline: NMF on the faces with every hole filled by its pixel's observed mean.

Mean over ``--seeds`` draws of the missing pixels (and initialisations).
"""

import argparse
import os
import platform
import warnings

import numpy as np
from _report import Report, timed


def models(k, seed, missing):
    from daskrnmf import NMF, ONMFO, RobustNMF

    return {"NMF": lambda: NMF(k, missing=missing, random_state=seed),
            "RobustNMF": lambda: RobustNMF(k, missing=missing, random_state=seed),
            "ONMFO": lambda: ONMFO(k, missing=missing, random_state=seed)}


def errors(model, X, Xin, miss):
    full = model.inverse_transform(model.transform(Xin))
    sq = (X - full) ** 2
    return float(sq[miss].mean()), float(sq[~miss].mean())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--k", type=int, nargs="+", default=[16, 49])
    parser.add_argument("--frac", type=float, default=0.1)
    here = os.path.dirname(__file__)
    parser.add_argument("--out", default=os.path.join(here, "results", "missing.md"))
    args = parser.parse_args()

    from daskrnmf import NMF
    from daskrnmf.datasets import load_orl

    warnings.simplefilter("ignore")
    X, _ = load_orl()
    X = X * (50.0 / X.max())
    rows = {}
    for k in args.k:
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            miss = rng.random(X.shape) < args.frac
            Xn = np.where(miss, np.nan, X)
            for name, make in models(k, seed, "mask").items():
                sec, model = timed(lambda: make().fit(Xn))
                e_miss, e_obs = errors(model, X, Xn, miss)
                csec, complete = timed(lambda: models(k, seed, "raise")[name]().fit(X))
                e_full = float(np.mean((X - complete.inverse_transform(complete.transform(X)))
                                       ** 2))
                rows.setdefault((k, name), []).append((e_miss, e_obs, e_full, sec, csec))
                print(k, seed, name, f"missing {e_miss:.3f} observed {e_obs:.3f} "
                      f"ratio {e_miss / e_obs:.3f} complete {e_full:.3f} "
                      f"{sec:.1f} s vs {csec:.1f} s", flush=True)
            # baseline: holes filled by the pixel's observed mean, then NMF on complete data
            filled = np.where(miss, np.nanmean(Xn, axis=0)[None, :], X)
            sec, base = timed(lambda: NMF(k, random_state=seed).fit(filled))
            e_miss, e_obs = errors(base, X, filled, miss)
            rows.setdefault((k, "NMF on mean-imputed faces"), []).append(
                (e_miss, e_obs, np.nan, sec, np.nan))

    emit = Report()
    emit("# Missing values: ORL faces with missing pixels")
    emit()
    emit(f"400 ORL faces 32 x 32, max grey level 50; {args.frac:.0%} of the pixels missing "
         f"completely at random (NaN); K = {', '.join(map(str, args.k))}, every model at its "
         "defaults with "
         f"`missing=\"mask\"`; mean of {args.seeds} seeds. Codes from each face's observed "
         "pixels (`transform`), holes filled by `inverse_transform`. Errors are mean squared "
         "errors against the true pixels. "
         f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one process "
         "(NumPy input).")
    emit()
    emit("| K | model | MSE missing pixels | MSE observed pixels | ratio (aim <= 1.3) "
         "| complete-data fit: MSE all pixels | s / masked fit | s / complete fit "
         "| time ratio |")
    emit("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (k, name), vals in rows.items():
        v = np.array(vals, dtype=float)
        m = v.mean(axis=0)
        ratio = np.mean(v[:, 0] / v[:, 1])
        full = "—" if np.isnan(m[2]) else f"{m[2]:.3f}"
        csec = "—" if np.isnan(m[4]) else f"{m[4]:.2f}"
        tratio = "—" if np.isnan(m[4]) else f"{m[3] / m[4]:.2f}"
        emit(f"| {k} | {name} | {m[0]:.3f} | {m[1]:.3f} | {ratio:.3f} | {full} | {m[3]:.2f} "
             f"| {csec} | {tratio} |")
    emit()
    emit("Ratio: MSE on the missing pixels / MSE on the observed ones, per seed, averaged. "
         "Time ratio: masked fit / complete-data fit of the same model (the masked "
         "kernels: per-sample Gram matrices for the codes of RobustNMF and ONMFO, per-pixel "
         "Gram matrices for their W; two more GEMMs per pass for NMF). The ratio grows "
         "with K: each pixel's K weights are fitted to the faces that observe it, so the "
         "observed pixels are fitted more closely than the held-out ones (the missing "
         "pixels' error itself falls with K).")
    emit.write(args.out)


if __name__ == "__main__":
    main()
