"""Every registered model, at its defaults, gives the same fit for NumPy input and for
any row chunking of the same data (Dask and Zarr blocks are how the data is stored, not
what it is)."""

import warnings

import dask.array as da
import numpy as np
import pytest

from daskrnmf import REGISTRY

# the model's size only (n_clusters, n_components, ...): everything else at its default
SIZE = {"RFNMF": dict(n_clusters=2), "RFNMTF": dict(n_row_clusters=2, n_column_clusters=2)}
KNOWN = {}


def _size(name):
    return SIZE.get(name, dict(n_components=2))


def _data():
    rng = np.random.default_rng(1)
    X = rng.random((40, 6)) * 0.2
    X[:20, :3] += 1.0           # two groups of samples, two groups of features
    X[20:, 3:] += 1.0
    return X


def _fitted(name, X):
    y = np.arange(X.shape[0]) % 2 if REGISTRY[name].needs_y else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # ConvergenceWarning
        model = REGISTRY[name].cls(**_size(name), random_state=0).fit(X, y)
    return {key: value for key, value in vars(model).items()
            if key.endswith("_") and not key.startswith("_") and isinstance(value, np.ndarray)}


@pytest.mark.parametrize("name", [pytest.param(n, marks=KNOWN.get(n, ())) for n in REGISTRY])
def test_defaults_do_not_depend_on_the_chunking(name):
    X = _data()
    want = _fitted(name, X)
    for rows in (7, 40):
        got = _fitted(name, da.from_array(X, chunks=(rows, X.shape[1])))
        assert set(got) == set(want)
        for key, value in want.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got[key], value, rtol=1e-7, atol=1e-10,
                                           err_msg=f"{key}, chunks of {rows} rows")
            else:
                np.testing.assert_array_equal(got[key], value,
                                              err_msg=f"{key}, chunks of {rows} rows")
