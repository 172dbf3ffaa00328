"""Per-cluster reweighted sums for one row block (the L2,1 centroid step, eq. 16-18)."""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath=False)
def _cluster_sums(X, labels, weights, sums, wsum, counts):
    n, d = X.shape
    R = labels.shape[1]
    for i in range(n):
        for r in range(R):
            c = labels[i, r]
            w = weights[i, r]
            counts[r, c] += 1
            wsum[r, c] += w
            for j in range(d):
                sums[r, c, j] += w * X[i, j]


def cluster_sums(X, labels, weights, n_clusters):
    """Sum of ``w_i x_i``, of ``w_i`` and the member count per (restart, cluster).

    Parameters
    ----------
    X : ndarray (n_rows, n_features) float64
    labels : ndarray (n_rows, n_restarts) int
    weights : ndarray (n_rows, n_restarts) float64
    n_clusters : int

    Returns
    -------
    sums : ndarray (n_restarts, n_clusters, n_features)
    wsum : ndarray (n_restarts, n_clusters)
    counts : ndarray of int64 (n_restarts, n_clusters)
    """
    R = labels.shape[1]
    sums = np.zeros((R, n_clusters, X.shape[1]))
    wsum = np.zeros((R, n_clusters))
    counts = np.zeros((R, n_clusters), dtype=np.int64)
    if X.shape[0]:
        _cluster_sums(X, labels.astype(np.int64), weights, sums, wsum, counts)
    return sums, wsum, counts


def worst_fit(residual, start, X, m, with_rows=True):
    """The ``m`` rows with the largest residual per restart (ties: lowest global index).

    Parameters
    ----------
    residual : ndarray (n_rows, n_restarts)
    start : int
        Global index of the block's first row.
    X : ndarray (n_rows, n_features)
    m : int
    with_rows : bool, default=True
        False: no ``rows`` (a caller that holds X in memory takes them by index).

    Returns
    -------
    dict with ``res`` (n_restarts, m), ``idx`` (n_restarts, m) int64 global indices
    (-1 where the block has fewer rows) and ``rows`` (n_restarts, m, n_features).
    """
    n, R = residual.shape
    res = np.full((R, m), -np.inf)
    idx = np.full((R, m), -1, dtype=np.int64)
    rows = np.zeros((R, m, X.shape[1])) if with_rows else None
    take = min(m, n)
    if take:
        gidx = np.arange(start, start + n, dtype=np.int64)
        for r in range(R):
            col = residual[:, r]
            cand = np.arange(n)
            if take < n and not np.isnan(col).any():
                # only the rows at or above the take-th largest residual can be among
                # the worst (ties included): sort those, not the block
                thr = np.partition(col, n - take)[n - take]
                cand = np.flatnonzero(col >= thr)
            order = cand[np.lexsort((gidx[cand], -col[cand]))[:take]]
            res[r, :take] = residual[order, r]
            idx[r, :take] = gidx[order]
            if with_rows:
                rows[r, :take] = X[order]
    return {"res": res, "idx": idx, "rows": rows}


def merge_worst_fit(parts):
    """Combine several :func:`worst_fit` summaries into one of the same size."""
    res = np.concatenate([p["res"] for p in parts], axis=1)
    idx = np.concatenate([p["idx"] for p in parts], axis=1)
    with_rows = parts[0]["rows"] is not None
    rows = np.concatenate([p["rows"] for p in parts], axis=1) if with_rows else None
    R, m = parts[0]["res"].shape
    out_res = np.empty((R, m))
    out_idx = np.empty((R, m), dtype=np.int64)
    out_rows = np.empty((R, m, rows.shape[2])) if with_rows else None
    for r in range(R):
        # -1 (padding) sorts last through the residual -inf; ties by lowest real index
        order = np.lexsort((np.where(idx[r] < 0, np.iinfo(np.int64).max, idx[r]), -res[r]))[:m]
        out_res[r], out_idx[r] = res[r, order], idx[r, order]
        if with_rows:
            out_rows[r] = rows[r, order]
    return {"res": out_res, "idx": out_idx, "rows": out_rows}


@njit(cache=True, nogil=True, fastmath=False)
def _column_stats(x, lo, hi, total):
    # per-feature accumulators: the loop over the features is independent per lane and
    # vectorises; a NaN or inf anywhere makes that feature's total non-finite
    n, d = x.shape
    for i in range(n):
        for j in range(d):
            v = np.float64(x[i, j])
            lo[j] = v if v < lo[j] else lo[j]      # min() and max() as Numba writes
            hi[j] = v if v > hi[j] else hi[j]      # them, without their overloads
            total[j] += v


#: Blocks of at most this many entries take :func:`finite_stats` by NumPy (the same
#: numbers): a first fit on small data compiles no statistics kernel (0.10-0.13 s of CPU
#: with an empty cache, where NumPy takes under a millisecond on such a block)
SMALL_ENTRIES = 2**16


def finite_stats(x):
    """Per-feature min and max of a block's finite values, its number of non-finite
    values and the sum of its finite values (one compiled pass, or NumPy's in the same
    order for blocks of at most :data:`SMALL_ENTRIES` entries: each feature's values
    summed row after row, then the features' sums; blocks holding NaN, inf, or sums that
    overflow take the masked NumPy route).

    Parameters
    ----------
    x : ndarray (n_rows, n_features), any real dtype

    Returns
    -------
    lo, hi : ndarray (n_features,) float64 (+inf / -inf for a feature with no finite value)
    nonfinite : int
    total : float
    """
    x = np.asarray(x)
    d = x.shape[1]
    lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
    total = np.zeros(d)
    if not x.shape[0]:
        return lo, hi, 0, 0.0
    if x.size > SMALL_ENTRIES:
        _column_stats(np.ascontiguousarray(x), lo, hi, total)
    else:
        # the kernel's numbers bit for bit: each feature's values added in row order to
        # +0.0 (an accumulation is sequential, where a sum may be pairwise; + 0.0 turns
        # an all -0.0 total into the kernel's +0.0), and of equal extremes the first in
        # row order (a column's min or max 0 is the kernel's first zero, +0.0 or -0.0);
        # NaN, inf or an overflow leave the total non-finite, silently as in the kernel,
        # and the masked route below then takes the block
        xc = np.ascontiguousarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            total = np.add.accumulate(xc, axis=0)[-1] + 0.0
        lo, hi = xc.min(axis=0), xc.max(axis=0)
        for ext in (lo, hi):
            zero = ext == 0.0
            if zero.any():
                cols = np.flatnonzero(zero)
                ext[cols] = xc[(xc[:, cols] == 0.0).argmax(axis=0), cols]
    if np.isfinite(total).all():
        return lo, hi, 0, float(total.sum())
    finite = np.isfinite(x) if x.dtype.kind == "f" else np.ones(x.shape, dtype=bool)
    xf = x.astype(np.float64)
    return (np.where(finite, xf, np.inf).min(axis=0), np.where(finite, xf, -np.inf).max(axis=0),
            int(x.size - finite.sum()), float(np.where(finite, xf, 0.0).sum()))
