"""The one iteration loop shared by the batch models.

A model supplies an update ``step(state, active) -> (state, objective)`` for its stacked
restarts; the driver owns the stopping rule, the objective history, the callback, the
logging, the :class:`~sklearn.exceptions.ConvergenceWarning` and the checkpoints.  Batch
models step over all of X per iteration (``rule="decrease"``); the online model (ONMFO)
steps over one batch per iteration and converges by its passes (``rule="passes"``).

The callback receives one dict for every model::

    {"model": str, "event": "iteration", "iteration": int, "max_iter": int,
     "objective": ndarray (n_restarts,), "best": int, "active": ndarray of bool,
     "n_passes": int or None, "elapsed": float, **extra}

``objective`` holds NaN for restarts that already stopped; ``best`` is the restart with
the lowest objective so far (the one a progress display should follow); ``elapsed`` the
seconds since the fit started (its first pass over X included); ``extra`` is what the
step reported about itself (``step_info``), e.g. ONMFO's pass and batch.

A callback with a true attribute ``progress_events`` (:class:`daskrnmf.ProgressBar`)
also receives, through :class:`Progress`, the fit's other events (its return value is
ignored for them):

* ``{"model", "event": "pass", "n_passes": int, "pass_name": str, "seconds": float,
  "elapsed": float}`` when a pass over X ends outside an iteration: the first pass
  (feature statistics), seeding and initialisation passes, the final pass(es);
* ``{"model", "event": "final", "final": True, "n_iter", "objective", "n_passes",
  "elapsed", ...}`` once the fitted attributes are set: ``n_iter`` is ``n_iter_`` as
  stored, ``objective`` ``objective_`` (None where the model has none),
  ``reconstruction_err`` its ``reconstruction_err_`` where it has one, ``n_passes``
  ``n_passes_``; a stream adds what its last line needs (ONMFO: ``converged``,
  ``stopped``, ``n_batches``, ``iteration`` and ``max_iter`` in batches).

``verbose >= 1`` writes the same events as lines (:func:`say`).
"""

import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

logger = logging.getLogger("daskrnmf")


def say(message, *args):
    """One progress line (``verbose``, ``ProgressBar(log=True)``): an INFO record of the
    ``daskrnmf`` logger when logging is configured to show it (a handler on the logger or
    an ancestor, and INFO enabled: the user's ``logging.basicConfig(level=logging.INFO)``,
    the CLI's ``--progress``), else printed to stderr, as scikit-learn's ``verbose``
    prints: a plain script or a batch job's log shows the lines without configuring
    logging, and once logging takes them, each line goes through it only (not twice).
    A line asked for (``verbose``, ``log=True``) is never dropped by a level set for
    other loggers' sake."""
    if logger.hasHandlers() and logger.isEnabledFor(logging.INFO):
        logger.info(message, *args)
        return
    stream = sys.stderr
    if stream is not None:
        stream.write((message % args if args else message) + "\n")
        stream.flush()


class Progress:
    """What one fit reports besides its iterations: the passes over X made outside an
    iteration (first pass, seeding, initialisation, final pass) and the final line, to
    ``verbose`` and to a callback that asks for them (``progress_events``); the clock of
    the whole fit (``elapsed`` in every event).

    Parameters
    ----------
    name : str
        The model's name, at the start of every line.
    callback : callable, optional
        The model's callback; receives the events when ``callback.progress_events``.
    verbose : int, default=0
    """

    def __init__(self, name, callback=None, verbose=0):
        self.name = name
        self.callback = callback
        self.verbose = verbose
        self.t0 = time.perf_counter()
        self.in_step = False        # the driver's step: its passes show in its line
        self.notes = {}

    @property
    def events(self):
        """The callback receives pass and final events."""
        return bool(getattr(self.callback, "progress_events", False))

    def elapsed(self):
        """Seconds since the fit started."""
        return time.perf_counter() - self.t0

    def passed(self, n_passes, what, seconds):
        """A pass over X ended (:meth:`daskrnmf._blocks.RowBlocks.map_reduce`)."""
        if self.in_step or not (self.verbose or self.events):
            return
        info = {"model": self.name, "event": "pass", "n_passes": int(n_passes),
                "pass_name": what, "seconds": seconds, "elapsed": self.elapsed()}
        if self.verbose:
            say("%s %s: %.3f s, %.1f s into the fit", self.name, pass_label(info), seconds,
                info["elapsed"])
        if self.events:
            self.callback(info)

    def note(self, **values):
        """Values the final event carries besides the fitted attributes (a stream's
        convergence, its batches)."""
        self.notes.update(values)

    def final(self, model):
        """The fit is over and ``model``'s fitted attributes are set: the last line."""
        if not (self.verbose or self.events):
            return
        n_iter = getattr(model, "n_iter_", None)
        info = {"model": self.name, "event": "final", "final": True,
                "n_iter": n_iter.tolist() if isinstance(n_iter, np.ndarray) else n_iter,
                "objective": getattr(model, "objective_", None),
                "n_passes": getattr(model, "n_passes_", None), "elapsed": self.elapsed()}
        if hasattr(model, "reconstruction_err_"):
            info["reconstruction_err"] = model.reconstruction_err_
        info.update(self.notes)
        if self.verbose:
            say("%s fitted: %s", self.name, final_summary(info))
        if self.events:
            self.callback(info)


def pass_label(info):
    """``pass 3 (Gram matrix)`` for a pass event."""
    name = info.get("pass_name")
    return f"pass {info['n_passes']}" + (f" ({name})" if name and name != "pass" else "")


def final_summary(info):
    """``5 iterations, objective 12.5, 7 passes over X, 3.4 s`` for a final event: the
    fitted attributes as stored (``n_iter_`` per problem where it is an array)."""
    n_iter = info.get("n_iter")
    parts = []
    if "n_batches" in info:     # a stream (ONMFO): n_iter_ counts the passes started
        if info.get("converged"):
            parts.append(f"converged after pass {n_iter}")
        elif info.get("stopped"):
            parts.append(f"stopped at batch {info['iteration']}/{info['max_iter']} "
                         f"(pass {n_iter})")
        else:
            parts.append(f"ended after pass {n_iter} of "
                         f"{info['max_iter'] // max(info['n_batches'], 1)}")
        if info.get("objective") is not None:
            parts.append(f"objective {float(info['objective']):.4g} per sample (last pass)")
        if info.get("n_passes") is not None:
            parts.append(f"{int(info['n_passes'])} passes")
        if info.get("n_samples_seen") is not None:
            parts.append(f"{int(info['n_samples_seen']):,} samples")
        parts.append(f"{info['elapsed']:.1f} s")
        return ", ".join(parts)
    if isinstance(n_iter, (list, tuple)):
        parts.append("iterations " + "/".join(str(int(i)) for i in n_iter))
    elif n_iter is not None:
        parts.append(f"{int(n_iter)} iterations")
    if info.get("objective") is not None:
        parts.append(f"objective {float(info['objective']):.6g}")
    elif info.get("reconstruction_err") is not None:
        parts.append(f"reconstruction error {float(info['reconstruction_err']):.6g}")
    if info.get("n_passes") is not None:
        parts.append(f"{int(info['n_passes'])} passes over X")
    parts.append(f"{info['elapsed']:.1f} s")
    return ", ".join(parts)


@dataclass
class IterationLog:
    """What the driver recorded: one row of ``history`` per iteration, one column per restart."""

    history: list = field(default_factory=list)
    n_iter: np.ndarray = None
    converged: np.ndarray = None
    stopped_by_callback: bool = False
    rule: str = "decrease"
    # the run could converge (no ConvergenceWarning for a fixed number of steps)
    can_converge: bool = True
    # rule="passes": the iteration after which the current pass began (saved with the
    # run: a resumed run's pass line counts the pass's batches before the resume too)
    pass_began: int = 0

    def restart_history(self, r):
        """Objective per iteration of restart ``r`` (iterations after it converged dropped)."""
        h = np.array([row[r] for row in self.history], dtype=float)
        return h[~np.isnan(h)]


#: ``rule="passes"``: a pass objective whose relative standard error is at most ``tol``
#: divided by this is precise enough for one comparison of two passes to decide
PRECISE_PASS = 4


def passes_converged(history, tol, errors=None):
    """``rule="passes"``: whether a stream's pass objectives ``history`` (noisy with the
    batch order) have converged; never with ``tol`` 0.

    * **Three passes** (any stream): the last two passes have not lowered the best of the
      earlier ones by more than ``tol`` relative.  Two in a row, because a pass objective
      of few batches varies by about 1 % with the batch order (400 ORL faces in 8
      batches): one pass above the best may be the order's luck.
    * **Two passes**, when the comparison is precise: the last pass has not lowered the
      best earlier one by more than ``tol`` relative, and the last two passes' ``errors``
      (the relative standard error of each pass objective, estimated from the spread of
      the batch losses it averages; NaN when unknown or from too few batches) are both at
      most ``tol / PRECISE_PASS``.  A pass whose batch losses spread that little is flat
      (a W still improving within it spreads them) and its objective is not the batch
      order's luck, so the next pass not lowering it means W had converged within it: a
      large X whose pass makes hundreds of W updates stops after its second pass, not
      its third.

    Parameters
    ----------
    history : sequence of float
        The objective of each completed pass.
    tol : float
    errors : sequence of float, optional
        Per pass, its objective's relative standard error (as long as ``history``);
        None: the three-pass rule only.
    """
    h = history
    if not tol > 0 or len(h) < 2:
        return False
    if len(h) >= 3 and min(h[-2:]) > (1 - tol) * min(h[:-2]):
        return True
    e = errors
    precise = (e is not None and len(e) == len(h)
               and all(v <= tol / PRECISE_PASS for v in e[-2:]))   # False for NaN
    return bool(precise and h[-1] > (1 - tol) * min(h[:-1]))


def iterate(step, state, *, n_restarts, max_iter, tol, callback=None, verbose=0,
            name="model", passes=None, rule="decrease", start=0, step_info=None,
            pass_objectives=None, pass_errors=None, progress=None, checkpoint=None,
            problem=None, checkpoint_when=None, resume_stopped=False):
    """Run ``step`` until every restart has converged or ``max_iter`` is reached.

    Restart ``r`` converges at iteration ``t`` when its objective changes by no more than
    ``tol`` relative: ``|J[t-1] - J[t]| <= tol * |J[t-1]|`` (``rule="decrease"``).  An
    increase is no convergence, also for models whose updates cannot increase it: a step
    that is not one of those (RFNMF's unit-weight first step after seeding) may, and
    RFNMF's L2,1 fits once stopped at their second iteration when it did.
    ``rule="passes"`` (a stream, one step per batch): the run converges at the end of a
    pass when :func:`passes_converged` says so of ``pass_objectives(state)`` (and
    ``pass_errors(state)``: after two passes where they are precise, else three), and a
    line per pass is logged.  Converged restarts drop out of later steps (``active`` is False
    for them).

    Parameters
    ----------
    step : callable
        ``step(state, active) -> (state, objective_of_active_restarts)``.
    state : object
        Initial model state, passed through ``step``.
    n_restarts, max_iter : int
    tol : float
    callback : callable, optional
        ``callback(info) -> bool``; called after each iteration with a dict holding
        ``iteration``, ``objective`` (per restart, NaN for inactive), ``active`` and
        ``n_passes``; returning True stops the fit.
    verbose : int
        >= 1 writes one line per iteration (:func:`say`).
    passes : callable, optional
        Returns the number of passes over X so far (for logs and the callback).
    rule : {"decrease", "passes"}
    start : int, default=0
        Steps already done: iterations are numbered from ``start + 1``.
    step_info : callable, optional
        ``step_info(state) -> dict`` merged into the callback's dict.
    pass_objectives : callable, optional
        ``rule="passes"``: ``pass_objectives(state) -> list`` of the objectives of the
        passes the stream has completed (a step that makes it longer ended a pass).
    pass_errors : callable, optional
        ``rule="passes"``: ``pass_errors(state) -> list``, per completed pass the relative
        standard error of its objective (NaN: unknown); see :func:`passes_converged`.
    progress : Progress, optional
        The fit's :class:`Progress`: its clock (``elapsed``), and the passes made inside
        a step are left to the iteration's line.
    checkpoint : daskrnmf._resume.RunCheckpoint, optional
        This run's part of the fit's checkpoint (the model's ``checkpoint`` parameter):
        the run starts from the iteration it saved, if it saved one, and is saved after
        every iteration.
    problem : object, optional
        The model's fit-state object: its attributes named in ``checkpoint_attributes``
        are saved and restored with ``state``.
    checkpoint_when : callable, optional
        ``checkpoint_when(state, iteration, stopping) -> bool``: whether to save after
        this iteration (default: after every one); a run's last iteration is always
        saved.
    resume_stopped : bool, default=False
        A resumed run that its callback had stopped continues (a stream paused by its
        callback) instead of ending at once with its saved state.

    Returns
    -------
    state, IterationLog
    """
    log = IterationLog(n_iter=np.zeros(n_restarts, dtype=int),
                       converged=np.zeros(n_restarts, dtype=bool), rule=rule)
    active = np.ones(n_restarts, dtype=bool)
    prev = np.full(n_restarts, np.inf)
    best_so_far = np.full(n_restarts, np.inf)
    t0 = progress.t0 if progress is not None else time.perf_counter()
    log.can_converge = rule == "decrease" or tol > 0
    restored = checkpoint.restore(state, problem) if checkpoint is not None else None
    if restored is not None:
        (state, history, log.n_iter, log.converged, log.stopped_by_callback, start,
         log.pass_began) = restored
        log.history = [np.array(row, dtype=float) for row in history]
        active = ~log.converged
        for row in log.history:
            seen = np.isfinite(row)
            prev = np.where(seen, row, prev)
            best_so_far = np.where(seen, np.fmin(best_so_far, row), best_so_far)
        if verbose:
            say("%s resumed from its checkpoint after iteration %d%s", name, start,
                "" if active.any() else " (converged)")
        if log.stopped_by_callback:
            if not resume_stopped:
                return state, log       # the run had ended: its callback stopped it
            # it continues: it ends as the run without that stop (at max_iter, the
            # ConvergenceWarning and the last line of a run that was not stopped)
            log.stopped_by_callback = False
        if active.any() and start > max_iter:
            if rule == "passes":      # max_iter counts passes, the steps batches
                raise ValueError(f"{name} was checkpointed after batch {start}, beyond its "
                                 f"max_iter ({max_iter} batches): resume with a larger "
                                 "max_iter, or fit with overwrite_checkpoint=True to start "
                                 "afresh.")
            raise ValueError(f"{name} was checkpointed after iteration {start}, beyond "
                             f"max_iter={max_iter}: resume with max_iter >= {start}, or fit "
                             "with overwrite_checkpoint=True to start afresh.")
    n_passes_done = len(pass_objectives(state)) if rule == "passes" else 0
    if restored is None:
        log.pass_began = start
    tic_pass = time.perf_counter()      # the current pass's clock, in this run
    for it in range(start + 1, max_iter + 1):
        if not active.any():
            break
        tic = time.perf_counter()
        if progress is not None:
            progress.in_step = True
        try:
            state, objective = step(state, active.copy())
        finally:
            if progress is not None:
                progress.in_step = False
        full = np.full(n_restarts, np.nan)
        full[active] = objective
        log.history.append(full)
        log.n_iter[active] = it
        finite = np.isfinite(prev)
        pass_line = None
        if rule == "passes":
            h = pass_objectives(state)
            ended = len(h) > n_passes_done
            newly = np.full(n_restarts, ended and passes_converged(
                h, tol, pass_errors(state) if pass_errors is not None else None))
            if ended:
                pass_line = (len(h), h[-1], it - log.pass_began,
                             time.perf_counter() - tic_pass)
                n_passes_done, log.pass_began, tic_pass = len(h), it, time.perf_counter()
        else:
            # a small change only: an increase is no convergence (see the docstring)
            drop = np.abs(prev - full)
            newly = active & finite & (drop <= tol * np.where(finite, np.abs(prev), 0.0))
        log.converged |= newly
        prev = np.where(active, full, prev)
        best_so_far = np.where(active, np.fmin(best_so_far, full), best_so_far)
        best = int(np.argmin(best_so_far)) if np.isfinite(best_so_far).any() else 0
        info = {"model": name, "event": "iteration", "iteration": it, "max_iter": max_iter,
                "objective": full, "best": best, "active": active.copy(),
                "n_passes": passes() if passes else None,
                "elapsed": time.perf_counter() - t0}
        if step_info is not None:
            info.update(step_info(state))
        active &= ~newly
        if verbose:
            say("%s iteration %d: objective %.6g (restart %d), %d of %d restarts active, "
                "%s passes, %.3f s, %.1f s into the fit", name, it, full[best] if np.isfinite(
                    full[best]) else np.nanmin(full), best, active.sum(), n_restarts,
                info["n_passes"], time.perf_counter() - tic, info["elapsed"])
            if pass_line is not None:
                say("%s pass %d: objective %.6g per sample, %d batches, %.3f s, %.1f s into "
                    "the fit", name, *pass_line, time.perf_counter() - t0)
        stop = bool(callback is not None and callback(info))
        log.stopped_by_callback = stop
        last = stop or not active.any() or it == max_iter
        if checkpoint is not None and (last or checkpoint_when is None
                                       or checkpoint_when(state, it, last)):
            checkpoint.save(state, problem, log, it)
        if stop or not active.any():
            break
    return state, log



def run_quiet(step, state, *, n_restarts, max_iter, tol):
    """An inner loop of a fit (a sample's clustering, an initialisation's candidates):
    :func:`iterate` with the caller's own limits and no callback, logs, progress,
    checkpoint or ConvergenceWarning — the fit's outer run reports and saves, and an
    inner run is done again on resume.  A model's inner loop on X itself runs through
    ``BaseModel._run(..., quiet=True)`` instead.  Returns ``state, log``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return iterate(step, state, n_restarts=n_restarts, max_iter=max_iter, tol=tol)

def warn_if_not_converged(name, converged, max_iter, stacklevel=None, unit="iterations"):
    """A :class:`~sklearn.exceptions.ConvergenceWarning` unless ``converged``, pointing
    at the user's line that called into daskrnmf (``stacklevel`` None: the first frame
    outside the package, however deep the fit's call chain); ``unit``: what ``max_iter``
    counts ("passes" for a stream)."""
    if not converged:
        warnings.warn(f"{name} did not converge within max_iter={max_iter} {unit}; "
                      "increase max_iter or tol.", ConvergenceWarning,
                      stacklevel=stacklevel or user_stacklevel())


def user_stacklevel():
    """The ``stacklevel`` of :func:`warnings.warn`, called by this function's caller,
    that names the first frame outside the daskrnmf package."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
