"""The first fit's wait for Numba compilation: an empty kernel cache against a warm one.

    python benchmarks/bench_compile.py [--repo PATH] [--out benchmarks/results/compile.md]
                                       [--old-repo OLD] [--previous OLD.json] [--json OUT.json]

For each model family and each place the kernels run (``client``: NumPy X, the fit in the
calling process; ``workers``: a Dask X on a LocalCluster of one worker process, whose
kernels compile there), two fresh Python processes fit the same small data one after the
other with one temporary ``NUMBA_CACHE_DIR``: the first starts with that directory empty
(nothing compiled, nothing cached), the second finds the first's cache.  With
``NUMBA_CACHE_DIR`` set, Numba reads and writes only that directory (its
``_UserProvidedCacheLocator`` comes first), so index files that an earlier run left in the
package's ``__pycache__`` are not consulted.  Each process times the fit alone (imports and
the cluster's start are outside the timer), so the difference is the compile wait.

``--old-repo`` measures a checkout of the code before (``git worktree add /tmp/old
5a7c08d``) in turn with this one, family by family, for the table's old columns (or
``--previous``: figures saved by an earlier run's ``--json``).  ``--json`` and
``--old-json`` add this run's figures to those files (a family at a time: each run
short on a shared machine), and ``--table-only`` writes the table from them without
measuring.  The 1-minute load average is read before each fit and its range printed
with the table.  Numbers, not assertions; the machine may be shared.

    python benchmarks/bench_compile.py --old-repo /tmp/old --families "RFNMTF" \
        --json new.json --old-json old.json --out -      # one family, then the next
    python benchmarks/bench_compile.py --table-only --json new.json --old-json old.json
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

FAMILIES = {
    # family: the models fitted in one process, one after the other
    "RFNMF l21": ["RFNMF(n_clusters=3, loss='l21', n_init=2, random_state=0)"],
    "RFNMF l1": ["RFNMF(n_clusters=3, loss='l1', n_init=2, random_state=0)"],
    "RFNMTF": ["RFNMTF(n_row_clusters=3, n_column_clusters=2, n_init=2, random_state=0)"],
    "ONMFO / RobustNMF": ["ONMFO(n_components=3, max_iter=3, random_state=0)",
                          "RobustNMF(n_components=3, max_iter=5, random_state=0)"],
    "NMF / RNMF / ORNMF": ["NMF(n_components=3, max_iter=5, random_state=0)",
                           "RNMF(n_components=3, max_iter=5, random_state=0)",
                           "ORNMF(n_components=3, max_iter=5, random_state=0)"],
    "MNMF / SemiNMF": ["MNMF(n_components=3, max_iter=5, random_state=0)",
                       "SemiNMF(n_components=3, max_iter=5, random_state=0)"],
}

CHILD = r"""
import json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
where, models = sys.argv[1], json.loads(sys.argv[2])
import daskrnmf
from daskrnmf import models as registry
rng = np.random.default_rng(0)
centres = rng.uniform(0.0, 4.0, size=(3, 12))
y = np.repeat(np.arange(3), 100)
X = np.abs(centres[y] + rng.normal(scale=0.3, size=(300, 12)))
X[::37] *= 8.0                      # a few gross rows
client = None
if where == "workers":
    import dask.array as da
    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    X, y = da.from_array(X, chunks=(100, 12)), da.from_array(y, chunks=100)
    client.run(lambda: __import__("daskrnmf.kernels"))
names = {spec: getattr(__import__(registry.get(spec).module, fromlist=["x"]), spec)
         for spec in registry.REGISTRY}
def worker_cpu():
    return sum(client.run(time.process_time).values()) if client is not None else 0.0
cpu0, wcpu0 = time.process_time(), worker_cpu()
tic = time.perf_counter()
for text in models:
    model = eval(text, dict(names))
    if registry.get(type(model).__name__).needs_y:
        model.fit(X, y)
    else:
        model.fit(X)
seconds = time.perf_counter() - tic
cpu = time.process_time() - cpu0 + worker_cpu() - wcpu0
if client is not None:
    client.close(); cluster.close()
print(json.dumps({"seconds": seconds, "cpu": cpu, "file": daskrnmf.__file__}))
"""


def run_child(repo, where, models, cache_dir):
    env = dict(os.environ, PYTHONPATH=repo, NUMBA_CACHE_DIR=cache_dir,
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, where, json.dumps(models)], env=env,
                         cwd=tempfile.gettempdir(), capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{where} {models}: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not os.path.realpath(result["file"]).startswith(os.path.realpath(repo)):
        raise RuntimeError(f"imported {result['file']}, not the checkout {repo}")
    return result["seconds"], result["cpu"]


def _git_head(repo):
    out = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or os.path.basename(repo)


def measure_one(repo, where, family):
    """(first fit with an empty cache, first fit with the cache it left): CPU seconds
    (the calling process's and, on workers, the worker's), then wall seconds."""
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        load = os.getloadavg()[0]
        empty, empty_cpu = run_child(repo, where, FAMILIES[family], cache)
        n_files = sum(len(f) for _, _, f in os.walk(cache))
        load = max(load, os.getloadavg()[0])
        warm, warm_cpu = run_child(repo, where, FAMILIES[family], cache)
    print(f"{os.path.basename(repo):14s} {where:8s} {family:20s} CPU empty {empty_cpu:6.2f} s "
          f"warm {warm_cpu:6.2f} s; wall {empty:6.2f} / {warm:6.2f} s ({n_files} cache files, "
          f"load {load:.1f})", flush=True)
    return empty_cpu, warm_cpu, empty, warm, load


def measure(repos, families, places, done=None):
    """Every checkout's figures, the checkouts taking turns family by family (so a load
    that comes and goes on a shared machine falls on old and new alike); ``done(figures)``
    after each family (the table so far is saved)."""
    figures = [{} for _ in repos]
    for where in places:
        for family in families:
            for repo, out in zip(repos, figures):
                out[f"{family}|{where}"] = measure_one(repo, where, family)
            if done is not None:
                done(figures)
    return figures


def write_table(path, figures, previous, families, old_label="a6a218d"):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _report import Report, cpu

    import numba

    emit = Report()
    emit("# First fit: compile wait with an empty Numba cache")
    emit()
    emit(f"{cpu()}; Python {platform.python_version()}, Numba {numba.__version__}. "
         "Each figure is one fresh process timing its fit alone (imports and cluster start "
         "outside the timer); *empty*: a new empty `NUMBA_CACHE_DIR`, *warm*: a second "
         "process on the cache the first left. 300 x 12 float64 blobs (3 clusters, a few "
         "gross rows); *workers*: the same X as a Dask array of 3 chunks on a LocalCluster "
         f"of one worker process. *old*: the code at {old_label}, measured "
         "in turn with the new, family by family. The figures are CPU seconds of the fit "
         "(the client process's plus, on workers, the worker's; compilation is "
         "single-threaded): on a machine shared with other jobs they move far less than "
         "wall time, shown after them (empty / warm). Single runs.")
    loads = [f[4] for f in list(figures.values()) + list(previous.values()) if len(f) > 4]
    if loads:
        emit()
        emit(f"The machine was shared with other jobs: its 1-minute load average was "
             f"{min(loads):.1f}–{max(loads):.1f} during these runs (on "
             f"{os.cpu_count()} cores).")
    emit()
    emit("| family | where | old: empty | old: warm | old: difference | new: empty | "
         "new: warm | new: difference | wall old | wall new |")
    emit("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, (empty, warm, wall_empty, wall_warm, *_) in figures.items():
        family, where = key.split("|")
        old = previous.get(key)
        old_cells = (f"{old[0]:.2f} | {old[1]:.2f} | {old[0] - old[1]:.2f}" if old
                     else "– | – | –")
        old_wall = f"{old[2]:.1f} / {old[3]:.1f}" if old else "–"
        emit(f"| {family} | {where} | {old_cells} | {empty:.2f} | {warm:.2f} | "
             f"{empty - warm:.2f} | {old_wall} | {wall_empty:.1f} / {wall_warm:.1f} |")
    emit()
    emit("Models per family, fitted one after the other in the same process: " + "; ".join(
        f"{f}: " + ", ".join(m.split("(")[0] for m in FAMILIES[f]) for f in families) + ".")
    emit.write(path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default=os.path.dirname(here))
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--places", nargs="*", default=["client", "workers"])
    parser.add_argument("--old-repo", help="a checkout of the code before (the table's old "
                        "columns), measured in turn with --repo")
    parser.add_argument("--json", help="add this run's figures to this file")
    parser.add_argument("--old-json", help="add the old checkout's figures to this file")
    parser.add_argument("--old-label", help="the old code's name in the table (default: "
                        "--old-repo's commit)")
    parser.add_argument("--table-only", action="store_true", help="write the table from "
                        "--json (and --old-json or --previous) without measuring")
    parser.add_argument("--previous", help="figures of an earlier run (--json) for the table")
    parser.add_argument("--out", default=os.path.join(here, "results", "compile.md"))
    args = parser.parse_args()

    def load(path):
        if path and os.path.exists(path):
            with open(path) as fh:
                return json.load(fh)
        return {}

    saved = load(args.previous)
    old_label = args.old_label or (_git_head(args.old_repo) if args.old_repo else "a6a218d")
    if args.table_only:
        new, old = load(args.json), load(args.old_json) or saved
        order = {f"{f}|{w}": (i, j) for j, f in enumerate(FAMILIES)
                 for i, w in enumerate(["client", "workers"])}
        new = dict(sorted(new.items(), key=lambda kv: order.get(kv[0], (9, 9))))
        families = [f for f in FAMILIES if any(k.startswith(f + "|") for k in new)]
        write_table(args.out, new, old, families, old_label)
        return
    earlier = [load(args.json), load(args.old_json)]

    def done(figures):
        for path, before, now in zip([args.json, args.old_json], earlier, figures):
            if path:
                with open(path, "w") as fh:
                    json.dump({**before, **now}, fh, indent=1)
        if args.out and args.out != "-":
            write_table(args.out, figures[0], figures[1] if len(figures) > 1 else saved,
                        args.families, old_label)

    repos = [args.repo] + ([args.old_repo] if args.old_repo else [])
    measure(repos, args.families, args.places, done)


if __name__ == "__main__":
    main()
