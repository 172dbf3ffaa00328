"""Hostile parameters over the registry: numbers beyond 64 bits, and initial arrays of
the wrong kind, get scikit-learn's message form (never a TypeError from deep inside)."""

import warnings

import numpy as np
import pytest

from daskrnmf import REGISTRY, RFNMF, RFNMTF
from daskrnmf._validation import Interval

from .test_common import SMALL

X = np.random.default_rng(0).random((20, 4)) + 0.1


def _huge_cases():
    """(model, parameter, value): an int beyond int64 for every int parameter, an int
    beyond float64 for every float one."""
    for name in REGISTRY:
        for key, rules in REGISTRY[name].cls._parameter_constraints.items():
            kinds = {r.kind for r in rules if isinstance(r, Interval)}
            if int in kinds:
                yield name, key, 2**64
            if float in kinds:
                yield name, key, 10**400
        yield name, "random_state", 2**64


@pytest.mark.parametrize("name, key, value", list(_huge_cases()))
def test_numbers_beyond_64_bits_get_the_parameter_message(name, key, value):
    model = REGISTRY[name].cls(**SMALL[name]).set_params(**{key: value})
    y = np.arange(20) % 2 if REGISTRY[name].needs_y else None
    with pytest.raises(ValueError, match=f"The '{key}' parameter of {name} must be .* Got "):
        model.fit(X, y)
    assert not hasattr(model, "n_features_in_")


def test_huge_parameter_message_says_why():
    with pytest.raises(ValueError, match=r"must be an int in the range \[1, inf\) that fits in "
                                         r"64 bits \(below 2\*\*63\)\. Got 18446744073709551616"):
        RFNMF(2, max_iter=2**64).fit(X)
    with pytest.raises(ValueError, match=r"that a float64 holds .* Got 1000.*\(an integer of "
                                         r"401 digits\) instead"):
        RFNMF(2, tol=10**400).fit(X)


def _fit(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return model.fit(X)


def test_init_array_like_is_converted_as_in_sklearn():
    centres = X[:2].tolist()
    a = _fit(RFNMF(2, init=np.array(centres), random_state=0))
    b = _fit(RFNMF(2, init=centres, random_state=0))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    S, c = [[1.0, 2.0], [3.0, 4.0]], [0, 1, 0, 1]
    a = _fit(RFNMTF(2, 2, init=(np.array(S), np.array(c)), random_state=0))
    b = _fit(RFNMTF(2, 2, init=(S, c), random_state=0))
    np.testing.assert_array_equal(a.block_medians_, b.block_medians_)


@pytest.mark.parametrize("init, error, message", [
    (X[:2] + 0j, ValueError, "must be real numbers; got complex"),
    (X[:2].astype(object) + 1j, ValueError, "must be real numbers; got complex"),
    (np.full((2, 4), "a"), TypeError, "must be real numbers; got dtype <U1"),
    (np.full((2, 4), "a", dtype=object), TypeError, "must be real numbers; got dtype object"),
    (np.full((2, 4), None), ValueError, "NaN or infinite"),
    ([[1.0, 2.0], [3.0]], ValueError, "must be real numbers of shape"),
    (X[:3], ValueError, r"shape \(n_clusters, n_features\) = \(2, 4\); got shape \(3, 4\)"),
])
def test_bad_init_arrays_get_clear_errors(init, error, message):
    model = RFNMF(2, init=init)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no ComplexWarning dropping imaginary parts
        with pytest.raises(error, match=message):
            model.fit(X)
    S = init[:, :2] if isinstance(init, np.ndarray) and init.shape == (2, 4) else init
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises((TypeError, ValueError), match="The 'init' tuple of RFNMTF"):
            RFNMTF(2, 2, init=(S, [0, 1, 0, 1])).fit(X)
