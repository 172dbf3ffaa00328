"""The one iteration loop shared by the batch models.

A model supplies an update ``step(state, active) -> (state, objective)`` for its stacked
restarts; the driver owns the stopping rule, the objective history, the callback, the
logging and the :class:`~sklearn.exceptions.ConvergenceWarning`.  Batch models step over
all of X per iteration; the online model (ONMFO) steps over one batch per iteration with
``rule="none"`` (a fixed number of steps), resumable from ``start``, and saves its
checkpoints from ``after_step``.

The callback receives one dict for every model::

    {"model": str, "iteration": int, "max_iter": int, "objective": ndarray (n_restarts,),
     "best": int, "active": ndarray of bool, "n_passes": int or None, **extra}

``objective`` holds NaN for restarts that already stopped; ``best`` is the restart with
the lowest objective so far (the one a progress display should follow); ``extra`` is
what the step reported about itself (``step_info``), e.g. ONMFO's pass and batch.
"""

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

logger = logging.getLogger("daskrnmf")


@dataclass
class IterationLog:
    """What the driver recorded: one row of ``history`` per iteration, one column per restart."""

    history: list = field(default_factory=list)
    n_iter: np.ndarray = None
    converged: np.ndarray = None
    stopped_by_callback: bool = False
    rule: str = "decrease"

    def restart_history(self, r):
        """Objective per iteration of restart ``r`` (iterations after it converged dropped)."""
        h = np.array([row[r] for row in self.history], dtype=float)
        return h[~np.isnan(h)]


def iterate(step, state, *, n_restarts, max_iter, tol, callback=None, verbose=0,
            name="model", passes=None, rule="decrease", start=0, after_step=None,
            step_info=None, converged=None):
    """Run ``step`` until every restart has converged or ``max_iter`` is reached.

    Restart ``r`` converges at iteration ``t`` when its objective no longer decreases by
    more than ``tol`` relative: ``J[t-1] - J[t] <= tol * |J[t-1]|`` (``rule="decrease"``,
    for models whose updates cannot increase it), or when it changes by no more than that,
    ``|J[t-1] - J[t]| <= tol * |J[t-1]|`` (``rule="change"``, for models without such a
    guarantee); ``rule="none"`` runs all ``max_iter`` steps (streams).  Converged restarts
    drop out of later steps (``active`` is False for them).

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
        >= 1 logs one INFO line per iteration on the ``daskrnmf`` logger.
    passes : callable, optional
        Returns the number of passes over X so far (for logs and the callback).
    rule : {"decrease", "change", "none"}
    start : int, default=0
        Steps already done (a resumed stream): iterations are numbered from ``start + 1``.
    after_step : callable, optional
        ``after_step(state, iteration, stopping)`` after the callback (checkpoints).
    step_info : callable, optional
        ``step_info(state) -> dict`` merged into the callback's dict and the log line.
    converged : callable, optional
        ``converged(state) -> bool`` after each step, for ``rule="none"``: a stream that
        decides itself when it has converged (ONMFO, at the end of a pass).

    Returns
    -------
    state, IterationLog
    """
    log = IterationLog(n_iter=np.zeros(n_restarts, dtype=int),
                       converged=np.zeros(n_restarts, dtype=bool), rule=rule)
    active = np.ones(n_restarts, dtype=bool)
    prev = np.full(n_restarts, np.inf)
    best_so_far = np.full(n_restarts, np.inf)
    for it in range(start + 1, max_iter + 1):
        tic = time.perf_counter()
        state, objective = step(state, active.copy())
        full = np.full(n_restarts, np.nan)
        full[active] = objective
        log.history.append(full)
        log.n_iter[active] = it
        finite = np.isfinite(prev)
        if rule == "none":
            newly = np.full(n_restarts, bool(converged is not None and converged(state)))
        else:
            drop = prev - full if rule == "decrease" else np.abs(prev - full)
            newly = active & finite & (drop <= tol * np.where(finite, np.abs(prev), 0.0))
        log.converged |= newly
        prev = np.where(active, full, prev)
        best_so_far = np.where(active, np.fmin(best_so_far, full), best_so_far)
        best = int(np.argmin(best_so_far)) if np.isfinite(best_so_far).any() else 0
        info = {"model": name, "iteration": it, "max_iter": max_iter, "objective": full,
                "best": best, "active": active.copy(),
                "n_passes": passes() if passes else None}
        if step_info is not None:
            info.update(step_info(state))
        active &= ~newly
        if verbose:
            logger.info("%s iteration %d: objective %.6g (restart %d), %d of %d restarts "
                        "active, %s passes, %.3f s", name, it, full[best] if np.isfinite(
                            full[best]) else np.nanmin(full), best, active.sum(), n_restarts,
                        info["n_passes"], time.perf_counter() - tic)
        stop = bool(callback is not None and callback(info))
        log.stopped_by_callback = stop
        if after_step is not None:
            after_step(state, it, stop or not active.any() or it == max_iter)
        if stop or not active.any():
            break
    return state, log


def warn_if_not_converged(name, converged, max_iter, stacklevel=3):
    """A :class:`~sklearn.exceptions.ConvergenceWarning` unless ``converged``."""
    if not converged:
        warnings.warn(f"{name} did not converge within max_iter={max_iter} iterations; "
                      "increase max_iter or tol.", ConvergenceWarning, stacklevel=stacklevel)
