"""Clustering quality against ground truth: accuracy (Hungarian), NMI, purity.

Inputs are 1-D label arrays (any integer labels), NumPy or Dask; all three metrics are
functions of the contingency table, which is tree-reduced for Dask input, so labels of
size n_samples are never gathered.
"""

import numpy as np
from scipy.optimize import linear_sum_assignment


def _pairs_chunk(a, b):
    pairs, counts = np.unique(np.stack([np.asarray(a).ravel(), np.asarray(b).ravel()]), axis=1,
                              return_counts=True)
    return pairs, counts


def _pairs_combine(parts):
    pairs = np.concatenate([p[0] for p in parts], axis=1)
    counts = np.concatenate([p[1] for p in parts])
    uniq, inv = np.unique(pairs, axis=1, return_inverse=True)
    return uniq, np.bincount(inv.ravel(), weights=counts).astype(np.int64)


def contingency_matrix(labels_true, labels_pred):
    """Counts of (true class, predicted cluster) pairs, shape (n_classes, n_clusters)."""
    import dask
    import dask.array as da

    from ._blocks import tree_reduce

    a = labels_true if isinstance(labels_true, da.Array) else np.asarray(labels_true)
    b = labels_pred if isinstance(labels_pred, da.Array) else np.asarray(labels_pred)
    if np.ndim(a) != 1 or np.ndim(b) != 1:
        raise ValueError(f"labels must be 1-D; got shapes {np.shape(a)} and {np.shape(b)}.")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"labels_true and labels_pred differ in length: {a.shape[0]} != {b.shape[0]}.")
    if isinstance(a, da.Array) or isinstance(b, da.Array):
        a = da.asarray(a)
        b = da.asarray(b).rechunk(a.chunks)
        parts = [dask.delayed(_pairs_chunk)(x, y) for x, y in zip(a.to_delayed().ravel(),
                                                                  b.to_delayed().ravel())]
        pairs, counts = dask.compute(tree_reduce(parts, _pairs_combine, 8, wrap=dask.delayed))[0]
    else:
        pairs, counts = _pairs_combine([_pairs_chunk(a, b)])
    _, ti = np.unique(pairs[0], return_inverse=True)
    _, pi = np.unique(pairs[1], return_inverse=True)
    table = np.zeros((ti.max() + 1, pi.max() + 1), dtype=np.int64)
    np.add.at(table, (ti.ravel(), pi.ravel()), counts)
    return table


def clustering_accuracy(labels_true, labels_pred):
    """Fraction of samples correctly labelled under the best one-to-one cluster-to-class map.

    The map is found with the Hungarian algorithm on the contingency table.
    """
    table = contingency_matrix(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / table.sum())


def purity(labels_true, labels_pred):
    """Fraction of samples in their cluster's majority class."""
    table = contingency_matrix(labels_true, labels_pred)
    return float(table.max(axis=0).sum() / table.sum())


def normalized_mutual_info(labels_true, labels_pred):
    """Mutual information normalised by the arithmetic mean of the two entropies.

    Equals :func:`sklearn.metrics.normalized_mutual_info_score` with its default
    ``average_method="arithmetic"``.
    """
    table = contingency_matrix(labels_true, labels_pred).astype(np.float64)
    n = table.sum()
    pt, pp = table.sum(axis=1) / n, table.sum(axis=0) / n
    nz = table > 0
    pij = table[nz] / n
    mi = float(np.sum(pij * (np.log(pij) - np.log(np.outer(pt, pp)[nz]))))
    h_true = -float(np.sum(pt[pt > 0] * np.log(pt[pt > 0])))
    h_pred = -float(np.sum(pp[pp > 0] * np.log(pp[pp > 0])))
    if h_true == 0 and h_pred == 0:
        return 1.0
    denom = 0.5 * (h_true + h_pred)
    return float(max(mi, 0.0) / denom) if denom > 0 else 0.0
