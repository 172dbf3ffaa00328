"""Every method of every registered model through one table of hostile inputs.

Generated from :data:`daskrnmf.REGISTRY`, so a new model gets these tests for free: each
public method that takes data (``fit``, ``partial_fit``, ``predict``, ``transform``,
``fit_transform``, ``fit_predict``, ``decision_function``, ``score``, ``decompose``, and
``inverse_transform``, which takes codes) is called with each hostile input in each
container (NumPy, Dask, Zarr).  A refused call raises a ValueError/TypeError whose message
names the problem and leaves a fitted model exactly as it was; float16 and big-endian
input is cast (as scikit-learn's ``check_array`` does) and gives the native result.

One fitted model per registered name is shared by the whole module (fitted once, on
30 x 5 data); a test that must change a model works on a clone.  tests/test_hostile_inputs.py
covers the values ``fit`` meets (constant, tiny, huge scales); this file covers the
methods.
"""

import pickle
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from daskrnmf import REGISTRY

from .test_common import SMALL

N, D = 30, 5
X0 = np.random.default_rng(0).random((N, D)) + 0.1
Y0 = np.arange(N) % 2

# the methods that take data, in the order they are tried; the ones a model has are used
METHODS = ("fit", "partial_fit", "fit_transform", "fit_predict", "predict", "transform",
           "decision_function", "score", "decompose", "inverse_transform")
FITS = ("fit", "partial_fit", "fit_transform", "fit_predict")
CONTAINERS = ("numpy", "dask", "zarr")


def _with(A, value):
    A = A.copy()
    A[3, 1] = value
    return A


def _objects(A):
    out = np.empty(A.shape, dtype=object)
    out[...] = "x"
    return out


# name -> (make(A) for a base array A, message of the refusal)
REFUSED = {
    "nan": (lambda A: _with(A, np.nan), "NaN"),
    "inf": (lambda A: _with(A, np.inf), "NaN or inf|infinit"),
    "huge": (lambda A: _with(A, 1e300), "Rescale"),
    "negative": (lambda A: _with(A, -1.0), "Negative values"),
    "n_features": (lambda A: A[:, :-1], r"is expecting \d+ features|has \d+ columns"),
    "1-D": (lambda A: A[0], "2D|2-D"),
    "empty": (lambda A: A[:0], "0 sample|empty"),
    "complex": (lambda A: A.astype(complex), "[Cc]omplex|real numeric dtype"),
    "object": (_objects, "could not convert|real numeric dtype"),
    "str": (lambda A: np.full(A.shape, "x"), "could not convert|real numeric dtype|dtype"),
}
# cast like scikit-learn's check_array: the result is the native array's
CAST = {
    "float16": lambda A: A.astype(np.float16),
    "big-endian": lambda A: A.astype(">f8"),
}


def _methods(name):
    cls = REGISTRY[name].cls
    return [m for m in METHODS if callable(getattr(cls, m, None))]


def _table():
    for name in REGISTRY:
        for method in _methods(name):
            for container in CONTAINERS:
                yield name, method, container


def _refused_table():
    """The cases that apply: negative values only where the model needs non-negative data
    (inverse_transform's codes: any sign), object arrays not in Zarr (no Zarr dtype)."""
    for name, method, container in _table():
        for case in REFUSED:
            if case == "negative" and not (REGISTRY[name].cls._non_negative
                                           and method != "inverse_transform"):
                continue
            if case == "object" and container == "zarr":
                continue
            yield name, method, container, case


@pytest.fixture(scope="module")
def fitted():
    """One fitted model per registered name (fitted on first use)."""
    cache = {}

    def get(name):
        if name not in cache:
            est = REGISTRY[name].cls(**SMALL[name], random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[name] = est.fit(X0, _y(name, N))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``put(A)``: A as a Zarr array in a fresh store of this module's directory."""
    root = tmp_path_factory.mktemp("hostile-zarr")
    count = iter(range(10**6))

    def put(A):
        path = str(root / f"a{next(count)}.zarr")
        with warnings.catch_warnings():     # str arrays: no Zarr V3 specification yet
            warnings.simplefilter("ignore")
            z = zarr.create_array(path, shape=A.shape, dtype=A.dtype,
                                  chunks=(10,) + A.shape[1:] if A.shape[0] else A.shape)
        if A.size:
            z[...] = A
        return zarr.open_array(path, mode="r")
    return put


def _y(name, n):
    return Y0[:n] if REGISTRY[name].needs_y else None


def _contain(A, container, store):
    if container == "dask":
        return da.from_array(A, chunks=(10,) + A.shape[1:] if A.ndim == 2 else 10)
    if container == "zarr":
        return store(A)
    return A


def _base(model, method):
    """The data a method takes: X, or the codes of X for inverse_transform."""
    if method == "inverse_transform":
        return np.asarray(model.transform(X0), dtype=np.float64)
    return X0


def _call(model, method, data, name):
    """Run ``method`` to the end (lazy Dask results computed); return its result."""
    args = (data,)
    if method in ("fit", "fit_predict", "fit_transform", "score"):
        n = data.shape[0] if getattr(data, "ndim", 0) else N
        if REGISTRY[name].needs_y or method == "score":
            args = (data, Y0[:n])           # no case has more than N rows
    out = getattr(model, method)(*args)
    if isinstance(out, tuple):
        return tuple(np.asarray(o) for o in out)
    return out if out is model else np.asarray(out)


def _state(model):
    return {key: pickle.dumps(value) for key, value in vars(model).items()}


@pytest.mark.parametrize("name, method, container, case", list(_refused_table()))
def test_hostile_input_is_refused_and_changes_nothing(name, method, container, case,
                                                      fitted, store):
    model = fitted(name)
    make, message = REFUSED[case]
    if case == "n_features" and method in ("fit", "fit_transform", "fit_predict"):
        # fit learns the feature count: a refit on fewer features that is refused (here
        # for a NaN) must not leave the new count beside the old components
        make, message = (lambda A: _with(A[:, :-1], np.nan)), "NaN"
    data = _contain(make(_base(model, method)), container, store)
    before = _state(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        with pytest.raises((ValueError, TypeError), match=message):
            _call(model, method, data, name)
    after = _state(model)
    assert after == before, sorted(k for k in set(after) | set(before)
                                   if after.get(k) != before.get(k))


@pytest.mark.parametrize("case", list(CAST))
@pytest.mark.parametrize("name, method, container", [
    t for t in _table() if t[1] not in ("fit_transform", "fit_predict", "score")])
def test_float16_and_big_endian_are_cast(name, method, container, case, fitted, store):
    model = fitted(name)
    if method in FITS:
        # a refit of two iterations: what the cast changes is already in the first
        model = clone(model)
        if "max_iter" in model.get_params():
            model.set_params(max_iter=2)
    A = CAST[case](_base(fitted(name), method))
    native = A.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # ConvergenceWarning
        warnings.simplefilter("error", RuntimeWarning)
        got = _call(model, method, _contain(A, container, store), name)
        if method in FITS:
            ref = _call(clone(model), method, _contain(native, container, store), name)
            for key, value in vars(ref).items():
                if key.endswith("_") and isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(getattr(model, key), value, err_msg=key)
            return
        want = _call(model, method, _contain(native, container, store), name)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert g.dtype.isnative
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name, method", [
    (name, m) for name in REGISTRY for m in _methods(name) if m not in FITS])
def test_unfitted_methods_raise_not_fitted(name, method):
    est = REGISTRY[name].cls(**SMALL[name])
    data = X0[:, :SMALL[name].get("n_components", 2)] if method == "inverse_transform" else X0
    with pytest.raises(NotFittedError):
        _call(est, method, data, name)


def _partial_fitters():
    return [name for name in REGISTRY if callable(getattr(REGISTRY[name].cls, "partial_fit", None))]


@pytest.mark.parametrize("name", _partial_fitters())
def test_partial_fit_refuses_changed_parameters(name):
    """As scikit-learn's partial_fit: the parameters are checked at every call, and
    n_components is fixed by the first call (a fresh estimator takes another)."""
    model = REGISTRY[name].cls(**SMALL[name], random_state=0).partial_fit(X0)
    before = _state(model)
    k = model.n_components
    with pytest.raises(ValueError, match=f"n_components.*{k} .*{k + 1}.*first partial_fit"):
        model.set_params(n_components=k + 1).partial_fit(X0)
    model.set_params(n_components=k)
    bad = next(key for key, rule in model._parameter_constraints.items()
               if key != "random_state" and any(getattr(c, "left", None) == 0 for c in rule))
    with pytest.raises(ValueError, match=f"The '{bad}' parameter of {name}"):
        clone(model).set_params(**{bad: -1}).partial_fit(X0)
    good = model.get_params()[bad]
    with pytest.raises(ValueError, match=f"The '{bad}' parameter of {name}"):
        model.set_params(**{bad: -1}).partial_fit(X0)
    model.set_params(**{bad: good})
    assert _state(model) == before


@pytest.mark.parametrize("container", ["numpy", "dask"])
@pytest.mark.parametrize("name, method", [
    (name, m) for name in REGISTRY for m in _methods(name) if m in ("fit", "partial_fit")])
def test_refused_first_fit_leaves_no_attribute(name, method, container, store):
    """A refused first fit leaves the estimator as constructed (no n_features_in_ of data
    that was refused)."""
    model = REGISTRY[name].cls(**SMALL[name], random_state=0)
    before = _state(model)
    with pytest.raises(ValueError, match="NaN"):
        _call(model, method, _contain(_with(X0, np.nan), container, store), name)
    assert _state(model) == before


def _masking():
    return [name for name in REGISTRY if REGISTRY[name].cls._supports_missing]


@pytest.mark.parametrize("container", ["numpy", "dask"])
@pytest.mark.parametrize("name", _masking())
def test_missing_mask_still_refuses_inf_and_huge_values(name, container, store):
    """With missing="mask" NaN entries are missing values in every method; inf and
    values above 1e60 are refused as without it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = REGISTRY[name].cls(**SMALL[name], missing="mask", random_state=0).fit(X0)
    gappy = _with(X0, np.nan)
    cases = {"infinit": _with(gappy.T, np.inf).T, "Rescale": _with(gappy.T, 1e300).T}
    for method in _methods(name):
        if method in FITS or method == "inverse_transform":
            continue
        _call(model, method, _contain(gappy, container, store), name)     # NaN: missing
        before = _state(model)
        for message, A in cases.items():
            with pytest.raises(ValueError, match=message):
                _call(model, method, _contain(A, container, store), name)
        assert _state(model) == before
