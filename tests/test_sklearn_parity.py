"""Behaviour a scikit-learn user expects from its own estimators (issue 41): NMF's default
initialisation falls back to random when NNDSVD cannot apply, the clusterers have a
``score`` (KMeans': ``-inertia``) so that ``GridSearchCV`` needs no ``scoring=``, and a
ConvergenceWarning says when fewer distinct clusters than asked for were found.

scikit-learn's common checks at generic parameters are in tests/test_common.py.
"""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from daskrnmf import NMF, ORNMF, RFNMF, RFNMTF, RNMF

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


# ---------------------------------------------------------------- score
def _nearest_distances(X, P, metric):
    diff = X[:, None, :] - P[None]
    d = np.abs(diff).sum(-1) if metric == "l1" else np.sqrt((diff ** 2).sum(-1))
    return d.min(axis=1)


@pytest.mark.parametrize("loss", ["l21", "l1", "l2"])
def test_rfnmf_score_is_the_negative_objective(loss, X):
    m = RFNMF(3, loss=loss, n_init=1, random_state=0).fit(X)
    assert m.score(X) == pytest.approx(-m.objective_, rel=1e-12)
    # new data: the objective of X2 under the fitted centres (squared distances for l2)
    X2 = X[::3] + 0.5
    d = _nearest_distances(X2, m.cluster_centers_, "l1" if loss == "l1" else "l2")
    expected = -(d ** 2 if loss == "l2" else d).sum()
    assert m.score(X2) == pytest.approx(expected, rel=1e-12)
    # out of core: the same number from the blocks, a Python float
    lazy = m.score(da.from_array(X2, chunks=(3, 5)))
    assert type(lazy) is float and lazy == pytest.approx(expected, rel=1e-12)


def test_rfnmtf_score_is_the_negative_objective(X):
    m = RFNMTF(3, 2, n_init=1, random_state=0).fit(X)
    assert m.score(X) == pytest.approx(-m.objective_, rel=1e-12)
    X2 = X[::3] + 0.5
    expected = -_nearest_distances(X2, m.row_prototypes_, "l1").sum()
    assert m.score(da.from_array(X2, chunks=(4, 5))) == pytest.approx(expected, rel=1e-12)


def test_score_checks_its_input_as_predict_does(X):
    m = RFNMF(3, n_init=1, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 4 features, but RFNMF is expecting 5"):
        m.score(X[:, :4])
    bad = da.from_array(np.where(np.arange(5) == 2, np.nan, X), chunks=(10, 5))
    with pytest.raises(ValueError, match="NaN"):
        m.score(bad)


@pytest.mark.parametrize("est, grid", [(RFNMF(n_init=1, random_state=0), {"n_clusters": [2, 3]}),
                                       (RFNMTF(n_column_clusters=2, n_init=1, random_state=0),
                                        {"n_row_clusters": [2, 3]})])
def test_grid_search_without_scoring_uses_score(est, grid, X):
    search = GridSearchCV(est, grid, cv=2).fit(X)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


# ---------------------------------------------------------------- fewer distinct clusters
DUPLICATES = np.array([[0.0, 0.0, 1.0], [4.0, 4.0, 1.0]]).repeat(6, axis=0)   # 2 points


@pytest.mark.parametrize("loss", ["l21", "l1", "l2"])
def test_rfnmf_warns_about_fewer_distinct_clusters(loss):
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(2\) found "
                                                r"smaller than n_clusters \(3\)\. Possibly "
                                                r"due to duplicate points in X\."):
        m = RFNMF(3, loss=loss, n_init=2, random_state=0).fit(DUPLICATES)
    assert np.unique(m.labels_).size == 2


def test_rfnmtf_warns_about_fewer_distinct_row_and_column_clusters(X):
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct row clusters \(2\) found "
                                                r"smaller than n_row_clusters \(3\)\. Possibly "
                                                r"due to duplicate rows in X\."):
        RFNMTF(3, 2, n_init=2, random_state=0).fit(DUPLICATES)
    # more column clusters than features (a ValueError before): each feature gets a
    # cluster of its own, the others stay empty
    for init in ("k-medians++", "random"):
        with pytest.warns(ConvergenceWarning, match=r"Number of distinct column clusters "
                                                    r"\(3\) found smaller than "
                                                    r"n_column_clusters \(4\)"):
            m = RFNMTF(2, 4, init=init, n_init=2, random_state=0).fit(X[:, :3])
        assert np.unique(m.column_labels_).size == 3 and m.block_medians_.shape == (2, 4)
        assert np.all(np.isfinite(m.block_medians_))
        assert m.score(X[:, :3]) == pytest.approx(-m.objective_, rel=1e-12)


def test_no_warning_when_every_cluster_is_found(X):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        RFNMF(3, n_init=1, random_state=0).fit(X)
        RFNMTF(3, 2, n_init=1, random_state=0).fit(X)
