"""A user's own data out of core (issue 41, "The user's own data"): ``.npy`` files, HDF5
(and NetCDF-4) datasets, ``np.memmap`` and ``h5py.Dataset`` objects are read by the
workers in row blocks (the graph holds a reader, never the values); ``fit(path,
component=...)`` reads an array inside a Zarr group; ``daskrnmf convert`` writes any of
them to a Zarr array.  Tiny files in tmp_path; no cluster but the session's in-process
one (tests/conftest.py) for the convert tests."""

import os
import pickle
import sys

import dask.array as da
import numpy as np
import pytest
import zarr

from daskrnmf import RFNMF, cli
from daskrnmf.io import check_array, open_dask_array

h5py = pytest.importorskip("h5py")
# five iterations are enough to compare two fits
pytestmark = pytest.mark.filterwarnings("ignore:.*did not converge")


@pytest.fixture(scope="module")
def X():
    return np.abs(np.random.default_rng(0).normal(size=(600, 5))) + 0.1


@pytest.fixture(scope="module")
def files(tmp_path_factory, X):
    """The same X as a .npy file, a Fortran-ordered .npy file, an HDF5 file (a plain
    dataset, and a chunked, compressed big-endian float32 one in a group, as NetCDF-4
    variables often are) and a Zarr group."""
    d = tmp_path_factory.mktemp("user-data")
    np.save(d / "x.npy", X)
    np.save(d / "xf.npy", np.asfortranarray(X))
    with h5py.File(d / "x.h5", "w") as f:
        f["X"] = X
        f.create_dataset("grp/Y", data=X.astype(">f4"), chunks=(64, 5), compression="gzip")
    g = zarr.open_group(str(d / "s.zarr"), mode="w")
    g.create_array("X", shape=X.shape, dtype=X.dtype, chunks=(200, 5))[...] = X
    return d


def _lazy(data, **kw):
    return check_array(data, estimator_name="RFNMF", **kw)


def _graph_data_bytes(A):
    """The pickled size of A's graph, and the largest NumPy array in it: what the client
    would ship to the workers (the values themselves if it held them)."""
    graph = dict(A.__dask_graph__())
    arrays = []
    for value in graph.values():
        value = getattr(value, "value", value)
        if isinstance(value, np.ndarray):
            arrays.append(value.nbytes)
    return len(pickle.dumps(graph)), max(arrays, default=0)


# ---------------------------------------------------------------- read by the workers
@pytest.mark.parametrize("name", ["x.npy", "xf.npy", "x.h5/X", "x.h5/grp/Y"])
def test_file_paths_read_as_lazy_row_blocks(files, X, name):
    A = _lazy(str(files / name))
    assert isinstance(A, da.Array) and len(A.chunks[1]) == 1
    expected = X.astype(np.float32) if name.endswith("Y") else X
    np.testing.assert_array_equal(A.compute(), expected)
    pickled, largest = _graph_data_bytes(A)
    assert pickled < X.nbytes / 4 and largest == 0


def test_hdf5_pair_and_component_read_the_dataset(files, X):
    path = str(files / "x.h5")
    np.testing.assert_array_equal(_lazy((path, "X")).compute(), X)
    np.testing.assert_array_equal(open_dask_array(path, "X").compute(), X)
    a = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(path, component="X")
    b = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(f"{path}/X")
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


def test_npy_fit_equals_the_same_blocks_as_dask(files, X):
    a = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(str(files / "x.npy"))
    b = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(
        da.from_array(X, chunks=(X.shape[0], X.shape[1])))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)


@pytest.mark.parametrize("view", ["whole", "rows", "reversed", "columns", "strided"])
def test_memmap_read_by_the_workers_not_the_client(files, X, view):
    """A memmap (also a view of one) becomes a Dask array reading its file in each task;
    before, it went through NumPy in the client (the whole array)."""
    mm = np.load(files / "x.npy", mmap_mode="r")
    mm = {"whole": mm, "rows": mm[100:350], "reversed": mm[::-1], "columns": mm[:, 1:4],
          "strided": mm[::3]}[view]
    A = _lazy(mm)
    assert isinstance(A, da.Array)
    pickled, largest = _graph_data_bytes(A)
    assert pickled < X.nbytes / 4 and largest == 0
    # the reader travels to a worker process as its file's name and layout
    back = pickle.loads(pickle.dumps(A))
    np.testing.assert_array_equal(back.compute(), np.asarray(mm))


def test_h5py_dataset_read_by_the_workers(files, X):
    with h5py.File(files / "x.h5", "r") as f:
        A = _lazy(f["grp/Y"])
        pickled, largest = _graph_data_bytes(A)
        assert pickled < X.nbytes / 4 and largest == 0
    # the file is closed here: each task opens it
    np.testing.assert_array_equal(A.compute(), X.astype(np.float32))


def test_h5py_dataset_of_a_file_open_for_writing_is_refused(tmp_path):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["X"] = np.ones((4, 2))
        with pytest.raises(ValueError, match=r"open for writing .* h5py.File\(path, 'r'\)"):
            _lazy(f["X"])


def test_zarr_group_with_component_fits(files):
    """fit(path, component=...) was refused as 'a Zarr group, not an array'."""
    store = str(files / "s.zarr")
    a = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(store, component="X")
    b = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(store + "/X")
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    # scikit-learn's fit_transform calls fit, then transform(X): both read the component
    codes = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit_transform(
        store, component="X")
    assert codes.shape == (600, 2)


def test_component_without_a_path_is_refused(X):
    with pytest.raises(ValueError, match="must then be that store's or file's path"):
        RFNMF(n_clusters=2).fit(X, component="X")


# ---------------------------------------------------------------- clear errors
@pytest.mark.parametrize("name, message", [
    ("x.h5", r"is an HDF5 file; name the dataset .* \[X \(600, 5\) float64, grp/Y"),
    ("x.h5/Z", r"No dataset 'Z' in the HDF5 file .*; its datasets: \[X "),
    ("x.h5/grp", r"'grp' in the HDF5 file .* is a group, not a dataset"),
    ("x.npy/X", r"is a .npy file, which holds one array; component='X' does not apply"),
    ("notes.txt", r"neither a .npy file, an HDF5/NetCDF-4 file nor a Zarr array"),
])
def test_unreadable_paths_say_what_they_are(files, name, message):
    (files / "notes.txt").write_text("not data")
    with pytest.raises(ValueError, match=message):
        RFNMF(n_clusters=2).fit(str(files / name))


def test_a_truncated_npy_file_is_named(tmp_path, X):
    path = tmp_path / "t.npy"
    np.save(path, X)
    A = _lazy(str(path))                        # opened whole: the header only is read
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 800)
    with pytest.raises(ValueError, match=r"Cannot read rows 0\.\.599 of the \.npy file .*t\.npy"):
        A.compute()
    with pytest.raises(ValueError, match=r"The \.npy file .*t\.npy is truncated: its header says"):
        _lazy(str(path))


def test_hdf5_without_h5py_names_the_extra(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)      # import h5py now fails
    with pytest.raises(ImportError, match=r'pip install "daskrnmf\[hdf5\]"'):
        RFNMF(n_clusters=2).fit(str(files / "x.h5/X"))


def test_open_array_of_a_npy_file_points_to_the_ways_in(files):
    from daskrnmf.io import open_array

    with pytest.raises(ValueError, match="is a .npy file, not a Zarr array.*daskrnmf convert"):
        open_array(str(files / "x.npy"))


# ---------------------------------------------------------------- daskrnmf convert
@pytest.fixture
def address(local_cluster):
    return local_cluster.scheduler_address


def test_a_fit_on_a_cluster_reads_the_file_in_the_workers_tasks(files, X, address,
                                                                monkeypatch):
    """Every read of the file is a worker's task (a distributed worker's thread); the
    client (this thread) reads none."""
    import threading

    from distributed import Client

    from daskrnmf import _files

    readers = []
    read = _files.MappedRows.read

    def recording(self, index, out=None):
        readers.append(threading.current_thread().name)
        return read(self, index, out)

    monkeypatch.setattr(_files.MappedRows, "read", recording)
    mm = np.load(files / "x.npy", mmap_mode="r")
    with Client(address):
        model = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(mm)
    assert readers and threading.current_thread().name not in readers
    assert all("Dask-Default-Threads" in name for name in readers), set(readers)
    assert model.labels_.shape == (600,)


@pytest.mark.parametrize("source, extra", [
    ("x.npy", []), ("x.h5", ["--component", "grp/Y"]), ("s.zarr/X", ["--chunk-rows", "128"]),
])
def test_convert_writes_a_zarr_array(files, X, tmp_path, address, capsys, source, extra):
    out = tmp_path / "out.zarr"
    assert cli.main(["convert", str(files / source), str(out), *extra,
                     "--scheduler-address", address]) == 0
    g = zarr.open_group(str(out), mode="r")
    z = g["X"]
    expected = X.astype(np.float32) if "grp/Y" in extra else X
    np.testing.assert_array_equal(z[...], expected)
    assert z.dtype == expected.dtype
    said = capsys.readouterr().out
    # the chunk advice: all 600 rows (< 32 MiB) in one chunk unless --chunk-rows says
    rows = 128 if "--chunk-rows" in extra else 600
    assert f": {rows} rows per chunk" in said and z.chunks == (rows, 5)
    assert dict(g.attrs).get("written_by") == "daskrnmf"
    # nothing partial is left beside it
    assert sorted(os.listdir(tmp_path)) == ["out.zarr"]


@pytest.mark.parametrize("source, extra", [("x.npy", []), ("x.h5/X", []),
                                           ("x.h5", ["--component", "X"])])
def test_cli_fit_reads_npy_and_hdf5_inputs(files, X, tmp_path, address, source, extra):
    """`daskrnmf fit` takes the paths a Python fit takes (it said "input x.h5/X does not
    exist"); the outputs equal a fit on the array in memory."""
    out = tmp_path / "fit.zarr"
    assert cli.main(["fit", "RFNMF", str(files / source), *extra, "--output", str(out),
                     "--n-clusters", "2", "--n-init", "1", "--max-iter", "5",
                     "--random-state", "0", "--scheduler-address", address]) == 0
    local = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(X)
    np.testing.assert_array_equal(zarr.open_group(str(out), mode="r")["labels"][:],
                                  local.labels_)


def test_convert_refuses_to_overwrite_without_the_flag(files, tmp_path, address, capsys):
    out = tmp_path / "out.zarr"
    argv = ["convert", str(files / "x.npy"), str(out), "--scheduler-address", address]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert cli.main(argv + ["--overwrite"]) == 0
    # never somebody else's directory, nor inside a Zarr store
    (tmp_path / "mine").mkdir()
    assert cli.main(["convert", str(files / "x.npy"), str(tmp_path / "mine"), "--overwrite",
                     "--scheduler-address", address]) == 1
    assert "daskrnmf did not write" in capsys.readouterr().err
    assert cli.main(["convert", str(files / "x.npy"), str(out / "inner"),
                     "--scheduler-address", address]) == 1
    assert "inside the Zarr store" in capsys.readouterr().err


@pytest.mark.parametrize("shape, itemsize, rows, reason", [
    ((10_000_000, 64), 8, 65_536, "about 32 MiB"),       # 32 MiB chunks of 512-byte rows
    ((1_000, 64), 8, 1_000, "one chunk"),
    ((10_000_000, 64), 8, 500_000, "above 64 MiB"),       # --chunk-rows 500000: 244 MiB
    ((10_000_000, 64), 8, 100, "below 16 MiB"),
])
def test_chunk_advice(shape, itemsize, rows, reason):
    from daskrnmf.io import chunk_advice

    given = None if reason in ("about 32 MiB", "one chunk") else rows
    got, why = chunk_advice(shape, np.dtype(f"f{itemsize}"), given)
    assert got == rows and reason in why
