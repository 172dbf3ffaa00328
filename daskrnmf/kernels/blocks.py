"""Helpers every per-block kernel and combine function uses (NumPy only, no dask)."""

import numpy as np


def as_float_block(block):
    """A C-contiguous float64 view/copy of one row block (kernels work in float64)."""
    return np.ascontiguousarray(block, dtype=np.float64)


def sum_arrays(arrays, dtype=None):
    """Sum a list of equally shaped arrays, left to right (in ``dtype`` if given)."""
    out = arrays[0].astype(dtype if dtype is not None else arrays[0].dtype, copy=True)
    for a in arrays[1:]:
        out += a
    return out


def sum_dicts(parts):
    """Key-wise sum of a list of dicts of arrays/numbers (a tree node's combine)."""
    return {key: sum_arrays([np.asarray(p[key]) for p in parts]) for key in parts[0]}
