"""A fitted model owns its results: per-sample attributes are computed at the end of the
fit, never graphs over X (issue: labels_ of a fit on a Zarr path re-read the store, and a
deleted store made every sample land in cluster 0)."""

import pickle
import shutil
import warnings

import numpy as np
import pytest
import zarr
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import ORNMF, RFNMF, RFNMTF


@pytest.fixture
def store(tmp_path):
    X = np.random.default_rng(0).random((600, 6)) + np.repeat(np.eye(3, 6) * 4, 200, axis=0)
    X = X - X.min() + 0.1           # non-negative, for ORNMF
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=X.shape, chunks=(100, 6), dtype="f8")
    z[:] = X
    return path, X


@pytest.mark.parametrize("make, attrs", [
    (lambda: RFNMF(3, n_init=2, random_state=0), ("labels_",)),
    (lambda: RFNMTF(3, 2, n_init=2, random_state=0), ("row_labels_", "labels_")),
    (lambda: ORNMF(3, n_clusters=3, max_iter=20, random_state=0), ("labels_", "jumps_")),
], ids=["RFNMF", "RFNMTF", "ORNMF"])
def test_results_survive_the_input_store(store, make, attrs):
    path, X = store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = make().fit(path)
        ref = make().fit(X)
    before = {a: np.array(getattr(m, a)) for a in attrs}
    for a in attrs:
        assert isinstance(getattr(m, a), np.ndarray), a
        np.testing.assert_allclose(before[a], getattr(ref, a), rtol=1e-9)
    blob = pickle.dumps(m)
    shutil.rmtree(path)
    for a in attrs:
        np.testing.assert_array_equal(getattr(m, a), before[a])
        np.testing.assert_array_equal(getattr(pickle.loads(blob), a), before[a])
    # the pickle holds the model and its per-sample results, not X (600 x 6 float64)
    assert len(blob) < X.nbytes
