"""Zarr input: open arrays read-only from paths or URLs."""

import os

import zarr


def open_array(url, component=None):
    """Open a Zarr array read-only.

    Parameters
    ----------
    url : str or os.PathLike
        Path or URL of a Zarr store, or of an array inside one.
    component : str, optional
        Path of the array inside the store (for arrays inside a group).

    Returns
    -------
    zarr.Array
        Opened with ``mode="r"``: daskrnmf never writes to its input.
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
