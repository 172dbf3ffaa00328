"""The benchmarks' Markdown report (lines printed as they come and saved at the end) and timer."""

import os
import threading
import time


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


def timed(fn):
    """``(seconds, fn())``."""
    tic = time.perf_counter()
    out = fn()
    return time.perf_counter() - tic, out


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
