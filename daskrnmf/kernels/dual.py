"""Box-constrained linear-kernel dual problems, solved by coordinate ascent on a block.

Both sub-problems of Max-Margin Semi-NMF that involve the hinge loss are of one form
(rows ``z_i`` of a block, labels ``y_i`` in {-1, +1}, offsets ``p_i``, a scale
``kappa > 0`` and a box ``[0, theta]``)::

    primal   min_v  ||v||^2 / (2 kappa) + theta * sum_i max(0, p_i - y_i z_i^T v)
    dual     max_a  sum_i a_i p_i - (kappa / 2) ||u||^2,   u = sum_i a_i y_i z_i,
             0 <= a_i <= theta,                             v = kappa u.

The SVM step is ``kappa = 1, p = 1, z = [G^T x, 1]`` (a linear SVM whose intercept is a
constant feature, as liblinear's); the G step is derived in :mod:`daskrnmf.models.mnmf`.

:func:`sweep` is Hsieh et al.'s dual coordinate descent (liblinear) on the block's rows
with the rest of ``u`` held fixed: the block's share of a CoCoA-style distributed round
(each block ascends its own coordinates from the same ``u``; the driver line-searches the
sum of the blocks' steps).  The visiting order is random, so a solution is reproducible
for a given chunking and equal across chunkings to the duality-gap tolerance.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _sweep(Z, y, p, a, u, kappa, theta, weight, n_sweeps, tol, seed):
    n, m = Z.shape
    np.random.seed(seed)
    order = np.arange(n)
    du = np.zeros(m)
    loc = u.copy()
    sq = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(m):
            s += Z[i, j] * Z[i, j]
        sq[i] = s
    for _ in range(n_sweeps):
        moved = 0.0
        np.random.shuffle(order)
        for ii in range(n):
            i = order[ii]
            box = theta * weight[i]
            if sq[i] <= 0.0 or box <= 0.0:
                continue
            g = 0.0
            for j in range(m):
                g += Z[i, j] * loc[j]
            g = p[i] - kappa * y[i] * g          # d dual / d a_i
            new = a[i] + g / (kappa * sq[i])
            if new < 0.0:
                new = 0.0
            elif new > box:
                new = box
            step = new - a[i]
            if step != 0.0:
                a[i] = new
                for j in range(m):
                    t = step * y[i] * Z[i, j]
                    loc[j] += t
                    du[j] += t
                moved = max(moved, abs(step) / max(box, 1e-300))
        if moved <= tol:
            break
    return du


def sweep(Z, y, p, alpha, u, kappa, theta, weight=None, n_sweeps=1, tol=0.0, seed=0):
    """Coordinate ascent on the block's dual variables, the others' share of ``u`` fixed.

    Parameters
    ----------
    Z : ndarray (n_rows, m)
    y : ndarray (n_rows,) of -1.0 / +1.0
    p : ndarray (n_rows,)
    alpha : ndarray (n_rows,)
        The block's dual variables; **updated in place**.
    u : ndarray (m,)
        ``sum_i alpha_i y_i z_i`` over all rows of all blocks.
    kappa, theta : float
    weight : ndarray (n_rows,), optional
        Per-row box scale (0 drops a row: its box is [0, 0]).
    n_sweeps : int
        Sweeps over the block's rows, each in a fresh random order (Hsieh et al.: much
        faster than cyclic order when the features have a large common offset); stops
        early once no variable moves by more than ``tol`` times its box.
    seed : int
        Seeds the sweep orders (so a round is reproducible).

    Returns
    -------
    du : ndarray (m,)
        The change of ``u`` due to this block.
    """
    w = np.ones(Z.shape[0]) if weight is None else np.asarray(weight, dtype=np.float64)
    return _sweep(np.ascontiguousarray(Z, dtype=np.float64), np.asarray(y, np.float64),
                  np.asarray(p, np.float64), alpha, np.asarray(u, np.float64), float(kappa),
                  float(theta), w, int(n_sweeps), float(tol), int(seed) % (2**31 - 1))


def hinge_sum(Z, y, p, v, weight=None):
    """``sum_i weight_i max(0, p_i - y_i z_i^T v)``."""
    h = np.maximum(p - y * (Z @ v), 0.0)
    return float(h.sum() if weight is None else (weight * h).sum())


def line_step(gain, u, du, kappa):
    """Best step ``t`` in [0, 1] along ``alpha + t d_alpha`` (``u + t du``) for the dual.

    The dual along the line is ``D + t gain - (kappa / 2)(2 t u.du + t^2 ||du||^2)`` with
    ``gain = sum_i d_alpha_i p_i``; any ``t`` in [0, 1] keeps every ``alpha_i`` in its box
    (a convex combination of two feasible points).
    """
    curv = kappa * float(du @ du)
    slope = gain - kappa * float(u @ du)
    if curv <= 0.0:
        return 1.0 if slope > 0 else 0.0
    return float(np.clip(slope / curv, 0.0, 1.0))
