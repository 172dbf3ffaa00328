"""Per-chunk kernels of the tri-factorization (RFNMTF, Wang, Nie & Huang, IJCAI 2016, eq. 20-22).

With row labels ``r`` (n_samples,), column labels ``c`` (n_features,) and block values
``S`` (n_row_clusters, n_column_clusters), the model of entry ``X[i, j]`` is
``S[r_i, c_j]``.
"""

import numpy as np
from numba import njit

from .kmedians import _cluster_medians_sorted, feature_sweep
from .median_select import middle_ranks


@njit(cache=True, nogil=True, fastmath=False)
def _column_costs(X, labels, S, out):
    # out is (R, L, d): the innermost loop runs over a row's contiguous features and
    # vectorises (over the column clusters, a handful, it did not)
    n, d = X.shape
    R = labels.shape[1]
    L = S.shape[2]
    for i in range(n):
        x = X[i]
        for r in range(R):
            k = labels[i, r]
            for l in range(L):
                s = S[r, k, l]
                o = out[r, l]
                for j in range(d):
                    o[j] += abs(x[j] - s)


def column_costs(X, labels, S):
    """The column step's partial costs for one row block (eq. 22, transposed).

    Parameters
    ----------
    X : ndarray (n_rows, n_features) float64
    labels : ndarray (n_rows, n_restarts) int
        Row cluster of every row per restart.
    S : ndarray (n_restarts, n_row_clusters, n_column_clusters)

    Returns
    -------
    cost : ndarray (n_restarts, n_features, n_column_clusters)
        ``cost[r, j, l] = sum_i |X[i, j] - S[r, labels[i, r], l]|`` over the block's
        rows: the L1 loss of feature ``j`` if it were in column cluster ``l``.
    """
    R, _, L = S.shape
    out = np.zeros((R, L, X.shape[1]))
    if X.shape[0]:
        _column_costs(np.ascontiguousarray(X, dtype=np.float64),
                      np.ascontiguousarray(labels, dtype=np.int64),
                      np.ascontiguousarray(S, dtype=np.float64), out)
    return np.ascontiguousarray(out.transpose(0, 2, 1))


def prototypes(S, columns):
    """Row prototypes ``P[r, k, j] = S[r, k, columns[r, j]]``, shape (R, n_row_clusters, n_features).

    The row step (eq. 21, transposed) puts each sample at its L1-nearest prototype.
    """
    return np.take_along_axis(S, np.broadcast_to(columns[:, None, :], (S.shape[0], S.shape[1],
                                                                       columns.shape[1])), axis=2)


def argmin_ties_low(cost, rtol=1e-12):
    """Argmin over the last axis, treating values within ``rtol`` of the minimum as ties
    that go to the lowest index, so that sums whose rounding depends on the chunking
    give the same choice."""
    m = cost.min(axis=-1, keepdims=True)
    near = cost <= m + rtol * np.abs(m)
    return near.argmax(axis=-1)


def sorted_rows(ranked):
    """The positions of :func:`~daskrnmf.kernels.median_select.rank_rows`' sorted rows
    for :func:`cluster_medians_sorted` (the k-medians loop's own,
    :func:`~daskrnmf.kernels.kmedians.feature_sweep`), made once."""
    return feature_sweep(ranked)


def cluster_medians_sorted(sweep, labels, out):
    """The median of every row's values in each cluster of its positions, read off the
    rows sorted once: ``out[c, i] = np.median(Xt[i, labels == c])`` for ``sweep`` =
    :func:`sorted_rows` of ``rank_rows(Xt)`` (the column clusters' profiles of RFNMTF's
    sample rows).  The k-medians loop's kernel and the blocks' (one compilation serves
    all three); ``out[c]`` of an empty cluster is left as it is.

    Parameters
    ----------
    sweep : tuple, :func:`sorted_rows`
    labels : ndarray of int (n_positions,), in [0, n_clusters)
    out : ndarray (n_clusters, n_rows) float64, C-contiguous

    Returns
    -------
    out
    """
    k, d = out.shape
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    lo, hi = middle_ranks(counts)
    _cluster_medians_sorted(sweep, labels, np.repeat(lo, d), np.repeat(hi, d),
                            np.count_nonzero(counts), np.zeros(k * d, dtype=np.int64), out)
    return out
