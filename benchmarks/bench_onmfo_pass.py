"""One ONMFO pass at its defaults against a plain read pass, and where the pass's time goes.

    python benchmarks/bench_onmfo_pass.py [--rows 500000] [--features 64 256]
                                          [--modes per-batch group] [--workdir DIR]
                                          [--out FILE] [--json FILE] [--compare FILE]

X: ``rows x features`` float32 in Zarr (chunks of 50 000 rows), the planted data of
``bench_onmfo_planted.py`` (rank 10, 1 % gross entries).  A LocalCluster of 2 worker
processes x 1 thread (1.5 GiB each) runs a plain read pass ``X.sum()`` (best of 3) and
``ONMFO(10, max_iter=1, random_state=0).fit`` of the store's path after a compiling fit
(best of 2; a full pass of the default batches, 4,096 rows each above 32,768 samples), in
two modes, interleaved (the machine's load drifts): ``group``, this code (a row group's
batches in one task, ``Feed.solve_run``), and ``per-batch``, the protocol before it (one
task and round trip per batch, W updated on the client; the same arithmetic).
``--compare``: the ``--json`` of another checkout, put beside.

The breakdown of the pass (client side, by timing the functions the fit calls): the time
spent waiting in ``Feed.solve`` / ``Feed.solve_run`` (the workers' solves, the round
trips, the statistics' transfer), in ``update_W`` on the client, and the rest (reading
the first row group for W's start, the driver's and the step's Python); the workers' own
compute time in the solve tasks from Dask's task stream.  Numbers, not assertions; a
loaded machine makes them noisy.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Report, capped_cluster, cpu, read_pass_times
from bench_onmfo_planted import CHUNK, K, write

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


def per_batch_solve_run(self, bs, fn, state, spec, upd, rows=None):
    """``Feed.solve_run`` as the code before it: one task and round trip per batch, the
    statistics and W updated on the client (the same arithmetic)."""
    from daskrnmf.models._outliers import add_statistics, solve_batch_piece, take_batch

    out = []
    for b in bs:        # the row group stays read while its batches are solved
        self.want(b)
    for i, b in enumerate(bs):
        st = self.solve(b, solve_batch_piece, add_statistics, state["W"], spec,
                        rows=None if rows is None else rows[i])
        state = take_batch(state, st, upd)
        out.append(({key: st[key] for key in ("loss", "n", "rounds", "observed")}, state))
        if state["n_observed"] == 0:
            break
    return out


def one(store, d, client, timer, modes):
    import dask.array as da
    from distributed import get_task_stream

    import daskrnmf._stream as stream
    from daskrnmf import ONMFO

    X = da.from_zarr(store)
    read = min(read_pass_times(X, 3))
    ONMFO(K, max_iter=1, random_state=0).fit(store)       # compiles on the workers
    best = {}
    group = getattr(stream.Feed, "solve_run", None)
    for _ in range(2):
        for mode in modes:          # interleaved: the machine's load drifts
            if group is not None:
                stream.Feed.solve_run = group if mode == "group" else per_batch_solve_run
            timer.reset()
            with get_task_stream(client) as ts:
                tic = time.perf_counter()
                model = ONMFO(K, max_iter=1, random_state=0).fit(store)
                sec = time.perf_counter() - tic
            work = {}
            for t in ts.data:
                name = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
                name = str(name)
                name = ("solve" if name.startswith(("_on_piece", "_on_pieces"))
                        else name.rsplit("-", 1)[0])
                for s in t["startstops"]:
                    if s["action"] == "compute":
                        work[name] = work.get(name, 0.0) + s["stop"] - s["start"]
            if mode not in best or sec < best[mode]["sec"]:
                best[mode] = {"sec": sec, "timer": dict(timer.sec), "calls": dict(timer.calls),
                              "work": work, "n_steps": int(model.n_steps_),
                              "objective": float(model.objective_history_[-1]),
                              "W": model.components_.tolist(), "read": read}
    if group is not None:
        stream.Feed.solve_run = group
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--features", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None, help="Markdown report (default: print only)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--compare", default=None,
                        help="a --json file of an older checkout, put beside these figures")
    parser.add_argument("--modes", nargs="+", default=["per-batch", "group"],
                        help="per-batch: this checkout's stream with one task and round "
                             "trip per batch and W updated on the client, as before a row "
                             "group's batches ran in one task (group)")
    parser.add_argument("--old-label", default="older checkout",
                        help="what the --compare figures are of")
    args = parser.parse_args()

    import daskrnmf._stream as stream
    import daskrnmf.models._outliers as outliers
    from daskrnmf.models import onmfo

    warnings.simplefilter("ignore")
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-pass-")
    timer = Timer()
    timer.wrap(stream.Feed, "solve", "Feed.solve")
    timer.wrap(stream.Feed, "solve_run", "Feed.solve_run")
    timer.wrap(onmfo, "update_W", "update_W (client)")         # the code before take_batch
    timer.wrap(outliers, "update_W", "update_W (client)")
    results = {}
    with capped_cluster(LIMIT) as client:
        for d in args.features:
            store = os.path.join(workdir, f"planted-{args.rows}x{d}.zarr")
            write(store, args.rows, d)
            best = one(store, d, client, timer, args.modes)
            for mode, r in best.items():
                results[(d, mode)] = r
                print(d, mode, {k: v for k, v in r.items() if k != "W"}, flush=True)
            client.run(__import__("gc").collect)
    timer.undo()

    old = {}
    if args.compare:
        with open(args.compare) as fh:
            old = {(int(key.split()[0]), args.old_label): r for key, r in json.load(fh).items()}
    emit = Report()
    emit(f"X: {args.rows:,} x d float32 in Zarr (chunks of {CHUNK:,} rows), planted rank "
         f"{K}, 1 % gross entries; LocalCluster 2 workers x 1 thread, "
         f"{LIMIT / 2**30:.1f} GiB each. ONMFO({K}, max_iter=1) at its defaults, one pass "
         f"(best of 2, the modes interleaved, after a compiling fit); read pass `X.sum()` "
         f"best of 3. {cpu()}.")
    emit()
    emit("| d | code | read pass (s) | ONMFO pass (s) | vs read | W updates | waiting on "
         "the workers' solves (s) | round trips | update_W on the client (s) | rest on the "
         "client (s) | workers' solve tasks (s) | objective |")
    emit("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (d, mode), f in sorted({**old, **results}.items(), key=lambda kv: kv[0][0]):
        wait = f["timer"].get("Feed.solve", 0.0) + f["timer"].get("Feed.solve_run", 0.0)
        trips = f["calls"].get("Feed.solve", 0) + f["calls"].get("Feed.solve_run", 0)
        upd = f["timer"].get("update_W (client)", 0.0)
        solve = f["work"].get("solve", 0.0) or sum(
            v for k, v in f["work"].items() if k.startswith("_on_piece"))
        emit(f"| {d} | {mode} | {f['read']:.2f} | {f['sec']:.2f} | "
             f"{f['read'] / f['sec']:.3f} | {f['n_steps']} | {wait:.2f} | {trips} | "
             f"{upd:.2f} | {f['sec'] - wait - upd:.2f} | {solve:.2f} | "
             f"{f['objective']:.6g} |")
    if args.out:
        emit.write(args.out)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{d} {mode}": r for (d, mode), r in results.items()}, fh)


if __name__ == "__main__":
    main()
