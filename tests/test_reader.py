"""daskrnmf's Zarr reader (:mod:`daskrnmf._reader`): zarr's values bit for bit, for every
layout it reads itself and every one it leaves to zarr, and buffers reused only when
nothing refers to them."""

import os

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

from daskrnmf import _reader
from daskrnmf._reader import BufferPool, ZarrRows, as_dask, plan_for, read_rows

X = (np.random.default_rng(0).random((1003, 7)) * 100)

# layouts read by daskrnmf: (create_array keywords)
OWN = {
    "v3-zstd": dict(zarr_format=3),
    "v3-raw": dict(zarr_format=3, compressors=None),
    "v3-blosc": dict(zarr_format=3, compressors=BloscCodec()),
    "v3-gzip": dict(zarr_format=3, compressors=GzipCodec()),
    "v2-zstd": dict(zarr_format=2),
    "v2-raw": dict(zarr_format=2, compressors=None),
    "v2-lz4": dict(zarr_format=2, compressors=numcodecs.LZ4()),
}
# layouts left to zarr: (create_array keywords, chunks)
ZARRS = {
    "checksum": (dict(zarr_format=3, compressors=[ZstdCodec(), Crc32cCodec()]), (100, 7)),
    "sharded": (dict(zarr_format=3, shards=(200, 7)), (100, 7)),
    "column chunks": (dict(zarr_format=3), (100, 4)),
    "v2 filters": (dict(zarr_format=2, filters=[numcodecs.Delta("<f8")]), (100, 7)),
}


def _store(tmp_path, kw, dtype=np.float64, chunks=(100, 7), drop=(2,)):
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=X.shape, chunks=chunks, dtype=dtype, fill_value=3, **kw)
    z[:] = X.astype(dtype)
    for c in drop:      # chunks not stored read as the fill value
        os.remove(os.path.join(path, z.metadata.encode_chunk_key((c, 0))))
    return zarr.open_array(path, mode="r")


@pytest.mark.parametrize("rows", [100, 250, 37, 2000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
@pytest.mark.parametrize("layout", list(OWN))
def test_own_reads_equal_zarrs(tmp_path, layout, dtype, rows):
    z = _store(tmp_path, OWN[layout], dtype)
    assert plan_for(z) is not None          # the test reads daskrnmf's path
    got = as_dask(z, rows).compute(scheduler="sync")
    assert got.dtype == z.dtype
    np.testing.assert_array_equal(got, z[:])
    assert np.all(got[200:300] == 3)        # the chunk not stored


@pytest.mark.parametrize("layout", list(ZARRS))
def test_layouts_it_does_not_read_are_read_by_zarr(tmp_path, layout):
    kw, chunks = ZARRS[layout]
    z = _store(tmp_path, kw, chunks=chunks, drop=())
    assert plan_for(z) is None
    np.testing.assert_array_equal(as_dask(z, 250).compute(scheduler="sync"), z[:])


def test_big_endian_and_in_memory_arrays_are_read_by_zarr(tmp_path):
    z = zarr.create_array(str(tmp_path / "be.zarr"), shape=X.shape, chunks=(100, 7),
                          dtype=">f8", zarr_format=2)
    z[:] = X
    z = zarr.open_array(str(tmp_path / "be.zarr"), mode="r")
    assert plan_for(z) is None
    np.testing.assert_array_equal(as_dask(z, 300).compute(scheduler="sync"), X)
    m = zarr.create_array(zarr.storage.MemoryStore(), shape=X.shape, chunks=(100, 7),
                          dtype="f8")
    m[:] = X
    assert plan_for(m) is None
    np.testing.assert_array_equal(as_dask(m, 300).compute(scheduler="sync"), X)


def test_selections_other_than_whole_rows_are_zarrs(tmp_path):
    z = _store(tmp_path, OWN["v3-zstd"])
    src = ZarrRows(z)
    for index in [(slice(5, 50), slice(1, 4)), (slice(0, 90, 2), slice(None)),
                  (slice(10, 20),), (slice(990, 1003), slice(None))]:
        np.testing.assert_array_equal(read_rows(src, index), z[index])


def test_a_corrupt_chunk_is_an_error(tmp_path):
    z = _store(tmp_path, OWN["v3-raw"], drop=())
    path = os.path.join(str(tmp_path / "x.zarr"), z.metadata.encode_chunk_key((1, 0)))
    with open(path, "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(ValueError, match="holds 100 bytes"):
        read_rows(ZarrRows(z), (slice(100, 200), slice(None)))


def _address(a):
    return a.__array_interface__["data"][0]


def _pooled(pool, a):
    """Whether ``a`` is a view of one of the pool's buffers."""
    return any(a.base is entry[0] for entry in pool._buffers)


def test_pool_reuses_a_buffer_only_when_nothing_refers_to_it():
    pool = BufferPool(2)
    a = pool.take(1000)
    first = _address(a)
    view = a[96:200].view(np.float64)        # a view of a view keeps the buffer
    del a
    b = pool.take(1000)
    assert _pooled(pool, b) and _address(b) != first
    del view
    c = pool.take(900)                      # free again: reused
    assert _pooled(pool, c) and _address(c) == first and len(pool) == 2
    d = pool.take(4000)                      # c and b are in use, the pool is full
    assert not _pooled(pool, d) and len(pool) == 2
    del b
    e = pool.take(4000)                      # a free buffer of the wrong size is replaced
    assert _pooled(pool, e) and len(pool) == 2 and e.nbytes == 4000
    assert not np.shares_memory(e, c) and not np.shares_memory(e, d)
    pool.clear()
    assert len(pool) == 0 and c[0] == c[0]   # in use: lives on with its user


def test_a_block_still_held_keeps_its_values(tmp_path, monkeypatch):
    _reader.release()
    z = _store(tmp_path, OWN["v3-zstd"], drop=())
    src = ZarrRows(z)
    monkeypatch.setattr(_reader._POOL, "max_buffers", 4)
    held = read_rows(src, (slice(0, 200), slice(None)))
    others = []
    for start in range(200, 1000, 200):     # later reads take other buffers
        others.append(read_rows(src, (slice(start, start + 200), slice(None))))
        assert not np.shares_memory(others[-1], held)
    np.testing.assert_array_equal(held, z[:200])
    assert len(_reader._POOL) == 4
    last = others.pop(0)                    # (the fifth read had an array of its own)
    buffer = id(last.base)                  # (the pool keeps it alive: a stable id)
    del last
    again = read_rows(src, (slice(800, 1000), slice(None)))
    assert id(again.base) == buffer         # released: its buffer is read into again
    np.testing.assert_array_equal(again, z[800:1000])
    _reader.release()


def test_open_dask_array_is_what_the_estimators_read(tmp_path):
    from daskrnmf.io import open_dask_array

    z = _store(tmp_path, OWN["v2-zstd"], drop=())
    X = open_dask_array(str(tmp_path / "x.zarr"))
    assert X.name.startswith(_reader.NAME_PREFIX) and len(X.chunks[1]) == 1
    np.testing.assert_array_equal(X.compute(scheduler="sync"), z[:])


def _source_tasks(X):
    return [k for k in dict(X.__dask_graph__())
            if str(k[0] if isinstance(k, tuple) else k).startswith("original-")]


def test_a_store_s_location_is_in_each_read_task_an_in_memory_store_in_one(tmp_path,
                                                                           monkeypatch):
    # a graph of some of X's blocks (a row group, a pass) has no task of the source's
    # own to compute again wherever the scheduler puts it (a worker busy solving, which
    # the reads on the other worker then waited for); a source that does not pickle
    # small (an in-memory store's values) stays in one task
    from daskrnmf._stores import input_stores

    z = _store(tmp_path, OWN["v3-zstd"], drop=())
    X = as_dask(z, 250)
    assert not _source_tasks(X[300:800])
    np.testing.assert_array_equal(X[300:800].compute(scheduler="sync"), z[300:800])
    assert input_stores(X) == [(os.path.realpath(str(tmp_path / "x.zarr")), "input")]
    m = zarr.create_array(zarr.storage.MemoryStore(), shape=X.shape, chunks=(100, 7),
                          dtype="f8")
    m[:] = np.asarray(z[:])
    monkeypatch.setattr(_reader, "INLINE_SOURCE_BYTES", 1000)     # X's values pickle above
    M = as_dask(m, 250)
    assert len(_source_tasks(M[300:800])) == 1
    np.testing.assert_array_equal(M[300:800].compute(scheduler="sync"), z[300:800])


def test_buffers_are_released_after_a_fit_even_when_the_cluster_is_gone(tmp_path, monkeypatch):
    from daskrnmf import _blocks

    z = _store(tmp_path, OWN["v3-zstd"], drop=())
    X = as_dask(z, 300)
    X.compute(scheduler="sync")
    assert len(_reader._POOL) > 0

    class Gone:
        def run(self, fn, **kwargs):
            raise OSError("the scheduler is gone")

    monkeypatch.setattr(_blocks, "active_client", lambda: Gone())
    _reader.release_after(X)                # no error of its own over the fit's
    assert len(_reader._POOL) == 0 and len(_reader._SCRATCH) == 0


def test_short_reads_fill_the_buffer_and_a_short_file_is_an_error(tmp_path):
    data = bytes(range(256)) * 40

    class Trickle:                           # a network file system's short reads
        def __init__(self, payload):
            self.payload, self.at = payload, 0

        def readinto(self, view):
            n = min(7, len(view), len(self.payload) - self.at)
            view[:n] = self.payload[self.at:self.at + n]
            self.at += n
            return n

    buf = np.empty(len(data), dtype=np.uint8)
    _reader._read_into(Trickle(data), buf, "x")
    assert buf.tobytes() == data
    with pytest.raises(ValueError, match="ended after 100 bytes"):
        _reader._read_into(Trickle(data[:100]), buf, "x")


def test_a_raw_chunk_of_the_wrong_size_is_an_error_as_in_zarr(tmp_path):
    z = _store(tmp_path, OWN["v3-raw"], drop=())
    path = os.path.join(str(tmp_path / "x.zarr"), z.metadata.encode_chunk_key((1, 0)))
    with open(path, "ab") as fh:
        fh.write(b"\0" * 64)                 # trailing bytes: zarr refuses the chunk too
    with pytest.raises(ValueError, match="holds 5664 bytes, 5600 expected"):
        read_rows(ZarrRows(z), (slice(100, 200), slice(None)))


def test_blocks_smaller_than_a_stored_chunk_keep_no_scratch(tmp_path):
    _reader.release()
    z = _store(tmp_path, OWN["v3-zstd"], drop=())
    np.testing.assert_array_equal(as_dask(z, 40).compute(scheduler="sync"), z[:])
    assert len(_reader._SCRATCH) == 0       # the memory-tight case: temporaries only
    as_dask(z, 300).compute(scheduler="sync")
    assert len(_reader._SCRATCH) > 0


def test_pool_bounds_its_bytes_and_empty_rows_are_zarrs(tmp_path, monkeypatch):
    pool = BufferPool(10, max_bytes=1000)
    a = pool.take(600)
    b = pool.take(600)                       # over the byte bound: an array of its own
    assert _pooled(pool, a) and not _pooled(pool, b) and pool.nbytes == 600
    monkeypatch.setattr(_reader, "_POOLING", False)    # a free-threaded Python
    assert not _pooled(pool, pool.take(10)) and len(pool) == 1
    monkeypatch.undo()
    z = zarr.create_array(str(tmp_path / "e.zarr"), shape=(5, 0), chunks=(2, 1), dtype="f4")
    assert as_dask(z, 4).compute(scheduler="sync").shape == (5, 0)


# ---------------------------------------------------------------- issue 40: odd input
def _damage(path, z, chunk=(1, 0)):
    key = os.path.join(path, z.metadata.encode_chunk_key(chunk))
    with open(key, "r+b") as fh:
        fh.write(b"\xff" * 8)               # the compressor's header: undecodable
    return z.metadata.encode_chunk_key(chunk)


@pytest.mark.parametrize("layout", ["v3-zstd", "checksum"])
def test_a_corrupt_input_chunk_is_a_value_error_naming_array_and_chunk(tmp_path, layout):
    from daskrnmf import RFNMF

    kw, chunks = (OWN[layout], (100, 7)) if layout in OWN else ZARRS[layout]
    z = _store(tmp_path, kw, chunks=chunks, drop=())
    path = str(tmp_path / "x.zarr")
    key = _damage(path, z)
    with pytest.raises(ValueError, match=f"chunk {key} of the Zarr array {path} .*rows "
                                         "100..199") as err:
        RFNMF(n_clusters=2, max_iter=2).fit(path)
    assert "corrupt" in str(err.value)


@pytest.mark.parametrize("dtype, zarr_format", [("f2", 3), (">f8", 2), (">i4", 2)])
def test_float16_and_big_endian_zarr_input_fit_as_numpy_input_does(tmp_path, dtype,
                                                                    zarr_format):
    from daskrnmf import NMF

    path = str(tmp_path / "odd.zarr")
    data = X[:200, :5]
    z = zarr.create_array(path, shape=data.shape, chunks=(50, 5), dtype=dtype,
                          zarr_format=zarr_format)
    z[:] = data.astype(dtype)
    kw = dict(n_components=2, max_iter=3, random_state=0)
    got = NMF(**kw).fit(path)
    want = NMF(**kw).fit(data.astype(dtype))        # NumPy: scikit-learn's float64
    assert got.components_.dtype == want.components_.dtype == np.float64
    np.testing.assert_allclose(got.components_, want.components_, rtol=1e-10)


def test_an_in_memory_store_is_not_pickled_whole_to_learn_it_is_too_big():
    # whether a source goes into each read task is told by its pickle's size, counted
    # and stopped at INLINE_SOURCE_BYTES: an in-memory store's values were pickled whole
    # on the client (a copy of X) to find them too big
    import tracemalloc

    m = zarr.create_array(zarr.storage.MemoryStore(), shape=(2000, 500), chunks=(500, 500),
                          dtype="f8", compressors=None)
    m[:] = np.random.default_rng(0).random(m.shape)        # 8 MB, uncompressed
    src = ZarrRows(m)
    tracemalloc.start()
    try:
        assert not _reader._inline(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    small = zarr.create_array(zarr.storage.MemoryStore(), shape=(20, 5), dtype="f8")
    assert _reader._inline(ZarrRows(small))
