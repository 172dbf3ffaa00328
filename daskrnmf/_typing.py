"""Names for the types the public API takes and returns (documentation for readers and
type checkers; all of them are ``typing.Any`` at run time: the estimators check their
input themselves).

Data
    What ``fit``, ``predict`` and ``transform`` take: a NumPy array or array-like, a
    pandas DataFrame, a Dask array chunked along rows, a ``zarr.Array``, or the path or
    URL of a Zarr array.
Array
    What ``predict`` and ``transform`` return: a NumPy array for in-memory input, a lazy
    Dask array chunked like X's rows for Dask/Zarr input.
Labels
    Class or cluster labels: a NumPy array or array-like, or a Dask array.
"""

from __future__ import annotations

import os
from typing import Any, Union

Data = Any
Array = Any
Labels = Any
PathLike = Union[str, "os.PathLike[str]"]
RandomState = Any   # None, an int, a numpy Generator or RandomState

__all__ = ["Array", "Data", "Labels", "PathLike", "RandomState"]
