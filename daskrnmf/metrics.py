"""Clustering quality against ground truth: accuracy (Hungarian), NMI, purity.

Inputs are 1-D label arrays (any label values; they need not be ``0 .. k - 1``), as
NumPy arrays, lists or Dask arrays. All three metrics are functions of the contingency
table (:func:`contingency_matrix`), which is tree-reduced chunk by chunk for Dask input,
so labels of size n_samples are never gathered in one place.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from ._typing import Labels


def _pairs_chunk(a, b):
    pairs, counts = np.unique(np.stack([np.asarray(a).ravel(), np.asarray(b).ravel()]), axis=1,
                              return_counts=True)
    return pairs, counts


def _pairs_combine(parts):
    pairs = np.concatenate([p[0] for p in parts], axis=1)
    counts = np.concatenate([p[1] for p in parts])
    uniq, inv = np.unique(pairs, axis=1, return_inverse=True)
    return uniq, np.bincount(inv.ravel(), weights=counts).astype(np.int64)


def contingency_matrix(labels_true: Labels, labels_pred: Labels) -> np.ndarray:
    """Count the samples of every (true class, predicted cluster) pair.

    Parameters
    ----------
    labels_true : array-like or dask.array.Array of shape (n_samples,)
        Ground-truth class labels.
    labels_pred : array-like or dask.array.Array of shape (n_samples,)
        Predicted cluster labels. If either input is a Dask array, the counts are
        computed chunk by chunk (``labels_pred`` is rechunked like ``labels_true``) and
        combined by a tree reduction.

    Returns
    -------
    table : ndarray of shape (n_classes, n_clusters)
        ``table[i, j]`` is the number of samples of the i-th class (in sorted order of
        the true labels) put in the j-th cluster (in sorted order of the predicted
        labels), as int64. Equal to
        :func:`sklearn.metrics.cluster.contingency_matrix` for NumPy input.

    Raises
    ------
    ValueError
        If the labels are not 1-D or differ in length.

    Examples
    --------
    >>> from daskrnmf.metrics import contingency_matrix
    >>> contingency_matrix([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2]).tolist()
    [[0, 2, 0], [2, 0, 0], [1, 0, 1]]

    Dask input gives the same table:

    >>> import dask.array as da
    >>> t = da.from_array([0, 0, 1, 1, 2, 2], chunks=2)
    >>> contingency_matrix(t, [1, 1, 0, 0, 0, 2]).tolist()
    [[0, 2, 0], [2, 0, 0], [1, 0, 1]]
    """
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


def clustering_accuracy(labels_true: Labels, labels_pred: Labels) -> float:
    """Clustering accuracy: the fraction of samples right under the best cluster-to-class map.

    Each cluster is mapped to a distinct class so that the number of samples whose
    cluster maps to their own class is largest; the map is an optimal assignment on the
    contingency table, found by :func:`scipy.optimize.linear_sum_assignment`.

    Parameters
    ----------
    labels_true : array-like or dask.array.Array of shape (n_samples,)
        Ground-truth class labels.
    labels_pred : array-like or dask.array.Array of shape (n_samples,)
        Predicted cluster labels.

    Returns
    -------
    accuracy : float
        In [0, 1]; 1 for a perfect clustering up to a renaming of the clusters.

    Notes
    -----
    When there are more clusters than classes (or fewer), the map is one-to-one on as
    many pairs as the smaller number, and the samples of the unmatched clusters
    (classes) count as errors. This is the accuracy used to evaluate NMF clustering
    since Xu, Liu and Gong [3]_. The assignment problem is the one solved by Kuhn's
    Hungarian method [1]_; SciPy solves it with a shortest augmenting path algorithm
    [2]_.

    References
    ----------
    .. [1] H. W. Kuhn, "The Hungarian Method for the Assignment Problem", Naval
       Research Logistics Quarterly, 2(1-2), 1955.
    .. [2] D. F. Crouse, "On Implementing 2D Rectangular Assignment Algorithms", IEEE
       Transactions on Aerospace and Electronic Systems, 52(4), 2016.
    .. [3] W. Xu, X. Liu and Y. Gong, "Document Clustering Based on Non-negative Matrix
       Factorization", Proceedings of the 26th Annual International ACM SIGIR
       Conference on Research and Development in Information Retrieval, 2003.

    Examples
    --------
    >>> from daskrnmf.metrics import clustering_accuracy
    >>> clustering_accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2])
    0.8333333333333334
    >>> clustering_accuracy([0, 0, 1, 1], [7, 7, 3, 3])
    1.0
    """
    table = contingency_matrix(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / table.sum())


def purity(labels_true: Labels, labels_pred: Labels) -> float:
    """Purity: the fraction of samples that belong to their cluster's majority class.

    Parameters
    ----------
    labels_true : array-like or dask.array.Array of shape (n_samples,)
        Ground-truth class labels.
    labels_pred : array-like or dask.array.Array of shape (n_samples,)
        Predicted cluster labels.

    Returns
    -------
    purity : float
        In (0, 1].

    Notes
    -----
    Several clusters may share a majority class, so purity rewards splitting: one
    cluster per sample has purity 1. Compare with :func:`clustering_accuracy`, which
    maps clusters to distinct classes and is never larger.

    References
    ----------
    .. [1] C. D. Manning, P. Raghavan and H. Schütze, "Introduction to Information
       Retrieval", Cambridge University Press, 2008, Section 16.3.

    Examples
    --------
    >>> from daskrnmf.metrics import clustering_accuracy, purity
    >>> labels_true, labels_pred = [0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2]
    >>> purity(labels_true, labels_pred)
    1.0
    >>> clustering_accuracy(labels_true, labels_pred)
    0.6666666666666666
    """
    table = contingency_matrix(labels_true, labels_pred)
    return float(table.max(axis=0).sum() / table.sum())


def normalized_mutual_info(labels_true: Labels, labels_pred: Labels) -> float:
    """Normalized mutual information: mutual information over the mean of the entropies.

    ``NMI = I(T; P) / ((H(T) + H(P)) / 2)`` for the true classes T and the predicted
    clusters P, computed from the contingency table with natural logarithms.

    Parameters
    ----------
    labels_true : array-like or dask.array.Array of shape (n_samples,)
        Ground-truth class labels.
    labels_pred : array-like or dask.array.Array of shape (n_samples,)
        Predicted cluster labels.

    Returns
    -------
    nmi : float
        In [0, 1]; 1 for identical partitions up to a renaming of the labels (also when
        both put every sample in one group), 0 when one partition is a single group and
        the other is not.

    Notes
    -----
    Equals :func:`sklearn.metrics.normalized_mutual_info_score` with its default
    ``average_method="arithmetic"``. Strehl and Ghosh [1]_ normalise by the geometric
    mean ``sqrt(H(T) H(P))`` instead; the arithmetic mean is one of the variants
    compared by Vinh, Epps and Bailey [2]_. The two agree when the entropies are equal.

    References
    ----------
    .. [1] A. Strehl and J. Ghosh, "Cluster Ensembles -- A Knowledge Reuse Framework for
       Combining Multiple Partitions", Journal of Machine Learning Research, 3, 2002.
    .. [2] N. X. Vinh, J. Epps and J. Bailey, "Information Theoretic Measures for
       Clusterings Comparison: Variants, Properties, Normalization and Correction for
       Chance", Journal of Machine Learning Research, 11, 2010.

    Examples
    --------
    >>> from daskrnmf.metrics import normalized_mutual_info
    >>> round(normalized_mutual_info([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2]), 4)
    0.7397
    >>> normalized_mutual_info([0, 0, 1, 1], [5, 5, 3, 3])
    1.0
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
