"""The benchmarks' Markdown report (lines printed as they come and saved at the end) and timer."""

import contextlib
import os
import threading
import time

import numpy as np


class Report:
    """``emit = Report(); emit("| a | b |"); emit.write(path)``."""

    def __init__(self):
        self.lines = []

    def __call__(self, line=""):
        print(line, flush=True)
        self.lines.append(line)

    def write(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("\n".join(self.lines) + "\n")


def cpu():
    """The processor, as /proc/cpuinfo names it (with its family and model, which tell
    AMD EPYC generations apart), and the number of cores."""
    info = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name", "unknown CPU")
    if "cpu family" in info:
        name += f" (family {info['cpu family']}, model {info.get('model', '?')})"
    return f"{name}, {os.cpu_count()} cores"


def timed(fn):
    """``(seconds, fn())``."""
    tic = time.perf_counter()
    out = fn()
    return time.perf_counter() - tic, out


def read_pass_times(X, repeat):
    """Seconds of ``repeat`` plain read passes ``X.sum()`` of the Dask array X, after one
    that brings its store into the page cache."""
    X.sum().compute()
    return [timed(lambda: X.sum().compute())[0] for _ in range(repeat)]


def timed_median(fn, repeat=5):
    """``(median seconds of repeat calls, the last fn())``: for sub-second fits, whose
    single timings vary by 2x from run to run on a shared 2-core machine."""
    times, out = [], None
    for _ in range(repeat):
        t, out = timed(fn)
        times.append(t)
    return float(np.median(times)), out


def start_sampler(dask_worker):
    """Run on every worker (``client.run``): a thread that records the process's peak RSS."""
    import psutil

    proc = psutil.Process()
    dask_worker._bench_peak = proc.memory_info().rss

    def sample():
        while True:
            dask_worker._bench_peak = max(dask_worker._bench_peak, proc.memory_info().rss)
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()


def reset_peak(dask_worker):
    import psutil

    dask_worker._bench_peak = psutil.Process().memory_info().rss


def peak(dask_worker):
    """The peak RSS recorded by :func:`start_sampler` (bytes)."""
    return getattr(dask_worker, "_bench_peak", 0)


def blob_store(store, n, d, *, outlier_fraction, chunk_rows):
    """Write the scale benchmarks' float32 blob store (10 clusters) unless it exists;
    returns it as a Dask array."""
    import dask
    import dask.array as da

    from daskrnmf.datasets import make_zarr_blobs

    if not os.path.exists(store):
        tic = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            make_zarr_blobs(store, n_samples=n, n_features=d, n_clusters=10, dtype="float32",
                            outlier_fraction=outlier_fraction, chunk_rows=chunk_rows,
                            random_state=0)
        print(f"wrote {store} in {time.perf_counter() - tic:.0f} s", flush=True)
    return da.from_zarr(store, component="X")


@contextlib.contextmanager
def capped_cluster(limit, workers=2, threads=1):
    """A LocalCluster of ``workers`` workers x ``threads`` threads (default 2 x 1) capped at
    ``limit`` bytes each with Dask's own spilling and pausing off (so the cap measures the
    library), the peak-RSS sampler started; yields the Client."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.memory.pause": False,
                          "distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False}), \
            LocalCluster(n_workers=workers, threads_per_worker=threads, memory_limit=limit,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(start_sampler)
        yield client
