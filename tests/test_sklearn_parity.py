"""Behaviour a scikit-learn user expects from its own estimators (issue 41): NMF's default
initialisation falls back to random when NNDSVD cannot apply.

scikit-learn's common checks at generic parameters are in tests/test_common.py.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import NMF, ORNMF, RNMF

FACTORIZATIONS = [NMF, RNMF, ORNMF]


@pytest.fixture(scope="module")
def X():
    """30 non-negative samples in 3 loose groups, 5 features."""
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0, 5, 5, 1], [5, 5, 0, 0, 1], [5, 0, 5, 0, 4]], dtype=float)
    return centres.repeat(10, axis=0) + rng.random((30, 5))


# ---------------------------------------------------------------- NMF's default init
@pytest.mark.parametrize("cls", FACTORIZATIONS)
def test_default_init_is_random_when_nndsvda_cannot_apply(cls, X):
    """scikit-learn's ``init=None``: NNDSVD-a while n_components <= min(n_samples,
    n_features), else random (the models refused their own default before)."""
    narrow = X[:, :2]                  # 2 features, 3 components
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = cls(3, max_iter=5, random_state=0).fit(narrow)
        b = cls(3, init="random", max_iter=5, random_state=0).fit(narrow)
    assert a.components_.shape == (3, 2)
    np.testing.assert_array_equal(a.components_, b.components_)
    # an explicit NNDSVD-a still cannot: a clear error, as scikit-learn's
    with pytest.raises(ValueError, match=r"init='nndsvda' needs n_components <= "
                                         r"min\(n_samples, n_features\) = 2; got "
                                         r"n_components=3"):
        cls(3, init="nndsvda").fit(narrow)


@pytest.mark.parametrize("cls", FACTORIZATIONS)
def test_default_init_is_nndsvda_where_it_applies(cls, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = cls(3, max_iter=5, random_state=0).fit(X)
        b = cls(3, init="nndsvda", max_iter=5, random_state=0).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert cls().init is None       # scikit-learn's default value, resolved at fit
