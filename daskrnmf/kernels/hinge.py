"""Linear hinge-loss problems: one block's share of a smoothed Newton pass, and the solver.

Both sub-problems of Max-Margin Semi-NMF that involve the hinge loss are of one form
(rows ``z_i``, labels ``y_i`` in {-1, +1}, offsets ``p_i``, row weights ``omega_i`` in
{0, 1}, a scale ``kappa > 0`` and a weight ``theta``)::

    primal  F(v) = ||v||^2 / (2 kappa) + theta sum_i omega_i max(0, r_i),
            r_i = p_i - y_i z_i^T v
    dual    D(alpha) = sum_i alpha_i p_i - (kappa / 2) ||u||^2,   u = sum_i alpha_i y_i z_i,
            0 <= alpha_i <= theta omega_i,   and F(kappa u*) = D(alpha*) at the optimum.

The SVM step is ``kappa = 1, p = 1, z = [G^T x, intercept_scaling]``; the G step is
derived in :mod:`daskrnmf.models.mnmf`.

Solver: Newton's method on the Huber-smoothed hinge (Chapelle, "Training a support vector
machine in the primal", 2007), ``l_mu(r) = 0 (r <= 0), r^2 / (2 mu) (0 < r < mu),
r - mu / 2 (r >= mu)``, with continuation in ``mu``.  Its gradient is ``v / kappa - u`` with
``alpha_i = theta omega_i clip(r_i / mu, 0, 1)`` — a feasible dual point at every iterate —
so every pass also gives a lower bound ``D(alpha)`` on the optimum of the (unsmoothed)
hinge problem; the best primal value seen less the best such bound is a true duality
gap, and it is the stopping rule.  The Hessian ``I / kappa + (theta / mu) sum z_i z_i^T``
sums only over the rows inside the smoothing zone ``0 < r_i < mu``; it is m x m (m the
number of features of z), tree-reduced like the gradient.

A pass (:func:`block_pass` on every block, summed) evaluates the smoothed loss along the
last Newton direction at a ladder of step sizes and everything at the full step, so an
accepted full step needs one pass; a backtracked step costs one more.
"""

import numpy as np
from numba import njit

#: step sizes at which a pass evaluates the smoothed loss along the Newton direction
#: (1 first: the full step; 0 last: the current point)
LADDER = tuple(np.geomspace(1.0, 1e-8, 33)) + (0.0,)
#: Newton decrement (relative to F) below which the smoothed problem counts as solved
_SOLVED = 1e-10


@njit(cache=True, nogil=True, fastmath=False)
def _ladder_losses(r0, s, omega, ladder, mu, out):
    """``sum_i omega_i l_mu(r0_i - t s_i)`` for every t of the ladder, in one sweep over
    the rows (tested against a NumPy twin), added to ``out`` (zeros from the caller: the
    np.zeros overload, about 0.1 s of a first fit's compile, is then not compiled)."""
    half = mu / 2
    inv = 1.0 / (2 * mu)
    for i in range(r0.shape[0]):
        if omega[i] == 0.0:
            continue
        for j in range(ladder.shape[0]):
            r = r0[i] - ladder[j] * s[i]
            if r > 0.0:
                out[j] += omega[i] * (r * r * inv if r < mu else r - half)
    return out


def block_pass(Z, y, p, omega, v, d, mu, ladder=LADDER):
    """One block's share of a Newton pass at ``v`` along direction ``d``.

    Parameters
    ----------
    Z : ndarray (n_rows, m)
    y, p, omega : ndarray (n_rows,)
    v, d : ndarray (m,)
        Current point and direction; the quantities below are at ``v + d`` except
        ``loss``.
    mu : float
        Smoothing width.
    ladder : sequence of float
        Step sizes t at which the smoothed loss along ``v + t d`` is returned.

    Returns
    -------
    dict of sums over the block's rows (all additive):
        ``loss`` (len(ladder),): ``sum omega l_mu(r(v + t d))``;
        ``hinge``: ``sum omega max(0, r)``; ``u``: ``sum a_i y_i z_i`` with
        ``a_i = omega_i clip(r_i / mu, 0, 1)`` (the dual point is ``theta a``);
        ``ap``: ``sum a_i p_i``; ``hess``: ``sum_{0 < r_i < mu} omega_i z_i z_i^T``;
        ``n_zone``: rows in the smoothing zone; ``n_pos``: rows with ``r > 0``.
    """
    r0 = p - y * (Z @ v)
    s = y * (Z @ d)
    ladder = np.asarray(ladder, dtype=np.float64)
    loss = _ladder_losses(r0, s, omega, ladder, float(mu), np.zeros(ladder.shape[0]))
    r = r0 - s
    a = omega * np.clip(r / mu, 0.0, 1.0)
    zone = (omega > 0) & (r > 0) & (r < mu)
    Zz = Z[zone]
    return {"loss": loss, "hinge": float((omega * np.maximum(r, 0.0)).sum()),
            "u": Z.T @ (a * y), "ap": float((a * p).sum()),
            "hess": Zz.T @ (Zz * omega[zone, None]), "n_zone": float(zone.sum()),
            "n_pos": float(((omega > 0) & (r > 0)).sum())}


def solve(run_pass, v0, kappa, theta, *, max_passes, tol, mu0=1.0, mu_min=1e-9, warm=False):
    """Minimise ``F(v)`` (module docstring) by smoothed Newton with continuation.

    Parameters
    ----------
    run_pass : callable
        ``run_pass(v, d, mu) -> dict``: :func:`block_pass` summed over all rows.
    v0 : ndarray (m,)
        Warm start.
    kappa, theta : float
    max_passes : int
        Passes allowed (at least 1).
    tol : float
        Relative duality gap (best ``F`` less best ``D``, over best ``F``) at which to stop.
    mu0, mu_min : float
        Smallest first and smallest smoothing width (in units of the margin, which is 1
        here).  The first width is raised to twice the mean positive residual at ``v0``
        (one extra pass) when that is larger: Newton starts where the smoothed loss is
        quadratic for most rows that violate their margin.
    warm : bool
        ``v0`` is the solution of a nearby problem and ``mu0`` the width that solve ended
        at: start there without raising the width to the residuals (which would lead
        Newton away from a point that is already nearly optimal and back through every
        width).  From a width far below the residuals' scale Newton's Hessian sees almost
        no rows and its steps crawl: the caller floors ``mu0`` where that can happen.

    Returns
    -------
    v : ndarray (m,)
        The measured point with the smallest ``F``.
    info : dict
        ``F`` (primal at v), ``hinge`` (the hinge sum at v), ``gap`` (relative: ``F`` less
        the best dual value of all iterates' multipliers, over ``F``), ``passes``, ``mu``
        (last smoothing width).
    """
    v = np.array(v0, dtype=np.float64)
    m = v.shape[0]
    d = np.zeros(m)
    mu = float(mu0)
    best = None
    lower, gap = -np.inf, np.inf
    for n_pass in range(1, max_passes + 1):
        res = run_pass(v, d, mu)
        if d.any():
            f_mu = [float((v + t * d) @ (v + t * d)) / (2 * kappa) + theta * loss
                    for t, loss in zip(LADDER, res["loss"])]
            i = int(np.argmin(f_mu))
            if i > 0:
                # the full step was not the best on the ladder: move to the best one and
                # evaluate there in the next pass.  If that is t = 0 (no step of at least
                # 1e-8 descends), the smoothed problem is solved as far as floating point
                # goes: sharpen, or stop at the smallest width.
                v = v + LADDER[i] * d
                d = np.zeros(m)
                if LADDER[i] == 0.0:
                    if mu <= mu_min:
                        break
                    mu = max(mu / 10, mu_min)
                continue
        v = v + d
        primal = float(v @ v) / (2 * kappa) + theta * res["hinge"]
        u = theta * res["u"]
        # every iterate's multipliers are feasible, so the best dual value seen is a lower
        # bound on the optimum, and the gap is measured against the best primal point (the
        # warm start v0 included: the solver never returns a point worse than it)
        lower = max(lower, theta * res["ap"] - kappa / 2 * float(u @ u))
        if best is None or primal < best[1]["F"]:
            best = (v.copy(), {"F": primal, "hinge": res["hinge"]})
        gap = (best[1]["F"] - lower) / max(abs(best[1]["F"]), 1e-300)
        if gap <= tol:
            break
        if (n_pass == 1 and not warm and res["n_pos"] > 0
                and 2 * res["hinge"] / res["n_pos"] > mu):
            mu = 2 * res["hinge"] / res["n_pos"]
            continue
        grad = v / kappa - u
        hess = (theta / mu) * res["hess"]
        hess[np.diag_indices(m)] += 1.0 / kappa
        try:
            d = -np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            # theta / mu so large that 1 / kappa vanishes beside it in float64 and the
            # Hessian is numerically singular: the least-norm Newton direction
            d = -np.linalg.lstsq(hess, grad, rcond=None)[0]
        if -float(grad @ d) / 2 <= _SOLVED * abs(primal) and mu > mu_min:
            # Newton has solved the smoothed problem (it converges finitely on this
            # piecewise quadratic); the rest of the gap is the smoothing's, at most
            # theta * n_zone * mu / 4: sharpen
            mu = max(mu / 10, mu_min)
            d = np.zeros(m)
    v, info = best
    return v, {**info, "gap": gap, "passes": n_pass, "mu": mu}
