"""The estimators' input, normalised once (:func:`check_array`): Zarr arrays read-only
from paths or URLs, ``.npy`` and HDF5 files; object-store locations.

The estimators accept a ``zarr.Array`` or the path of one wherever they take data;
:func:`check_array` turns whatever they are given into the array a fit reads, and
:func:`open_input` is what it uses to open a path.  They read a user's own files out of
core too, each block by a worker task that opens the file itself (the client reads a
header only; see the user guide's page on your own data):

* the path of a ``.npy`` file (``numpy.save``);
* an HDF5 dataset: ``"data.h5/X"``, ``("data.h5", "X")`` or ``fit("data.h5",
  component="X")``; a NetCDF-4 file is an HDF5 file, so ``"data.nc/VARIABLE"`` reads a
  variable.  Needs h5py (``pip install "daskrnmf[hdf5]"``);
* an ``np.memmap`` or an ``h5py.Dataset`` passed as they are.

The workers must see these files at the same path as the client (a shared file system
on a cluster).  ``daskrnmf convert`` writes any of them to a Zarr array.

A path may also be an fsspec URL (``s3://bucket/data.zarr``, ``gs://…``, ``memory://…``;
``file://`` is a local path), with ``storage_options`` for its file system (credentials,
``client_kwargs={"endpoint_url": ...}``, ...).  Arrays are then read by the workers, each
its own chunks, straight from the object store; the client reads metadata only.  S3 needs
the ``s3`` extra (``pip install "daskrnmf[s3]"``), other protocols their fsspec package.

Writing to an object store: the commit-marker rule
--------------------------------------------------
Object stores have no atomic rename, so a result written to a URL (a saved model, a
``daskrnmf fit`` output store) is never written in place.  Its location ``URL`` holds:

* ``URL/v-<32 hex digits>/`` — one complete result (a Zarr group), written under a fresh,
  unique prefix that nothing reads while it is being written;
* ``URL/daskrnmf-commit.json`` — the pointer ``{"format": "daskrnmf-commit",
  "current": "v-…"}``, written last, in one PUT (atomic on S3, GCS and Azure): writing it
  *is* the commit.

Readers (:func:`open_array`, :func:`daskrnmf.load`) trust only the prefix the pointer
names (:func:`resolve`).  A write interrupted at any moment therefore leaves no readable
half-result and the previous result (the pointer's old target) intact; after the commit,
the old version and prefixes abandoned by interrupted writes are deleted.  One writer at
a time per location.  Local paths keep the write-then-``rename`` rule.  Both rules are
behind :func:`write_whole` (the checks before the work behind :func:`check_destination`),
which ``model.save`` and the CLI's outputs use.  ONMFO checkpoints on an object store
follow the same rule with their own pointer (``LATEST``), see the user guide's page *Checkpoints and resuming a fit*.
"""

from __future__ import annotations

import contextlib
import json
import re
import os
import uuid
from typing import TYPE_CHECKING

import dask
import numpy as np

from . import _files, _reader, _stores
from . import _validation as v
from ._blocks import check_block_fits, check_stored_chunk_fits, worker_block_budget
from ._reader import BLOCK_BYTES
from ._stores import is_url, local_path  # noqa: F401  (public here)
from ._typing import PathLike

if TYPE_CHECKING:       # zarr is imported where a store is opened: a model's import needs none
    import zarr

POINTER = "daskrnmf-commit.json"
POINTER_FORMAT = "daskrnmf-commit"
_VERSION_PREFIX = "v-"


# ---------------------------------------------------------------- URLs
# is_url, local_path: daskrnmf._stores (the layer below), re-exported here


def filesystem(url: str, storage_options: dict | None = None):
    """``(fs, path)``: the fsspec file system of ``url`` and the path in it."""
    from fsspec.core import url_to_fs

    with explained(url, "open"):
        return url_to_fs(url, **(storage_options or {}))


def store(url: str, storage_options: dict | None = None, *, read_only: bool):
    """A ``zarr.storage.FsspecStore`` for ``url``: what the client opens and the workers
    (the store is pickled into every task) read or write chunks through."""
    from zarr.storage import FsspecStore

    with explained(url, "open"):
        return FsspecStore.from_url(url, storage_options=dict(storage_options or {}),
                                    read_only=read_only)


def zarr_target(path: PathLike, storage_options: dict | None = None, *, read_only: bool):
    """What ``zarr.open*`` takes for ``path``: a local path as is, a URL as a store."""
    if is_url(path):
        return store(path, storage_options, read_only=read_only)
    return local_path(path)


@contextlib.contextmanager
def explained(url, action="read"):
    """Errors of a file system turned into one clear line naming ``url``: wrong or
    missing credentials (PermissionError), a missing bucket or container
    (FileNotFoundError), an fsspec protocol whose package is not installed
    (ImportError), an unreachable endpoint (ConnectionError); never a raw
    botocore/aiohttp traceback."""
    try:
        yield
    except Exception as exc:
        clear = _explained_error(exc, url, action)
        if clear is None:
            raise
        raise clear from None


def _explained_error(exc, url, action):
    """The clear error for ``exc`` (None: leave it as it is)."""
    module = (type(exc).__module__ or "").split(".")[0]
    if module == "zarr":
        return None                        # zarr's own errors (no array there, ...)
    if isinstance(exc, PermissionError):
        return PermissionError(
            f"Access to {url} was denied ({_detail(exc)}) when trying to {action} it: check "
            "the credentials in storage_options (e.g. 'key' and 'secret', 'token' or "
            f"'profile') and that they are allowed to {action} it.")
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(f"{url} cannot be reached: {_detail(exc)} (a missing bucket "
                                 "or container?).")
    if isinstance(exc, ImportError):
        protocol = str(url).split("://", 1)[0]
        hint = ' (pip install "daskrnmf[s3]")' if protocol in ("s3", "s3a") else ""
        return ImportError(f"{url}: the file system of {protocol}:// needs a package that "
                           f"is not installed: {exc}{hint}.")
    if module in ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "google") \
            or isinstance(exc, (OSError, TimeoutError)):
        return ConnectionError(f"Cannot {action} {url}: {type(exc).__name__}: {_detail(exc)}")
    return None


def _detail(exc):
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."


# ---------------------------------------------------------------- committed locations
def _join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def read_pointer(url: str, storage_options: dict | None = None) -> str | None:
    """The version named by the commit pointer at ``url`` (``"v-…"``), or None when
    ``url`` is no committed location."""
    fs, path = filesystem(url, storage_options)
    with explained(url, "read"):
        try:
            raw = fs.cat_file(_join(path, POINTER))
        except FileNotFoundError:
            return None
    try:
        meta = json.loads(raw)
        current = meta["current"]
        ok = meta.get("format") == POINTER_FORMAT and isinstance(current, str) \
            and _is_version(current)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ValueError(f"The commit pointer {_join(url, POINTER)} is damaged: "
                         f"{raw[:60]!r}.")
    return current


def resolve(url: str, storage_options: dict | None = None) -> str:
    """The URL to read for ``url``: itself, or, when ``url`` or one of its parents is a
    committed location (see the module's commit-marker rule), the same path inside the
    version its pointer names.  Local paths are returned unchanged."""
    if not is_url(url):
        return url
    protocol, rest = url.split("://", 1)
    parts = rest.rstrip("/").split("/")
    for i in range(len(parts), 0, -1):
        base = protocol + "://" + "/".join(parts[:i])
        try:
            current = read_pointer(base, storage_options)
        except PermissionError:       # e.g. no right to list or read that level
            continue
        if current is not None:
            return "/".join([base, current] + parts[i:])
    return url


def location_exists(url: str, storage_options: dict | None = None) -> bool:
    """True when anything (a committed result or other objects) is at ``url``."""
    fs, path = filesystem(url, storage_options)
    with explained(url, "read"):
        return bool(fs.exists(path)) or bool(fs.exists(_join(path, POINTER)))


def check_writable(url: str, storage_options: dict | None = None, what: str = "output"):
    """Write and delete a probe object under ``url``: wrong credentials, a missing bucket
    or a read-only location fail here, before any work, and leave nothing behind."""
    fs, path = filesystem(url, storage_options)
    probe = _join(path, f".daskrnmf-probe-{uuid.uuid4().hex}")
    with explained(f"{what} {url}", "write"):
        fs.pipe_file(probe, b"")
        fs.rm_file(probe)


def check_replaceable(url: str, what: str = "output", *, how: str = "--overwrite",
                      storage_options: dict | None = None) -> None:
    """The object-store side of :func:`daskrnmf._stores.check_replaceable`: a location
    that holds objects but no commit pointer is not daskrnmf's to replace."""
    if location_exists(url, storage_options) and read_pointer(url, storage_options) is None:
        raise FileExistsError(
            f"{what} {url} holds objects daskrnmf did not write (no {POINTER}); {how} "
            "replaces only daskrnmf's own results: choose another location or remove them "
            "yourself.")


def _is_version(name):
    """A name :func:`new_version` makes (``v-`` and 32 hex digits): only those are ever
    removed as old or abandoned versions, never a user's ``v-data``."""
    return re.fullmatch(_VERSION_PREFIX + "[0-9a-f]{32}", name) is not None


def new_version(url: str) -> str:
    """A fresh, unique version prefix under the location ``url`` (not yet committed)."""
    return _join(url, f"{_VERSION_PREFIX}{uuid.uuid4().hex}")


def commit(url: str, version: str, storage_options: dict | None = None, *,
           overwrite: bool = False) -> None:
    """Make the complete result at ``version`` (from :func:`new_version`) the one at the
    location ``url``: one PUT of the pointer, then the previous version and prefixes left
    by interrupted writes are deleted (only names :func:`new_version` makes: other objects
    at ``url`` are never touched; :func:`check_replaceable` refuses a
    location that holds them and no pointer)."""
    name = version.rstrip("/").rsplit("/", 1)[1]
    fs, path = filesystem(url, storage_options)
    if not overwrite and read_pointer(url, storage_options) is not None:
        raise FileExistsError(f"{url} exists; pass overwrite=True to replace it.")
    body = json.dumps({"format": POINTER_FORMAT, "current": name}).encode()
    with explained(url, "write"):
        fs.pipe_file(_join(path, POINTER), body)        # the commit
    with contextlib.suppress(Exception):                 # garbage: best effort
        fs.invalidate_cache(path)
        for entry in fs.ls(path, detail=False):
            base = entry.rstrip("/").rsplit("/", 1)[-1]
            if base in (POINTER, name):
                continue
            if _is_version(base):
                fs.rm(entry, recursive=True)


def discard(version: str, storage_options: dict | None = None) -> None:
    """Delete an uncommitted version prefix (an interrupted or failed write); a version
    its location's pointer names is kept."""
    location, name = version.rstrip("/").rsplit("/", 1)
    with contextlib.suppress(Exception):
        if read_pointer(location, storage_options) == name:
            return
        fs, path = filesystem(version, storage_options)
        fs.rm(path, recursive=True)


# ---------------------------------------------------------------- writing a result
def check_destination(path: PathLike, what: str = "output", *, overwrite: bool,
                      how: str = "overwrite=True", storage_options: dict | None = None):
    """A store to be written at ``path``, a local path or a URL, checked before any work:
    absent, or replaced (``overwrite``) only when daskrnmf wrote it, and writable (a URL:
    a probe object written and deleted, so that wrong credentials and a missing bucket
    fail now).  Local paths: :func:`daskrnmf._stores.check_destination`."""
    if not is_url(path):
        return _stores.check_destination(path, what, overwrite=overwrite, how=how)
    if location_exists(path, storage_options):
        if not overwrite:
            raise FileExistsError(f"{what} {path} exists; pass {how} to replace it.")
        check_replaceable(path, what, how=how, storage_options=storage_options)
    check_writable(path, storage_options, what)


def write_whole(path: PathLike, write, what: str = "output", *, overwrite: bool,
                how: str = "overwrite=True", storage_options: dict | None = None,
                tmp: str | None = None) -> str:
    """Write a store whole or not at all: ``write(tmp)`` at a temporary location that is
    then made the one at ``path``: renamed into place for a local path
    (:func:`daskrnmf._stores.write_whole`), committed for a URL (the commit-marker rule);
    the temporary is removed whatever happens (:func:`discard` keeps a committed one).
    ``tmp`` (from :func:`daskrnmf._stores.partial_name` or :func:`new_version`): for a
    caller that must also remove it later.  Returns the path (local: absolute)."""
    if not is_url(path):
        return _stores.write_whole(path, write, what, overwrite=overwrite, how=how, tmp=tmp)
    tmp = tmp or new_version(path)
    try:
        write(tmp)
        try:
            commit(path, tmp, storage_options, overwrite=overwrite)
        except FileExistsError:                  # another writer committed meanwhile
            raise FileExistsError(f"{what} {path} exists; pass {how} to replace it.") \
                from None
    finally:
        discard(tmp, storage_options)
    return path


def open_array(url: PathLike, component: str | None = None, *,
               storage_options: dict | None = None) -> zarr.Array:
    """Open a Zarr array read-only, with an informative error for anything else.

    Parameters
    ----------
    url : str or os.PathLike
        Path or fsspec URL (``s3://bucket/data.zarr``) of a Zarr store, or of an array
        inside one.  A URL that is (or is inside) a location written by daskrnmf on an
        object store is read from the version its commit pointer names.
    component : str, default=None
        Path of the array inside the store, for an array inside a group; None opens
        the store's root, which must then be an array.
    storage_options : dict, default=None
        Options of the URL's fsspec file system (credentials, endpoint, ...); ignored
        for local paths.  The array keeps them: the workers read its chunks with them.

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
    PermissionError
        For a URL whose credentials are wrong or missing (the message names the URL).

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
    import zarr

    url = os.fspath(url)
    where = url if component is None else f"{url} (component {component!r})"
    _refuse_user_file(url)
    try:
        node = _open_node(url, component, storage_options)
    except (PermissionError, ImportError, ConnectionError):
        raise
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as exc:
        why = exc
        if is_url(url):
            why = _missing_bucket(url, storage_options) or "nothing there"
        raise ValueError(f"No Zarr array at {where} ({why}). Pass the path of a Zarr array, or a "
                         "store plus component=... for an array inside a group.") from None
    except Exception as exc:  # zarr raises assorted errors for paths that are not Zarr
        raise ValueError(f"{where} is not a readable Zarr array ({type(exc).__name__}: {exc}).") from None
    if isinstance(node, zarr.Group):
        names = sorted(name for name, _ in node.arrays())
        raise ValueError(f"{url} is a Zarr group, not an array; pass component=... naming one of "
                         f"its arrays: {names}.")
    return node


def open_dask_array(url: PathLike, component: str | None = None, *,
                    storage_options: dict | None = None):
    """An input path as the estimators read it: a Dask array of whole rows.

    The blocks are whole stored chunks, about 32 MiB each (and small enough for the
    workers' memory limit, when a distributed Client is active).  Chunks of a Zarr
    array on a local or shared file system are decompressed straight into reused
    buffers on the workers (in a Dask worker about twice as
    fast as reading through zarr); other arrays are read by zarr.  A ``.npy`` file or an
    HDF5 dataset is read by the workers, each block by a task that opens the file.  Use
    it to compute on X the way a fit reads it.

    Parameters
    ----------
    url, storage_options
        As :func:`open_input`.
    component : str, default=None
        The array inside a Zarr group, or the dataset of an HDF5 file.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features), chunked along rows only.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from daskrnmf.io import open_dask_array
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "x.npy")
    >>> np.save(path, np.arange(12.0).reshape(6, 2))
    >>> X = open_dask_array(path)     # the header only is read here
    >>> X.shape, float(X.sum().compute())
    ((6, 2), 66.0)
    >>> tmp.cleanup()
    """
    node = open_input(url, component, storage_options=storage_options)
    where = os.fspath(url) if component is None else f"{url}/{component}"
    if isinstance(node, _files.FileRows):
        return _file_to_dask(node, where)
    return _zarr_to_dask(node, where)


def open_input(url: PathLike, component: str | None = None, *,
               storage_options: dict | None = None):
    """What an input path names: a read-only ``zarr.Array``, or the reader of a ``.npy``
    file or an HDF5 dataset (a small picklable description: the file's path and
    layout, read from its header only).

    Parameters
    ----------
    url : str or os.PathLike
        A Zarr array's path or URL (as :func:`open_array`), a ``.npy`` file's path, or an
        HDF5 (NetCDF-4) file's path, followed by the dataset's name inside it
        (``data.h5/group/X``).  Files are recognised by their first bytes, not their
        names.
    component : str, default=None
        The array inside a Zarr group, or the dataset of an HDF5 file (appended to any
        name already in ``url``).
    storage_options : dict, default=None
        As :func:`open_array` (URLs are Zarr stores).

    Raises
    ------
    ValueError
        Nothing readable there: the message says what was found (a Zarr group and its
        arrays, an HDF5 file and its datasets, a file of another kind).
    ImportError
        An HDF5 file without h5py installed (``pip install "daskrnmf[hdf5]"``).
    """
    path = os.fspath(url)
    found = None if is_url(path) else _files.split_file_path(local_path(path))
    if found is not None:
        file, inner = found
        name = "/".join(p.strip("/") for p in (inner, component) if p) or None
        return _files.open_file(file, name)
    return open_array(path, component, storage_options=storage_options)


def _refuse_user_file(url):
    """A ``.npy`` or HDF5 file given where a Zarr array is expected: say what it is and
    how it is read, instead of zarr's 'nothing there'."""
    found = None if is_url(url) else _files.split_file_path(local_path(url))
    if found is None:
        return
    kind = _files.file_kind(found[0])
    what = {"npy": "a .npy file", "hdf5": "an HDF5 file"}.get(kind, "a file")
    raise ValueError(f"{url} is {what}, not a Zarr array. The estimators read .npy files and "
                     "HDF5 datasets as they are (fit(path), fit('data.h5/X')), "
                     "daskrnmf.io.open_dask_array reads them as a Dask array, and "
                     "'daskrnmf convert INPUT OUTPUT.zarr' writes them to Zarr.")


def _open_node(url, component, storage_options, group=False):
    """The Zarr node (a group with ``group``) at ``url`` (``component`` inside it),
    read-only.  For a URL the commit pointer comes first: when ``url`` or a parent is a
    committed location, the version its pointer names is read, never what an
    interrupted cleanup may have left at the location itself."""
    import zarr

    open_ = zarr.open_group if group else zarr.open
    if not is_url(url):
        return open_(store=url, path=component or "", mode="r")
    with explained(url, "read"):
        target = resolve(url, storage_options)
        return open_(store=store(target, storage_options, read_only=True),
                     path=component or "", mode="r")


def _missing_bucket(url, storage_options):
    """"the bucket B does not exist" when that is why nothing is at ``url`` (zarr reads
    a missing bucket as a missing key), else None."""
    try:
        fs, path = filesystem(url, storage_options)
        if not hasattr(fs, "split_path"):      # file systems without buckets
            return None
        bucket = fs.split_path(path)[0]
        if bucket and not fs.exists(bucket):
            return f"the bucket {bucket!r} does not exist, or these credentials cannot see it"
    except Exception:
        return None
    return None


# ---------------------------------------------------------------- the estimators' input
#: What the estimators take as X (the TypeError of :func:`check_array` lists it).
ACCEPTED_INPUT = ("a NumPy array, a dask array, a zarr.Array, an np.memmap, an h5py.Dataset, "
                  "or the path of a Zarr array (or URL), of a .npy file or of an HDF5 "
                  "dataset ('data.h5/X'), or a pair (path, component) for an array inside a "
                  "Zarr group or an HDF5 file")


def check_array(X, *, estimator_name, input_name="X", storage_options=None, allow_nan=False):
    """X as the estimators read it: a checked NumPy array or a row-chunked Dask array.

    What the user passed is opened and wrapped here, once for every model: a path or
    fsspec URL of a Zarr array (read-only; its blocks whole stored chunks, read by the
    workers), the path of a ``.npy`` file or of an HDF5/NetCDF-4 dataset
    (``data.h5/X``), a pair ``(path, component)``, an ``np.memmap`` or an
    ``h5py.Dataset`` (read by the workers in row blocks).  The messages are the
    estimators'.

    Parameters
    ----------
    X : array-like, dask.array.Array, zarr.Array, str, os.PathLike or (path, component)
        Any of :data:`ACCEPTED_INPUT`.
    estimator_name : str
        Who asks, named in the messages (``"X passed to RFNMF"``).
    input_name : str, default="X"
        The input's name in the messages (``"H"`` for ``inverse_transform``).
    storage_options : dict, default=None
        Options of a URL's fsspec file system; None takes the running fit's
        (``fit(..., storage_options=...)``).
    allow_nan : bool, default=False
        NaN entries are missing values (``missing="mask"``): only inf is refused.

    Returns
    -------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
        In a dtype the kernels take (:func:`native_dtype`); a Dask array is chunked
        along its rows only.

    Raises
    ------
    ValueError
        X is not 2-D, is empty, holds NaN or inf (NumPy input: a lazy X is checked in
        the first pass over it, :func:`daskrnmf.reductions.checked_blocks`), has unknown
        chunk sizes or is chunked along its columns.
    TypeError
        X is of none of the accepted kinds, or its dtype is not a real number's.
    """
    import dask.array as da
    import zarr

    where = f"{input_name} passed to {estimator_name}"
    if v.is_path(X) or v.is_path_pair(X):
        if storage_options is None:
            storage_options = v.current_storage_options()
        path, component = X if isinstance(X, tuple) else (X, None)
        X = open_input(path, component, storage_options=storage_options)
    else:       # a memmap or an h5py Dataset: read by the workers from its file
        X = _files.rows_of(X) or X
    if isinstance(X, _files.FileRows):
        X = _file_to_dask(X, where)
    if isinstance(X, zarr.Array):
        X = _zarr_to_dask(X, where)
    if isinstance(X, np.ndarray):
        v._check_shape_dtype(X, where)
        X = native_dtype(X)
        n_nan, n_inf = v.count_nonfinite(X)
        v.check_missing_count(n_nan, n_inf, where, allow_nan=allow_nan)
        return X
    if isinstance(X, da.Array):
        v._check_shape_dtype(X, where)
        X = native_dtype(X)
        if any(np.isnan(c) for c in X.chunks[0]) or any(np.isnan(c) for c in X.chunks[1]):
            raise ValueError(f"{where} has unknown chunk sizes; call X.compute_chunk_sizes() "
                             "before fitting.")
        if len(X.chunks[1]) != 1:
            raise ValueError(f"{where} is chunked along its columns {X.chunks[1][:4]}...; daskrnmf "
                             "needs every sample's features in one chunk. Use "
                             f"X.rechunk({{1: {X.shape[1]}}}).")
        return X
    raise TypeError(f"{where} must be {ACCEPTED_INPUT}; got an object of type "
                    f"{type(X).__module__}.{type(X).__qualname__}.")


def native_dtype(X):
    """X (NumPy or Dask, lazily) in a dtype the compiled kernels take: float16 as float64
    (what scikit-learn's ``check_array`` gives NumPy input, and what integers become),
    a non-native byte order (``'>f8'``) as the native one.  Numba has no float16 and
    compiles for native byte order only; other dtypes are returned unchanged."""
    dt = _reader.native_dtype(X.dtype)          # the one rule, shared with the reader
    return X if dt == X.dtype else X.astype(dt)


def _zarr_to_dask(z, where):
    """A Zarr array as a Dask array of whole rows: blocks of whole stored chunks, about
    :data:`BLOCK_BYTES` (less if dask's ``array.chunk-size`` is smaller), and small enough
    for the workers' memory limit (what a worker holds besides them is estimated; the
    kernels hold a float64 copy of a block).  When even one stored chunk is too large for
    that, blocks split stored chunks (each block then decompresses its whole stored chunk:
    the time of several decodes per pass, and one decoded stored chunk transiently in a
    task)."""
    if z.ndim != 2:
        v._check_shape_dtype(z, where)
    rows = _block_rows(z.shape, z.dtype, z.chunks[0], where)
    # read by daskrnmf's reader (whole chunks decoded into reused buffers; zarr itself
    # for layouts it does not read)
    return _reader.as_dask(z, rows)


def _block_rows(shape, dtype, stored, where):
    """Rows per block of an array of ``shape`` stored in chunks of ``stored`` rows (1 for
    a file without chunks): :data:`BLOCK_BYTES` of whole stored chunks, fewer when the
    workers' memory limit asks for it (see :func:`_zarr_to_dask`)."""
    limit = min(BLOCK_BYTES, dask.utils.parse_bytes(dask.config.get("array.chunk-size")))
    row_bytes = max(1, shape[1] * np.dtype(dtype).itemsize)
    stored = max(1, int(stored))
    rows = max(stored, (limit // row_bytes) // stored * stored)
    budget = worker_block_budget()
    if budget is not None and budget <= 0:
        check_block_fits(None, where)      # the limit cannot hold a worker's baseline
    if budget is not None and budget > 0:
        check_stored_chunk_fits(stored * row_bytes, budget, where)
        fit = budget // max(1, shape[1] * 8)        # rows whose float64 copy fits
        if rows > fit:
            rows = fit // stored * stored if fit >= stored else max(1, fit)
    return min(rows, max(1, shape[0]))


def _file_to_dask(src, where):
    """A user's file (:class:`daskrnmf._files.FileRows`) as a Dask array of whole rows,
    blocks sized as a Zarr array's (an HDF5 dataset's chunks taken as stored chunks: a
    read decodes every chunk it touches)."""
    v._check_shape_dtype(src, where)
    stored = getattr(src, "chunk_rows", None) or 1
    return _files.as_dask(src, _block_rows(src.shape, src.dtype, stored, where))


# ---------------------------------------------------------------- daskrnmf convert
#: Bytes of a stored chunk that ``daskrnmf convert`` aims at: a fit reads X in blocks of
#: whole stored chunks of about this size (:data:`daskrnmf._reader.BLOCK_BYTES`), and
#: a worker decodes a whole stored chunk to read any row of it, so chunks of 16-64 MiB
#: keep both the number of tasks per pass and a worker thread's memory small.
CHUNK_BYTES = BLOCK_BYTES
_CHUNK_RANGE = (16 * 2**20, 64 * 2**20)


def chunk_advice(shape, dtype, chunk_rows=None):
    """``(rows, why)``: rows per stored chunk for a Zarr copy of an array of ``shape``
    and ``dtype`` (``chunk_rows``: the user's choice, checked), and why, in words."""
    n, d = int(shape[0]), int(shape[1])
    row_bytes = max(1, d * np.dtype(dtype).itemsize)
    if chunk_rows is None:
        rows = max(1, min(n, CHUNK_BYTES // row_bytes))
        why = ("all rows in one chunk (the array is smaller than the 32 MiB aimed at)"
               if rows == n else
               "chunks of about 32 MiB: a fit reads X in blocks of whole chunks of about "
               "that size, and a worker decodes a whole chunk to read any of its rows")
    else:
        rows = max(1, min(n, int(chunk_rows)))
        size = rows * row_bytes
        why = "--chunk-rows"
        if size > _CHUNK_RANGE[1]:
            why += (f"; chunks above 64 MiB need that much memory per worker thread for each "
                    f"read (about {CHUNK_BYTES // row_bytes} rows make 32 MiB)")
        elif size < _CHUNK_RANGE[0] and rows < n:
            why += (f"; chunks below 16 MiB make many small tasks and files per pass (about "
                    f"{CHUNK_BYTES // row_bytes} rows make 32 MiB)")
    return rows, why


def row_blocks(node, rows: int):
    """What :func:`open_input` gave (a ``zarr.Array`` or a file's reader) as a Dask array
    of blocks of ``rows`` rows, each read by a worker task (what ``daskrnmf convert``
    writes, one stored chunk per block)."""
    if isinstance(node, _files.FileRows):
        return _files.as_dask(node, rows)
    return _reader.as_dask(node, rows)
