"""ONMFO passes at their defaults against a plain read pass, and where a pass's time goes.

    python benchmarks/bench_onmfo_pass.py [--rows 500000] [--features 64 256] [--passes 1]
                                          [--workdir DIR] [--out FILE] [--json FILE]
                                          [--compare FILE] [--old-label TEXT]
                                          [--workers 2] [--threads-per-worker 1]

X: ``rows x features`` float32 in Zarr (chunks of 50 000 rows), the planted data of
``bench_onmfo_planted.py`` (rank 10, 1 % gross entries).  A LocalCluster of ``--workers``
processes x ``--threads-per-worker`` threads (default 2 x 1; 1.5 GiB each) runs a plain
read pass ``X.sum()`` (best of 3) and ``ONMFO(10, max_iter=passes, tol=0,
random_state=0).fit`` of the store's path after a compiling fit (best of 2; full passes of
the default batches, 4,096 rows each above 32,768 samples).  ``--compare``: the ``--json`` of another checkout (run this script
with ``PYTHONPATH`` pointing at it), put beside.

Where the fit's time goes, from Dask's task stream.  The row groups' solve tasks
(``_on_pieces``: a group's batches one after the other, W updated between them) depend
on each other through W, so they run one at a time: the fit's time is their sum plus
what keeps the next one from starting.  Columns: the solve tasks' sum; the time before
the first solve starts (reading the first row group, W's start); the gaps between one
solve's end and the next one's start, split into what the worker of the next solve was
doing then (reading chunks, putting a group together and in order, receiving data) and
idle time (waiting for the client, the scheduler or another worker); the time after the
last solve; and each pass's own samples/s over the read pass's (the first pass from the
fit's start, each later one from the moment the client took the pass before's last
batch).  Also the
client's time waiting in ``Feed.solve`` / ``Feed.take_run`` (``solve_run`` in older
checkouts), and the reads' and transfers' total worker time.

A second table, the CPU a pass takes: the read pass's own worker time (its tasks, from
the task stream of one more read pass), ONMFO's reads (and putting its groups together
and in order) a pass, and each pass's solve tasks with the ratio they alone allow: the
solves of a pass run one after another, so no pass can run faster than
``read pass / its solve tasks``, whatever the reading beside them costs.  Numbers, not
assertions; a loaded machine makes them noisy.
"""

import argparse
import itertools
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

# a row group's reading, putting together and ordering (the zarr reads' own tasks are
# "daskrnmf-zarr-getitem-..."; "_arranged" also names "_arranged_parts", "_relaid" the copy
# of a group held for the next pass)
READS = ("getitem", "daskrnmf-zarr", "rechunk", "from-zarr", "original", "finalize",
         "chunk_checksum", "_arranged", "_relaid")


class Timer:
    """Seconds and calls of the functions wrapped (``wrap(owner, name)``)."""

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


def overlap(a, b, spans):
    """Seconds of ``[a, b]`` covered by the (start, stop) ``spans`` (merged first)."""
    total, end = 0.0, a
    for s, e in sorted(spans):
        s, e = max(s, end), min(e, b)
        if e > s:
            total += e - s
            end = e
    return total


def breakdown(events, t0, t1):
    """Where the fit's wall time ``t1 - t0`` went, from the task stream's ``events``
    (worker, action, name, start, stop): see the module's docstring."""
    solves = sorted((s, e, w) for w, act, name, s, e in events
                    if act == "compute" and name.startswith("_on_pieces"))
    out = {"wall": t1 - t0, "solves": len(solves),
           "solve": sum(e - s for s, e, _ in solves),
           "first": (solves[0][0] - t0) if solves else t1 - t0,
           "last": (t1 - solves[-1][1]) if solves else 0.0,
           "gap_read": 0.0, "gap_transfer": 0.0, "gap_idle": 0.0,
           "reads": sum(e - s for w, act, name, s, e in events
                        if act == "compute" and name.startswith(READS)),
           "transfers": sum(e - s for w, act, name, s, e in events if act == "transfer")}
    for (_, a, _), (b, _, w) in itertools.pairwise(solves):
        if b <= a:
            continue
        read = overlap(a, b, [(s, e) for w_, act, name, s, e in events if w_ == w
                              and act == "compute" and name.startswith(READS)])
        moved = overlap(a, b, [(s, e) for w_, act, name, s, e in events if w_ == w
                               and act == "transfer"])
        moved = min(moved, b - a - read)
        out["gap_read"] += read
        out["gap_transfer"] += moved
        out["gap_idle"] += b - a - read - moved
    return out


def one(store, client, timer, passes):
    import dask.array as da
    from distributed import get_task_stream

    from daskrnmf import ONMFO

    X = da.from_zarr(store)
    read = min(read_pass_times(X, 3))
    with get_task_stream(client) as ts:         # the read pass's own worker time
        X.sum().compute()
    read_cpu = sum(s["stop"] - s["start"] for t in ts.data for s in t["startstops"]
                   if s["action"] == "compute")
    ONMFO(K, max_iter=1, random_state=0).fit(store)       # compiles on the workers
    best = None
    for _ in range(2):
        timer.reset()
        ends = {}       # pass -> the fit's elapsed seconds when its last batch was taken

        def record(info, ends=ends):
            if info.get("event") == "iteration" and "pass" in info:
                ends[int(info["pass"])] = float(info["elapsed"])

        with get_task_stream(client) as ts:
            t0 = time.time()
            model = ONMFO(K, max_iter=passes, tol=0, random_state=0,
                          callback=record).fit(store)
            t1 = time.time()
        events = []
        for t in ts.data:
            key = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
            name = str(key)
            for s in t["startstops"]:
                events.append((t["worker"], s["action"], name, s["start"], s["stop"]))
        f = breakdown(events, t0, t1)
        if best is None or f["wall"] < best["wall"]:
            best = {**f, "timer": dict(timer.sec), "calls": dict(timer.calls),
                    "read_cpu": read_cpu, "pass_solve": pass_solves(events, t0, ends),
                    "n_steps": int(model.n_steps_), "passes": passes,
                    "objective": [float(h) for h in model.objective_history_],
                    "W": model.components_.tolist(), "read": read,
                    "pass_seconds": [b - a for a, b in
                                     itertools.pairwise([0.0] + [ends[p] for p in sorted(ends)])]}
    return best


def pass_solves(events, t0, ends):
    """Each pass's solve tasks' seconds: a solve task (one row group of one pass) counts
    for the first pass whose last batch the client took after the task ended."""
    bounds = [t0 + ends[p] for p in sorted(ends)]
    out = [0.0] * len(bounds)
    for w, act, name, s, e in events:
        if act == "compute" and name.startswith("_on_pieces"):
            p = next((i for i, b in enumerate(bounds) if e <= b), len(bounds) - 1)
            if out:
                out[p] += e - s
    return out


def each(f):
    """Each pass's samples/s over the read pass's, with its seconds: from the fit's start
    (the first pass pays for reading the first row group) to the moment the client took
    the pass's last batch, then from one pass's last batch to the next one's."""
    sec = f.get("pass_seconds")
    if not sec:
        return "-"
    return ", ".join(f"{f['read'] / t:.3f} ({t:.2f} s)" for t in sec)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--features", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--passes", type=int, default=1,
                        help="passes of each fit (2 or more: the passes' boundary too)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None, help="Markdown report (default: print only)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--compare", default=None,
                        help="a --json file of an older checkout, put beside these figures")
    parser.add_argument("--label", default="this checkout", help="what these figures are of")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster's workers")
    parser.add_argument("--threads-per-worker", type=int, default=1,
                        help="each worker's threads")
    parser.add_argument("--old-label", default="older checkout",
                        help="what the --compare figures are of")
    args = parser.parse_args()

    import daskrnmf._stream as stream

    warnings.simplefilter("ignore")
    workdir = args.workdir or tempfile.mkdtemp(prefix="daskrnmf-pass-")
    timer = Timer()
    for name in ("solve", "solve_run", "take_run"):
        timer.wrap(stream.Feed, name, "waiting")
    results = {}
    with capped_cluster(LIMIT, args.workers, args.threads_per_worker) as client:
        for d in args.features:
            store = os.path.join(workdir, f"planted-{args.rows}x{d}.zarr")
            write(store, args.rows, d)
            results[(d, args.label)] = r = one(store, client, timer, args.passes)
            print(d, {k: v for k, v in r.items() if k != "W"}, flush=True)
            client.run(__import__("gc").collect)
    timer.undo()

    old = {}
    if args.compare:
        with open(args.compare) as fh:
            old = {(int(key.split()[0]), args.old_label): r for key, r in json.load(fh).items()}
    emit = Report()
    emit(f"X: {args.rows:,} x d float32 in Zarr (chunks of {CHUNK:,} rows), planted rank "
         f"{K}, 1 % gross entries; LocalCluster {args.workers} workers x "
         f"{args.threads_per_worker} thread(s), "
         f"{LIMIT / 2**30:.1f} GiB each. ONMFO({K}, max_iter={args.passes}, tol=0) at its "
         f"defaults (best of 2, after a compiling fit); read pass `X.sum()` best of 3. "
         f"{cpu()}; load average {os.getloadavg()[0]:.1f} at the end.")
    emit()
    emit("| d | code | read pass (s) | ONMFO fit (s) | a pass vs read | solve tasks (s) | "
         "before the first solve (s) | gaps: reading on the next solve's worker (s) | "
         "gaps: receiving data (s) | gaps: idle (s) | after the last solve (s) | "
         "client waiting (s) | reads, all workers (s) | transfers, all workers (s) | "
         "each pass vs read (its seconds) | objective per pass |")
    emit("|---:|---|" + "---:|" * 14)
    for (d, label), f in sorted({**old, **results}.items(), key=lambda kv: kv[0][0]):
        per_pass = f["wall"] / max(f.get("passes", 1), 1)
        emit(f"| {d} | {label} | {f['read']:.2f} | {f['wall']:.2f} | "
             f"{f['read'] / per_pass:.3f} | {f['solve']:.2f} | {f['first']:.2f} | "
             f"{f['gap_read']:.2f} | {f['gap_transfer']:.2f} | {f['gap_idle']:.2f} | "
             f"{f['last']:.2f} | {f['timer'].get('waiting', 0.0):.2f} | {f['reads']:.2f} | "
             f"{f['transfers']:.2f} | {each(f)} | "
             f"{', '.join(f'{h:.6g}' for h in f['objective'])} |")
    emit()
    emit("The CPU a pass takes (worker seconds; reads: ONMFO's chunk reads and the putting "
         "of its row groups together and in order, all workers, a pass on average; each "
         "pass's solve tasks, and the ratio to the read pass they alone allow):")
    emit()
    emit("| d | code | read pass (s) | its worker time (s) | ONMFO reads a pass (s) | "
         "each pass: solve tasks (s), at most vs read |")
    emit("|---:|---|---:|---:|---:|---|")
    for (d, label), f in sorted({**old, **results}.items(), key=lambda kv: kv[0][0]):
        if "pass_solve" not in f:
            continue
        emit(f"| {d} | {label} | {f['read']:.2f} | {f['read_cpu']:.2f} | "
             f"{f['reads'] / max(f.get('passes', 1), 1):.2f} | "
             + ", ".join(f"{t:.2f} ({f['read'] / t:.3f}x)" if t > 0 else "-"
                         for t in f["pass_solve"]) + " |")
    if args.out:
        emit.write(args.out)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{d} {label}": r for (d, label), r in results.items()}, fh)


if __name__ == "__main__":
    main()
