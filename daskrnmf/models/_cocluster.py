"""The NumPy pieces of RFNMTF (:mod:`daskrnmf.models.rfnmtf`): on the workers, the fused
co-clustering pass of a row block (row step, column costs, sizes, worst-fit rows, a
speculative first round of the S step's medians) and the rounds of the random initial
labels; on the client, the rules for empty row and column clusters.  NumPy in, small
arrays out; no Dask, no scikit-learn."""

from dataclasses import dataclass

import numpy as np

from ..kernels.assign import nearest
from ..kernels.blocks import as_float_block, sum_arrays
from ..kernels.cocluster import column_costs
from ..kernels.median_rounds import median_round, merge_median_round
from ..kernels.sums import merge_worst_fit, worst_fit
from ..reductions import random_labels


@dataclass(frozen=True)
class CoclusterSpec:
    """The fused co-clustering pass: ``K`` row clusters and, when the column labels have
    settled, the speculative first round (``plan``) of the S step's medians."""

    K: int
    plan: dict = None
    worst: bool = True  # the worst-fit rows (X in memory: a pass of their own if needed)


def cocluster_assign_chunk(block, start, P, S, C, spec):
    """The fused pass of one block: row step with the prototypes P (R, K, d), the column
    costs with the new row labels, sizes, worst-fit rows and — when ``spec.plan`` is
    given — a speculative first S-step round for the column labels C.

    Returns ``(partial, labels)``; labels (n_rows, R) stay with the block.
    """
    x = as_float_block(block)
    K = spec.K
    labels, residual = nearest(x, P, "l1")
    part = {"objective": residual.sum(axis=0),
            "counts": np.stack([np.bincount(labels[:, r], minlength=K)
                                for r in range(labels.shape[1])]).astype(np.int64),
            "worst": worst_fit(residual, start, x, K) if spec.worst else None,
            "costs": column_costs(x, labels, S)}
    if spec.plan is not None:
        part["median"] = median_round(x, labels, K, spec.plan, C)
    return part, labels


def cocluster_assign_combine(parts):
    out = {"objective": sum_arrays([p["objective"] for p in parts]),
           "counts": sum_arrays([p["counts"] for p in parts]),
           "worst": (merge_worst_fit([p["worst"] for p in parts])
                     if parts[0]["worst"] is not None else None),
           "costs": sum_arrays([p["costs"] for p in parts])}
    if "median" in parts[0]:
        out["median"] = merge_median_round([p["median"] for p in parts])
    return out


def worst_chunk(block, start, P, K):
    """The fused pass's worst-fit rows alone (:func:`cocluster_assign_chunk`)."""
    x = as_float_block(block)
    return worst_fit(nearest(x, P, "l1")[1], start, x, K)


def random_median_chunk(block, start, K, plan, C, seed, R):
    """An S-step round for the random initial row labels, drawn from (seed, restart, row)."""
    x = as_float_block(block)
    return median_round(x, random_labels(seed, R, start, x.shape[0], K), K, plan, C)


# ---------------------------------------------------------------- empty clusters
def reseed_empty_columns(C, costs, L):
    """An empty column cluster takes the feature that fits its own cluster worst (largest
    cost; ties to the lowest index) among clusters with more than one feature."""
    R = C.shape[0]
    n_in = np.bincount((C + L * np.arange(R)[:, None]).ravel(), minlength=R * L)
    if n_in.all():
        return C
    C = C.copy()
    for r in np.flatnonzero((n_in.reshape(R, L) == 0).any(axis=1)):
        own = np.take_along_axis(costs[r], C[r][:, None], axis=1)[:, 0]
        for l in np.flatnonzero(np.bincount(C[r], minlength=L) == 0):
            sizes = np.bincount(C[r], minlength=L)
            movable = sizes[C[r]] > 1
            if not movable.any():   # every feature alone (L > n_features): the rest stay empty
                break
            j = int(np.argmax(np.where(movable, own, -np.inf)))
            C[r, j] = l
            own[j] = -np.inf
    return C


def reseed_empty_rows(S, counts, worst, C):
    """An empty row cluster takes the worst-fit sample as its prototype: S[k, l] = the
    median of that sample's features in column cluster l (worst first, ties to the lowest
    index)."""
    if counts.all():
        return S
    S = S.copy()
    for r in range(S.shape[0]):
        for slot, k in enumerate(np.flatnonzero(counts[r] == 0)):
            row = worst["rows"][r, slot]
            for l in range(S.shape[2]):
                members = row[C[r] == l]
                if members.size:        # an empty column cluster: zero_empty_columns
                    S[r, k, l] = np.median(members)
    return S


def zero_empty_columns(S, C, L):
    """S with 0 in the blocks of column clusters no feature is in (only with
    n_column_clusters > n_features), the value the out-of-core S step's search gives them
    (an empty range), instead of the NaN of an empty median: the column costs of the
    next step then stay finite, and a feature moves there only if 0 fits it better."""
    R = C.shape[0]
    used = np.zeros((R, L), dtype=bool)
    used[np.repeat(np.arange(R), C.shape[1]), C.ravel()] = True
    if used.all():
        return S
    S = S.copy()
    S[~used[:, None, :].repeat(S.shape[1], axis=1)] = 0.0
    return S
