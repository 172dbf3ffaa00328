"""Bad input gets a clear error, and nothing is changed."""

import hashlib
import os

import dask.array as da
import numpy as np
import pytest
import zarr

from daskrnmf import RFNMF
from daskrnmf.io import open_array


@pytest.mark.parametrize("param, value, message", [
    ("max_iter", -3, "The 'max_iter' parameter of RFNMF must be an int in the range [1, inf). Got -3 instead."),
    ("max_iter", 2.5, "The 'max_iter' parameter of RFNMF must be an int in the range [1, inf). Got 2.5 instead."),
    ("n_clusters", 0, "The 'n_clusters' parameter of RFNMF must be an int in the range [1, inf). Got 0 instead."),
    ("loss", "l3", "The 'loss' parameter of RFNMF must be a str among {'l21', 'l1', 'l2'}. Got 'l3' instead."),
    ("tol", -1.0, "The 'tol' parameter of RFNMF must be a float in the range [0, inf). Got -1.0 instead."),
    ("median_tol", 2.0, "The 'median_tol' parameter of RFNMF must be a float in the range [0, 1]. Got 2.0 instead."),
    ("n_init", True, "The 'n_init' parameter of RFNMF must be an int in the range [1, inf). Got True instead."),
    ("random_state", "seed", "The 'random_state' parameter of RFNMF must be an int in the range [0, 4294967295]"),
    ("random_state", -1, "The 'random_state' parameter of RFNMF must be an int in the range [0, 4294967295], "
                         "an instance of 'numpy.random.RandomState', an instance of 'numpy.random.Generator' or None. "
                         "Got -1 instead."),
    ("callback", 3, "The 'callback' parameter of RFNMF must be a callable or None. Got 3 instead."),
    ("init", "kmeans", "The 'init' parameter of RFNMF must be a str among {'k-medians++', 'random'} or an array"),
])
def test_bad_parameters(param, value, message):
    m = RFNMF(2).set_params(**{param: value})
    with pytest.raises(ValueError) as info:
        m.fit(np.ones((5, 2)))
    assert message in str(info.value)
    assert not hasattr(m, "cluster_centers_")


def test_bad_init_array():
    with pytest.raises(ValueError, match=r"shape \(n_clusters, n_features\) = \(2, 3\)"):
        RFNMF(2, init=np.ones((3, 3))).fit(np.ones((5, 3)))


# In-memory input gets scikit-learn's own messages (validate_data); Dask/Zarr input ours.
@pytest.mark.parametrize("X, error, message", [
    (np.ones(5), ValueError, "Expected 2D array, got 1D array instead"),
    (da.ones(5, chunks=2), ValueError, "must be 2-D .* got 1-D .* X.reshape\\(-1, 1\\)"),
    (np.ones((2, 2, 2)), ValueError, "Found array with dim 3"),
    (np.ones((0, 3)), ValueError, "Found array with 0 sample"),
    (np.ones((3, 0)), ValueError, "Found array with 0 feature"),
    (da.ones((0, 3), chunks=(1, 3)), ValueError, "is empty"),
    (np.array([["a", "b"], ["c", "d"]]), ValueError, "could not convert string to float"),
    (np.ones((3, 2), dtype=complex), ValueError, "Complex data not supported"),
    (da.ones((3, 2), dtype=complex, chunks=(1, 2)), TypeError, "real numeric dtype"),
    ({"a": 1}, (TypeError, ValueError), ".+"),
    (da.ones((10, 4), chunks=(5, 2)), ValueError, r"chunked along its columns.*rechunk\(\{1: 4\}\)"),
])
def test_bad_input(X, error, message):
    with pytest.raises(error, match=message):
        RFNMF(1).fit(X)


def test_array_likes_accepted():
    """Lists, DataFrames and bool/int arrays are data, as in scikit-learn."""
    pd = pytest.importorskip("pandas")
    X = [[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]]
    a = RFNMF(2, random_state=0).fit(X)
    b = RFNMF(2, random_state=0).fit(pd.DataFrame(X, columns=["u", "v"]))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert list(b.feature_names_in_) == ["u", "v"]
    assert RFNMF(2, random_state=0).fit(np.array(X) > 1).n_features_in_ == 2


def test_feature_count_checked_on_both_paths():
    m = RFNMF(2, random_state=0).fit(np.ones((6, 3)))
    for X in (np.ones((4, 2)), da.ones((4, 2), chunks=(2, 2))):
        with pytest.raises(ValueError, match="X has 2 features, but RFNMF is expecting 3 features"):
            m.predict(X)


def test_dask_predict_checks_values_like_numpy():
    m = RFNMF(2, random_state=0).fit(np.random.default_rng(0).random((20, 3)))
    bad = np.ones((6, 3))
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.predict(bad)
    with pytest.raises(ValueError, match="NaN"):
        m.predict(da.from_array(bad, chunks=(3, 3))).compute()


def test_unknown_chunks():
    X = da.ones((10, 3), chunks=(5, 3))
    X = X[X[:, 0] > 0]
    with pytest.raises(ValueError, match="unknown chunk sizes.*compute_chunk_sizes"):
        RFNMF(1).fit(X)


def test_too_many_clusters():
    with pytest.raises(ValueError, match="n_clusters=6 must be <= n_samples=5"):
        RFNMF(6).fit(np.ones((5, 2)))


@pytest.mark.parametrize("as_dask", [False, True])
def test_nan_inf_reported_with_count(as_dask):
    X = np.ones((50, 3))
    X[3, 1], X[40, 0] = np.nan, np.inf
    data = da.from_array(X, chunks=(7, 3)) if as_dask else X
    m = RFNMF(2)
    with pytest.raises(ValueError, match="contains 2 NaN or infinite value"):
        m.fit(data)
    assert not hasattr(m, "labels_")


def test_zarr_paths(tmp_path):
    with pytest.raises(ValueError, match="No Zarr array at"):
        RFNMF(2).fit(str(tmp_path / "missing.zarr"))
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.create_array("X", shape=(20, 3), chunks=(5, 3), dtype="f8")[:] = np.arange(60.0).reshape(20, 3)
    with pytest.raises(ValueError, match=r"is a Zarr group, not an array; .*\['X'\]"):
        RFNMF(2).fit(str(tmp_path / "g.zarr"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not|No Zarr"):
        RFNMF(2).fit(str(tmp_path / "plain"))
    assert open_array(str(tmp_path / "g.zarr"), component="X").shape == (20, 3)
    one_d = g.create_array("v", shape=(20,), chunks=(5,), dtype="f8")
    one_d[:] = 1.0
    with pytest.raises(ValueError, match="must be 2-D"):
        RFNMF(2).fit(str(tmp_path / "g.zarr" / "v"))


def _tree_digest(path):
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)):
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(p.encode())
            h.update(open(p, "rb").read())
            h.update(str(os.stat(p).st_mtime_ns).encode())
    return h.hexdigest()


def test_input_store_never_written(tmp_path):
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=(200, 4), chunks=(30, 2), dtype="f8")  # column-chunked storage
    z[:] = np.random.default_rng(0).normal(size=(200, 4))
    before = _tree_digest(path)
    m = RFNMF(3, loss="l1", n_init=2, random_state=0).fit(path)
    labels = m.predict(zarr.open_array(path, mode="r"))
    labels.compute()
    assert _tree_digest(path) == before
    # the store's storage chunks split columns; daskrnmf reads whole rows regardless
    first = labels.chunks[0][0]
    assert first == 200 or first % 30 == 0
