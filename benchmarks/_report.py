"""The benchmarks' Markdown report (lines printed as they come and saved at the end) and timer."""

import os
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
