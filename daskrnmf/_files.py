"""A user's own files read by the workers in row blocks: ``.npy``, HDF5 (and NetCDF-4,
which is HDF5), ``np.memmap`` and ``h5py.Dataset``.

Why
---
A memmap or an h5py dataset given to the estimators as it was went through NumPy in the
client process: the whole array was read there (a 0.55 GiB memmap fit peaked at
1.34 GiB) and shipped to the workers.  Here the client reads a file's header only and
builds a Dask array whose graph holds a small picklable *reader* (the file's path and
layout, never its values); each block task opens the file itself, read-only, and reads
its rows.  The workers must see the file at the same path, as for a Zarr path (a shared
file system on a cluster).

The readers' blocks take their memory from :mod:`daskrnmf._reader`'s buffer pool (the
reason is that module's: fresh allocations in a worker cost page faults every pass).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ._reader import _POOL, FILE_PREFIX, _rows_of, native_dtype, row_source_as_dask

H5PY_HINT = 'pip install "daskrnmf[hdf5]"'
NAME_PREFIX = FILE_PREFIX
_NPY_MAGIC = b"\x93NUMPY"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


# ---------------------------------------------------------------- what a path is
def file_kind(path) -> str | None:
    """``"npy"``, ``"hdf5"``, ``"netcdf3"`` or ``"other"`` for a regular file (from its
    first bytes, not its name); None when ``path`` is no regular file."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if head.startswith(_NPY_MAGIC):
                return "npy"
            if head[:3] == b"CDF":
                return "netcdf3"
            # HDF5's signature is at 0 or after a user block of 512, 1024, 2048, ... bytes
            size, at = os.fstat(fh.fileno()).st_size, 0
            while at + 8 <= size:
                fh.seek(at)
                if fh.read(8) == _HDF5_MAGIC:
                    return "hdf5"
                at = 512 if at == 0 else 2 * at
    except OSError:
        return None
    return "other"


def split_file_path(path):
    """``(file, inner)`` when ``path`` is an existing regular file (``inner`` None) or a
    path inside one (``"data.h5/group/X"`` -> ``("data.h5", "group/X")``); else None."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return path, None
    head, inner = path.rstrip("/"), []
    while head and not os.path.lexists(head):
        head, name = os.path.split(head)
        if not name:
            break
        inner.insert(0, name)
    if inner and os.path.isfile(head):
        return head, "/".join(inner)
    return None


def open_file(path, component=None):
    """The reader of the array in the file ``path`` (``component``: an HDF5 dataset's
    name), or a ValueError saying what the file is and what is read."""
    kind = file_kind(path)
    if kind == "npy":
        if component:
            raise ValueError(f"{path} is a .npy file, which holds one array; component="
                             f"{component!r} does not apply: pass the file's path alone.")
        return npy_rows(path)
    if kind == "hdf5":
        return hdf5_rows(path, component)
    if kind == "netcdf3":
        raise ValueError(f"{path} is a NetCDF-3 (classic) file; daskrnmf reads NetCDF-4 files "
                         "(which are HDF5). Convert it, e.g. 'nccopy -k nc4 IN OUT.nc', then "
                         "pass 'OUT.nc/VARIABLE'.")
    raise ValueError(f"{path} is a file that is neither a .npy file, an HDF5/NetCDF-4 file nor "
                     "a Zarr array. daskrnmf reads those (and NumPy, Dask and Zarr arrays); "
                     "save the data with numpy.save, or write it to Zarr.")


# ---------------------------------------------------------------- readers
class FileRows:
    """A 2-D array in a file as :func:`dask.array.from_array` sees it: ``shape``,
    ``dtype`` (the one computed in, :func:`daskrnmf._reader.native_dtype`), ``ndim``;
    :meth:`read` opens the file and reads a selection.  Pickled into the graph as its
    path and layout only."""

    kind = "file"

    def __init__(self, path, shape, file_dtype):
        self.path = os.path.abspath(os.fspath(path))
        self.shape = tuple(int(s) for s in shape)
        self.ndim = len(self.shape)
        self.file_dtype = np.dtype(file_dtype)
        numeric = self.file_dtype.kind in "iuf" and not self.file_dtype.fields
        self.dtype = native_dtype(self.file_dtype) if numeric else self.file_dtype
        try:
            st = os.stat(self.path)
            self._stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            self._stamp = None

    def __getitem__(self, index):
        return read_rows(self, index)

    def __dask_tokenize__(self):
        # a file changed in place gets new block names (no stale cached blocks)
        return (NAME_PREFIX, self.kind, self.path, self._stamp, self._layout())

    def _layout(self):
        return (self.shape, self.file_dtype.str)

    def describe(self):
        return self.path

    def read(self, index, out=None):  # pragma: no cover - subclasses
        raise NotImplementedError


class MappedRows(FileRows):
    """An array stored raw in a file (a ``.npy`` file after its header, a memmap's file):
    ``offset`` bytes into it, with byte ``strides``; each read maps the file read-only."""

    kind = "mapped"

    def __init__(self, path, offset, shape, strides, file_dtype, what="file"):
        super().__init__(path, shape, file_dtype)
        self.offset = int(offset)
        self.strides = tuple(int(s) for s in strides)
        self.what = what

    def _layout(self):
        return super()._layout() + (self.offset, self.strides)

    def describe(self):
        return f"the {self.what} {self.path}"

    def read(self, index, out=None):
        raw = np.memmap(self.path, dtype=np.uint8, mode="r")
        view = np.ndarray(self.shape, dtype=self.file_dtype, buffer=raw, offset=self.offset,
                          strides=self.strides)
        if out is None:     # a copy: no block keeps the file mapped
            return np.array(view[index], dtype=self.dtype)
        np.copyto(out, view[index], casting="unsafe")
        return out


class HDF5Rows(FileRows):
    """A dataset of an HDF5 (or NetCDF-4) file; each read opens the file read-only."""

    kind = "hdf5"

    def __init__(self, path, name, shape, file_dtype, chunk_rows=None):
        super().__init__(path, shape, file_dtype)
        self.name = name
        self.chunk_rows = chunk_rows

    def _layout(self):
        return super()._layout() + (self.name,)

    def describe(self):
        return f"the dataset {self.name!r} of the HDF5 file {self.path}"

    def read(self, index, out=None):
        h5py = import_h5py(self.path)
        with h5py.File(self.path, "r") as f:
            ds = f[self.name]
            if out is None:
                return np.asarray(ds[index], dtype=self.dtype)
            ds.read_direct(out, source_sel=index)      # HDF5 converts the dtype
        return out


def read_rows(src, index, asarray=True, lock=None):
    """``src[index]`` for a :class:`FileRows` (the getter of :func:`as_dask`): a run of
    whole rows into a pool buffer, anything else as a new array; a file that cannot be
    read is a ValueError naming it and the rows (OSError and MemoryError as they are,
    with the file named: a worker that cannot see the file says so)."""
    rows = _rows_of(index, src.shape)
    try:
        if rows is None:
            return src.read(index)
        start, stop = rows
        d = src.shape[1]
        out = (_POOL.take((stop - start) * d * src.dtype.itemsize).view(src.dtype)
               .reshape(stop - start, d))
        return src.read((slice(start, stop), slice(0, d)), out)
    except (MemoryError, ImportError):
        raise
    except FileNotFoundError:
        raise FileNotFoundError(f"{src.describe()} cannot be found here: the workers read it "
                                "at the same path as the client (a shared file system on a "
                                "cluster), and it must not be moved while it is read.") from None
    except OSError as exc:       # permissions, a directory, a file lock: not a corrupt file
        raise OSError(exc.errno, f"Cannot read {src.describe()}: {_short(exc)}") from None
    except Exception as exc:
        where = (f"rows {rows[0]}..{rows[1] - 1}" if rows else f"the selection {index}")
        raise ValueError(f"Cannot read {where} of {src.describe()}: {type(exc).__name__}: "
                         f"{_short(exc)}. Was the file changed or truncated while it was "
                         "read?") from None


def _short(exc):
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."


# ---------------------------------------------------------------- .npy
def npy_rows(path):
    """The reader of a ``.npy`` file, from its header only (no value is read)."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as fh:
            version = fmt.read_magic(fh)
            # version 3.0 differs from 2.0 only in allowing utf-8 field names
            read = fmt.read_array_header_1_0 if version == (1, 0) else \
                fmt.read_array_header_2_0
            shape, fortran, dtype = read(fh)
            offset = fh.tell()
    except (OSError, ValueError) as exc:
        raise ValueError(f"The .npy file {path} has an unreadable header: {_short(exc)}.") \
            from None
    if dtype.hasobject:
        raise TypeError(f"The .npy file {path} holds Python objects (dtype {dtype}); daskrnmf "
                        "reads real numbers only. Save it as numbers, e.g. "
                        "numpy.save(path, X.astype('float64')).")
    strides = _contiguous_strides(shape, dtype.itemsize, fortran)
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = os.path.getsize(path)
    if size < need:
        raise ValueError(f"The .npy file {path} is truncated: its header says {shape} {dtype} "
                         f"({need} bytes with the header), the file has {size} bytes.")
    return MappedRows(path, offset, shape, strides, dtype, what=".npy file")


def _contiguous_strides(shape, itemsize, fortran):
    strides, step = [], itemsize
    for n in (shape if fortran else reversed(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(strides if fortran else reversed(strides))


# ---------------------------------------------------------------- np.memmap
def is_file_memmap(X) -> bool:
    """A ``np.memmap`` whose values are those of its file (not copy-on-write) and whose
    file has a name: the workers can read it themselves."""
    return (isinstance(X, np.memmap) and getattr(X, "filename", None) is not None
            and getattr(X, "mode", "c") != "c" and _mapping(X) is not None)


def _mapping(X):
    """The ``mmap.mmap`` under the memmap ``X`` (a view's too), or None."""
    base = X
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base


def memmap_rows(X):
    """The reader of a ``np.memmap`` (also a slice or transposition of one): its file's
    name, and the byte offset and strides of its first element in the file."""
    if X.mode in ("r+", "w+"):
        X.flush()   # values written through it reach the file, so other nodes read them too
    mapped = _mapping(X)
    start = X.offset - X.offset % mmap.ALLOCATIONGRANULARITY    # where numpy mapped from
    # the mmap's own address: a zero-copy view of it (nothing is read)
    base_address = np.frombuffer(mapped, dtype=np.uint8).__array_interface__["data"][0]
    offset = start + X.__array_interface__["data"][0] - base_address
    return MappedRows(X.filename, offset, X.shape, X.strides, X.dtype, what="memmap file")


# ---------------------------------------------------------------- HDF5
def import_h5py(path):
    try:
        import h5py
    except ImportError:
        raise ImportError(f"{path} is an HDF5 file: reading it needs h5py, which is not "
                          f"installed ({H5PY_HINT}).") from None
    return h5py


def is_h5py_dataset(X) -> bool:
    return (type(X).__module__ or "").startswith("h5py.") and type(X).__name__ == "Dataset"


def h5py_dataset_rows(ds):
    """The reader of an open ``h5py.Dataset``: its file's name and its own."""
    f = ds.file
    if f.mode != "r":
        raise ValueError(f"The HDF5 file {f.filename} is open for writing (mode {f.mode!r}) "
                         "in this process; the workers cannot read it while it is (HDF5 "
                         "locks it). Close it and open it with h5py.File(path, 'r'), or pass "
                         f"the path '{f.filename}/{ds.name.lstrip('/')}'.")
    return _dataset_rows(f.filename, ds)


def _dataset_rows(path, ds):
    chunks = ds.chunks
    return HDF5Rows(path, ds.name, ds.shape, ds.dtype,
                    chunk_rows=int(chunks[0]) if chunks and len(chunks) else None)


def hdf5_rows(path, name):
    """The reader of the dataset ``name`` of the HDF5 file ``path``; a clear error (the
    datasets the file holds) when ``name`` is missing or no dataset."""
    h5py = import_h5py(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        hint = (" On a file system without locks, set HDF5_USE_FILE_LOCKING=FALSE."
                if "lock" in str(exc).lower() else "")
        raise ValueError(f"The HDF5 file {path} cannot be opened: {_short(exc)}.{hint}") \
            from None
    with f:
        # the file's datasets are listed (a walk of all its metadata) only for an error
        if not name:
            raise ValueError(f"{path} is an HDF5 file; name the dataset to read: "
                             f"'{path}/NAME' or component='NAME'. Its datasets: "
                             f"{_listing(_datasets(f, h5py))}.")
        node = f.get(name)
        if node is None:
            raise ValueError(f"No dataset {name!r} in the HDF5 file {path}; its datasets: "
                             f"{_listing(_datasets(f, h5py))}.")
        if not isinstance(node, h5py.Dataset):
            raise ValueError(f"{name!r} in the HDF5 file {path} is a group, not a dataset; "
                             f"the file's datasets: {_listing(_datasets(f, h5py))}.")
        return _dataset_rows(path, node)


def _datasets(f, h5py):
    found = []

    def visit(name, node):
        if isinstance(node, h5py.Dataset):
            found.append((name, node.shape, node.dtype))

    f.visititems(visit)
    return found


def _listing(found, limit=20):
    if not found:
        return "none"
    items = [f"{name} {tuple(shape)} {dtype}" for name, shape, dtype in found[:limit]]
    more = f", ... ({len(found) - limit} more)" if len(found) > limit else ""
    return "[" + ", ".join(items) + more + "]"


# ---------------------------------------------------------------- as Dask
def rows_of(X):
    """The reader of an in-memory handle of a file (a memmap, an h5py Dataset), or None."""
    if is_file_memmap(X):
        return memmap_rows(X)
    if is_h5py_dataset(X):
        return h5py_dataset_rows(X)
    return None


def as_dask(src, rows):
    """``src`` (a :class:`FileRows`) as a Dask array of ``rows``-row blocks, each read by
    a task of its own (:func:`read_rows`); the graph holds ``src``, never its values."""
    return row_source_as_dask(src, rows, read_rows, NAME_PREFIX)
