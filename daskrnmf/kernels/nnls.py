"""Non-negative least squares for every row of a block: the exact active-set solver
(:func:`nnls_codes`, Lawson-Hanson in Bro & de Jong's normal-equation form).

``min_{h >= 0} ||x - G h||^2`` per row x, from the k x k Gram matrix ``G^T G`` and the
row's ``G^T x``; finite (an active set grows and shrinks until the KKT conditions hold).
Each row is solved on its own, so a row's result does not depend on its block.
"""

import numpy as np
from numba import njit

from .blocks import one_type_per_argument


@one_type_per_argument
@njit(cache=True, nogil=True, fastmath=False)
def _chol_append(A, idx, s, L, c, dependent_out=False):
    """Append column c to the passive set ``idx[:s]`` and its Cholesky factor L of
    ``A[idx, idx]`` (one new row, O(s^2)); a pivot that roundoff made non-positive is
    floored (a column dependent on the others gets ~0).  ``dependent_out``: a column whose
    pivot is at or below that floor (dependent on the passive set: more columns than
    A's rank) is not appended.  Returns the new size."""
    idx[s] = c
    for j in range(s):
        acc = A[c, idx[j]]
        for m in range(j):
            acc -= L[s, m] * L[j, m]
        L[s, j] = acc / L[j, j]
    acc = A[c, c]
    for m in range(s):
        acc -= L[s, m] * L[s, m]
    floor = 1e-14 * A[c, c] + 1e-300
    if dependent_out and not (acc > floor):
        return s
    L[s, s] = np.sqrt(acc if acc > floor else floor)
    return s + 1


@njit(cache=True, nogil=True, fastmath=False)
def _chol_delete(idx, s, L, t):
    """Remove position t from the passive set ``idx[:s]`` and its Cholesky factor: the
    rows below t move up, and Givens rotations of neighbouring columns take out the
    superdiagonal this leaves (O((s - t)^2)).  Returns the new size."""
    for i in range(t, s - 1):
        idx[i] = idx[i + 1]
        for j in range(i + 2):
            L[i, j] = L[i + 1, j]
    for i in range(t, s - 1):
        a = L[i, i]
        b = L[i, i + 1]
        r = np.sqrt(a * a + b * b)
        if r > 0.0:
            c = a / r
            sn = b / r
            L[i, i] = r
            for row in range(i + 1, s - 1):
                u = L[row, i]
                w = L[row, i + 1]
                L[row, i] = c * u + sn * w
                L[row, i + 1] = c * w - sn * u
        L[i, i + 1] = 0.0
    return s - 1


@njit(cache=True, nogil=True, fastmath=False)
def _chol_solve(b, idx, s, L, z):
    """``A[P, P] z = b[P]`` (P = ``idx[:s]``) from the factor L."""
    for i in range(s):                      # L y = b
        acc = b[idx[i]]
        for m in range(i):
            acc -= L[i, m] * z[m]
        z[i] = acc / L[i, i]
    for i in range(s - 1, -1, -1):          # L^T z = y
        acc = z[i]
        for m in range(i + 1, s):
            acc -= L[m, i] * z[m]
        z[i] = acc / L[i, i]


@njit(cache=True, nogil=True, fastmath=False)
def _nnls_gram_rows(A, B, out, tol, warm, idx, z, L, passive):
    """Lawson-Hanson active set on the normal equations (Bro & de Jong's FNNLS) for every
    row: ``min_{h >= 0} h^T A h / 2 - b^T h`` with ``A = G^T G``, ``b = G^T x``.

    ``warm``: each row starts from ``out[i]`` (>= 0) with its positive entries as the
    passive set (first solved on that set, stepping back to feasibility), instead of 0;
    None (or False) starts every row at 0 (None: see :func:`_nnls_row`).  Scratch from
    the caller (:func:`_solve`): ``idx`` (k,) int64, ``z`` (k,), ``L`` (k, k), ``passive``
    (k,) bool, all False (np.empty's and np.zeros' overloads, about 0.3 s of a first
    fit's compile, are then not compiled for these kernels)."""
    n, k = B.shape
    amax = 0.0
    for c in range(k):
        v = abs(A[c, c])
        amax = v if v > amax else amax          # max() as Numba writes it
    for i in range(n):
        _nnls_row(A, B[i], out[i], tol, warm, amax, idx, z, L, passive, -1)
    return out


@njit(cache=True, nogil=True, fastmath=False)
def _nnls_gram_rows_each(A3, B, out, tol, warm, idx, z, L, passive):
    """:func:`_nnls_gram_rows` with a Gram matrix of its own for every row (``A3[i]``, the
    masked Gram matrices of rows with missing entries); the same scratch."""
    n, k = B.shape
    for i in range(n):
        A = A3[i]
        amax = 0.0
        for c in range(k):
            v = abs(A[c, c])
            amax = v if v > amax else amax
        _nnls_row(A, B[i], out[i], tol, warm, amax, idx, z, L, passive, -1)
    return out


@one_type_per_argument
@njit(cache=True, nogil=True, fastmath=False)
def _nnls_row(A, b, x, tol, warm, amax, idx, z, L, passive, s):
    """One row of the active-set solve (``x`` is the row's solution, updated in place;
    ``idx``, ``z``, ``L``, ``passive`` scratch space).

    The passive set ``idx[:s]`` keeps its Cholesky factor ``L[:s, :s]`` of ``A[idx,
    idx]`` up to date as columns enter (one new row) and leave (Givens rotations), so a
    step costs O(s^2), not a factorisation.  ``s >= 0``: ``idx[:s]``, ``L`` and
    ``passive`` hold the factor a previous call on the same A left (returned), and a warm
    start changes it only where the support of x differs; ``s < 0``: built from scratch
    (a row's result then does not depend on the rows solved before it).  ``warm`` None
    is a cold start that Numba compiles without the warm start's code (its ``is not
    None`` test is decided before typing), for callers that never start warm.  Returns
    the passive set's size."""
    k = b.shape[0]
    if s < 0:
        s = 0
        for c in range(k):
            passive[c] = False
    resume = False
    if warm is not None and warm:
        for t in range(s - 1, -1, -1):      # cached columns that left the support
            c = idx[t]
            if not (x[c] > 0.0):
                passive[c] = False
                s = _chol_delete(idx, s, L, t)
        for c in range(k):
            if x[c] > 0.0 and A[c, c] > 0.0 and not passive[c]:
                # a support wider than A's rank (k > n_features, or a clipped
                # least-squares start) has columns dependent on the others: their
                # floored pivots (~1e-7 relative) compound through the factor to inf and
                # NaN codes.  They start at 0 (the active set lets them in if they help).
                grown = _chol_append(A, idx, s, L, c, True)
                if grown == s:
                    x[c] = 0.0
                else:
                    s = grown
                    passive[c] = True
                    resume = True
            elif x[c] > 0.0 and A[c, c] > 0.0:
                resume = True
            else:
                x[c] = 0.0
                if passive[c]:              # a cached column whose A[c, c] is 0
                    for t in range(s):
                        if idx[t] == c:
                            s = _chol_delete(idx, s, L, t)
                            break
                    passive[c] = False
    else:
        for t in range(s):
            passive[idx[t]] = False
        s = 0
        x[:] = 0.0
    bmax = 0.0
    for c in range(k):
        bc = abs(b[c])
        bmax = bc if bc > bmax else bmax        # max() as Numba writes it
    if bmax == 0.0:
        x[:] = 0.0
        for t in range(s):
            passive[idx[t]] = False
        return 0
    for _outer in range(3 * k + 3):
        best = -1
        if resume:                      # a warm start: solve on its passive set first
            resume = False
        else:
            xmax = 0.0
            for c in range(k):
                xc = x[c]
                xmax = xc if xc > xmax else xmax
            wbest = tol * (bmax + amax * xmax)
            for c in range(k):
                if passive[c] or A[c, c] <= 0.0:
                    continue
                w = b[c]
                for j in range(k):
                    w -= A[c, j] * x[j]
                if w > wbest:
                    best, wbest = c, w
            if best < 0:
                break                   # KKT holds: no zero coordinate can descend
            passive[best] = True
            s = _chol_append(A, idx, s, L, best, False)
        stalled = False
        for inner in range(3 * k + 3):
            _chol_solve(b, idx, s, L, z)
            feasible = True
            for t in range(s):
                if z[t] <= 0.0:
                    feasible = False
            if feasible:
                for t in range(s):
                    x[idx[t]] = z[t]
                break
            if inner == 0 and best >= 0 and x[best] == 0.0 and z[s - 1] <= 0.0:
                stalled = True          # roundoff: the entering column cannot move
                passive[best] = False
                s -= 1                  # it was appended last
                break
            alpha, tmin = 1.0, -1
            for t in range(s):
                if z[t] <= 0.0:
                    ratio = x[idx[t]] / (x[idx[t]] - z[t])
                    if ratio < alpha or tmin < 0:
                        alpha, tmin = ratio, t
            for t in range(s):
                x[idx[t]] += alpha * (z[t] - x[idx[t]])
            x[idx[tmin]] = 0.0          # the blocking coordinate, exactly on its bound
            for t in range(s - 1, -1, -1):
                if x[idx[t]] <= 0.0:
                    x[idx[t]] = 0.0
                    passive[idx[t]] = False
                    s = _chol_delete(idx, s, L, t)
        if stalled:
            break
    return s


TABLE_MAX_K = 12   # k up to which the passive sets' inverses are tabled (2^k entries)


def support_table(k):
    """The table of the tabled NNLS in :func:`daskrnmf.kernels.cd_rows._cd_rows` with k
    components: the inverses of ``A[P, P]`` by passive set P (a bitmask), (2^k, k, k),
    to fill with :func:`_fill_table` for one A (and again for another: the entries a
    fill leaves alone stay 0).  ``None`` above ``TABLE_MAX_K``."""
    if k > TABLE_MAX_K:
        return None
    return np.zeros((1 << k, k, k))


@njit(cache=True, nogil=True, fastmath=True)
def _fill_table(A, tab):
    """``tab[P]``: the inverse of ``A[P, P]`` embedded in k x k zeros, for every passive
    set P (a bitmask), each bordered from the set without its highest member c, tabled
    before it: the inverse on Q + c is the one on Q and the Schur complement ``s = A[c,
    c] - A[c, Q] A[Q, Q]^-1 A[Q, c]`` (the square of the pivot a Cholesky factor of
    ``A[P, P]`` would append, floored as in :func:`_chol_append`).  O(k^2) a set, no
    allocation: the 1 024 sets of k = 10 in 0.08 ms, where the 760 that a block of 4 096
    rows asked for one at a time (a factor and its inverse each) cost 0.4 ms.

    ``tab``: from :func:`support_table` (zeros), or filled by this function before: a
    fill writes only the entries of P's members (``tab[P, :c + 1, :c + 1]``), the others
    are 0 for every A, so no loop clears them.  The sets are taken by highest member c,
    then Q = P without c in increasing order: P in increasing order, as a loop over P
    would take them, without a loop to find c."""
    k = A.shape[0]
    for c in range(k):
        for Q in range(1 << c):
            P = Q | (1 << c)
            s = A[c, c]
            for i in range(c):                  # u = A[Q, Q]^-1 A[Q, c] in tab[P, c]
                acc = 0.0
                for j in range(c):
                    acc += tab[Q, i, j] * A[j, c]
                tab[P, c, i] = acc
                s -= A[c, i] * acc
            floor = 1e-14 * A[c, c] + 1e-300
            s = s if s > floor else floor
            inv = 1.0 / s
            for i in range(c):
                ui = tab[P, c, i] * inv
                for j in range(c):
                    tab[P, i, j] = tab[Q, i, j] + ui * tab[P, c, j]
            for i in range(c):
                v = -tab[P, c, i] * inv
                tab[P, c, i] = v
                tab[P, i, c] = v
            tab[P, c, c] = inv


def nnls_codes(GtG, XG, tol=None, init=None):
    """The exact non-negative least-squares codes ``argmin_{h_i >= 0} ||x_i - G h_i||`` of
    every row, from ``G^T G`` (k, k) and the rows ``G^T x_i`` (n, k).

    Lawson & Hanson's active-set method in the normal-equation form of Bro & de Jong
    (finite; each row on its own, so a row's code does not depend on its block), where
    coordinate descent needs thousands of sweeps on an ill-conditioned G.  ``tol``: a
    zero coordinate enters when its gradient exceeds ``tol * (max |G^T x| + max diag(G^T
    G) * max h)`` (default ``32 k`` machine epsilons).
    """
    return _solve(_nnls_gram_rows, GtG, XG, tol, init)


def _solve(kernel, GtG, XG, tol, init):
    """The arguments :func:`nnls_codes` and :func:`nnls_codes_each` share, then
    ``kernel``: the default ``tol`` (``32 k`` machine epsilons), a warm start or zeros."""
    XG = np.ascontiguousarray(XG, dtype=np.float64)
    k = XG.shape[1]
    tol = 32 * max(k, 1) * np.finfo(np.float64).eps if tol is None else float(tol)
    warm = init is not None
    out = np.array(init, dtype=np.float64) if warm else np.zeros(XG.shape)
    if XG.shape[0] == 0 or k == 0:
        return out
    # a cold start passes warm=None: Numba then prunes the warm start's code before it
    # types the kernel, and a process whose solves all start cold compiles less
    return kernel(np.ascontiguousarray(GtG, dtype=np.float64), XG, out, tol,
                  True if warm else None, np.empty(k, dtype=np.int64), np.empty(k),
                  np.empty((k, k)), np.zeros(k, dtype=np.bool_))


def nnls_codes_each(GtG, XG, tol=None, init=None):
    """:func:`nnls_codes` with a Gram matrix of its own for every row: ``GtG`` (n, k, k)
    (e.g. ``W diag(m_i) W^T`` over the observed entries of row i, see
    :func:`daskrnmf.kernels.missing.row_grams`), ``XG`` (n, k).  A row whose Gram matrix
    is the shared one gets :func:`nnls_codes`'s result bit for bit."""
    return _solve(_nnls_gram_rows_each, GtG, XG, tol, init)
