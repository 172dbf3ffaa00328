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


def _checked_values(x, name):
    """``x`` (one chunk of labels, NumPy) if its values are labels: a float label must be
    finite and integer-valued (a NaN is no class, and 0.5 is a score, not a label)."""
    x = np.asarray(x).ravel()
    if x.dtype.kind == "c":
        raise ValueError(f"{name} holds complex numbers; labels are integers or strings.")
    if x.dtype.kind == "f" and x.size:
        if not np.isfinite(x).all():
            raise ValueError(f"{name} holds NaN or infinity; every sample needs a label.")
        frac = x[x != np.floor(x)]
        if frac.size:
            raise ValueError(f"{name} holds values that are not integers ({frac[0].item()!r}); "
                             "labels are class or cluster ids.")
    return x


def _distinct(x, name):
    """``np.unique(x, return_inverse=True)``, with mixed label types (e.g. 1 and "a" in an
    object array, which cannot be sorted) a ValueError naming ``name``."""
    try:
        values, inverse = np.unique(x, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in x})
        raise ValueError(f"{name} mixes label types ({' and '.join(kinds)}); give labels of "
                         "one type.") from None
    return values, inverse.ravel()


def _pairs(a, b, counts=None):
    """The distinct (a, b) pairs and the sum of their ``counts`` (default: one per row),
    each side kept in its own dtype (one stacked array would upcast int64 labels to
    float64 next to float ones and merge 2**53 and 2**53 + 1)."""
    ua, ia = _distinct(a, "labels_true")
    ub, ib = _distinct(b, "labels_pred")
    code = ia.astype(np.int64) * len(ub) + ib
    uc, inv = np.unique(code, return_inverse=True)
    total = np.zeros(len(uc), dtype=np.int64)
    np.add.at(total, inv.ravel(), 1 if counts is None else counts)
    return ua[uc // max(len(ub), 1)], ub[uc % max(len(ub), 1)], total


def _pairs_chunk(a, b):
    return _pairs(_checked_values(a, "labels_true"), _checked_values(b, "labels_pred"))


def _pairs_combine(parts):
    return _pairs(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                  np.concatenate([p[2] for p in parts]))


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
        If the labels are not 1-D, differ in length or are empty, mix label types (1 and
        "a"), or are floats that are NaN, infinite or not integer-valued (labels are
        ids, compared exactly in their own dtype: int64 labels are never rounded
        through a float).

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
    if a.shape[0] == 0:
        raise ValueError("labels are empty (0 samples); there is nothing to compare.")
    if not isinstance(a, da.Array):
        a = _labels(labels_true, "labels_true", a)
    if not isinstance(b, da.Array):
        b = _labels(labels_pred, "labels_pred", b)
    if isinstance(a, da.Array) or isinstance(b, da.Array):
        if not isinstance(a, da.Array):      # the Dask side sets the blocks
            a, b = b, a
            swap = True
        else:
            swap = False
        b = _blocks_like(b, a.chunks[0])
        parts = [dask.delayed(_pairs_chunk)(*((y, x) if swap else (x, y)))
                 for x, y in zip(a.to_delayed().ravel(), b)]
        ta, pb, counts = dask.compute(tree_reduce(parts, _pairs_combine, 8,
                                                  wrap=dask.delayed))[0]
    else:
        ta, pb, counts = _pairs_chunk(a, b)
    _, ti = _distinct(ta, "labels_true")
    _, pi = _distinct(pb, "labels_pred")
    table = np.zeros((ti.max() + 1, pi.max() + 1), dtype=np.int64)
    np.add.at(table, (ti, pi), counts)
    return table


def _blocks_like(b, chunks):
    """``b`` cut into pieces of ``chunks`` rows: a Dask array's blocks (rechunked), or a
    NumPy array's slices, scattered to the workers when a distributed Client is active —
    labels held by the client travel as data, not inside the task graph (which
    distributed warns about past 10 MB: "Sending large graph")."""
    import dask.array as da

    from ._blocks import active_client

    if isinstance(b, da.Array):
        return list(b.rechunk((chunks,)).to_delayed().ravel())
    starts = np.concatenate([[0], np.cumsum(chunks)[:-1]]).astype(int)
    pieces = [b[s:s + n] for s, n in zip(starts, chunks)]
    client = active_client()
    # hash=False: fresh keys (hashed ones may still be being released from an earlier call)
    return client.scatter(pieces, hash=False) if client is not None else pieces


def _labels(given, name, array):
    """``array`` (NumPy labels made from ``given``), refused when ``given`` is a sequence
    that mixes strings and numbers: NumPy would turn 1 into "1" and merge it with "1"."""
    if isinstance(given, np.ndarray) or array.dtype.kind not in "US":
        return array
    kinds = {type(v).__name__ for v in given if not isinstance(v, (str, bytes, np.str_,
                                                                   np.bytes_))}
    if kinds:
        raise ValueError(f"{name} mixes label types (str and {' and '.join(sorted(kinds))}); "
                         "give labels of one type.")
    return array


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
