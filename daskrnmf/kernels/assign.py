"""Nearest-centre assignment for stacked restarts (compiled loops).

The loops are written out instead of using BLAS so that a row's distances do not depend
on the other rows in its block: labels are identical for every chunking.
"""

import numpy as np
from numba import njit

from .blocks import as_float_block, as_kernel_block, split_rows


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _l1(x, y):
    """``sum |x - y|``, one vectorised loop."""
    s = 0.0
    for j in range(x.shape[0]):
        s += abs(x[j] - y[j])
    return s


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _sq(x, y):
    """``sum (x - y)^2``, one vectorised loop."""
    s = 0.0
    for j in range(x.shape[0]):
        t = x[j] - y[j]
        s += t * t
    return s


def _metric_markers(metric):
    """``(True, None)`` for "l1", ``(None, True)`` otherwise: the two marker arguments of
    the distance kernels.  Numba prunes the branch whose ``is not None`` test a None
    argument decides before it types the kernel (as :func:`daskrnmf.kernels.cd_rows.
    _cd_rows` does), so a process compiles only the metric it uses; a branch on a flag
    would compile both loops."""
    return (True, None) if metric == "l1" else (None, True)


@njit(cache=True, nogil=True, fastmath=True)
def _nearest(X, C, l1, l2, labels, dist, x, y):
    # every distance in full: a plain loop over the features vectorises, and is 6-13x
    # faster than sums stopped early at the best so far (measured on 64 and 1024
    # features), whose branches keep the compiler from vectorising.  Rows go in pairs,
    # each copied once into a float64 row (X float32: widened once, not once a centre),
    # and one loop sums both rows' distances to a centre: 6.8 -> 4.8 ms (L2), 7.5 -> 6.2
    # ms (L1) on 100 000 x 64 float32, 10 centres, each sum the old loop's bit for bit
    # (it compiles in 0.05-0.07 s more per signature).  A row's distances depend on that
    # row only (the summation order is fixed by n_features; an odd last row is paired
    # with itself, through the same loop), so labels do not depend on the chunking; ties
    # go to the lowest index.  l1, l2: the markers of _metric_markers (one None).  x, y:
    # the two rows' float64 scratch, (n_features,) each, from the caller (np.empty's
    # overload compiled for this kernel alone cost 0.15 s of the first fit).
    n, d = X.shape
    R, k, _ = C.shape
    for i in range(0, n, 2):
        i2 = i + 1 if i + 1 < n else i
        for j in range(d):
            x[j] = X[i, j]
            y[j] = X[i2, j]
        for r in range(R):
            best = np.inf
            best2 = np.inf
            arg = 0
            arg2 = 0
            for c in range(k):
                s = 0.0
                t = 0.0
                for j in range(d):
                    u = x[j] - C[r, c, j]
                    v = y[j] - C[r, c, j]
                    if l1 is not None:
                        s += abs(u)
                        t += abs(v)
                    if l2 is not None:
                        s += u * u
                        t += v * v
                if s < best:
                    best = s
                    arg = c
                if t < best2:
                    best2 = t
                    arg2 = c
            if l2 is not None:
                best = np.sqrt(best)
                best2 = np.sqrt(best2)
            labels[i, r] = arg
            labels[i2, r] = arg2
            dist[i, r] = best
            dist[i2, r] = best2


@njit(cache=True, nogil=True, fastmath=True)
def _all(X, C, l1, l2, out):
    # the loops of _nearest: distances equal the ones it compares
    n, d = X.shape
    k = C.shape[0]
    for i in range(n):
        x = X[i]
        for c in range(k):
            if l1 is not None:
                out[i, c] = _l1(x, C[c])
            if l2 is not None:
                out[i, c] = np.sqrt(_sq(x, C[c]))


def nearest(X, centers, metric, threads=1, finite=False):
    """Nearest centre of every row, for each stacked restart.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features)
        float32 stays float32 (widened value by value: the float64 result)
    centers : ndarray of shape (n_restarts, n_clusters, n_features)
    metric : {"l1", "l2"}
    threads : int, default=1
        Split the rows of the distance loop over this many threads (in-process callers:
        X in memory; a row's result does not depend on the split) when the work is
        large enough to pay for it (``ROW_THREADS_MIN_WORK``).
    finite : bool, default=False
        True when X is known to hold no NaN (a fit's blocks, checked in its first pass
        unless ``missing="mask"``): the check for missing entries, a pass over X (0.9 ms
        on 100 000 x 64 float32, a sixth of the L2 loop), is skipped.

    Returns
    -------
    labels : ndarray of int32, shape (n_rows, n_restarts)
        Index of the nearest centre; ties go to the lowest index.
    distances : ndarray of float64, shape (n_rows, n_restarts)
        ``||x_i - f_{label_i}||_1`` (l1) or ``||x_i - f_{label_i}||_2`` (l2).  NaN
        entries of X (``missing="mask"``) are left out and the sum over the observed
        ones is rescaled by ``n_features / n_observed`` (:func:`_nearest_masked`).
    """
    X = as_kernel_block(X)
    C = np.ascontiguousarray(centers, dtype=np.float64)
    labels = np.empty((X.shape[0], C.shape[0]), dtype=np.int32)
    dist = np.empty((X.shape[0], C.shape[0]), dtype=np.float64)
    if not X.shape[0]:
        return labels, dist
    if not finite and np.isnan(X.min()):   # missing entries (missing="mask"): the observed ones
        _nearest_masked(X, C, metric == "l1", labels, dist)
    elif (metric == "l2" and X.shape[1] >= GEMM_MIN_FEATURES and C.shape[1] > 1
          and C.shape[1] * X.shape[1] >= GEMM_MIN_WORK):
        _nearest_l2_certified(as_float_block(X), C, labels, dist)
    else:
        l1, l2 = _metric_markers(metric)
        split_rows(lambda a, b: _nearest(X[a:b], C, l1, l2, labels[a:b], dist[a:b],
                                         *_pair_rows(X.shape[1])),
                   X.shape[0], threads if X.size * C.shape[0] * C.shape[1]
                   >= ROW_THREADS_MIN_WORK else 1)
    return labels, dist


def _pair_rows(d):
    """The scratch rows of :func:`_nearest` (a pair each call: threads share none)."""
    xy = np.empty((2, d))
    return xy[0], xy[1]


ROW_THREADS_MIN_WORK = 2**22    # distance terms below which one thread is faster


# L2 assignment by one matrix product when there are at least this many features and
# n_clusters x n_features reaches GEMM_MIN_WORK: below it the vectorised loop is faster
# (measured: 4.5 against 17 ms for 50 000 rows, 64 features, 10 centres; 11 against 24
# ms at 128 features; the product wins from about 4000: 25 against 47 ms at 50 x 256)
GEMM_MIN_FEATURES = 16
GEMM_MIN_WORK = 4096


def _nearest_l2_certified(X, C, labels, dist):
    """L2 labels from ``||x||^2 + ||c||^2 - 2 x.c`` (one GEMM), kept only where the gap
    between the two nearest centres exceeds a bound on the rounding error of both that
    product and the exact loop (``4 (d + 2) eps (||x|| + max ||c||)^2``); the other rows,
    and ties, are decided by the exact loop.  So the labels are those of :func:`_nearest`
    (ties to the lowest index) whatever the block, and the distances are computed
    exactly, row by row, for the chosen centres."""
    n, d = X.shape
    R, k, _ = C.shape
    Cf = C.reshape(R * k, d)
    xx = np.einsum("ij,ij->i", X, X)
    cc = np.einsum("ij,ij->i", Cf, Cf)
    D = X @ Cf.T
    D *= -2.0
    D += xx[:, None]
    D += cc[None, :]
    D = D.reshape(n, R, k)
    labels[:] = np.argmin(D, axis=2)
    two = np.partition(D, 1, axis=2)
    cmax = np.sqrt(cc.reshape(R, k).max(axis=1))
    bound = 4.0 * (d + 2) * np.finfo(np.float64).eps * (np.sqrt(xx)[:, None] + cmax[None, :]) ** 2
    unsure = np.flatnonzero(((two[:, :, 1] - two[:, :, 0]) <= bound).any(axis=1))
    if unsure.size:
        sub_labels = np.empty((unsure.size, R), dtype=np.int32)
        sub_dist = np.empty((unsure.size, R))
        _nearest(np.ascontiguousarray(X[unsure]), C, None, True, sub_labels, sub_dist,
                 *_pair_rows(d))
        labels[unsure] = sub_labels
    _distance_to(X, C, labels, dist)


@njit(cache=True, nogil=True, fastmath=True)
def _distance_to(X, C, labels, dist):
    """dist[i, r] = ||x_i - C[r, labels[i, r]]||_2, row by row."""
    n, d = X.shape
    R = C.shape[0]
    for i in range(n):
        for r in range(R):
            c = labels[i, r]
            s = 0.0
            for j in range(d):
                t = X[i, j] - C[r, c, j]
                s += t * t
            dist[i, r] = np.sqrt(s)


def distances(X, centers, metric):
    """All distances, shape (n_rows, n_clusters), for one set of centres (n_clusters, n_features)."""
    X = as_kernel_block(X)
    C = np.ascontiguousarray(centers, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]), dtype=np.float64)
    if X.shape[0] and np.isnan(X.min()):
        _all_masked(X, C, metric == "l1", out)
    elif X.shape[0]:
        _all(X, C, *_metric_markers(metric), out)
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _seed_trials(X, cand, mind, tau, l1, l2, power, pot):
    """pot[t] = sum_i min(d(x_i, X[cand[t]]), mind_i, tau) ** power; with power 0
    instead mind_i = min(mind_i, d(x_i, X[cand[t]])) in place (:func:`seed_update`: one
    kernel for both, compiled once).  l1, l2: the markers of :func:`_metric_markers`."""
    n, d = X.shape
    T = cand.shape[0]
    if power == 0:
        y = X[cand[0]]
        for i in range(n):
            if l1 is not None:
                u = _l1(X[i], y)
            if l2 is not None:
                u = np.sqrt(_sq(X[i], y))
            if u < mind[i]:
                mind[i] = u
        return
    for i in range(n):
        m = mind[i]
        cap = tau if tau < m else m         # min(m, tau), as Numba's min()
        x = X[i]
        for t in range(T):
            if l1 is not None:
                v = _l1(x, X[cand[t]])
            if l2 is not None:
                v = np.sqrt(_sq(x, X[cand[t]]))
            if v > cap:
                v = cap
            pot[t] += v if power == 1 else v * v


def seed_potentials(X, cand, mind, tau, metric, power):
    """Clipped potential of every candidate centre of greedy seeding.

    Parameters
    ----------
    X : ndarray (n, n_features) float64, C-contiguous
    cand : ndarray of int (T,), candidate rows of X
    mind : ndarray (n,), distance of every row to its nearest centre so far (inf: none)
    tau : float, clip (inf: none)
    metric : {"l1", "l2"}
    power : {1, 2}

    Returns
    -------
    pot : ndarray (T,), ``sum_i min(d(x_i, x_c), mind_i, tau) ** power``
    """
    pot = np.zeros(len(cand))
    _seed_trials(X, np.asarray(cand, dtype=np.int64), np.asarray(mind, dtype=np.float64),
                 float(tau), *_metric_markers(metric), int(power), pot)
    return pot


@njit(cache=True, nogil=True, fastmath=False)
def _seed_l2_trials(G, xx, xc, cap, power, pot):
    """pot[t] = sum_i min(sqrt(max(xx_i + xc_t - 2 G_it, 0)), cap_i) ** power, row by row
    (no fastmath: the same numbers, in the same order, as the NumPy expression)."""
    n, T = G.shape
    for i in range(n):
        c = cap[i]
        for t in range(T):
            v = (xx[i] + xc[t]) - 2.0 * G[i, t]
            if v < 0.0:
                v = 0.0
            v = np.sqrt(v)
            if c < v:
                v = c
            pot[t] += v * v if power == 2 else v


@njit(cache=True, nogil=True, fastmath=False)
def _seed_l2_update(G, xx, xc, t, mind):
    for i in range(G.shape[0]):
        v = (xx[i] + xc) - 2.0 * G[i, t]
        if v < 0.0:
            v = 0.0
        v = np.sqrt(v)
        if v < mind[i]:
            mind[i] = v


def seed_potentials_gram(G, xx, xc, cap, power):
    """:func:`seed_potentials` for the L2 distance from the Gram products ``G = X
    X[cand]^T`` (n, T), the squared norms ``xx`` of the rows (n,) and ``xc`` of the
    candidates (T,), and ``cap = min(mind, tau)`` (n,): one compiled loop, where the
    NumPy expression made five (n, T) temporaries."""
    pot = np.zeros(G.shape[1])
    _seed_l2_trials(G, xx, xc, cap, int(power), pot)
    return pot


def seed_update_gram(G, xx, xc, t, mind):
    """``mind = min(mind, d(X, candidate t))`` in place from the Gram products (as
    :func:`seed_potentials_gram`); returns mind."""
    _seed_l2_update(G, xx, float(xc[t]), int(t), mind)
    return mind


@njit(cache=True, nogil=True, fastmath=True)
def _pairwise_l1(X, D):
    n = X.shape[0]
    for i in range(n):
        D[i, i] = 0.0
        for j in range(i + 1, n):
            v = _l1(X[i], X[j])
            D[i, j] = v
            D[j, i] = v


def pairwise_distances(X, metric):
    """All distances between the rows of an in-memory X (n, n_features), shape (n, n),
    exactly symmetric with a zero diagonal (the L2 ones from one matrix product)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    if metric == "l1":
        D = np.empty((n, n))
        _pairwise_l1(X, D)
        return D
    xx = np.einsum("ij,ij->i", X, X)
    D = np.sqrt(np.maximum(xx[:, None] + xx[None] - 2.0 * (X @ X.T), 0.0))
    upper = np.triu_indices(n, 1)
    D.T[upper] = D[upper]
    np.fill_diagonal(D, 0.0)
    return D


@njit(cache=True, nogil=True, fastmath=True)
def _seed_pairwise_trials(D, cand, cap, power, pot):
    for t in range(cand.shape[0]):
        row = D[cand[t]]
        acc = 0.0
        for i in range(row.shape[0]):
            v = min(row[i], cap[i])
            acc += v * v if power == 2 else v
        pot[t] = acc


def seed_potentials_pairwise(D, cand, cap, power):
    """:func:`seed_potentials` from all the distances ``D`` (n, n) of
    :func:`pairwise_distances`: ``sum_i min(D[c, i], cap_i) ** power`` per candidate c."""
    pot = np.zeros(len(cand))
    _seed_pairwise_trials(D, np.asarray(cand, dtype=np.int64), cap, int(power), pot)
    return pot


def seed_update(X, c, mind, metric):
    """``mind = min(mind, d(X, X[c]))`` in place; returns mind."""
    _seed_trials(X, np.array([c], dtype=np.int64), mind, np.inf, *_metric_markers(metric), 0,
                 np.zeros(1))
    return mind


# ---------------------------------------------------------------- missing values
@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _observed_scale(x):
    """``d / |O|`` for a row whose NaN entries are missing (0 when none is observed)."""
    o = 0
    for j in range(x.shape[0]):
        if not np.isnan(x[j]):
            o += 1
    return x.shape[0] / o if o else 0.0


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _masked_sum(x, y, l1):
    """``sum |x - y|`` (l1) or ``sum (x - y)^2`` over the observed (non-NaN) x."""
    s = 0.0
    for j in range(x.shape[0]):
        v = x[j]
        if not np.isnan(v):
            t = v - y[j]
            s += abs(t) if l1 else t * t
    return s


@njit(cache=True, nogil=True, fastmath=False)
def _nearest_masked(X, C, l1, labels, dist):
    """As :func:`_nearest` over the observed (non-NaN) entries of each row, the sum
    rescaled by ``d / |O_i|`` (a row with no observed entry is at distance 0 of every
    centre and goes to centre 0)."""
    n, d = X.shape
    R, k, _ = C.shape
    for i in range(n):
        scale = _observed_scale(X[i])
        for r in range(R):
            best = np.inf
            arg = 0
            for c in range(k):
                s = _masked_sum(X[i], C[r, c], l1) * scale
                if s < best:
                    best = s
                    arg = c
            labels[i, r] = arg
            dist[i, r] = best if l1 else np.sqrt(best)


@njit(cache=True, nogil=True, fastmath=False)
def _all_masked(X, C, l1, out):
    n, d = X.shape
    k = C.shape[0]
    for i in range(n):
        scale = _observed_scale(X[i])
        for c in range(k):
            s = _masked_sum(X[i], C[c], l1) * scale
            out[i, c] = s if l1 else np.sqrt(s)
