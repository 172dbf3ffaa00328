"""A progress display for long fits, as a ``callback`` of any daskrnmf estimator.

    RFNMF(10, callback=ProgressBar()).fit("big.zarr/X")
    ONMFO(49, callback=ProgressBar(desc="faces")).fit(X)

On a terminal or in a notebook it redraws one line in place: each pass over X made
outside an iteration (the first pass, seeding, initialisation, the final pass), then
iterations with the objective and the passes over X for batch models, batches of the
stream with the pass for ONMFO, and a last line with what the model stores (``n_iter_``,
``objective_``, ``n_passes_``) and the whole fit's time.  In a non-interactive batch log
it stays quiet unless ``log=True``, in which case it writes the same lines, one per
event: through the ``daskrnmf`` logger when logging is configured (the CLI's
``--progress``), else to stderr.
"""

import sys
import time

from ._driver import final_summary, pass_label, say


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
        Also (or, when not interactive, only) write one line per event: through the
        ``daskrnmf`` logger (INFO) when logging is configured, else to stderr.
    stream : file, default=sys.stderr
    every : int, default=1
        Show every ``every``-th iteration, and of the passes over X made outside an
        iteration the first and every ``every``-th (the last line is always shown).

    Attributes
    ----------
    steps : int
        Iterations seen so far; ``last`` the most recent iteration's ``info`` dict.
    final : dict or None
        The fit's final event (the user guide's page *Progress, verbose and callbacks*), once the fit is over.
    """

    #: the driver also sends the pass and final events (see the user guide's page *Progress, verbose and callbacks*)
    progress_events = True

    def __init__(self, desc=None, *, log=False, stream=None, every=1):
        self.desc = desc
        self.log = log
        self.stream = stream if stream is not None else sys.stderr
        self.every = max(1, int(every))
        self.steps = 0
        self.last = None
        self.final = None
        self._t0 = None
        self._width = 0
        self._known = None
        self._iters = None

    def describe(self, info):
        """One line for the driver's ``info`` dict (the user guide's page *Progress, verbose and callbacks*).

        A pass event shows the pass; the final event what the model stores (a stream's
        bar full when it converged before its planned passes).  Streams (an ``info``
        with ``n_batches``, ONMFO) show batches done of ``max_iter`` (all the planned
        passes), the pass and the batch's loss; batch models show the iteration and the
        objective of the restart the driver calls ``best`` (naming it when there are
        several restarts).  The time is ``elapsed``, since the fit started.
        """
        import numpy as np

        elapsed = info["elapsed"] if "elapsed" in info else time.perf_counter() - self._t0
        head = f"{self.desc}: " if self.desc else ""
        event = info.get("event", "iteration")
        if event == "pass":
            return f"{head}{pass_label(info)}, {elapsed:.1f} s"
        if event == "final":
            if "n_batches" in info:
                # converged before max_iter passes: the planned batches are not needed
                done = info["max_iter"] if info.get("converged") else info["iteration"]
                return f"{head}{_bar(done, info['max_iter'])}{final_summary(info)}"
            return f"{head}fitted: {final_summary(info)}"
        total = info.get("max_iter")
        if "n_batches" in info:      # a stream: one iteration per batch
            done = f"{info['iteration']}/{total}" if total else f"{info['iteration']}"
            return (f"{head}{_bar(info['iteration'], total)}batch {done} (pass "
                    f"{info['pass'] + 1}), loss/sample {info['loss']:.4g}, "
                    f"{info['n_samples_seen']:,} samples, "
                    f"{elapsed:.1f} s")
        obj = self._known if self._known is not None else np.atleast_1d(
            np.asarray(info.get("objective", np.nan), dtype=float))
        best = min(int(info.get("best", 0)), obj.size - 1)
        value = float(obj[best])       # a restart that has stopped keeps its last objective
        # ... and its own iteration count (others may run on): what the model stores
        it = int(self._iters[best]) if self._iters is not None and self._iters[best] \
            else info["iteration"]
        which = f" (restart {best + 1} of {obj.size})" if obj.size > 1 else ""
        passes = info.get("n_passes")
        return (f"{head}iteration {it}, objective {value:.6g}{which}"
                + (f", {passes} passes" if passes is not None else "") + f", {elapsed:.1f} s")

    def __call__(self, info):
        if self._t0 is None:
            self._t0 = time.perf_counter()
        event = info.get("event", "iteration")
        if event == "final":
            self.final = info
        elif event == "pass":
            # passes outside iterations (an inner loop's, e.g. MNMF's semi-NMF start, may
            # be many): the first, then every ``every``-th
            if (info["n_passes"] - 1) % self.every:
                return False
        elif event == "iteration":
            self.steps += 1
            self.last = info
            self._track(info)
            if self.steps % self.every:
                return False
        line = self.describe(info)
        if _interactive(self.stream):
            pad = " " * max(0, self._width - len(line))
            self.stream.write("\r" + line + pad)
            self.stream.flush()
            self._width = len(line)
        if self.log:
            say(line)
        return False

    def _track(self, info):
        """The last finite objective of every restart (NaN marks a stopped one) and the
        iteration it was reached at (the restart's ``n_iter_`` if the model keeps it)."""
        import numpy as np

        obj = info.get("objective")
        if obj is None or "n_batches" in info:
            return
        obj = np.atleast_1d(np.asarray(obj, dtype=float))
        if self._known is None or self._known.shape != obj.shape:
            self._known = np.full(obj.shape, np.nan)
            self._iters = np.zeros(obj.shape, dtype=int)
        self._known = np.where(np.isfinite(obj), obj, self._known)
        self._iters = np.where(np.isfinite(obj), int(info["iteration"]), self._iters)

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
