"""Every registered model through the same table of hostile inputs.

Each case must end in a clear error (ValueError/TypeError/MemoryError whose message names
the problem) that leaves the estimator unfitted, or in a fit whose fitted arrays are all
finite — never NaN with a RuntimeWarning, never a raw error from deep inside.  The
scikit-learn common checks (tests/test_common.py) cover the array-API side (lists, 1-D,
empty, complex, object dtype, feature counts); this table covers the data's values.
"""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

from daskrnmf import REGISTRY

from .test_common import SMALL


def _base(n=40, d=6):
    return np.random.default_rng(0).random((n, d)) + 0.1


def _with(value, where=(3, 2)):
    X = _base()
    X[where] = value
    return X


# name -> (X, message of the error, or None when a finite fit is required)
CASES = {
    "nan": (_with(np.nan), "NaN"),
    "inf": (_with(np.inf), "NaN or inf"),
    "constant": (np.full((40, 6), 3.0), None),
    "zeros": (np.zeros((40, 6)), None),
    "one-row": (_base(1), "n_samples|sample"),
    "tiny-scale": (_base() * 1e-300, None),
    "large-scale": (_base() * 1e55, None),
    "huge-scale": (_base() * 1e100, "Rescale X"),
}


def _y(name, n):
    return (np.arange(n) % 2) if REGISTRY[name].needs_y else None


def _fitted_arrays(m):
    for key, value in vars(m).items():
        if key.endswith("_") and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            yield key, value


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", list(REGISTRY))
def test_hostile_values(name, case):
    X, message = CASES[case]
    est = REGISTRY[name].cls(**SMALL[name], random_state=0)
    if case == "one-row" and REGISTRY[name].task == "factorization":
        # one sample can be factorized (as in sklearn; NMF's default init is then random)
        message = None
    y = _y(name, X.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*did not converge.*")
        for data in (X, da.from_array(X, chunks=(15, X.shape[1]))):
            m = clone(est)
            if message is None:
                m.fit(data, y)
                for key, value in _fitted_arrays(m):
                    assert np.all(np.isfinite(value)), (key, value)
            else:
                with pytest.raises((ValueError, TypeError), match=message):
                    m.fit(data, y)
                assert not hasattr(m, m._fitted_attribute)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_negative_values(name):
    X = _with(-1.0)
    est = REGISTRY[name].cls(**SMALL[name], random_state=0)
    y = _y(name, X.shape[0])
    for data in (X, da.from_array(X, chunks=(15, X.shape[1]))):
        m = clone(est)
        if est._non_negative:
            with pytest.raises(ValueError, match="Negative values in data passed to"):
                m.fit(data, y)
            assert not hasattr(m, m._fitted_attribute)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m.fit(data, y)


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "0"])
def test_bad_random_state(name, seed):
    est = REGISTRY[name].cls(**SMALL[name], random_state=seed)
    with pytest.raises(ValueError, match="The 'random_state' parameter of " + name):
        est.fit(_base(), _y(name, 40))
