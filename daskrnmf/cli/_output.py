"""The output store a command writes: a Zarr group of arrays (per-sample ones chunked like
the input's stored rows), metadata, and for a fit the fitted model, written whole or not
at all (:func:`daskrnmf.io.write_whole`: renamed into place, or committed on an object
store)."""

import json

import dask.array as da
import numpy as np
import zarr

from .. import _stores, io
from .._persist import write_group


def write_store(path, arrays, attrs, overwrite, *, n_rows=None, row_chunk=None, tmp=None,
                model=None, storage_options=None):
    """Write a Zarr group whole or not at all, at a local path or a URL.

    Parameters
    ----------
    path : str
        The output store: a local path (written under a temporary name next to it and
        renamed into place when complete) or an fsspec URL (written under a fresh prefix
        ``path/v-<id>`` and committed by the pointer ``path/daskrnmf-commit.json``, the
        commit-marker rule of :mod:`daskrnmf.io`): an interrupted write leaves no
        readable half-result and the previous one intact.
    arrays : dict
        Name -> NumPy array (small) or Dask array (written chunk by chunk on the
        workers).  Arrays with ``n_rows`` rows are stored in chunks of ``row_chunk`` rows
        (the input's stored chunking), the others in one chunk (Dask: their largest
        block) along the rows; every other axis whole.
    attrs : dict
        JSON-able metadata, stored with daskrnmf's owner mark (a later ``--overwrite``
        may replace the store).
    overwrite : bool
        Replace an existing store (only one daskrnmf wrote).
    n_rows, row_chunk : int, optional
        The input's rows and its stored rows per chunk.
    tmp : str, optional
        The temporary location to write at, for a caller that must remove it after a
        cluster closes (:func:`daskrnmf._stores.partial_name`, :func:`daskrnmf.io.new_version`).
    model : estimator, optional
        A fitted estimator saved in the ``model`` subgroup (``daskrnmf.load`` of the
        store, or of ``STORE/model``, gives it back).
    storage_options : dict, optional
        Options of the URL's fsspec file system.

    Returns
    -------
    path : str
        The store written (local: absolute).
    """
    def write(tmp):
        group = zarr.open_group(io.zarr_target(tmp, storage_options, read_only=False), mode="w")
        sources, targets = [], []
        for name, value in arrays.items():
            if isinstance(value, da.Array) and value.ndim == 0:
                value = value.compute()
            per_sample = bool(row_chunk) and np.ndim(value) > 0 and value.shape[0] == n_rows
            if isinstance(value, da.Array):
                rows = row_chunk if per_sample else max(max(value.chunks[0]), 1)
                chunks = (rows,) + tuple(max(s, 1) for s in value.shape[1:])
                targets.append(group.create_array(name, shape=value.shape, dtype=value.dtype,
                                                  chunks=chunks))
                sources.append(value.rechunk(chunks))
            else:
                value = np.asarray(value)
                chunks = tuple(max(s, 1) for s in value.shape) or None
                if per_sample:
                    chunks = (row_chunk,) + chunks[1:]
                group.create_array(name, shape=value.shape, dtype=value.dtype,
                                   chunks=chunks)[...] = value
        if sources:
            da.store(sources, targets, lock=False)
        if model is not None:
            write_group(model, tmp.rstrip("/") + "/model", storage_options)
        group.attrs.update(json.loads(json.dumps(_stores.mark(attrs), default=_json_default)))

    return io.write_whole(path, write, "output", overwrite=overwrite, how="--overwrite",
                          storage_options=storage_options, tmp=tmp)


def temporary(path, run, storage_options=None):
    """A fresh temporary location for the store at ``path`` (local: a name next to it; a
    URL: an uncommitted version prefix under it), which ``run`` removes after the cluster
    has closed (:class:`._run.Run`: no worker still writes into it then)."""
    if io.is_url(path):
        tmp = io.new_version(path)
        return run.remove_later(tmp, lambda: io.discard(tmp, storage_options))  # kept once
    return run.remove_later(_stores.partial_name(path))                          # committed


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return repr(obj)
