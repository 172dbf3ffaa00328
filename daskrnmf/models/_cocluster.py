"""The worker side of RFNMTF (:mod:`daskrnmf.models.rfnmtf`): the fused co-clustering
pass of a row block (row step, column costs, sizes, worst-fit rows, a speculative first
round of the S step's medians) and the rounds of the random initial labels.  NumPy in,
small arrays out; no Dask, no scikit-learn."""

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
