"""Atomic checkpoints of a streaming fit in a directory of Zarr groups.

Layout of a checkpoint directory::

    path/
      LATEST            name of the newest complete generation (replaced atomically)
      gen-00000007/     a Zarr group: the state's arrays, its scalars in the attributes

A generation is written under a temporary name, renamed when complete, and only then
named in ``LATEST`` (written to a temporary file and ``os.replace``-d), so a process killed
at any moment leaves either the previous checkpoint or the new one, never a torn one.
Older generations and abandoned temporaries are removed after the switch.  Local (or
POSIX-mounted shared) file systems only: the atomicity rests on ``rename``.
"""

import json
import os
import shutil
import uuid
import warnings

import numpy as np

_LATEST = "LATEST"


def save(path, arrays, attrs):
    """Write a new generation holding ``arrays`` (name -> ndarray) and ``attrs`` (JSON)."""
    import zarr

    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    current = _latest_name(path)
    number = int(current.split("-")[1]) + 1 if current else 0
    name = f"gen-{number:08d}"
    tmp = os.path.join(path, f".{name}.{uuid.uuid4().hex}.partial")
    group = zarr.open_group(tmp, mode="w")
    for key, value in arrays.items():
        value = np.ascontiguousarray(value)
        group.create_array(key, shape=value.shape, dtype=value.dtype,
                           chunks=value.shape or None)[...] = value
    group.attrs.update(json.loads(json.dumps({**attrs, "_arrays": sorted(arrays)})))
    os.rename(tmp, os.path.join(path, name))
    pointer = os.path.join(path, f".{_LATEST}.{uuid.uuid4().hex}")
    with open(pointer, "w") as fh:
        fh.write(name)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(pointer, os.path.join(path, _LATEST))
    for entry in os.listdir(path):
        ours = entry.startswith(("gen-", ".gen-", f".{_LATEST}."))
        if ours and entry != name:  # never touch files that are not the checkpoint's
            full = os.path.join(path, entry)
            shutil.rmtree(full) if os.path.isdir(full) else os.remove(full)


def load(path):
    """``(arrays, attrs)`` of the newest complete generation, or None if there is none.

    Safe against a writer in another process: a generation replaced (and deleted) while
    it was being read is read again from the new pointer.
    """
    import zarr

    path = os.fspath(path)
    for _ in range(20):
        name = _latest_name(path)
        if name is None:
            return None
        try:
            with warnings.catch_warnings():   # a half-deleted old generation
                warnings.simplefilter("ignore")
                group = zarr.open_group(os.path.join(path, name), mode="r")
                arrays = {key: np.asarray(arr[...]) for key, arr in group.arrays()}
                attrs = dict(group.attrs)
        except (FileNotFoundError, OSError, KeyError, ValueError):
            arrays = None
        if arrays is not None and _latest_name(path) == name and \
                set(arrays) == set(attrs.get("_arrays", arrays)):
            return arrays, attrs
    raise RuntimeError(f"Checkpoint at {path} kept changing while it was read.")


def _latest_name(path):
    try:
        with open(os.path.join(path, _LATEST)) as fh:
            name = fh.read().strip()
    except FileNotFoundError:
        return None
    return name if os.path.isdir(os.path.join(path, name)) else None
