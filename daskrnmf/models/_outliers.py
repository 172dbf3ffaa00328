"""The pieces ONMFO and RobustNMF share: X ~ H W + R with a sparse non-negative R.

For W fixed, the codes h and outliers r of a sample x solve

    min_{h, r >= 0} 1/2 ||x - h W - r||^2 + alpha_R ||r||_1                          (3)

by the multiplicative rounds (16)-(17) (:func:`daskrnmf.kernels.outliers.solve_codes`);
a row block reduces to the statistics A = H^T X, B = H^T H, C = H^T R and its objective
(:func:`daskrnmf.kernels.outliers.block_statistics`), from which W takes steps of (18)
(:func:`daskrnmf.kernels.outliers.update_components`).  The functions here run on the
workers (NumPy in, small arrays out; they import neither Dask nor scikit-learn).
"""

from dataclasses import dataclass

import numpy as np

from ..kernels.blocks import as_float_block, check_values, sum_arrays
from ..kernels.outliers import block_statistics, initial_codes, solve_codes

SOLVE_ROWS = 2048  # rows solved at a time: bounds the kernels' temporaries


def add_statistics(parts):
    """Sum of :func:`block_statistics` dicts (associative; the tree keeps the order)."""
    return {"A": sum_arrays([p["A"] for p in parts]), "B": sum_arrays([p["B"] for p in parts]),
            "C": sum_arrays([p["C"] for p in parts]), "loss": sum(p["loss"] for p in parts),
            "n": sum(p["n"] for p in parts)}


@dataclass(frozen=True)
class SolveSpec:
    """The (h, r) solve of a batch: ``alpha_R``, ``n_iter`` rounds of (16)-(17), and
    ``where`` (the estimator, for error messages)."""

    alpha_R: float
    n_iter: int
    where: str


def solve_batch_piece(block, start, W, spec):
    """Codes and outliers of one piece of a batch (W fixed), reduced to its statistics.

    Checks the piece (finite, non-negative), then solves ``SOLVE_ROWS`` rows at a time.
    ``spec``: a :class:`SolveSpec`.
    """
    x = as_float_block(block)
    check_values(x, spec.where, non_negative=True,
                 rows=f", in rows {start}..{start + x.shape[0] - 1}")
    parts = []
    for s in range(0, x.shape[0], SOLVE_ROWS):
        xs = x[s:s + SOLVE_ROWS]
        h, r = solve_codes(xs, W, spec.alpha_R, spec.n_iter)
        parts.append(block_statistics(xs, h, r, W, spec.alpha_R))
    return add_statistics(parts)


def codes_block(block, W, alpha_R, n_iter, what):
    """``what="h"``: H (m, k); ``"hr"``: [H | R] (m, k + d) of one (checked) block of X."""
    x = as_float_block(block)
    out = np.empty((x.shape[0], W.shape[0] + (x.shape[1] if what == "hr" else 0)))
    for s in range(0, x.shape[0], SOLVE_ROWS):
        h, r = solve_codes(x[s:s + SOLVE_ROWS], W, alpha_R, n_iter)
        out[s:s + SOLVE_ROWS, :W.shape[0]] = h
        if what == "hr":
            out[s:s + SOLVE_ROWS, W.shape[0]:] = r
    return out


def initial_components(seed, k, d, mean):
    """Uniform random W >= 0 (k, d) with entries of the size that reproduces ``mean``."""
    avg = np.sqrt(max(mean, 1e-10) / k)
    return avg * np.random.default_rng([seed, 4]).uniform(size=(k, d))


# ---------------------------------------------------------------- the batch model's pass
def batch_init_chunk(block, start, W, alpha_R):
    """A block's starting H, R (kept on its worker) and its row count."""
    h, r = initial_codes(as_float_block(block), W, alpha_R)
    return block.shape[0], (h, r)


def count(parts):
    return sum(parts)


def batch_chunk(block, start, hr, W, alpha_R, update):
    """(7) then (8) for the block's rows with W fixed (when ``update``), then its
    statistics; the new H, R stay with the block."""
    x = as_float_block(block)
    h, r = hr
    if update:
        h, r = solve_codes(x, W, alpha_R, 1, h=h, r=r)
    return block_statistics(x, h, r, W, alpha_R), (h, r)
