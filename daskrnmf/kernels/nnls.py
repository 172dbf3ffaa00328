"""Non-negative least squares for every row of a block (compiled coordinate descent).

``min_{h >= 0} ||x - G h||^2`` per row x, from the k x k Gram matrix ``G^T G`` and the
row's ``G^T x``: exact coordinate minimisation (each step solves one coordinate in closed
form and clips at 0), cycled until no coordinate moves by more than ``tol`` relative to
the row's largest coefficient.  The problem is convex, so this converges to the NNLS
solution; each row is solved on its own, so a row's result does not depend on its block.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _nnls_rows(GtG, XG, H, max_iter, tol):
    n, k = XG.shape
    for i in range(n):
        for _ in range(max_iter):
            moved = 0.0
            top = 0.0
            for c in range(k):
                if GtG[c, c] <= 0.0:
                    H[i, c] = 0.0
                    continue
                g = XG[i, c]
                for j in range(k):
                    g -= GtG[c, j] * H[i, j]
                new = H[i, c] + g / GtG[c, c]
                if new < 0.0:
                    new = 0.0
                moved = max(moved, abs(new - H[i, c]))
                H[i, c] = new
                top = max(top, new)
            if moved <= tol * max(top, 1e-300):
                break
    return H


def nnls_rows(GtG, XG, H0=None, max_iter=1000, tol=1e-10):
    """Solve ``min_{h_i >= 0} ||x_i - G h_i||`` for every row i.

    Parameters
    ----------
    GtG : ndarray (k, k)
    XG : ndarray (n_rows, k), rows ``G^T x_i``
    H0 : ndarray (n_rows, k), optional
        Warm start (clipped at 0); zeros if omitted.

    Returns
    -------
    H : ndarray (n_rows, k), non-negative
    """
    H = np.zeros(XG.shape) if H0 is None else np.maximum(np.array(H0, dtype=np.float64), 0.0)
    return _nnls_rows(np.ascontiguousarray(GtG, dtype=np.float64),
                      np.ascontiguousarray(XG, dtype=np.float64), H, int(max_iter), float(tol))
