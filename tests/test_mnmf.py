"""Max-Margin Semi-NMF: the G step's dual (eq. 9-10) against its simplified form."""

import numpy as np
import pytest
from scipy.optimize import minimize, nnls

from daskrnmf.kernels import hinge


def _problem(seed, n=24, d=6, k=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 1.0          # rows are samples (paper: columns)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    H = rng.random((n, k))
    w = rng.normal(size=k)
    return X, y, H, w, 0.3


def _eq10(X, y, H, w, b):
    """T_1, T_2, t_3..t_7 of eq. 10 literally (paper orientation, T_2 with y_i y_j)."""
    V, Hp = X.T, H.T                           # m x L, k x L
    L = V.shape[1]
    B = np.linalg.inv(2 * Hp @ Hp.T)
    M = [np.outer(V[:, i], w) for i in range(L)]
    T1 = np.array([[sum(y[i] * y[j] * Hp[:, kk] @ B @ M[i].T @ M[j] @ B @ Hp[:, kk]
                        for kk in range(L)) for j in range(L)] for i in range(L)])
    T2 = np.array([[y[i] * y[j] * w @ B @ M[j].T @ V[:, i] for j in range(L)] for i in range(L)])
    t3 = np.array([4 * sum(y[i] * Hp[:, kk] @ B @ Hp @ V.T @ M[i] @ B @ Hp[:, kk]
                           for kk in range(L)) for i in range(L)])
    t4 = np.array([2 * sum(y[i] * Hp[:, kk] @ B @ w * V[:, i] @ V[:, kk] for kk in range(L))
                   for i in range(L)])
    t5 = np.array([2 * y[i] * w @ B @ Hp @ V.T @ V[:, i] for i in range(L)])
    t6 = b * y
    t7 = np.ones(L)
    return T1 - T2, t3 - t4 - t5 - t6 + t7, B


@pytest.mark.parametrize("seed", [0, 1])
def test_eq9_dual_is_a_linear_kernel_svm_dual(seed):
    X, y, H, w, b = _problem(seed)
    Q2, lin, B = _eq10(X, y, H, w, b)
    P = np.linalg.inv(H.T @ H)
    c = w @ P @ w
    f = X @ (X.T @ H @ P) @ w                   # x_i^T G_0 w
    Q = np.outer(y, y) * (X @ X.T)
    np.testing.assert_allclose(Q2, -c / 4 * Q, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(lin, 1 - y * (f + b), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_smoothed_newton_solves_eq9(seed):
    X, y, H, w, b = _problem(seed)
    theta = 5.0
    Q2, lin, B = _eq10(X, y, H, w, b)
    # SciPy on eq. 9 as printed (with T_2's y_i y_j), G from eq. 7
    res = minimize(lambda a: -(a @ Q2 @ a + lin @ a), np.zeros(len(y)),
                   jac=lambda a: -(2 * Q2 @ a + lin), bounds=[(0, theta)] * len(y),
                   method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
    a = res.x
    V, Hp = X.T, H.T
    G_ref = (2 * V @ Hp.T + sum(a[i] * y[i] * np.outer(V[:, i], w) for i in range(len(y)))) @ B
    # ours: kappa = c / 2, p = 1 - y (f + b), z = x; G = G_0 + v w^T P / c
    P = np.linalg.inv(H.T @ H)
    G0 = X.T @ H @ P
    c = w @ P @ w
    p = 1 - y * (X @ G0 @ w + b)
    ones = np.ones(len(y))
    v, info = hinge.solve(lambda v, d, mu: hinge.block_pass(X, y, p, ones, v, d, mu),
                          np.zeros(X.shape[1]), c / 2, theta, max_passes=300, tol=1e-4)
    assert info["gap"] <= 1e-4
    # the same optimum: SciPy's multipliers give G_ref and the primal point kappa u*
    u_star = X.T @ (a * y)
    v_star = c / 2 * u_star

    def primal(v):
        return v @ v / c + theta * np.maximum(0, p - y * (X @ v)).sum()

    assert primal(v_star) <= primal(v) <= primal(v_star) * (1 + 1e-4)
    np.testing.assert_allclose(G0 + np.outer(v_star, P @ w) / c, G_ref, rtol=1e-6, atol=1e-8)
    G = G0 + np.outer(v, P @ w) / c
    np.testing.assert_allclose(G, G_ref, rtol=0, atol=1e-2 * np.abs(G_ref).max())


# ---------------------------------------------------------------- the estimators
import warnings

import dask.array as da
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from daskrnmf import MNMF, SemiNMF
from daskrnmf.datasets import make_margin_gaussians
from daskrnmf.kernels import rng
from .reference import mnmf_reference, semi_nmf_reference


def _initial_h(n, k, seed):
    idx = np.arange(n, dtype=np.uint64)
    return np.stack([rng.uniform(seed, rng.stream_id(11, j), idx) for j in range(k)], axis=1)


@pytest.fixture(scope="module")
def small_toy():
    X, y = make_margin_gaussians(30, 10, n_noise_directions=3, random_state=0)
    return X, y


def test_block_pass_sums_over_blocks_equal_one_block():
    rs = np.random.default_rng(0)
    Z = rs.normal(size=(50, 4))
    y = np.where(rs.random(50) < 0.5, -1.0, 1.0)
    p, omega = rs.normal(size=50) + 1, (rs.random(50) < 0.8).astype(float)
    v, d = rs.normal(size=4), rs.normal(size=4)
    whole = hinge.block_pass(Z, y, p, omega, v, d, 0.7)
    parts = [hinge.block_pass(Z[a:b], y[a:b], p[a:b], omega[a:b], v, d, 0.7)
             for a, b in [(0, 7), (7, 30), (30, 50)]]
    for key, value in whole.items():
        np.testing.assert_allclose(sum(q[key] for q in parts), value, rtol=1e-12, atol=1e-12)
    # the twin: NumPy directly
    r = p - y * (Z @ (v + d))
    assert whole["hinge"] == pytest.approx((omega * np.maximum(r, 0)).sum())
    zone = (omega > 0) & (r > 0) & (r < 0.7)
    np.testing.assert_allclose(whole["hess"], Z[zone].T @ Z[zone])
    # the compiled ladder of smoothed losses against its NumPy twin, the Huber-smoothed
    # hinge l_mu(r) = 0 (r <= 0), r^2 / (2 mu) (0 < r < mu), r - mu / 2 (r >= mu)
    def smoothed(r, mu):
        return np.where(r <= 0, 0.0, np.where(r < mu, r * r / (2 * mu), r - mu / 2))

    r0 = p - y * (Z @ v)
    ladder = [float((omega * smoothed(r0 - t * y * (Z @ d), 0.7)).sum())
              for t in hinge.LADDER]
    np.testing.assert_allclose(whole["loss"], ladder, rtol=1e-12)


def test_semi_nmf_is_dings_algorithm_and_never_increases(small_toy):
    X, _ = small_toy
    est = SemiNMF(3, max_iter=25, tol=0, random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        H = est.fit_transform(X)
    G_ref, H_ref = semi_nmf_reference(X, _initial_h(len(X), 3, 4), 25)
    np.testing.assert_allclose(est.components_.T, G_ref, rtol=1e-7, atol=1e-9)
    assert np.all(np.diff(est.objective_history_) <= 1e-9 * est.objective_history_[:-1])
    # the codes returned are the exact NNLS codes of the final basis (SciPy's nnls)
    codes = np.array([nnls(G_ref, x)[0] for x in X])
    np.testing.assert_allclose(H, codes, rtol=1e-7, atol=1e-9)
    assert np.sum((X - H @ est.components_) ** 2) <= np.sum((X - H_ref @ G_ref.T) ** 2)
    assert est.reconstruction_err_ == pytest.approx(np.linalg.norm(X - H @ est.components_))


def test_mnmf_is_algorithm_1(small_toy):
    """Against every sub-problem solved densely (SciPy's L-BFGS-B on the duals of the G and
    SVM steps, scipy.optimize.nnls for H), for two iterations.  Moderate theta: the dense
    G-step solver (L-BFGS-B) is itself unreliable at theta = 10^4."""
    X, y01 = small_toy
    y = np.where(y01 == 1, 1.0, -1.0)
    G, H, w, b, history = mnmf_reference(X, y, _initial_h(len(X), 2, 5), 1.0, 0.1, 20, 2)
    est = MNMF(2, C=1.0, reconstruction_weight=0.1, semi_max_iter=20, max_iter=2, tol=0,
               inner_tol=1e-7, max_inner_iter=500, random_state=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y01)
    np.testing.assert_allclose(est.components_.T, G, atol=1e-4)
    np.testing.assert_allclose(est.coef_[0], w, atol=1e-4)
    assert est.intercept_[0] == pytest.approx(b, abs=1e-4)
    np.testing.assert_allclose(est.objective_history_[0], history, rtol=1e-5)
    assert np.all(est.inner_gaps_[0] <= 1e-7) and est.inner_gaps_[0].shape == (3, 2)


def test_mnmf_separates_the_toy_where_semi_nmf_features_do_not():
    """Kumar et al., Section 4.1 (a harder version of their toy): k = 2, C = 100,
    reconstruction_weight = 0.01."""
    for seed in (0, 1):
        X, y = make_margin_gaussians(random_state=seed)
        Xt, yt = make_margin_gaussians(random_state=100 + seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = MNMF(2, random_state=seed).fit(X, y)
            semi = SemiNMF(2, random_state=seed).fit(X)
        svm = LinearSVC(C=100, max_iter=100000).fit(X @ semi.components_.T, y)
        baseline = svm.score(Xt @ semi.components_.T, yt)
        assert est.score(X, y) >= 0.95
        assert est.score(Xt, yt) >= 0.8
        assert est.score(Xt, yt) >= baseline + 0.15


def test_mnmf_predicts_dask_as_dask(small_toy):
    """Dask in, Dask predictions out; the score of Dask X beside labels in memory.  (That
    the fit itself does not depend on the chunking is tests/test_protocol.py's.)"""
    X, y = small_toy
    kw = dict(C=1.0, reconstruction_weight=0.1, semi_max_iter=20, max_iter=3, tol=0,
              inner_tol=1e-6, random_state=2)
    Xd = da.from_array(X, chunks=(13, -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        many = MNMF(2, **kw).fit(Xd, da.from_array(y, chunks=7))
    pred = many.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), many.predict(X))
    assert many.score(Xd, y) == many.score(X, y)



def test_mnmf_scores_dask_labels_and_weights(small_toy):
    """score of Dask X with Dask y and sample weights chunked otherwise than X (one pass,
    nothing gathered): scikit-learn's weighted accuracy; y of the wrong length is refused."""
    from sklearn.metrics import accuracy_score

    X, y = small_toy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=5, max_iter=2, tol=0, random_state=0).fit(X, y)
    w = np.random.default_rng(0).random(len(y))
    Xd = da.from_array(X, chunks=(13, -1))
    yd, wd = da.from_array(y, chunks=7), da.from_array(w, chunks=11)
    want = accuracy_score(y, est.predict(X), sample_weight=w)
    assert est.score(Xd, yd, wd) == pytest.approx(want, rel=1e-12)
    assert est.score(X, yd, wd) == pytest.approx(want, rel=1e-12)
    assert est.score(Xd, yd) == est.score(X, y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.score(Xd, y[:-1])

def test_mnmf_pass_count(small_toy):
    X, y = small_toy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=5, tol=0, max_iter=2, random_state=0).fit(X, y)
    passes = est.inner_passes_[0]
    assert passes.shape == (3, 2) and passes[0, 0] == 0 and np.all(passes[:, 1] >= 1)
    # input check + initial H + 5 semi-NMF + the exact codes of the initial basis + the G
    # steps' Newton passes + one H pass per iteration; the SVM steps read the kept
    # features, not X
    assert np.all(passes[1:, 0] <= est.max_inner_iter)
    assert est.n_passes_ == 2 + 5 + 1 + passes[:, 0].sum() + 2


def test_mnmf_runs_every_iteration_in_few_newton_passes_at_the_defaults():
    """At the model's defaults (C = 100, theta = 10^4, 8 Newton passes per G step), tol=0
    runs every iteration, and an iteration reads X at most max_inner_iter + 1 times.  (That
    its objective never rises there is tests/test_protocol.py's.)"""
    X, y = make_margin_gaussians(60, 30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, tol=0, max_iter=12, random_state=0).fit(X, y)
    assert len(est.objective_history_[0]) == 12
    assert np.all(est.inner_passes_[0][1:, 0] <= 8)


def test_mnmf_one_vs_one_for_several_classes():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(240, n_features=8, centers=3, cluster_std=1.5, random_state=0)
    names = np.array(["ant", "bee", "cat"])[y]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, max_iter=3, random_state=0).fit(X, names)
    assert list(est.classes_) == ["ant", "bee", "cat"]
    assert est.pairs_ == [(0, 1), (0, 2), (1, 2)]
    assert est.components_.shape == (3, 2, 8) and est.coef_.shape == (3, 2)
    assert est.decision_function(X).shape == (240, 3)
    assert est.transform(X).shape == (240, 6)
    assert est.score(X, names) >= 0.95


@pytest.mark.parametrize("y, message", [
    (None, "requires y"),
    (np.zeros(59), "inconsistent numbers of samples"),
    (np.zeros((60, 2)), "1d array"),
    (np.ones(60), "at least 2 classes"),
])
def test_mnmf_label_errors(small_toy, y, message):
    X, _ = small_toy
    with pytest.raises(ValueError, match=message):
        MNMF(2).fit(X, y)


def test_mnmf_parameter_and_input_errors(small_toy):
    X, y = small_toy
    with pytest.raises(ValueError, match=r"The 'C' parameter of MNMF must be a float in the "
                                         r"range \[1e-50, 1e\+50\]\. Got -1(\.0)? instead\."):
        MNMF(2, C=-1.0).fit(X, y)
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        MNMF(2).fit(bad, y)
    with pytest.raises(ValueError, match="features"):
        MNMF(2, max_iter=0).fit(X, y).predict(X[:, :5])


# ---------------------------------------------------------------- NNLS, transform
from sklearn.base import clone
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import _ovr_decision_function

from daskrnmf.models import _semi


@pytest.mark.parametrize("spread", [1.0, 1e-3, 1e-5])
def test_nnls_codes_are_exact_on_ill_conditioned_bases(spread):
    """Active set against SciPy's NNLS, where coordinate descent stops short."""
    rs = np.random.default_rng(0)
    G = rs.normal(size=(30, 6))
    G[:, 1] = G[:, 0] + spread * rs.normal(size=30)          # cond(G) up to ~1e5
    G[:, 2] = G[:, 0] - 0.5 * G[:, 1] + spread * rs.normal(size=30)
    X = rs.normal(size=(80, 30))
    H = _semi.nnls_codes(G.T @ G, X @ G)
    ref = np.array([nnls(G, x)[0] for x in X])
    assert H.min() >= 0
    np.testing.assert_allclose(H, ref, rtol=1e-7, atol=1e-9)


def test_nnls_codes_with_more_components_than_features():
    G = np.array([[1.0, 2.0]])                                 # rank 1
    H = _semi.nnls_codes(G.T @ G, np.array([[3.0], [-1.0]]) @ G)
    np.testing.assert_allclose(H @ G.T, [[3.0], [0.0]], atol=1e-12)


def test_semi_nmf_fit_transform_equals_fit_then_transform(small_toy):
    X, _ = small_toy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        H = SemiNMF(4, max_iter=30, random_state=0).fit_transform(X)
        est = SemiNMF(4, max_iter=30, random_state=0).fit(X)
        Hd = SemiNMF(4, max_iter=30, random_state=0).fit_transform(
            da.from_array(X, chunks=(17, -1)))
    np.testing.assert_allclose(est.transform(X), H, rtol=1e-6, atol=1e-9 * np.abs(H).max())
    np.testing.assert_allclose(Hd.compute(), H, rtol=1e-6, atol=1e-9 * np.abs(H).max())
    lazy = est.transform(da.from_array(X, chunks=(17, -1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), H, rtol=1e-6, atol=1e-9 * np.abs(H).max())


# ---------------------------------------------------------------- float32, outputs, NaN
def test_float32_in_float32_out(small_toy):
    X, y = small_toy
    X32 = X.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        semi = SemiNMF(2, max_iter=10, random_state=0)
        H = semi.fit_transform(X32)
        clf = MNMF(2, semi_max_iter=5, max_iter=1, random_state=0).fit(X32, y)
    # parameters, transform and outputs of every model: tests/test_protocol.py
    assert H.dtype == np.float32
    assert clf.decision_function(X32).dtype == np.float32
    assert clf.decision_function(X).dtype == np.float64


def test_outputs_are_what_the_cli_writes(small_toy):
    X, y = small_toy
    Xd = da.from_array(X, chunks=(13, -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        semi = SemiNMF(2, max_iter=5, random_state=0).fit(X)
        clf = MNMF(2, semi_max_iter=5, max_iter=1, random_state=0).fit(X, y)
    out = semi._outputs(Xd)
    assert list(out) == ["H"] and isinstance(out["H"], da.Array)
    np.testing.assert_allclose(out["H"].compute(), semi.transform(X))
    out = clf._outputs(Xd)
    assert list(out) == ["predictions"] and isinstance(out["predictions"], da.Array)
    np.testing.assert_array_equal(out["predictions"].compute(), clf.predict(X))
    np.testing.assert_array_equal(clf._outputs(X)["predictions"], clf.predict(X))


def test_dask_input_with_nan_raises_like_numpy(small_toy):
    X, y = small_toy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        semi = SemiNMF(2, max_iter=5, random_state=0).fit(X)
        clf = MNMF(2, semi_max_iter=5, max_iter=1, random_state=0).fit(X, y)
    bad = X.copy()
    bad[20, 1] = np.nan
    for method in (semi.transform, clf.predict, clf.decision_function, clf.transform):
        with pytest.raises(ValueError, match="NaN"):
            method(bad)
        with pytest.raises(ValueError, match="NaN"):
            method(da.from_array(bad, chunks=(13, -1))).compute()


# ---------------------------------------------------------------- the classifier contract
def test_renamed_parameters_warn_and_still_work(small_toy):
    with pytest.warns(FutureWarning, match="'lam' of MNMF was renamed to 'reconstruction_weight'"):
        est = MNMF(2, lam=0.5)
    with pytest.warns(FutureWarning, match="'inner_max_iter' of MNMF was renamed to "
                                           "'max_inner_iter'"):
        est.set_params(inner_max_iter=7)
    params = est.get_params()
    assert params["reconstruction_weight"] == 0.5 and params["max_inner_iter"] == 7
    assert "lam" not in params and "inner_max_iter" not in params
    assert clone(est).get_params() == params
    with pytest.raises(TypeError, match="unexpected keyword argument 'lamda'"):
        MNMF(2, lamda=0.5)


@pytest.mark.parametrize("y, error, message", [
    (np.linspace(0, 1, 60), ValueError, "Unknown label type: continuous"),
    (np.r_[np.zeros(59), np.nan], ValueError, "Input y contains NaN"),
    (np.r_[np.zeros(59), np.inf], ValueError, "Input y contains infinity"),
])
def test_mnmf_refuses_targets_that_are_not_classes(small_toy, y, error, message):
    X, _ = small_toy
    with pytest.raises(error, match=message):
        MNMF(2).fit(X, y)
    with pytest.raises(error, match=message):
        MNMF(2).fit(da.from_array(X, chunks=(13, -1)), da.from_array(y, chunks=7))


def test_mnmf_column_vector_y_warns_and_is_raveled(small_toy):
    X, y = small_toy
    kw = dict(semi_max_iter=5, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        flat = MNMF(2, **kw).fit(X, y)
        with pytest.warns(DataConversionWarning, match="column-vector y"):
            col = MNMF(2, **kw).fit(X, y[:, None])
        with pytest.warns(DataConversionWarning, match="column-vector y"):
            lazy = MNMF(2, **kw).fit(da.from_array(X, chunks=(13, -1)),
                                     da.from_array(y[:, None], chunks=(7, 1)))
    np.testing.assert_array_equal(col.coef_, flat.coef_)
    np.testing.assert_allclose(lazy.coef_, flat.coef_, atol=1e-6)


def test_mnmf_multiclass_decision_function_is_svc_ovr_shape():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(120, n_features=5, centers=4, cluster_std=2.0, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=20, max_iter=2, random_state=0).fit(X, y)
    dec = est.decision_function(X)
    assert dec.shape == (120, 4)
    np.testing.assert_array_equal(est.classes_[np.argmax(dec, axis=1)], est.predict(X))
    pairwise = _semi.pair_decisions(X, *est._problems())
    np.testing.assert_allclose(dec, _ovr_decision_function(pairwise < 0, -pairwise, 4))
    Xd = da.from_array(X, chunks=(50, -1))
    np.testing.assert_allclose(est.decision_function(Xd).compute(), dec)
    np.testing.assert_array_equal(est.predict(Xd).compute(), est.predict(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert est.fit_transform(X, y).shape == (120, 6 * 2)
    assert list(est.get_feature_names_out()) == [f"mnmf{i}" for i in range(12)]


def test_mnmf_binary_decision_sign_is_prediction(small_toy):
    X, y = small_toy
    names = np.array(["no", "yes"])[y]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=10, max_iter=2, random_state=0).fit(X, names)
    dec = est.decision_function(X)
    assert dec.shape == (len(X),)
    np.testing.assert_array_equal(np.where(dec > 0, "yes", "no"), est.predict(X))


@pytest.mark.parametrize("seed", [25, 42])
def test_numerically_singular_newton_hessian_is_no_error(seed):
    """Seeds on which the G step's Hessian (theta / mu * H + I / kappa) is singular in
    float64 (scikit-learn's check_dtype_object data): a LinAlgError before."""
    from sklearn.utils.estimator_checks import check_dtype_object

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_dtype_object("MNMF", MNMF(n_components=2, random_state=seed))


@pytest.mark.parametrize("lazy", [False, True])
def test_mnmf_refuses_classes_of_one_sample(lazy):
    # issue 40: as many classes as samples is n (n - 1) / 2 binary problems of one sample
    # a side, each a fit of its own (on Dask input, minutes for 40 samples): refused
    X = np.abs(np.random.default_rng(0).normal(size=(8, 3)))
    y = np.array([0, 0, 1, 1, 2, 3, 4, 4])
    if lazy:
        X, y = da.from_array(X, chunks=(3, -1)), da.from_array(y, chunks=3)
    with pytest.raises(ValueError, match=r"at least 2 samples of every class in y; "
                                         r"2 classes have 1 sample: \[2, 3\]"):
        MNMF(2, max_iter=1, semi_max_iter=1).fit(X, y)


@pytest.fixture(scope="module")
def sklearn_train_blobs():
    """scikit-learn's check_classifiers_train data: 3 standardised blobs, shuffled."""
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler
    from sklearn.utils import shuffle

    X, y = make_blobs(n_samples=300, random_state=0)
    X, y = shuffle(X, y, random_state=7)
    return StandardScaler().fit_transform(X), y


@pytest.mark.parametrize("seed", [0, 11])
def test_mnmf_semi_update_does_not_overflow_into_a_zero_classifier(sklearn_train_blobs,
                                                                    seed):
    """Ding's H update divided a moderate numerator by a denominator of ~1e-322 (a row of
    H decayed toward 0): the ratio overflowed, the NaN it made became H = 0, and one pair's
    classifier ended exactly 0 (training accuracy 0.69; the pair alone 0.935)."""
    X, y = sklearn_train_blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(n_components=3, random_state=seed).fit(X, y)
    assert np.all(np.abs(est.coef_).max(axis=1) > 0)
    assert np.isfinite(est.components_).all()
    assert est.score(X, y) > 0.83           # check_classifiers_train's bar
    # every pair's classifier, on that pair's samples, near the pair fitted alone (0.935)
    dec = _semi.pair_decisions(X, *est._problems())
    for p, (a, b) in enumerate(est.pairs_):
        rows = (y == a) | (y == b)
        assert np.mean((dec[rows, p] > 0) == (y[rows] == a)) >= 0.9


@pytest.mark.parametrize("first", ["a", 1])
def test_mnmf_refuses_mixed_string_and_number_labels(small_toy, first):
    """An object y mixing str and int labels: scikit-learn's message, for NumPy and Dask
    y, not a TypeError from sorting the labels."""
    X, _ = small_toy
    other = 1 if first == "a" else "a"
    y = np.array([first, other] * (len(X) // 2), dtype=object)
    est = MNMF(2)
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\)"):
        est.fit(X, y)
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\)"):
        est.fit(da.from_array(X, chunks=(13, -1)), da.from_array(y, chunks=7))
    assert not hasattr(est, "coef_")


def test_mnmf_tiny_reconstruction_weight_still_takes_g_steps(small_toy):
    """At reconstruction_weight <= 1e-13, c = w^T P w fell below a fixed 1e-12 and every
    G step was skipped as if w were 0: the objective ended 7x that of 1e-12 (5813 against
    834) and the accuracy at chance (0.52 against 0.93)."""
    X, y = small_toy
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = MNMF(2, reconstruction_weight=1e-12, random_state=0).fit(X, y)
        tiny = MNMF(2, reconstruction_weight=1e-40, random_state=0).fit(X, y)
    assert tiny.inner_passes_[0][1:, 0].sum() > 0           # the G steps ran
    assert tiny.objective_history_[0][-1] == pytest.approx(ref.objective_history_[0][-1],
                                                           rel=1e-3)
    assert tiny.score(X, y) == ref.score(X, y)


@pytest.mark.parametrize("param", ["C", "reconstruction_weight", "intercept_scaling"])
@pytest.mark.parametrize("value", [1e-300, 1e300, np.inf])
def test_mnmf_weights_beyond_float64_are_refused(small_toy, param, value):
    """Beyond 1e+-50 the products of C, 1 / reconstruction_weight and intercept_scaling^2
    overflowed (non-finite intercept_ and decision values, a skipped G step, chance
    accuracy): the constraint refuses them with the range."""
    X, y = small_toy
    est = MNMF(2, **{param: value})
    with pytest.raises(ValueError, match=rf"The '{param}' parameter of MNMF must be a float "
                                         r"in the range \[1e-50, 1e\+50\]\. Got "):
        est.fit(X, y)
    assert not hasattr(est, "coef_")


def test_mnmf_fit_takes_basemodels_keywords(small_toy, tmp_path):
    """MNMF.fit, which defines its own, has BaseModel.fit's keywords: the checkpoint's
    ``resume`` / ``overwrite_checkpoint``, and still ``component`` and ``storage_options``
    (added to every fit by BaseModel)."""
    X, y = small_toy
    store = str(tmp_path / "d.zarr")
    da.from_array(X, chunks=(20, X.shape[1])).to_zarr(store, component="X")
    params = dict(n_components=2, max_iter=2, semi_max_iter=5, random_state=0)
    a = MNMF(**params).fit(X, y)
    b = MNMF(**params).fit(store, y, component="X", storage_options={})
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9)   # summed in other blocks
    with pytest.raises(ValueError, match="resume=True needs the 'checkpoint' parameter of MNMF"):
        MNMF(**params).fit(X, y, resume=True)
    path = str(tmp_path / "ckpt")
    MNMF(**params, checkpoint=path).fit(X, y)
    with pytest.raises(ValueError, match="holds an earlier run's checkpoint"):
        MNMF(**params, checkpoint=path).fit(X, y)
    c = MNMF(**params, checkpoint=path).fit(X, y, overwrite_checkpoint=True)
    np.testing.assert_array_equal(a.coef_, c.coef_)
