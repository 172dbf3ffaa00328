"""ONMFO against its batch twin and scikit-learn on corrupted ORL faces (Zhao & Tan, ICASSP 2016, Sec. 4).

    python benchmarks/bench_onmfo.py [--seeds 3] [--out benchmarks/results/onmfo.md]
                                     [--figures benchmarks/results]

The paper's protocol: the 400 ORL faces (32 x 32) scaled to a maximum grey level of 50; a
fraction rho of the pixels gets U[30, 50] added and is clipped at 50
(``daskrnmf.datasets.corrupt_images``); K = 49, alpha_R = 1, two passes for the online
methods.  E_avg (eq. 20) = mean over pixels of (clean - H W)^2, with H the codes of the
corrupted faces under the learned W (ONMFO / RobustNMF: ``decompose``, which also takes
out R; scikit-learn: ``transform``).  Compared, same data, same process, one run: ONMFO
and RobustNMF at their defaults (``solver="cd"``) beside the old literal multiplicative
configuration (``solver="mu"``, 300 inner rounds; ONMFO batches of 10 and two passes,
RobustNMF 200 iterations), a converged RobustNMF (1500 iterations of "cd") as the
reference, scikit-learn ``MiniBatchNMF`` at its defaults and ``NMF(solver="mu",
max_iter=200, tol=0)``, neither of which models outliers.

Mean over ``--seeds`` corruptions/initialisations.  With matplotlib installed, the learned
bases at rho = 10 % and 30 % are saved as PNGs (the paper's Figures 2-3).
"""

import argparse
import os
import warnings

import numpy as np
from _report import Report, cpu, timed


def e_avg(clean, H, W):
    return float(np.mean((clean - H @ W) ** 2))


def run_all(noisy, clean, seed):
    from sklearn.decomposition import NMF as SkNMF
    from sklearn.decomposition import MiniBatchNMF

    from daskrnmf import ONMFO, RobustNMF

    out = {}
    old = dict(solver="mu", max_inner_iter=300, inner_tol=0)      # the paper's updates
    for name, make in (
            ("ONMFO() defaults (cd)", lambda: ONMFO(49, random_state=seed)),
            ("ONMFO(tol=1e-3) (cd; the previous default tol)",
             lambda: ONMFO(49, tol=1e-3, random_state=seed)),
            ("old: ONMFO mu, batch 10, 2 passes, 300 inner", lambda: ONMFO(
                49, batch_size=10, max_iter=2, tol=0, forget_power=0, random_state=seed,
                **old)),
            ("RobustNMF() defaults (cd)", lambda: RobustNMF(49, random_state=seed)),
            ("old: RobustNMF mu, 200 it. (old default)", lambda: RobustNMF(
                49, max_iter=200, tol=0, random_state=seed, **old)),
            ("RobustNMF converged (cd, 1500 it.)", lambda: RobustNMF(
                49, max_iter=1500, tol=0, random_state=seed))):
        sec, model = timed(lambda: make().fit(noisy))
        H, _ = model.decompose(noisy)
        out[name] = (e_avg(clean, H, model.components_), sec, model.components_)
    for name, make in (
            ("sklearn MiniBatchNMF() defaults",
             lambda: MiniBatchNMF(49, random_state=seed)),
            ("sklearn NMF (mu, 200 it., tol=0)",
             lambda: SkNMF(49, solver="mu", max_iter=200, tol=0, random_state=seed))):
        sec, model = timed(lambda: make().fit(noisy))
        out[name] = (e_avg(clean, model.transform(noisy), model.components_), sec,
                     model.components_)
    return out


def save_bases(results, rho, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure", flush=True)
        return None
    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.6))
    for ax, name in zip(axes, names):
        W = results[name][2]
        tiles = np.ones((7 * 33 + 1, 7 * 33 + 1))
        for j in range(49):
            img = W[j].reshape(32, 32).T          # ORL is stored column-major
            img = img / max(img.max(), 1e-12)
            r, c = divmod(j, 7)
            tiles[1 + 33 * r:33 * (r + 1), 1 + 33 * c:33 * (c + 1)] = img
        ax.imshow(tiles, cmap="gray")
        ax.set_title(name.replace(" (", "\n("), fontsize=8)
        ax.axis("off")
    fig.suptitle(f"Bases learned on ORL with {int(rho * 100)} % outliers (seed 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--rhos", type=float, nargs="+", default=[0.1, 0.3])
    here = os.path.dirname(__file__)
    parser.add_argument("--out", default=os.path.join(here, "results", "onmfo.md"))
    parser.add_argument("--figures", default=os.path.join(here, "results"))
    args = parser.parse_args()

    from daskrnmf.datasets import corrupt_images, load_orl

    warnings.simplefilter("ignore")
    emit = Report()
    X, _ = load_orl()
    table, figures = {}, []
    # load the compiled kernels once, outside the timings (a one-time cost per process)
    from daskrnmf import ONMFO, RobustNMF

    warm = corrupt_images(X, 0.1, random_state=0)[1]
    ONMFO(49, max_iter=1, tol=0, random_state=0).fit(warm)
    RobustNMF(49, max_iter=2, tol=0, random_state=0).fit(warm)
    for rho in args.rhos:
        for seed in range(args.seeds):
            clean, noisy, _ = corrupt_images(X, rho, random_state=seed)
            res = run_all(noisy, clean, seed)
            for name, (err, sec, _) in res.items():
                table.setdefault(name, {}).setdefault(rho, []).append((err, sec))
            print(rho, seed, {k: round(v[0], 2) for k, v in res.items()}, flush=True)
            if seed == 0 and rho in (0.1, 0.3):
                fig = save_bases(res, rho, os.path.join(args.figures,
                                                        f"onmfo_bases_rho{int(rho * 100)}.png"))
                figures += [fig] if fig else []

    names = list(table)
    emit("# ONMFO on corrupted ORL faces (Zhao & Tan, ICASSP 2016, Sec. 4)")
    emit()
    emit(f"400 faces 32 x 32, max grey level 50, U[30, 50] added to a fraction rho of the "
         f"pixels, clipped at 50; K = 49, alpha_R = 1; mean of {args.seeds} seeds. "
         f"{cpu()}, one process.")
    emit()
    emit("E_avg (eq. 20, against the clean faces; lower is better):")
    emit()
    emit("| method | " + " | ".join(f"rho {int(r * 100)} %" for r in args.rhos) + " |")
    emit("|---|" + "---:|" * len(args.rhos))
    for name in names:
        emit(f"| {name} | " + " | ".join(f"{np.mean([e for e, _ in table[name][r]]):.2f}"
                                          for r in args.rhos) + " |")
    emit()
    emit("Seconds per fit (mean over rho and seeds) and ratios:")
    emit()
    def sec(name):
        return np.mean([s for r in args.rhos for _, s in table[name][r]])

    def err(name, r):
        return np.mean([e for e, _ in table[name][r]])

    mu = sec("sklearn NMF (mu, 200 it., tol=0)")
    mb = sec("sklearn MiniBatchNMF() defaults")
    emit("| method | s / fit | / sklearn NMF mu 200 | / sklearn MiniBatchNMF() |")
    emit("|---|---:|---:|---:|")
    for name in names:
        emit(f"| {name} | {sec(name):.2f} | {sec(name) / mu:.2f} | {sec(name) / mb:.2f} |")
    emit()
    conv = "RobustNMF converged (cd, 1500 it.)"
    emit("E_avg / converged RobustNMF E_avg per rho:")
    emit()
    emit("| method | " + " | ".join(f"rho {int(r * 100)} %" for r in args.rhos) + " |")
    emit("|---|" + "---:|" * len(args.rhos))
    for name in names:
        emit(f"| {name} | " + " | ".join(f"{err(name, r) / err(conv, r):.3f}"
                                          for r in args.rhos) + " |")
    emit()
    emit("This machine was shared with other jobs for this run (the seconds are noisy). "
         "The previous committed run (2026-11-25, the same machine; ONMFO before issue "
         "38's schedule: no forget_power, the pass objective over all its batches): ONMFO() "
         "defaults E_avg 11.03 / 11.42 (1.080x / 1.088x converged), 0.67 s, 0.70x "
         "MiniBatchNMF(); ONMFO(tol=1e-3) 10.66 / 10.95 (1.044x / 1.043x), 1.45 s; "
         "RobustNMF() defaults 0.62 s, 1.06x NMF mu 200.")
    emit()
    emit("Before it: the run of 2026-11-24 (a 2-core AMD EPYC Zen 5; the "
         "same code for these in-memory fits): ONMFO() defaults 0.31 s, 0.56x "
         "MiniBatchNMF(), RobustNMF() defaults 0.28 s, 0.68x NMF mu 200, the same E_avg; "
         "this machine takes about twice as long for every method. Before it: the code "
         "before the tabled-inverse NNLS 0.29 s, 0.39x and 0.32 s, 0.63x (K = 49 is above "
         "the tabled NNLS's k <= 12: those ratios moved with run-to-run noise); an older "
         "2-core machine 0.60 s, 0.78x and 0.54 s, 0.99x; before the kept-factor NNLS and "
         "the default tol=1e-2, ONMFO() (tol=1e-3) 2.19 s, 2.66x MiniBatchNMF(), E_avg "
         "1.044 / 1.043 x converged; RobustNMF() 0.55 s, 1.20x NMF mu 200.")
    if figures:
        emit()
        for fig in figures:
            emit(f"![bases]({os.path.basename(fig)})")
    emit.write(args.out)


if __name__ == "__main__":
    main()
