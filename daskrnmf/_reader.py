"""Rows of a Zarr array read on the workers into reused buffers.

Why
---
distributed starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (memory freed goes
back to the operating system, so the memory monitor sees what a worker really holds).
glibc then serves every allocation above 128 KiB with a fresh ``mmap`` whose pages fault
in one at a time when first written.  Reading a chunk through zarr allocates its
compressed bytes and its decoded array anew every time: on the 2-core VM of the
benchmarks a 12.8 MB float32 chunk took 45 ms in a worker against 20 ms in a plain
process, most of the difference page faults (6,200 a chunk, at 3-7 us each).  Every pass
over X reads every chunk, so that was most of the cost of a pass.

How
---
For an array on a local (or shared POSIX) file system whose chunks hold whole rows and
whose codecs are plain bytes plus at most one compressor (zarr v3: the bytes codec, then
zstd, blosc or gzip; zarr v2: no filters, any numcodecs compressor) — what
``zarr.create_array`` writes by default — a block's stored chunks are read with
``readinto`` into a per-thread buffer and decompressed straight into the block's rows.
The block's memory comes from a per-process :class:`BufferPool`: a buffer is handed out
again only once nothing refers to it any more (its reference count is back to the
pool's own), so a block kept by a task, a view of it or a transfer in flight keeps its
buffer; nothing is ever overwritten while in use.  Every other array (an object store,
sharding, filters, checksums, column chunks, big-endian data) and every selection that
is not a run of whole rows is read by zarr itself.  The values are zarr's, bit for bit
(tested against it for each layout), in the dtype of :func:`native_dtype`: big-endian
data in the machine's byte order, float16 as float64 (the compiled kernels take neither;
NumPy input gets the same from scikit-learn's ``validate_data``).

A chunk that cannot be read (corrupt or truncated bytes: a codec's error, a checksum
that does not match, a file of the wrong size) is a ValueError naming the array and
the chunk (:class:`ChunkError`), raised where the chunk is read — on a worker too, from
where the client re-raises it as it is.

:func:`as_dask` builds the Dask array the estimators read: ``da.from_array`` with
:func:`read_rows` as its getter.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ._blocks import active_client
from .kernels.blocks import available_cpus, release_thread_scratch

# Bytes of a block of Zarr input: several blocks per worker thread on data of a few
# hundred MB, so that a pass is balanced over the workers (1M x 64 float32 on 2 workers:
# blocks of 128 MiB, two to a pass, made the pass time vary 0.35-1.1 s as both went to
# one worker or not; 32 MiB blocks, ten to a pass, ran every pass in 0.4-0.5 s).
BLOCK_BYTES = 32 * 2**20

#: Buffers a process keeps for reuse, per thread that reads: a worker thread holds two
#: blocks at once in a pass, the one its task works on and the next one read (both
#: within the blocks :data:`daskrnmf._blocks.BLOCK_COPIES` allows a thread); blocks
#: beyond them (ONMFO's read-ahead) take arrays of their own, as they did before.
POOL_BUFFERS_PER_THREAD = 2
#: ... and at most this many bytes in all: what an idle process keeps after a read that
#: no fit follows (``predict``/``transform`` on Zarr input, :func:`open_dask_array`)
POOL_MAX_BYTES = 256 * 2**20
# a free-threaded Python's reference count is two counters read one after the other: a
# read racing another thread can come out one short, which is how a free buffer looks,
# so there the pool hands out new arrays only
_POOLING = getattr(sys, "_is_gil_enabled", lambda: True)()


def _reading_threads():
    """Threads of this process that run tasks: a worker's, else the cores'."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):     # not in a worker's task
        return available_cpus()


class BufferPool:
    """Byte buffers of one process, each handed out again only when nothing else refers
    to it.

    :meth:`take` returns a view of a pool buffer (or of a new array when every pool
    buffer is in use and the pool is full).  A view, and every view of a view, holds a
    reference to the buffer that owns the memory, so the buffer's reference count says
    whether anything still uses it.

    Parameters
    ----------
    max_buffers : int, optional
        Buffers kept for reuse; by default :data:`POOL_BUFFERS_PER_THREAD` per thread
        that runs tasks in this process (counted at the first :meth:`take`).
    max_bytes : int, default=POOL_MAX_BYTES
        Bytes kept for reuse; a request beyond either bound gets an array of its own.
    """

    def __init__(self, max_buffers=None, max_bytes=POOL_MAX_BYTES):
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._buffers = []      # [buffer, its reference count when free]

    def take(self, nbytes):
        """A writable uint8 array of ``nbytes`` bytes that nothing else uses."""
        nbytes = max(int(nbytes), 1)
        if not _POOLING:
            return np.empty(nbytes, dtype=np.uint8)
        if self.max_buffers is None:
            self.max_buffers = POOL_BUFFERS_PER_THREAD * _reading_threads()
        with self._lock:
            free = [e for e in self._buffers if _unused(e)]
            fits = [e for e in free if nbytes <= e[0].nbytes <= 2 * nbytes]
            if fits:        # the smallest free buffer large enough, at most twice too large
                return min(fits, key=lambda e: e[0].nbytes)[0][:nbytes]
            # room for a new buffer: free ones of the wrong size make way (largest first)
            for e in sorted(free, key=lambda e: -e[0].nbytes):
                if (len(self._buffers) < self.max_buffers
                        and self.nbytes + nbytes <= self.max_bytes):
                    break
                self._buffers = [b for b in self._buffers if b is not e]
            if (len(self._buffers) >= self.max_buffers
                    or self.nbytes + nbytes > self.max_bytes):
                return np.empty(nbytes, dtype=np.uint8)     # an array of its own
            entry = [np.empty(nbytes, dtype=np.uint8), 0]
            entry[1] = sys.getrefcount(entry[0])    # its count while only the pool has it
            self._buffers.append(entry)
            return entry[0][:nbytes]

    @property
    def nbytes(self):
        """Bytes of the buffers the pool holds (free or in use)."""
        return sum(e[0].nbytes for e in self._buffers)

    def clear(self):
        """Forget every buffer (those still in use live on with their users)."""
        with self._lock:
            self._buffers.clear()

    def __len__(self):
        return len(self._buffers)


def _unused(entry):
    """Whether nothing but the pool refers to a pool entry's buffer (counted as when the
    entry was made: the entry's list and the call's argument)."""
    return sys.getrefcount(entry[0]) == entry[1]


_POOL = BufferPool()
# per thread: a chunk's compressed bytes, and a chunk decoded apart (one only partly in a
# block); keyed by thread so that release() reaches every thread's
_SCRATCH = {}


def release():
    """Drop this process's read buffers (the pool's free ones and every thread's scratch
    buffers, the solves' among them: :func:`daskrnmf.kernels.blocks.thread_scratch`);
    called on the workers at the end of a fit."""
    _POOL.clear()
    _SCRATCH.clear()
    release_thread_scratch()


def _scratch(name, nbytes):
    key = (threading.get_ident(), name)
    buf = _SCRATCH.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = _SCRATCH[key] = np.empty(max(int(nbytes), 1), dtype=np.uint8)
    return buf[:nbytes]


@dataclass(frozen=True)
class _Plan:
    """Where and how a fast-read array's chunks are stored."""

    directory: str          # the array's directory (absolute)
    chunk_rows: int
    chunk_cols: int
    codec: object           # None (raw bytes) or an object with decode(buf, out=...)
    fill_value: float


def _decoder(z):
    """The chunks' single decoder (None: raw little-endian bytes), or False when the
    array's codecs are not ones :func:`read_rows` reads itself."""
    meta = z.metadata
    if meta.zarr_format == 2:
        if meta.filters or meta.order != "C":
            return False
        return meta.compressor          # a numcodecs codec, or None
    from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

    codecs = tuple(meta.codecs)
    if not codecs or type(codecs[0]) is not BytesCodec:
        return False                    # sharding, transpose, ... first
    endian = codecs[0].endian
    if endian is not None and getattr(endian, "value", endian) != sys.byteorder:
        return False
    rest = codecs[1:]
    if not rest:
        return None
    if len(rest) > 1:
        return False
    import numcodecs

    codec = rest[0]
    if type(codec) is ZstdCodec:
        return numcodecs.Zstd()
    if type(codec) is BloscCodec:
        return numcodecs.Blosc()
    if type(codec) is GzipCodec:
        return numcodecs.GZip()
    return False                        # checksums and other codecs: zarr reads them


def plan_for(z):
    """A :class:`_Plan` when :func:`read_rows` can read ``z`` itself, else None."""
    from zarr.storage import LocalStore

    try:
        if not isinstance(z.store, LocalStore) or z.ndim != 2:
            return None
        dtype = np.dtype(z.dtype)
        if dtype.kind not in "iuf" or dtype.byteorder == ">" or (
                dtype.byteorder == "=" and sys.byteorder != "little"):
            return None
        if sys.byteorder != "little" and dtype.itemsize > 1:
            return None
        if z.metadata.zarr_format == 3 and type(z.metadata.chunk_grid).__name__ != \
                "RegularChunkGrid":
            return None
        chunk_rows, chunk_cols = (int(c) for c in z.chunks)
        if chunk_cols < z.shape[1]:
            return None                 # a row's features span several chunks
        codec = _decoder(z)
        if codec is False:
            return None
        z.metadata.encode_chunk_key((0, 0))     # (the key of a chunk, asked per read)
        directory = os.path.abspath(os.path.join(str(z.store.root), z.path))
        fill = z.metadata.fill_value
        fill = 0 if fill is None else fill
        return _Plan(directory, chunk_rows, chunk_cols, codec, np.asarray(fill, dtype).item())
    except (AttributeError, TypeError, ValueError):   # another zarr's metadata: zarr reads
        return None


def native_dtype(dtype):
    """The dtype input values are computed in: the machine's byte order (the compiled
    kernels take no big-endian array), and float16 (or any float but float32 and
    float64) as float64, what scikit-learn makes of NumPy input of those dtypes."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize not in (4, 8):
        return np.dtype(np.float64)
    return dtype.newbyteorder("=")


class ChunkError(ValueError):
    """A stored chunk of an input array that cannot be read (a ValueError)."""


def where_is(z):
    """The location of the Zarr array ``z`` for messages: its directory, or its store's
    URL and path."""
    root = getattr(z.store, "root", None)
    if root is not None:
        return os.path.join(str(root), z.path) if z.path else str(root)
    base = getattr(z.store, "path", None) or str(z.store)
    return "/".join(p for p in (str(base).rstrip("/"), z.path) if p)


class ZarrRows:
    """A Zarr array as :func:`dask.array.from_array` sees it, read by :func:`read_rows`.

    Parameters
    ----------
    z : zarr.Array
        Two-dimensional.
    """

    def __init__(self, z):
        self.array = z
        self.shape = tuple(z.shape)
        self.dtype = native_dtype(z.dtype)
        # values converted on the way (float16, big-endian) are read by zarr
        self.plan = plan_for(z) if self.dtype == np.dtype(z.dtype) else None
        self.ndim = 2

    def __getitem__(self, index):
        return read_rows(self, index)

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("daskrnmf-zarr-rows", tokenize(self.array), self.plan)


def _rows_of(index, shape):
    """``(start, stop)`` when ``index`` selects whole rows ``start:stop``, else None."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) == 1:
        index = index + (slice(None),)
    if len(index) != 2 or not all(isinstance(i, slice) for i in index):
        return None
    rows, cols = index
    if cols.indices(shape[1]) != (0, shape[1], 1):
        return None
    start, stop, step = rows.indices(shape[0])
    if step != 1 or stop <= start:
        return None
    return start, stop


def read_rows(src, index, asarray=True, lock=None):
    """``src[index]`` for :class:`ZarrRows` ``src`` (the getter of :func:`as_dask`).

    A run of whole rows of an array with a plan is read here: each stored chunk into a
    per-thread buffer and decompressed into the block (a chunk only partly in the block
    is decompressed apart, then its rows copied), the block's memory taken from the
    pool; a missing chunk reads as the fill value, as in zarr.  Everything else is
    zarr's ``src.array[index]``, in ``src.dtype``.  A chunk that cannot be read is a
    :class:`ChunkError` naming it.
    """
    rows = (None if src.plan is None or not src.shape[1]
            else _rows_of(index, src.shape))
    if rows is None:
        try:
            return np.asarray(src.array[index], dtype=src.dtype)
        except (MemoryError, OSError, ImportError):   # not the chunk's bytes: as they are
            raise
        except Exception as exc:
            raise _chunk_error(src.array, index, exc) from None
    plan = src.plan
    start, stop = rows
    d = src.shape[1]
    itemsize = src.dtype.itemsize
    out = _POOL.take((stop - start) * d * itemsize).view(src.dtype).reshape(stop - start, d)
    cr, cc = plan.chunk_rows, plan.chunk_cols
    nbytes = cr * cc * itemsize
    # a thread keeps its scratch buffers only when a stored chunk is not larger than the
    # block: blocks split stored chunks when the workers' memory is tight, and there the
    # decoded chunk and its compressed bytes are temporaries, as zarr's own
    keep = nbytes <= out.nbytes
    for c in range(start // cr, (stop - 1) // cr + 1):
        first = c * cr
        lo, hi = max(start, first), min(stop, first + cr)
        # a chunk wholly inside the block, and as wide as X, is decoded in place
        direct = lo == first and hi == first + cr and cc == d
        dest = (out[lo - start:hi - start].reshape(-1).view(np.uint8) if direct
                else _scratch("chunk", nbytes) if keep else np.empty(nbytes, dtype=np.uint8))
        key = src.array.metadata.encode_chunk_key((c, 0))
        try:
            stored = _read_chunk(os.path.join(plan.directory, key), plan.codec, dest, keep)
        except (MemoryError, OSError, ImportError):
            raise
        except Exception as exc:    # a codec's error, a file of the wrong size
            raise _explained(src.array, key, first, min(first + cr, src.shape[0]),
                             exc) from None
        if not stored:
            out[lo - start:hi - start] = plan.fill_value
        elif not direct:
            chunk = dest.view(src.dtype).reshape(cr, cc)
            out[lo - start:hi - start] = chunk[lo - first:hi - first, :d]
    return out


def _read_chunk(path, codec, dest, keep=True):
    """Decode the chunk stored at ``path`` into the uint8 array ``dest`` (its exact
    decoded size); False when the chunk is not stored (zarr's fill value).  ``keep``:
    the compressed bytes go to this thread's kept scratch buffer (else a temporary)."""
    try:
        fh = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return False
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if codec is None:
            if size != dest.nbytes:
                raise ValueError(f"Zarr chunk {path} holds {size} bytes, {dest.nbytes} "
                                 "expected.")
            _read_into(fh, dest, path)
            return True
        raw = (_scratch("compressed", size) if keep
               else np.empty(max(size, 1), dtype=np.uint8)[:size])
        _read_into(fh, raw, path)
    res = codec.decode(raw, out=dest)
    res = (np.frombuffer(res, dtype=np.uint8) if isinstance(res, (bytes, bytearray))
           else np.asarray(res).reshape(-1).view(np.uint8))
    if res.nbytes != dest.nbytes:
        raise ValueError(f"Zarr chunk {path} decoded to {res.nbytes} bytes, {dest.nbytes} "
                         "expected.")
    if not np.shares_memory(res, dest):     # a codec that decodes into a copy of its own
        dest[:] = res
    return True


def _explained(z, key, lo, hi, exc):
    detail = str(exc).rstrip(".")
    return ChunkError(f"Cannot read the chunk {key} of the Zarr array {where_is(z)} (rows "
                      f"{lo}..{hi - 1}): {type(exc).__name__}: {detail}. The chunk is corrupt "
                      "or truncated: restore it, or write the array again.")


def _chunk_error(z, index, exc):
    """The :class:`ChunkError` for ``exc``, raised by zarr reading ``z[index]``: each
    stored chunk the selection touches is read again on its own to find the one at
    fault (the error's cost only)."""
    import itertools

    sel = index if isinstance(index, tuple) else (index,)
    sel = tuple(sel) + (slice(None),) * (z.ndim - len(sel))
    grid = getattr(z, "shards", None) or z.chunks     # what is stored: a shard, or a chunk
    spans = []
    for s, n, c in zip(sel, z.shape, grid):
        start, stop, _ = s.indices(n) if isinstance(s, slice) else (0, n, 1)
        spans.append(range(start // c, max(start, stop - 1) // c + 1))
    for coords in itertools.product(*spans):
        box = tuple(slice(i * c, min((i + 1) * c, n))
                    for i, c, n in zip(coords, grid, z.shape))
        try:
            z[box]
        except Exception as found:
            return _explained(z, z.metadata.encode_chunk_key(coords), box[0].start,
                              box[0].stop, found)
    return ChunkError(f"Cannot read {index} of the Zarr array {where_is(z)}: "
                      f"{type(exc).__name__}: {exc}.")


def _read_into(fh, buf, path):
    """Fill ``buf`` from the open file ``fh`` (one ``read`` returns at most ~2 GiB, and a
    network file system may return less than asked)."""
    view = memoryview(buf).cast("B")
    got = 0
    while got < buf.nbytes:
        n = fh.readinto(view[got:])
        if not n:
            raise ValueError(f"Zarr chunk {path} ended after {got} bytes, {buf.nbytes} "
                             "expected (it changed while it was read?).")
        got += n


NAME_PREFIX = "daskrnmf-zarr-"


FILE_PREFIX = "daskrnmf-file-"       # the blocks of a user's file (daskrnmf._files)


def as_dask(z, rows):
    """``z`` as a Dask array of ``rows``-row blocks (whole rows), read by :func:`read_rows`."""
    return row_source_as_dask(ZarrRows(z), rows, read_rows, NAME_PREFIX)


#: Most bytes of a pickled row source held in each block's task (:func:`row_source_as_dask`)
INLINE_SOURCE_BYTES = 2**16


class _PickleSize:
    """A file that counts the bytes pickled into it and stops the pickling (raises)
    once they are more than :data:`INLINE_SOURCE_BYTES`: nothing is kept."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        self.n += memoryview(b).nbytes
        if self.n > INLINE_SOURCE_BYTES:
            raise OverflowError("too big to inline")
        return len(b)


def _inline(src):
    """Whether ``src`` goes into each block's task: a source that pickles small (a
    store's location and metadata; not an in-memory store's values).  Its pickle is
    counted, not kept, and stopped at :data:`INLINE_SOURCE_BYTES`: an in-memory store
    was pickled whole, a copy of its values on the client, only to be found too big."""
    try:
        pickle.Pickler(_PickleSize(), protocol=5).dump(src)
    except Exception:   # too big, or not picklable: one task holds it  # noqa: BLE001
        return False
    return True


def row_source_as_dask(src, rows, getter, prefix):
    """A row source (``shape``, ``dtype`` and a ``getter(src, index)``) as a Dask array of
    ``rows``-row blocks, each read by a task of its own: the graph holds ``src``, never
    its values; ``prefix`` names the blocks so that :func:`release_after` knows them.

    A source that pickles small is held in each block's task (``inline_array``), not in
    one task of its own that every read depends on: a graph of some blocks (a row group
    of ONMFO's default batches, a pass's blocks) computed that task again wherever the
    scheduler put it, a worker busy with a solve as often as not, and its reads on the
    other worker waited for that solve (0.3-0.4 s, several times a pass)."""
    import dask.array as da
    from dask.base import tokenize

    return da.from_array(src, chunks=(rows, src.shape[1]), name=prefix + tokenize(src, rows),
                         getitem=getter, asarray=False, fancy=False,
                         inline_array=_inline(src), meta=np.empty((0, 0), dtype=src.dtype))


def release_after(X):
    """After a fit that read ``X`` (built by :func:`as_dask`, or by
    :func:`daskrnmf._files.as_dask`, whose blocks use the same pool): :func:`release` here
    and on every worker, so that idle workers do not keep a fit's blocks.  A worker that
    cannot be reached keeps its buffers (at most :data:`POOL_BUFFERS` blocks)."""
    if not str(getattr(X, "name", "")).startswith((NAME_PREFIX, FILE_PREFIX)):
        return
    release()
    client = active_client()
    if client is not None:
        try:
            client.run(release, on_error="ignore")
        except (OSError, TimeoutError):     # the cluster is gone (it took the buffers)
            pass
