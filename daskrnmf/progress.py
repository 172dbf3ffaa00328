"""A progress display for long fits, as a ``callback`` of any daskrnmf estimator.

    RFNMF(10, callback=ProgressBar()).fit("big.zarr/X")
    ONMFO(49, callback=ProgressBar(desc="faces")).fit(X)

On a terminal or in a notebook it redraws one line in place (iterations, with the
objective and the passes over X, for batch models; batches of the stream, with the pass,
for ONMFO).  In a non-interactive batch log it stays quiet unless ``log=True``, in which
case it writes one INFO line per step through the ``daskrnmf`` logger (the CLI's
``--progress``).
"""

import logging
import sys
import time

logger = logging.getLogger("daskrnmf")


def _in_notebook():
    """True inside a Jupyter kernel (not merely when ipykernel has been imported)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _interactive(stream):
    if _in_notebook():
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """Callback that shows a fit's progress; never stops the fit.

    Parameters
    ----------
    desc : str, optional
        Label in front of the line (default: nothing).
    log : bool, default=False
        Also (or, when not interactive, only) log one INFO line per step.
    stream : file, default=sys.stderr
    every : int, default=1
        Show every ``every``-th step (and the last one seen).

    Attributes
    ----------
    steps : int
        Steps seen so far; ``last`` the most recent ``info`` dict.
    """

    def __init__(self, desc=None, *, log=False, stream=None, every=1):
        self.desc = desc
        self.log = log
        self.stream = stream if stream is not None else sys.stderr
        self.every = max(1, int(every))
        self.steps = 0
        self.last = None
        self._t0 = None
        self._width = 0

    def describe(self, info):
        """One line for an ``info`` dict of the batch driver or of ONMFO's stream."""
        elapsed = time.perf_counter() - self._t0
        head = f"{self.desc}: " if self.desc else ""
        if "n_batches" in info:      # ONMFO
            total = info.get("total_steps")
            done = f"{info['n_steps']}/{total}" if total else f"{info['n_steps']}"
            bar = _bar(info["n_steps"], total)
            return (f"{head}{bar}batch {done} (pass {info['pass'] + 1}), loss/sample "
                    f"{info['loss']:.4g}, {info['n_samples_seen']:,} samples, {elapsed:.1f} s")
        import numpy as np

        obj = info.get("objective")
        best = float(np.nanmin(obj)) if obj is not None and np.size(obj) else float("nan")
        passes = info.get("n_passes")
        return (f"{head}iteration {info['iteration']}, objective {best:.6g}"
                + (f", {passes} passes" if passes is not None else "") + f", {elapsed:.1f} s")

    def __call__(self, info):
        if self._t0 is None:
            self._t0 = time.perf_counter()
        self.steps += 1
        self.last = info
        if self.steps % self.every:
            return False
        line = self.describe(info)
        if _interactive(self.stream):
            pad = " " * max(0, self._width - len(line))
            self.stream.write("\r" + line + pad)
            self.stream.flush()
            self._width = len(line)
        if self.log:
            logger.info(line)
        return False

    def close(self):
        """End the redrawn line (call after the fit when shown interactively)."""
        if self._width and _interactive(self.stream):
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0


def _bar(done, total, width=20):
    if not total:
        return ""
    filled = int(width * min(done, total) / total)
    return "[" + "#" * filled + "." * (width - filled) + "] "
