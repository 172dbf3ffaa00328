"""Tree reductions over row blocks, built on :mod:`daskrnmf.kernels`.

Each reduction is a ``*_chunk`` function (one block -> small dict), a ``*_combine``
function (list of dicts -> dict, associative) and, where needed, an aggregation,
run by :meth:`daskrnmf._blocks.RowBlocks.map_reduce` as a pairwise tree.

* :func:`feature_stats` — per-feature min / max and the NaN/inf count (the input check).
* :func:`assign_chunk` / :func:`assign_combine` — the fused pass of the hard-indicator
  models: nearest-centre assignment with the current centres, objective, cluster sizes,
  worst-fit samples, and the new centres' statistics (reweighted sums for L2,1, the
  first median round for L1).
* :func:`sample_rows`, :func:`label_counts` — a uniform row sample, label counts.

The median search whose first round rides in the fused pass is
:mod:`daskrnmf._median_search`.
"""

import functools
from collections import Counter
from dataclasses import dataclass

import dask
import numpy as np

from ._blocks import RowBlocks, tree_reduce
from ._stores import digest as sha256_of
from ._validation import check_missing_count
from .kernels import rng
from .kernels.assign import nearest
from .kernels.blocks import as_kernel_block, sum_arrays
from .kernels.median_rounds import median_round, merge_median_round
from .kernels.sums import cluster_sums, finite_stats, merge_worst_fit, worst_fit

# The first pass's row sample (seeding): a fixed key, so that it depends on X alone.
SAMPLE_SEED, SAMPLE_STREAM = 0x5EED5, 7

# ---------------------------------------------------------------- feature statistics
def feature_stats_chunk(block, start, sample_size=0, threshold=1.0):
    """One block's min, max, non-finite count, row count and sum of finite values (one
    compiled pass, NumPy's for a small block: :func:`~daskrnmf.kernels.sums.finite_stats`),
    with its candidate sample rows (keys below ``threshold``, see
    :func:`sample_rows_chunk`)."""
    x = np.asarray(block)
    lo, hi, nonfinite, total = finite_stats(x)
    out = {"min": lo, "max": hi, "nonfinite": nonfinite, "n": x.shape[0], "sum": total}
    if sample_size:
        out["sample"] = sample_rows_chunk(x, start, SAMPLE_SEED, SAMPLE_STREAM, sample_size,
                                          threshold)
    return out


def feature_stats_combine(parts, sample_size=0):
    out = {"min": np.minimum.reduce([p["min"] for p in parts]),
           "max": np.maximum.reduce([p["max"] for p in parts]),
           "nonfinite": sum(p["nonfinite"] for p in parts),
           "n": sum(p["n"] for p in parts), "sum": sum(p["sum"] for p in parts)}
    if sample_size:
        out["sample"] = sample_rows_combine([p["sample"] for p in parts], sample_size)
    return out


def missing_stats_chunk(block, start, sample_size=0, threshold=1.0):
    """:func:`feature_stats_chunk` with the NaN entries counted apart from the infinite
    ones: ``nan`` (int) and ``observed`` (d,) — each feature's number of non-NaN entries
    (``missing="mask"``'s first pass, see :mod:`daskrnmf.kernels.missing`)."""
    out = feature_stats_chunk(block, start, sample_size, threshold)
    x = np.asarray(block)
    if x.dtype.kind == "f" and out["nonfinite"]:
        miss = np.isnan(x)
        out["nan"] = int(miss.sum())
        out["observed"] = x.shape[0] - miss.sum(axis=0).astype(np.int64)
    else:
        out["nan"] = 0
        out["observed"] = np.full(x.shape[1], x.shape[0], dtype=np.int64)
    return out


def missing_stats_combine(parts, sample_size=0):
    out = feature_stats_combine(parts, sample_size)
    out["nan"] = sum(p["nan"] for p in parts)
    out["observed"] = np.sum([p["observed"] for p in parts], axis=0)
    return out


def _order_sample(stats):
    if "sample" in stats:
        res = stats["sample"]
        order = np.argsort(res["idx"])
        stats["sample"] = res["rows"][order]
    return stats


def sample_threshold(size, n):
    """The key below which a block offers its rows to a uniform sample of ``size`` of ``n``
    rows (:func:`sample_rows_chunk`).

    The ``size``-th smallest of ``n`` uniform keys is about ``size / n``: keys below
    ``(size + 8 sqrt(size) + 16) / n`` number ``size`` or more but for a chance below
    1e-15 (8 standard deviations), so a block sends a few more than its share of the
    sample instead of ``size`` rows.  Where they fall short the sample is drawn again
    in a second pass with no threshold (:func:`feature_stats`, :func:`sample_rows`).
    """
    if size >= n:
        return 1.0
    return float(min(1.0, (size + 8.0 * np.sqrt(size) + 16.0) / n))


def feature_stats(blocks, sample_size=0, missing=False, digest=False):
    """Per-feature minimum and maximum of the finite values, their sum, the number of rows
    and the NaN/inf count (1 pass).

    ``sample_size > 0`` draws, in the same pass, a uniform sample of that many rows
    (all rows when X has fewer) as ``stats["sample"]`` (sample_size, n_features) float64,
    ordered by row index: the rows with the smallest keys ``uniform(SAMPLE_SEED, i)``, so
    the sample depends on X alone, not on its chunking (:func:`sample_rows_chunk`).
    Rows holding NaN/inf may be drawn; the caller checks ``nonfinite`` first.

    ``missing`` (``missing="mask"``): NaN counted apart, ``stats["nan"]``, and each
    feature's observed count, ``stats["observed"]`` (:func:`missing_stats_chunk`).
    ``digest``: also the SHA-256 of every block, in row order, ``stats["sha256"]``
    (computed where the block is read; a checkpointed fit's fingerprint of X).
    """
    chunk, combine = ((missing_stats_chunk, missing_stats_combine) if missing
                      else (feature_stats_chunk, feature_stats_combine))
    size = int(min(sample_size, blocks.shape[0]))
    combine = functools.partial(combine, sample_size=size)
    if digest:
        chunk = functools.partial(_digested, chunk)
        combine = functools.partial(_digests_combined, combine)
    stats = blocks.map_reduce(chunk, combine,
                              args=(size, sample_threshold(size, blocks.shape[0])),
                              name="feature stats" + (" (missing='mask')" if missing else "")
                              + (" + row sample" if size else ""))
    if size and stats["sample"]["idx"].shape[0] < size:     # below the threshold: < 1e-15
        rows, idx = sample_rows(blocks, size, SAMPLE_SEED, SAMPLE_STREAM, threshold=1.0)
        stats["sample"] = {"rows": rows, "idx": idx}
    return _order_sample(stats)


def _digested(chunk, block, start, *args):
    out = chunk(block, start, *args)
    out["sha256"] = [sha256_of(np.asarray(block))]
    return out


def _digests_combined(combine, parts):
    out = combine(parts)
    out["sha256"] = [h for p in parts for h in p["sha256"]]     # consecutive blocks
    return out


def checked_blocks(X, where, sample_size=0, allow_nan=False, hint="", on_pass=None,
                   digest=False):
    """Row blocks of a validated X and its feature stats (with a row sample of
    ``sample_size`` rows, see :func:`feature_stats`); NaN/inf in X is a ValueError naming
    ``where`` (the first pass of every fit) — with ``allow_nan`` (``missing="mask"``) only
    inf is, and the stats count each feature's observed entries.  ``hint`` ends the NaN
    error's message; ``on_pass`` reports every pass over X, this first one included
    (:class:`~daskrnmf._blocks.RowBlocks`)."""
    blocks = RowBlocks(X, on_pass=on_pass)
    stats = feature_stats(blocks, sample_size, missing=allow_nan, digest=digest)
    n_nan = stats.get("nan", 0)
    check_missing_count(n_nan, stats["nonfinite"] - n_nan, where, allow_nan=allow_nan,
                        hint=hint)
    return blocks, stats


# ---------------------------------------------------------------- the fused pass
def random_labels(seed, n_restarts, start, n_rows, n_clusters, first_restart=0):
    """Random indicator G (the paper's init): label of row i in restart r from (seed, r, i)."""
    idx = np.arange(start, start + n_rows, dtype=np.uint64)
    out = np.empty((n_rows, n_restarts), dtype=np.int32)
    for r in range(n_restarts):
        out[:, r] = rng.integers(seed, rng.stream_id(1, first_restart + r), idx, n_clusters)
    return out


@dataclass(frozen=True)
class AssignSpec:
    """What every block of the fused assignment pass needs besides the centres.

    ``metric`` ("l1"/"l2"), ``n_clusters``, ``eps`` (residual floor of the L2,1 weights),
    ``n_worst`` (worst-fit rows kept to re-seed empty clusters), ``seed``/``restarts``
    (random labels), ``stats`` ("sums", "median" or "counts": labels and sizes only),
    ``weights`` ("l21" or "ones"),
    ``squared`` (k-means objective), ``median_plan`` (L1: the first median round),
    ``missing`` (``missing="mask"``: NaN entries are missing; the statistics then count
    each (cluster, feature)'s observed entries: ``wsum_f`` and ``observed``; False: the
    block holds no NaN, as the fit's first pass checked, and the assignment does not
    look for any),
    ``worst_rows`` (False: the worst-fit indices without their rows, for X in memory),
    ``threads`` (the assignment's threads: X in memory, in-process).
    """

    metric: str
    n_clusters: int
    eps: float
    n_worst: int
    seed: int
    restarts: int
    stats: str
    weights: str
    squared: bool = False
    median_plan: dict = None
    missing: bool = False
    worst_rows: bool = True
    threads: int = 1


def assign_chunk(block, start, centers, spec):
    """One block of the fused pass.

    Parameters
    ----------
    block : ndarray (n_rows, n_features)
    start : int
        Global index of the block's first row.
    centers : ndarray (n_restarts, n_clusters, n_features) or None
        Current centres; None assigns random labels (``spec.seed``) instead.
    spec : AssignSpec

    Returns
    -------
    (partial, labels) : the partial summary and the block's labels (n_rows, n_restarts).
    """
    x = as_kernel_block(block)         # float32 stays: the kernels widen exactly
    k = spec.n_clusters
    if centers is None:
        labels = random_labels(spec.seed, spec.restarts, start, x.shape[0], k)
        residual = np.zeros(labels.shape)
    else:
        # a fit's blocks hold no NaN unless missing="mask" (its first pass checked them)
        labels, residual = nearest(x, centers, spec.metric, spec.threads,
                                   finite=not spec.missing)
    part = {"objective": (residual ** 2 if spec.squared else residual).sum(axis=0),
            "worst": worst_fit(residual, start, x, spec.n_worst, spec.worst_rows)}
    nan = np.isnan(x) if spec.missing else None
    if nan is not None and not nan.any():
        nan = None                      # a complete block: the plain statistics
    if spec.stats == "sums":
        weights = (np.ones_like(residual) if spec.weights == "ones"
                   else 1.0 / np.maximum(residual, spec.eps))
        xs = x if nan is None else np.where(nan, 0.0, x)
        part["sums"], part["wsum"], part["counts"] = cluster_sums(xs, labels, weights, k)
        if spec.missing:                # the weights of each feature's observed entries
            part["wsum_f"] = (np.repeat(part["wsum"][:, :, None], x.shape[1], axis=2)
                              if nan is None else
                              cluster_sums((~nan).astype(np.float64), labels, weights, k)[0])
    else:
        part["counts"] = _label_counts(labels, k)
        if spec.stats == "median":
            part["median"] = median_round(x, labels, k, spec.median_plan)
        if spec.missing:                # observed values per (restart, cluster, feature)
            part["observed"] = (np.repeat(part["counts"][:, :, None], x.shape[1], axis=2)
                                if nan is None else
                                cluster_sums((~nan).astype(np.float64), labels,
                                             np.ones(labels.shape), k)[0].astype(np.int64))
    return part, labels


def _label_counts(labels, k):
    R = labels.shape[1]
    return np.stack([np.bincount(labels[:, r], minlength=k) for r in range(R)]).astype(np.int64)


def assign_combine(parts):
    out = {"objective": sum_arrays([p["objective"] for p in parts]),
           "worst": merge_worst_fit([p["worst"] for p in parts]),
           "counts": sum_arrays([p["counts"] for p in parts])}
    for key in ("wsum_f", "observed"):
        if key in parts[0]:
            out[key] = sum_arrays([p[key] for p in parts])
    if "sums" in parts[0]:
        out["sums"] = sum_arrays([p["sums"] for p in parts])
        out["wsum"] = sum_arrays([p["wsum"] for p in parts])
    elif "median" in parts[0]:
        out["median"] = merge_median_round([p["median"] for p in parts])
    return out


# ---------------------------------------------------------------- row sample
def sample_rows_chunk(block, start, seed, stream, size, threshold=1.0):
    """The block's candidates for a uniform sample of ``size`` rows: its rows with keys
    ``uniform(seed, stream, i)`` below ``threshold`` (:func:`sample_threshold`), at most
    the ``size`` smallest, as float64.

    Merged by :func:`sample_rows_combine`, the root holds the ``size`` rows with the
    smallest keys of all of X: a uniform sample without replacement that depends on the
    seed alone, not on the chunking.
    """
    x = np.asarray(block)
    idx = np.arange(start, start + x.shape[0], dtype=np.int64)
    keys = rng.uniform(seed, stream, idx.astype(np.uint64))
    cand = np.flatnonzero(keys < threshold) if threshold < 1.0 else idx - start
    take = cand[np.lexsort((idx[cand], keys[cand]))[:size]]
    return {"key": keys[take], "idx": idx[take],
            "rows": np.ascontiguousarray(x[take], dtype=np.float64)}


def sample_rows_combine(parts, size):
    key = np.concatenate([p["key"] for p in parts])
    idx = np.concatenate([p["idx"] for p in parts])
    rows = np.concatenate([p["rows"] for p in parts])
    take = np.lexsort((idx, key))[:size]
    return {"key": key[take], "idx": idx[take], "rows": rows[take]}


def sample_rows(blocks, size, seed, stream, threshold=None):
    """A uniform sample of ``size`` rows of X (1 pass), ordered by row index.

    Blocks send only their rows with keys below ``threshold`` (default
    :func:`sample_threshold`); in the rare case that too few keys fall below it, a second
    pass draws the sample with none.

    Returns
    -------
    rows : ndarray (size, n_features), idx : ndarray (size,) of global row indices
    """
    size = min(size, blocks.shape[0])
    if threshold is None:
        threshold = sample_threshold(size, blocks.shape[0])
    res = blocks.map_reduce(sample_rows_chunk, functools.partial(sample_rows_combine, size=size),
                            args=(seed, stream, size, threshold),
                            name="row sample")
    if res["idx"].shape[0] < size:      # fewer keys below the threshold (< 1e-15): again
        return sample_rows(blocks, size, seed, stream, threshold=1.0)
    order = np.argsort(res["idx"])
    return res["rows"][order], res["idx"][order]


# ---------------------------------------------------------------- label counts
def label_counts_chunk(y):
    """``{label: count}`` of one block of labels: NumPy's unique for numbers and strings,
    a Counter for an object block (labels of mixed types cannot be sorted)."""
    y = np.asarray(y).ravel()
    if y.dtype == object:
        return dict(Counter(y.tolist()))
    values, counts = np.unique(y, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def label_counts_combine(parts):
    out = {}
    for part in parts:
        for label, n in part.items():
            out[label] = out.get(label, 0) + n
    return out


def label_counts(y):
    """``{label: count}`` of a 1-D Dask array of labels of any dtype, tree-reduced over
    its blocks (one pass over y; nothing of its length gathered)."""
    parts = [dask.delayed(label_counts_chunk, pure=True)(b) for b in y.to_delayed().ravel()]
    return dask.compute(tree_reduce(parts, label_counts_combine, 8, wrap=dask.delayed))[0]
