"""One ONMFO pass at its defaults against a plain read pass, and where the pass's time goes.

    python benchmarks/bench_onmfo_pass.py [--rows 500000] [--features 64 256]
                                          [--workdir DIR] [--out FILE] [--json FILE]

X: ``rows x features`` float32 in Zarr (chunks of 50 000 rows), the planted data of
``bench_onmfo_planted.py`` (rank 10, 1 % gross entries).  A LocalCluster of 2 worker
processes x 1 thread (1.5 GiB each) runs a plain read pass ``X.sum()`` (best of 3) and
``ONMFO(10, max_iter=1, random_state=0).fit`` of the store's path after a compiling fit
(best of 2; a full pass of the default batches, 4,096 rows each above 32,768 samples).

The breakdown of the pass (client side, by timing the functions the fit calls): the time
spent waiting in ``Feed.solve`` / ``Feed.solve_run`` (the workers' solves, the round
trips, the statistics' transfer), in ``update_W`` on the client, and the rest (the
driver's and the step's Python); the workers' own compute time from Dask's task stream
(tasks running the solves).  Numbers, not assertions; a loaded machine makes them noisy.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Report, capped_cluster, cpu  # noqa: E402
from bench_onmfo_planted import CHUNK, K, write  # noqa: E402

LIMIT = int(1.5 * 2**30)


class Timer:
    """Seconds and calls of the functions wrapped (``wrap(module, name)``)."""

    def __init__(self):
        self.sec, self.calls, self._undo = {}, {}, []

    def wrap(self, owner, name, label=None):
        label = label or name
        fn = getattr(owner, name, None)
        if fn is None:
            return
        self.sec.setdefault(label, 0.0)
        self.calls.setdefault(label, 0)

        def timed(*args, **kwargs):
            tic = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sec[label] += time.perf_counter() - tic
                self.calls[label] += 1

        setattr(owner, name, timed)
        self._undo.append((owner, name, fn))

    def reset(self):
        for key in self.sec:
            self.sec[key], self.calls[key] = 0.0, 0

    def undo(self):
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)


def one(store, d, client, timer):
    import dask.array as da
    from distributed import get_task_stream

    from daskrnmf import ONMFO

    X = da.from_zarr(store)
    X.sum().compute()               # the store into the page cache
    reads = []
    for _ in range(3):
        tic = time.perf_counter()
        X.sum().compute()
        reads.append(time.perf_counter() - tic)
    read = min(reads)
    ONMFO(K, max_iter=1, random_state=0).fit(store)       # compiles on the workers
    best = None
    for _ in range(2):
        timer.reset()
        with get_task_stream(client) as ts:
            tic = time.perf_counter()
            model = ONMFO(K, max_iter=1, random_state=0).fit(store)
            sec = time.perf_counter() - tic
        work = {}
        for t in ts.data:
            name = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
            name = str(name)
            name = "solve" if name.startswith("_on_piece") else name.rsplit("-", 1)[0]
            for s in t["startstops"]:
                if s["action"] == "compute":
                    work[name] = work.get(name, 0.0) + s["stop"] - s["start"]
        if best is None or sec < best["sec"]:
            best = {"sec": sec, "timer": dict(timer.sec), "calls": dict(timer.calls),
                    "work": work, "n_steps": int(model.n_steps_),
                    "objective": float(model.objective_history_[-1]),
                    "W": model.components_.tolist()}
    best["read"] = read
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--features", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None, help="Markdown report (default: print only)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()

    import daskrnmf._stream as stream
    import daskrnmf.models.onmfo as onmfo

    warnings.simplefilter("ignore")
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-pass-")
    timer = Timer()
    timer.wrap(stream.Feed, "solve", "Feed.solve")
    timer.wrap(stream.Feed, "solve_run", "Feed.solve_run")
    timer.wrap(onmfo, "update_W", "update_W (client)")
    results = {}
    with capped_cluster(LIMIT) as client:
        for d in args.features:
            store = os.path.join(workdir, f"planted-{args.rows}x{d}.zarr")
            write(store, args.rows, d)
            results[d] = one(store, d, client, timer)
            r = results[d]
            print(d, {k: v for k, v in r.items() if k != "W"}, flush=True)
            client.run(__import__("gc").collect)
    timer.undo()

    emit = Report()
    emit(f"X: {args.rows:,} x d float32 in Zarr (chunks of {CHUNK:,} rows), planted rank "
         f"{K}; LocalCluster 2 workers x 1 thread, {LIMIT / 2**30:.1f} GiB each. {cpu()}.")
    emit()
    emit("| d | read pass (s) | ONMFO pass (s) | vs read | W updates | waiting on the "
         "workers (s) | update_W on the client (s) | rest on the client (s) | workers' "
         "solve tasks (s) |")
    emit("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d, r in results.items():
        wait = r["timer"].get("Feed.solve", 0.0) + r["timer"].get("Feed.solve_run", 0.0)
        upd = r["timer"].get("update_W (client)", 0.0)
        solve = r["work"].get("solve", 0.0)
        emit(f"| {d} | {r['read']:.2f} | {r['sec']:.2f} | {r['read'] / r['sec']:.3f} | "
             f"{r['n_steps']} | {wait:.2f} | {upd:.2f} | {r['sec'] - wait - upd:.2f} | "
             f"{solve:.2f} |")
    if args.out:
        emit.write(args.out)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({str(d): r for d, r in results.items()}, fh)


if __name__ == "__main__":
    main()
