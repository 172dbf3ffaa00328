"""Zarr input: open arrays read-only from paths or URLs.

The estimators accept a ``zarr.Array`` or the path of one wherever they take data;
:func:`open_array` is what they use to open a path.
"""

from __future__ import annotations

import os

import zarr

from ._typing import PathLike


def open_array(url: PathLike, component: str | None = None) -> zarr.Array:
    """Open a Zarr array read-only, with an informative error for anything else.

    Parameters
    ----------
    url : str or os.PathLike
        Path or URL of a Zarr store, or of an array inside one.
    component : str, default=None
        Path of the array inside the store, for an array inside a group; None opens
        the store's root, which must then be an array.

    Returns
    -------
    array : zarr.Array
        The array, opened with ``mode="r"``: daskrnmf never writes to its input.
        Nothing is read until it is indexed.

    Raises
    ------
    ValueError
        If nothing is at ``url`` (and ``component``), if it is not a readable Zarr
        array, or if it is a group (the message lists the group's arrays).

    Examples
    --------
    >>> import os, tempfile
    >>> from daskrnmf.datasets import make_zarr_blobs
    >>> from daskrnmf.io import open_array
    >>> tmp = tempfile.TemporaryDirectory()
    >>> store = make_zarr_blobs(os.path.join(tmp.name, "blobs.zarr"), n_samples=100,
    ...                         n_features=4, n_clusters=2, chunk_rows=50)
    >>> X = open_array(store, component="X")
    >>> X.shape, X.chunks, X.read_only
    ((100, 4), (50, 4), True)
    >>> open_array(store)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: ... is a Zarr group, not an array; ... its arrays: ['X', 'outlier', 'y'].
    >>> tmp.cleanup()
    """
    url = os.fspath(url)
    where = url if component is None else f"{url} (component {component!r})"
    try:
        node = zarr.open(store=url, path=component or "", mode="r")
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as exc:
        raise ValueError(f"No Zarr array at {where} ({exc}). Pass the path of a Zarr array, or a "
                         "store plus component=... for an array inside a group.") from None
    except Exception as exc:  # zarr raises assorted errors for paths that are not Zarr
        raise ValueError(f"{where} is not a readable Zarr array ({type(exc).__name__}: {exc}).") from None
    if isinstance(node, zarr.Group):
        names = sorted(name for name, _ in node.arrays())
        raise ValueError(f"{url} is a Zarr group, not an array; pass component=... naming one of "
                         f"its arrays: {names}.")
    return node
