"""The ``"cd"`` solve of (3) for complete rows, fused per row in one compiled loop.

Same algorithm and stopping rule as :func:`daskrnmf.kernels.outliers.solve_codes_cd`
(exact r, exact warm-started NNLS h, alternated until a round lowers the row's objective
by at most ``tol`` relative), but each row runs all its rounds in one compiled loop with
its residual in a d-vector: no (m, d) temporaries per round, which on long, narrow blocks
(k ~ 10, d ~ 100s) cost more than the arithmetic.  Residuals and objectives are
accumulated in float64 from the (float32 or float64) data.
"""

import numpy as np
from numba import njit

from .nnls import _nnls_row


@njit(cache=True, nogil=True, fastmath=True)
def _residual(x, W, h, e):
    d = x.shape[0]
    for j in range(d):
        e[j] = x[j]
    for c in range(W.shape[0]):
        hc = h[c]
        if hc != 0.0:
            for j in range(d):
                e[j] -= hc * W[c, j]


@njit(cache=True, nogil=True, fastmath=True)
def _cd_rows(x, W, G, L, warm, h, lam, max_iter, tol, nnls_tol, r_out, rounds, loss):
    """Every row: b0 = W x (a loop, so that a row's numbers do not depend on its block),
    clipped least squares from the Cholesky factor L of the ridged G unless ``warm``,
    then the rounds; ``loss[i]`` gets the row's final objective (3)."""
    m, d = x.shape
    k = W.shape[0]
    e = np.empty(d)
    b = np.empty(k)
    b0 = np.empty(k)
    idx = np.empty(k, dtype=np.int64)         # the NNLS's passive set and its factor,
    z = np.empty(k)                           # kept from one round to the next
    F = np.empty((k, k))
    passive = np.zeros(k, dtype=np.bool_)
    amax = 0.0
    for c in range(k):
        amax = max(amax, abs(G[c, c]))
    for i in range(m):
        for c in range(k):
            acc = 0.0
            for j in range(d):
                acc += W[c, j] * x[i, j]
            b0[c] = acc
        hi = h[i:i + 1]
        if not warm:
            for c in range(k):          # L y = b0, then L^T h = y, clipped at 0
                acc = b0[c]
                for t in range(c):
                    acc -= L[c, t] * hi[0, t]
                hi[0, c] = acc / L[c, c]
            for c in range(k - 1, -1, -1):
                acc = hi[0, c]
                for t in range(c + 1, k):
                    acc -= L[t, c] * hi[0, t]
                hi[0, c] = acc / L[c, c]
            for c in range(k):
                if hi[0, c] < 0.0:
                    hi[0, c] = 0.0
        f_prev = np.inf
        f = 0.0
        s = -1
        for it in range(max_iter + 1):
            _residual(x[i], W, hi[0], e)
            f = 0.0
            for j in range(d):
                q = e[j] if e[j] < lam else lam
                f += q * (e[j] - 0.5 * q)
            if it > 0 and f_prev - f <= tol * f_prev:
                break
            if it == max_iter:
                break
            f_prev = f
            for c in range(k):          # b = W (x - r), r = max(0, e - lam): dense and
                acc = 0.0               # branch-free, it vectorises (1.4x faster per row
                for j in range(d):      # than the sparse update over the r_j > 0)
                    rj = e[j] - lam
                    acc += W[c, j] * (rj if rj > 0.0 else 0.0)
                b[c] = b0[c] - acc
            s = _nnls_row(G, b, hi[0], nnls_tol, True, amax, idx, z, F, passive, s)
            rounds[i] += 1
        # the loop left with e = x - h W of the final h: r, and the row's objective (3)
        loss[i] = f
        for j in range(d):
            rj = e[j] - lam
            r_out[i, j] = rj if rj > 0.0 else 0.0


def solve_rows_fused(x, W, lam, max_iter, tol, h=None, *, dtype=None, return_loss=False,
                     out=None):
    """:func:`daskrnmf.kernels.outliers.solve_codes_cd` for complete data, row by row in
    one compiled loop (see the module docstring); same parameters and returns, and with
    ``return_loss`` each row's objective (3) at the returned h, r (float64, as
    :func:`daskrnmf.kernels.outliers.huber_rows` of its residual).  ``dtype``: the work
    dtype the caller already chose (:func:`daskrnmf.kernels.outliers.work_dtype`; its
    check is a pass over x).  ``out``: arrays (h (>= m, k) float64, r (>= m, d) in the
    work dtype, rounds (>= m,) int64, loss (>= m,) float64) whose first m rows receive
    the results (a caller that solves a block in slices reuses them: fresh arrays of that
    size cost page faults each time, several µs a page on VMs), without ``h``."""
    from .outliers import work_dtype

    dt = work_dtype(x) if dtype is None else np.dtype(dtype)
    x = np.ascontiguousarray(x, dtype=dt)
    W64 = np.ascontiguousarray(W, dtype=np.float64)
    G = W64 @ W64.T
    k = W64.shape[0]
    L = np.linalg.cholesky(G + (1e-12 * np.trace(G) + 1e-300) * np.eye(k)) if k else G
    warm = h is not None
    m = x.shape[0]
    if out is not None and not warm:
        h, r, rounds, loss = (a[:m] for a in out)
        rounds[:] = 0
    else:
        h = np.array(h, dtype=np.float64) if warm else np.zeros((m, k))
        rounds = np.zeros(m, dtype=np.int64)
        r = np.empty(x.shape, dtype=dt)
        loss = np.zeros(m)
    h = np.ascontiguousarray(h)
    if m:
        _cd_rows(x, W64, G, np.ascontiguousarray(L), warm, h, float(lam), int(max_iter),
                 float(tol), 32 * max(k, 1) * np.finfo(np.float64).eps, r, rounds, loss)
    if return_loss:
        return h, r, rounds, loss
    return h, r, rounds
