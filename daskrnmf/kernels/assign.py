"""Nearest-centre assignment for stacked restarts (compiled loops).

The loops are written out instead of using BLAS so that a row's distances do not depend
on the other rows in its block: labels are identical for every chunking.
"""

import numpy as np
from numba import njit

from .blocks import as_float_block


@njit(cache=True, nogil=True, fastmath=True)
def _nearest(X, C, l1, labels, dist):
    n, d = X.shape
    R, k, _ = C.shape
    for i in range(n):
        for r in range(R):
            best = np.inf
            arg = 0
            for c in range(k):
                s = 0.0
                j = 0
                while j < d:
                    stop = min(j + 16, d)
                    if l1:
                        for jj in range(j, stop):
                            s += abs(X[i, jj] - C[r, c, jj])
                    else:
                        for jj in range(j, stop):
                            t = X[i, jj] - C[r, c, jj]
                            s += t * t
                    j = stop
                    if s >= best:  # early abandon: cannot become the strict minimum
                        break
                if s < best:
                    best = s
                    arg = c
            labels[i, r] = arg
            dist[i, r] = best if l1 else np.sqrt(best)


@njit(cache=True, nogil=True, fastmath=True)
def _all(X, C, l1, out):
    n, d = X.shape
    k = C.shape[0]
    for i in range(n):
        for c in range(k):
            s = 0.0
            for j in range(d):
                t = X[i, j] - C[c, j]
                s += abs(t) if l1 else t * t
            out[i, c] = s if l1 else np.sqrt(s)


def nearest(X, centers, metric):
    """Nearest centre of every row, for each stacked restart.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features)
    centers : ndarray of shape (n_restarts, n_clusters, n_features)
    metric : {"l1", "l2"}

    Returns
    -------
    labels : ndarray of int32, shape (n_rows, n_restarts)
        Index of the nearest centre; ties go to the lowest index.
    distances : ndarray of float64, shape (n_rows, n_restarts)
        ``||x_i - f_{label_i}||_1`` (l1) or ``||x_i - f_{label_i}||_2`` (l2).
    """
    X = as_float_block(X)
    C = np.ascontiguousarray(centers, dtype=np.float64)
    labels = np.empty((X.shape[0], C.shape[0]), dtype=np.int32)
    dist = np.empty((X.shape[0], C.shape[0]), dtype=np.float64)
    if X.shape[0]:
        _nearest(X, C, metric == "l1", labels, dist)
    return labels, dist


def distances(X, centers, metric):
    """All distances, shape (n_rows, n_clusters), for one set of centres (n_clusters, n_features)."""
    X = as_float_block(X)
    C = np.ascontiguousarray(centers, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]), dtype=np.float64)
    if X.shape[0]:
        _all(X, C, metric == "l1", out)
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _seed_trials(X, cand, mind, tau, l1, power, pot):
    """pot[t] = sum_i min(d(x_i, X[cand[t]]), mind_i, tau) ** power (early abandon)."""
    n, d = X.shape
    T = cand.shape[0]
    for i in range(n):
        cap = min(mind[i], tau)
        limit = cap if l1 else cap * cap
        for t in range(T):
            c = cand[t]
            s = 0.0
            j = 0
            while j < d:
                stop = min(j + 16, d)
                if l1:
                    for jj in range(j, stop):
                        s += abs(X[i, jj] - X[c, jj])
                else:
                    for jj in range(j, stop):
                        u = X[i, jj] - X[c, jj]
                        s += u * u
                j = stop
                if s >= limit:
                    break
            v = s if l1 else np.sqrt(s)
            if v > cap:
                v = cap
            pot[t] += v if power == 1 else v * v


@njit(cache=True, nogil=True, fastmath=True)
def _seed_update(X, c, mind, l1):
    """mind_i = min(mind_i, d(x_i, X[c])) in place (early abandon)."""
    n, d = X.shape
    for i in range(n):
        limit = mind[i] if l1 else mind[i] * mind[i]
        s = 0.0
        j = 0
        while j < d:
            stop = min(j + 16, d)
            if l1:
                for jj in range(j, stop):
                    s += abs(X[i, jj] - X[c, jj])
            else:
                for jj in range(j, stop):
                    u = X[i, jj] - X[c, jj]
                    s += u * u
            j = stop
            if s >= limit:
                break
        if s < limit:
            mind[i] = s if l1 else np.sqrt(s)


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
                 float(tau), metric == "l1", int(power), pot)
    return pot


def seed_update(X, c, mind, metric):
    """``mind = min(mind, d(X, X[c]))`` in place; returns mind."""
    _seed_update(X, int(c), mind, metric == "l1")
    return mind
