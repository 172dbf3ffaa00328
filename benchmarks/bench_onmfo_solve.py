"""ONMFO's per-row solve (``solver="cd"``, complete rows): µs a row of an old checkout
beside this one, in one run (issue 38: a pass at >= 0.5x a plain read needs the solve
at about 0.7-0.8 µs a row at 64 features, statistics included).

    python benchmarks/bench_onmfo_solve.py [--old 2414277] [--features 64 256]
                                           [--repeat 5] [--out FILE]

Data: the planted rows of ``bench_onmfo_planted.py`` (rank 10, 1 % gross entries),
float32.  W and alpha_R: an ONMFO fit (k = 10, one pass, ``random_state=0``) of its first
150 000 rows with this checkout's code, shared by both.  Each checkout (the old one
extracted by ``git archive`` into a temporary directory) is timed in child processes
that alternate old, new, old, new ... (``--repeat`` each; the figure is the fastest, in
CPU seconds of the child, which a loaded machine disturbs less than wall time), on
49 152 further rows in batches of 4 096: ``solve_batch_piece`` (the whole solve of a
batch piece with its statistics, what a pass runs) and the kernel alone
(``solve_rows_fused`` on 2 048-row slices, W's part prepared once a batch where the code
has ``prepare_components``, else its NNLS table kept for the batch), with the inner rounds a row takes and the
objective (3) summed over the rows (the same problem solved: equal to rounding).
Numbers, not assertions.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROWS = 49_152
BATCH = 4096


def child(features, params):
    """In a child process: time the checkout on PYTHONPATH; prints one JSON line."""
    sys.path.insert(0, HERE)
    from bench_onmfo_planted import block

    from daskrnmf.kernels.cd_rows import solve_rows_fused
    from daskrnmf.kernels.nnls import support_table
    from daskrnmf.models import _outliers as O

    z = np.load(params)
    W, lam, n_iter, tol = z["W"], float(z["alpha"]), int(z["n_iter"]), float(z["tol"])
    x = block(3, ROWS, features)[0]                 # rows the fit did not see
    spec = O.SolveSpec(alpha_R=lam, n_iter=n_iter, where="x", tol=tol)
    O.solve_batch_piece(x[:BATCH], 0, W, spec)      # compiled (or loaded) first

    def pieces():
        loss = rounds = 0.0
        for s in range(0, ROWS, BATCH):
            st = O.solve_batch_piece(x[s:s + BATCH], s, W, spec)
            loss += st["loss"]
            rounds += st["rounds"]
        return loss, rounds

    try:                                            # W's part once a block, as a pass
        from daskrnmf.kernels.cd_rows import prepare_components
        once = {"prepared": lambda: prepare_components(W, x.dtype)}
    except ImportError:                             # (before it: the table alone)
        once = {"table": lambda: support_table(W.shape[0])}

    def kernel():
        for b in range(0, ROWS, BATCH):
            kw = {key: make() for key, make in once.items()}
            for s in range(b, b + BATCH, 2048):
                solve_rows_fused(x[s:s + 2048], W, lam, n_iter, tol, dtype=x.dtype, **kw)

    out = {}
    for name, fn in (("piece", pieces), ("kernel", kernel)):
        best = np.inf
        for _ in range(3):
            tic = time.process_time()
            res = fn()
            best = min(best, time.process_time() - tic)
        out[name] = best / ROWS * 1e6
        if name == "piece":
            out["loss"], out["rounds"] = res[0], res[1] / ROWS
    print(json.dumps(out), flush=True)


def fit_params(features, path):
    sys.path.insert(0, HERE)
    from bench_onmfo_planted import block

    from daskrnmf import ONMFO

    X = np.concatenate([block(i, 50_000, features)[0] for i in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ONMFO(10, random_state=0, max_iter=1).fit(X)
    np.savez(path, W=m.components_, alpha=m.alpha_R_, n_iter=m.max_inner_iter,
             tol=m.inner_tol)


def run(checkout, features, params):
    env = dict(os.environ, PYTHONPATH=checkout, OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(features),
                          "--params", params], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", default="2414277", help="the commit to compare with")
    parser.add_argument("--features", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "onmfo_solve.md"))
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--params", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.params)
        return
    sys.path.insert(0, HERE)
    from _report import Report, cpu

    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    emit = Report()
    emit("# ONMFO's per-row solve, old beside new")
    emit()
    emit(f"{cpu()}; `python benchmarks/bench_onmfo_solve.py --old {args.old}` at {head} "
         f"(uncommitted changes included); fastest of {args.repeat} child processes each, "
         "CPU µs a row, float32, k = 10, batches of 4 096 rows.  `piece`: "
         "`solve_batch_piece` (solve and statistics); `kernel`: `solve_rows_fused` alone.")
    emit()
    emit("| features | code | piece µs/row | kernel µs/row | rounds/row | objective (3) |")
    emit("|---|---|---:|---:|---:|---:|")
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "old")
        os.makedirs(old)
        arch = subprocess.run(["git", "-C", ROOT, "archive", args.old, "daskrnmf"],
                              capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
        for d in args.features:
            params = os.path.join(tmp, f"params{d}.npz")
            fit_params(d, params)
            res = {"old": [], "new": []}
            for _ in range(args.repeat):
                res["old"].append(run(old, d, params))
                res["new"].append(run(ROOT, d, params))
                loads.append(os.getloadavg()[0])
            best = {code: {key: min(v[key] for v in res[code]) for key in ("piece", "kernel")}
                    for code in res}
            for code in ("old", "new"):
                r = res[code]
                emit(f"| {d} | {code} ({args.old if code == 'old' else head}) | "
                     f"{best[code]['piece']:.3f} | {best[code]['kernel']:.3f} | "
                     f"{r[0]['rounds']:.3f} | {r[0]['loss']:.6g} |")
            emit(f"| {d} | old / new | {best['old']['piece'] / best['new']['piece']:.2f}x | "
                 f"{best['old']['kernel'] / best['new']['kernel']:.2f}x | | |")
    emit()
    emit(f"1-minute load average during the run: {min(loads):.1f}-{max(loads):.1f} on "
         f"{os.cpu_count()} cores (CPU time moves less with the load than wall time, but "
         "a loaded machine's caches and turbo still do).")
    emit.write(args.out)


if __name__ == "__main__":
    main()
