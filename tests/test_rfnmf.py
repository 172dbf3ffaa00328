"""RFNMF against the exact in-memory update rules, planted recovery, invariances, API."""

import logging
import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import RFNMF
from daskrnmf.datasets import make_outlier_blobs
from daskrnmf.metrics import clustering_accuracy

from .reference import objective, rfnmf_reference

LOSSES = ["l1", "l21"]


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=2.0, random_state=3)
    return X, y


def _eps(X):
    return 1e-10 * np.max(X.max(0) - X.min(0))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("chunks", [None, 600, 47])
def test_matches_exact_reference(blobs, loss, chunks):
    X, _ = blobs
    F0 = X[[0, 1, 2, 3]] + 0.5
    data = X if chunks is None else da.from_array(X, chunks=(chunks, 5))
    m = RFNMF(4, loss=loss, init=F0, max_iter=6, tol=0.0).fit(data)
    F, labels, hist = rfnmf_reference(X, F0, loss, m.n_iter_, _eps(X))
    rtol = 0 if loss == "l1" else 1e-9
    np.testing.assert_allclose(m.cluster_centers_, F, rtol=rtol, atol=1e-12 if rtol else 0)
    np.testing.assert_allclose(m.objective_history_, hist, rtol=1e-10)
    obj, lab = objective(X, F, loss)
    np.testing.assert_allclose(m.objective_, obj, rtol=1e-10)
    np.testing.assert_array_equal(np.asarray(m.labels_), lab)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("as_dask", [False, True])
def test_empty_cluster_reseeded_from_worst_fit(loss, as_dask):
    # in memory the worst-fit rows are taken from X by index, out of core they travel
    # with the pass's summary: the same centre
    X = np.array([[0.0, 0.0], [0.1, 0.0], [10.0, 0.0], [10.1, 0.0], [50.0, 50.0]])
    F0 = np.array([[0.0, 0.0], [10.0, 0.0], [1000.0, 1000.0]])  # centre 2 wins no sample
    m = RFNMF(3, loss=loss, init=F0, max_iter=1, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(da.from_array(X, chunks=(2, 2)) if as_dask else X)
    F, _, _ = rfnmf_reference(X, F0, loss, 1, _eps(X))
    np.testing.assert_allclose(m.cluster_centers_[2], [50.0, 50.0])
    np.testing.assert_allclose(m.cluster_centers_, F)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("init", ["k-medians++", "random"])
def test_recovers_planted_clusters(loss, init):
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=1.0, random_state=3)
    m = RFNMF(4, loss=loss, init=init, n_init=5, random_state=0).fit(X)
    assert clustering_accuracy(y, m.labels_) == 1.0


@pytest.mark.parametrize("loss", LOSSES)
def test_robust_to_outliers_where_kmeans_is_not(loss):
    X, y = make_outlier_blobs(random_state=0)
    inl = y >= 0
    m = RFNMF(2, loss=loss, n_init=10, random_state=0).fit(X)
    km = KMeans(2, n_init=10, random_state=0).fit(X)
    assert clustering_accuracy(y[inl], m.labels_[inl]) == 1.0
    assert clustering_accuracy(y[inl], km.labels_[inl]) < 0.9


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_random_state_controls_result(blobs):
    X, _ = blobs
    a = RFNMF(4, n_init=1, init="random", random_state=1, max_iter=3).fit(X)
    b = RFNMF(4, n_init=1, init="random", random_state=1, max_iter=3).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    c = RFNMF(4, n_init=1, init="random", random_state=2, max_iter=1).fit(X)
    d = RFNMF(4, n_init=1, init="random", random_state=1, max_iter=1).fit(X)
    assert not np.array_equal(c.cluster_centers_, d.cluster_centers_)
    gen = np.random.default_rng(5)
    est = RFNMF(4, n_init=1, random_state=gen)
    est.fit(X)
    assert est.random_state is gen


def test_n_init_keeps_lowest_objective(blobs):
    X, _ = blobs
    Xn = X + np.random.default_rng(0).standard_cauchy(size=X.shape)
    single = RFNMF(4, loss="l1", n_init=1, random_state=0, init="random").fit(Xn)
    seen = []
    stacked = RFNMF(4, loss="l1", n_init=6, random_state=0, init="random",
                    callback=lambda info: seen.append(info["objective"].copy()) and False).fit(Xn)
    # restart 0 of the stacked fit is the single-restart fit ...
    np.testing.assert_allclose([row[0] for row in seen[:single.n_iter_]], single.objective_history_)
    # ... the restarts differ, and the kept one is the best of them
    assert len(set(np.round(seen[0], 6))) > 1
    assert stacked.objective_ <= single.objective_
    # one pass per iteration serves every restart
    assert stacked.n_passes_ < 6 * single.n_passes_


def test_passes_counted(blobs):
    X, _ = blobs
    m = RFNMF(4, loss="l21", init="random", n_init=4, max_iter=5, tol=0.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X)
    # feature stats + random-G F step + one fused pass per iteration + final assignment
    assert m.n_passes_ == 1 + 1 + m.n_iter_ + 1
    m = RFNMF(4, loss="l21", n_init=2, max_iter=3, tol=0.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X)
    assert m.n_passes_ == 1 + 3 + 1  # k-medians++ seeds from the first pass's sample


def test_predict_transform_fit_predict(blobs):
    X, _ = blobs
    m = RFNMF(4, loss="l1", random_state=0).fit(X)
    np.testing.assert_array_equal(m.predict(X), m.labels_)
    T = m.transform(X)
    assert T.shape == (600, 4)
    np.testing.assert_allclose(T, np.abs(X[:, None] - m.cluster_centers_[None]).sum(-1))
    np.testing.assert_array_equal(T.argmin(1), m.labels_)
    Xd = da.from_array(X, chunks=(100, 5))
    assert isinstance(m.predict(Xd), da.Array)
    np.testing.assert_array_equal(m.predict(Xd).compute(), m.labels_)
    np.testing.assert_allclose(m.transform(Xd).compute(), T)
    np.testing.assert_array_equal(RFNMF(4, loss="l1", random_state=0).fit_predict(X), m.labels_)
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :3])


def test_sklearn_estimator_protocol():
    m = RFNMF(3, loss="l1", n_init=2, random_state=4, median_tol=1e-3)
    c = clone(m)
    assert c.get_params() == m.get_params()
    c.set_params(n_clusters=5, loss="l21")
    assert c.n_clusters == 5 and c.loss == "l21"
    with pytest.raises(Exception, match="not fitted"):
        m.predict(np.ones((3, 2)))


def test_convergence_warning_and_callback(blobs):
    X, _ = blobs
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        RFNMF(4, init="random", n_init=1, max_iter=1, random_state=0).fit(X)
    seen = []
    m = RFNMF(4, n_init=2, max_iter=50, tol=0.0, random_state=0,
              callback=lambda info: seen.append(info) or info["iteration"] == 2).fit(X)
    assert len(seen) == 2 and m.n_iter_ == 2
    assert seen[0]["objective"].shape == (2,) and seen[0]["n_passes"] > 0


def test_verbose_logs_objective(blobs, caplog):
    X, _ = blobs
    with caplog.at_level(logging.INFO, logger="daskrnmf"):
        RFNMF(4, n_init=1, verbose=1, random_state=0).fit(X)
    assert any("objective" in r.message for r in caplog.records)


def test_float32_and_integer_input():
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=1.0, random_state=3)
    m32 = RFNMF(4, loss="l1", random_state=0).fit(X.astype(np.float32))
    assert clustering_accuracy(y, m32.labels_) == 1.0
    Xi = np.round(X * 10).astype(np.int64)
    mi = RFNMF(4, loss="l1", random_state=0).fit(da.from_array(Xi, chunks=(50, 5)))
    assert clustering_accuracy(y, mi.labels_) == 1.0


def test_outputs_on_a_distributed_client(blobs, local_cluster):
    from distributed import Client

    X, _ = blobs
    Xd = da.from_array(X, chunks=(100, 5))
    with Client(local_cluster):
        seen = []
        m = RFNMF(4, loss="l1", n_init=2, random_state=0,
                  callback=lambda info: seen.append(info["iteration"]) and False).fit(Xd)
        labels = m.labels_     # computed in the fit's final pass
        assert isinstance(labels, np.ndarray)
        # predict's graph must not carry the estimator itself
        np.testing.assert_array_equal(m.predict(Xd).compute(), labels)
        assert m.transform(Xd).compute().shape == (600, 4)
    np.testing.assert_array_equal(labels, RFNMF(4, loss="l1", n_init=2, random_state=0).fit(X).labels_)


def test_l21_is_not_pinned_to_kmedians_pp_seeds():
    # seeds are data points with residual 0: without the unit-weight first step, the
    # IRLS weights pin every centre to its seed and the fit "converges" at once
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=3.0, random_state=1)
    m = RFNMF(4, loss="l21", n_init=1, random_state=0, tol=0.0, max_iter=100).fit(X)
    assert m.n_iter_ > 2
    assert not any(np.all(np.isclose(X, c), axis=1).any() for c in m.cluster_centers_)
    F, _, hist = rfnmf_reference(X, X[[0, 1, 2, 3]], "l21", 5, _eps(X))
    assert hist[1] == pytest.approx(hist[0], rel=1e-6)  # the literal rule from data points is stuck


def test_l2_loss_is_kmeans(blobs):
    X, y = blobs
    m = RFNMF(4, loss="l2", n_init=10, random_state=0).fit(X)
    km = KMeans(4, n_init=10, random_state=0).fit(X)
    np.testing.assert_allclose(m.objective_, km.inertia_, rtol=1e-9)
    assert clustering_accuracy(km.labels_, m.labels_) == 1.0


@pytest.mark.parametrize("loss", ["l21", "l1", "l2"])
@pytest.mark.parametrize("X", [np.full((30, 4), 3.0), np.zeros((30, 4)), np.ones((1, 4)),
                               np.full((30, 4), 1e-310), np.full((30, 4), 1e55)],
                         ids=["constant", "zeros", "one-row", "subnormal", "large"])
def test_degenerate_data_gives_finite_centres(X, loss):
    """Constant, all-zero, one-row, near-subnormal and huge data: the centre is the data's
    value and the objective finite, with no RuntimeWarning (the weight floor underflowed)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        m = RFNMF(1, loss=loss, n_init=2, random_state=0).fit(X)
    np.testing.assert_allclose(m.cluster_centers_[0], X[0], rtol=1e-12)
    assert np.isfinite(m.objective_)


def test_huge_scale_is_a_clear_error():
    with pytest.raises(ValueError, match="values up to 1e.300 in magnitude.*Rescale X"):
        RFNMF(2).fit(np.full((10, 3), 1e300))


def _gross_outlier_blobs(n, d, k, seed, fraction=0.05):
    """Gaussian clusters (centres U[2, 10]^d, std 1); ``fraction`` of the rows have a
    quarter of their entries replaced by U[0, 100] (make_zarr_blobs' corruption)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(2, 10, size=(k, d))
    y = rng.integers(0, k, n)
    X = centers[y] + rng.normal(size=(n, d))
    rows = np.flatnonzero(rng.random(n) < fraction)
    cols = np.argsort(rng.random((rows.size, d)), axis=1)[:, :d // 4]
    X[rows[:, None], cols] = rng.uniform(0, 100, size=(rows.size, d // 4))
    inlier = np.ones(n, dtype=bool)
    inlier[rows] = False
    return np.maximum(X, 0.0), y, inlier


@pytest.mark.parametrize("loss", ["l1", "l21"])
def test_seeding_resists_gross_outliers(loss):
    # 5 % gross outliers, one restart: the true clusters for at least 9 seeds of 10
    X, y, inlier = _gross_outlier_blobs(1500, 20, 8, seed=3)
    found = 0
    for seed in range(10):
        m = RFNMF(8, loss=loss, n_init=1, random_state=seed).fit(X)
        found += clustering_accuracy(y[inlier], m.labels_[inlier]) >= 0.98
    assert found >= 9


def test_seed_kernels_match_numpy():
    from daskrnmf.kernels.assign import seed_potentials, seed_update

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 37))
    cand = np.array([3, 50, 299, 3])
    mind = np.where(rng.random(300) < 0.1, np.inf, rng.uniform(0, 12, 300))
    for metric, ord_ in (("l1", 1), ("l2", 2)):
        D = np.linalg.norm(X[:, None, :] - X[cand][None], ord=ord_, axis=2)
        for tau, power in ((np.inf, 2), (5.0, 1), (5.0, 2)):
            want = (np.minimum(np.minimum(D, mind[:, None]), tau) ** power).sum(axis=0)
            np.testing.assert_allclose(seed_potentials(X, cand, mind, tau, metric, power), want,
                                       rtol=1e-12)
        got = seed_update(X, 50, mind.copy(), metric)
        np.testing.assert_allclose(got, np.minimum(mind, D[:, 1]), rtol=1e-12)


def test_gram_seed_kernels_equal_the_numpy_expression():
    """The L2 seeding's fused kernels give the NumPy expression they replaced bit for bit
    (same operations, same order)."""
    from daskrnmf.kernels.assign import seed_potentials_gram, seed_update_gram

    rng = np.random.default_rng(1)
    X = np.round(rng.normal(size=(301, 13)), 1)
    X[7] = X[3]                                          # a duplicate: distance 0 (or < 0)
    xx = np.einsum("ij,ij->i", X, X)
    cand = np.array([3, 50, 300, 3, 7])
    G = X @ X[cand].T
    D = np.sqrt(np.maximum(xx[:, None] + xx[cand][None] - 2.0 * G, 0.0))
    mind = np.where(rng.random(301) < 0.1, np.inf, rng.uniform(0, 6, 301))
    for tau, power in ((np.inf, 2), (3.0, 1), (3.0, 2)):
        cap = np.minimum(mind, tau)
        want = (np.minimum(D, cap[:, None]) ** power).sum(axis=0)
        np.testing.assert_array_equal(seed_potentials_gram(G, xx, xx[cand], cap, power), want)
    for t in range(len(cand)):
        np.testing.assert_array_equal(seed_update_gram(G, xx, xx[cand], t, mind.copy()),
                                      np.minimum(mind, D[:, t]))


@pytest.mark.parametrize("power", [1, 2])
def test_seed_draw_is_numpys_choice(power):
    """The greedy seeding's draw (compiled) gives the clip, the candidates and the
    generator's state of the NumPy code it replaced: ``tau = np.quantile(mind, q)``,
    weights ``min(mind, tau) ** power`` (rows off the centres alike when tau <= 0),
    ``gen.choice(n, T, p=w / w.sum())`` (uniform when every weight is 0)."""
    from daskrnmf.kernels.kmedians import seed_draw

    rng = np.random.default_rng(power)
    for trial in range(300):
        n = int(rng.integers(1, 400))
        mind = rng.random(n) * 10.0 ** rng.uniform(-3, 5)
        if trial % 4 == 1:
            mind[rng.random(n) < 0.95] = 0.0        # most rows on a centre: tau <= 0
        if trial % 10 == 3:
            mind[:] = 0.0                           # every weight 0
        if trial % 7 == 2:
            mind = np.round(mind)                   # ties
        q, T = (0.9, 0.5, 1.0)[trial % 3], int(rng.integers(1, 20))
        tau = np.quantile(mind, q)
        w = np.minimum(mind, tau) ** power
        if tau <= 0:
            w = (mind > 0).astype(np.float64)
        total = w.sum()
        want_gen, gen = np.random.default_rng([3, trial]), np.random.default_rng([3, trial])
        want = want_gen.choice(n, size=T, p=w / total if total > 0 else None)
        got_tau, got = seed_draw(mind, q, power, gen, T)
        assert got_tau == tau
        np.testing.assert_array_equal(got, want)
        assert gen.random() == want_gen.random()


def test_seeding_sample_is_drawn_in_the_first_pass():
    # the sample (and so the seeds) depend on X alone, not on its chunking
    X, _, _ = _gross_outlier_blobs(600, 6, 4, seed=1)
    a = RFNMF(4, n_init=2, max_iter=2, tol=0.0, random_state=0)
    b = RFNMF(4, n_init=2, max_iter=2, tol=0.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a.fit(da.from_array(X, chunks=(97, 6)))
        b.fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.n_passes_ == b.n_passes_ == 1 + 2 + 1


def test_in_memory_medians_match_numpy_and_out_of_core():
    # ties, heavy tails, an empty cluster, two restarts; float32 input
    from daskrnmf.models._clustering import cluster_medians

    rng = np.random.default_rng(4)
    X = np.round(rng.standard_cauchy(size=(301, 7)), 1).astype(np.float32)
    labels = np.stack([rng.integers(0, 4, 301), rng.integers(0, 3, 301)], axis=1)
    got = cluster_medians(X, labels, 4)
    for r in range(2):
        for c in range(4):
            rows = X[labels[:, r] == c].astype(np.float64)
            want = np.median(rows, axis=0) if len(rows) else np.full(7, np.nan)
            np.testing.assert_array_equal(got[r, c], want)
    # a fit in memory and out of core (many chunks) gives the very same centres
    F0 = X[:4].astype(np.float64) + 0.05
    a = RFNMF(4, loss="l1", init=F0, max_iter=5, tol=0.0)
    b = RFNMF(4, loss="l1", init=F0, max_iter=5, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a.fit(X)
        b.fit(da.from_array(X, chunks=(40, 7)))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.median_rounds_ == [1] * a.n_iter_      # selection: no refinement pass


@pytest.mark.parametrize("loss", ["l1", "l21"])
def test_restarts_screened_on_the_sample_find_the_same_clusters(loss, monkeypatch):
    # X larger than the seeding sample: the restarts run on the sample, the best on X
    import daskrnmf.models._clustering as clustering

    X, y, inlier = _gross_outlier_blobs(2400, 10, 6, seed=5)
    full = RFNMF(6, loss=loss, n_init=4, random_state=0).fit(X)  # sample = X: all on X
    monkeypatch.setattr(clustering, "SEED_SAMPLE_ROWS", 600)
    seen = []
    screened = RFNMF(6, loss=loss, n_init=4, random_state=0,
                     callback=lambda info: seen.append(len(info["objective"])) and False)
    screened.fit(da.from_array(X, chunks=500))
    assert set(seen) == {1}                                     # one restart on X
    # (L1: a fit whose last step kept its centres needs no final pass)
    assert screened.n_passes_ == 1 + screened.n_iter_ + (loss != "l1")
    # the same clusters (a fixed point reached from other centres may move a row or two)
    assert clustering_accuracy(full.labels_, screened.labels_) >= 0.995
    assert clustering_accuracy(y[inlier], screened.labels_[inlier]) >= 0.98
    np.testing.assert_allclose(screened.objective_, full.objective_, rtol=1e-3)


# ---------------------------------------------------------------- missing values
def test_masked_distances_match_numpy():
    from daskrnmf.kernels.assign import distances, nearest

    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 20))
    X[rng.random(X.shape) < 0.2] = np.nan
    X[3] = np.nan                                       # a row with nothing observed
    C = rng.normal(size=(2, 4, 20))
    M = ~np.isnan(X)
    scale = np.divide(20, M.sum(1), out=np.zeros(50), where=M.sum(1) > 0)
    for metric in ("l1", "l2"):
        diff = np.where(M[:, None, None, :], X[:, None, None, :] - C[None], 0.0)
        s = (np.abs(diff) if metric == "l1" else diff ** 2).sum(-1) * scale[:, None, None]
        want = s if metric == "l1" else np.sqrt(s)            # (50, R, k)
        labels, dist = nearest(X, C, metric)
        np.testing.assert_array_equal(labels, want.argmin(-1))
        np.testing.assert_allclose(dist, want.min(-1), rtol=1e-12)
        np.testing.assert_allclose(distances(X, C[0], metric), want[:, 0], rtol=1e-12)


@pytest.fixture(params=["compiled", "numpy"])
def median_path(request, monkeypatch):
    """Group medians by the compiled selection, or by NumPy (small inputs,
    :data:`~daskrnmf.kernels.median_select.SMALL_VALUES`)."""
    from daskrnmf.kernels import median_select

    if request.param == "compiled":
        monkeypatch.setattr(median_select, "SMALL_VALUES", -1)
    return request.param


def test_medians_from_previous_ones_equal_fresh_selection(median_path):
    """cluster_medians keeps the medians of unchanged clusters and counts / selects the
    others around the previous medians: the same values as a fresh selection and as
    numpy.median, on tied, heavy-tailed and missing data, with guesses exact, near, far
    and partly missing, counted by features (Xt) and by rows (X, float64 and float32)."""
    from daskrnmf.kernels.median_select import group_medians
    from daskrnmf.models._clustering import cluster_medians

    rng = np.random.default_rng(7)
    for trial in range(60):
        # (the last trials' groups are large enough to select a missed median on the
        # guess's side, SIDE_SELECT_MIN)
        n = int(rng.integers(1, 80)) if trial < 50 else int(rng.integers(200, 400))
        d, k = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        X = (rng.integers(0, 4, size=(n, d)).astype(float) if trial % 2
             else np.round(rng.standard_cauchy(size=(n, d)), 1))
        if trial % 3 == 0:
            X[rng.random(X.shape) < 0.2] = np.nan
        old = rng.integers(0, k, size=(n, 2))
        new = old.copy()
        moved = rng.random(n) < 0.2
        new[moved] = rng.integers(0, k, size=(int(moved.sum()), 2))
        before = cluster_medians(X, old, k)
        np.testing.assert_array_equal(cluster_medians(X, new, k, (old, before)),
                                      cluster_medians(X, new, k))
        np.testing.assert_array_equal(cluster_medians(X, new, k, guess=before),
                                      cluster_medians(X, new, k))
        # any guess gives the same medians
        lab = new[:, 0]
        order, ends = np.argsort(lab, kind="stable"), np.cumsum(np.bincount(lab, minlength=k))
        Xt = np.ascontiguousarray(X.T)
        fresh = group_medians(Xt, order, ends, np.full((k, d), np.nan))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN groups
            want = np.stack([np.nanmedian(X[lab == c], axis=0) if (lab == c).any()
                             else np.full(d, np.nan) for c in range(k)])
        np.testing.assert_array_equal(fresh, want)
        partly = fresh.copy()
        partly[rng.random(partly.shape) < 0.3] = np.nan
        X32 = X.astype(np.float32)
        Xt32 = np.ascontiguousarray(X32.T, dtype=np.float64)
        fresh32 = group_medians(Xt32, order, ends, np.full((k, d), np.nan))
        for guess in (fresh, fresh + 0.05, np.nextafter(fresh, np.inf), rng.normal(size=(k, d)),
                      np.full((k, d), 1e9), np.full((k, d), -1e9), partly):
            np.testing.assert_array_equal(
                group_medians(Xt, order, ends, np.full((k, d), np.nan), guess), fresh)
            np.testing.assert_array_equal(
                group_medians(Xt, order, ends, np.full((k, d), np.nan), guess, X=X), fresh)
            np.testing.assert_array_equal(
                group_medians(Xt32, order, ends, np.full((k, d), np.nan), guess, X=X32),
                fresh32)


def test_group_medians_skip_missing_values(median_path):
    from daskrnmf.kernels.median_select import group_medians

    rng = np.random.default_rng(5)
    X = np.round(rng.normal(size=(80, 6)), 1)
    X[rng.random(X.shape) < 0.3] = np.nan
    X[:, 5] = np.nan                                    # a feature nobody observes
    g = rng.integers(0, 3, 80)
    out = np.full((3, 6), np.nan)
    group_medians(np.ascontiguousarray(X.T), np.argsort(g, kind="stable"),
                  np.cumsum(np.bincount(g, minlength=3)), out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.stack([np.nanmedian(X[g == c], axis=0) for c in range(3)])
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("loss", ["l1", "l21"])
def test_missing_mask_on_complete_data_changes_nothing(loss):
    X, _, _ = _gross_outlier_blobs(400, 8, 4, seed=2)
    a = RFNMF(4, loss=loss, n_init=3, random_state=0).fit(X)
    b = RFNMF(4, loss=loss, n_init=3, random_state=0, missing="mask").fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert not a.__sklearn_tags__().input_tags.allow_nan
    assert b.__sklearn_tags__().input_tags.allow_nan


@pytest.mark.parametrize("loss", ["l1", "l21"])
def test_missing_values_clustered_in_memory_and_out_of_core(loss):
    # 10 % of the entries missing at random: the planted clusters are found as with the
    # complete data, and many chunks (histogram medians, tree sums) give the in-memory
    # result (selection medians) exactly
    X, y, inlier = _gross_outlier_blobs(900, 12, 5, seed=7)
    Xm = X.copy()
    Xm[np.random.default_rng(1).random(X.shape) < 0.1] = np.nan
    full = RFNMF(5, loss=loss, n_init=3, random_state=0).fit(X)
    mem = RFNMF(5, loss=loss, n_init=3, random_state=0, missing="mask").fit(Xm)
    ooc = RFNMF(5, loss=loss, n_init=3, random_state=0, missing="mask").fit(
        da.from_array(Xm, chunks=(101, 12)))
    assert (clustering_accuracy(y[inlier], mem.labels_[inlier])
            >= clustering_accuracy(y[inlier], full.labels_[inlier]) - 0.03)
    np.testing.assert_array_equal(np.asarray(ooc.labels_), mem.labels_)
    np.testing.assert_allclose(ooc.cluster_centers_, mem.cluster_centers_,
                               rtol=0 if loss == "l1" else 1e-9)
    assert np.isfinite(mem.cluster_centers_).all()
    # predict and transform take missing entries too
    np.testing.assert_array_equal(mem.predict(Xm), mem.labels_)
    assert np.isfinite(mem.transform(Xm)).all()


def test_missing_raise_is_the_default():
    X, _, _ = _gross_outlier_blobs(100, 4, 2, seed=0)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RFNMF(2).fit(X)
    with pytest.raises(ValueError, match="The 'missing' parameter of RFNMF must be"):
        RFNMF(2, missing="drop").fit(X)


@pytest.mark.parametrize("loss", ["l1", "l21"])
def test_seeds_drawn_on_threads_are_those_drawn_in_sequence(monkeypatch, loss):
    """The restarts' seeds are drawn, their in-memory medians selected and the rows
    assigned on one thread per core: the fit is the one the restarts give one after the
    other, on one thread."""
    from daskrnmf.models import _clustering

    X, _ = make_blobs(300, n_features=5, centers=4, random_state=3)
    X -= X.min()
    from daskrnmf.kernels import assign

    monkeypatch.setattr(_clustering, "available_cpus", lambda: 4)   # threads, whatever the machine
    monkeypatch.setattr(_clustering, "THREADS_MIN_VALUES", 0)        # ... and the data size
    monkeypatch.setattr(assign, "ROW_THREADS_MIN_WORK", 0)           # the assignment's rows too
    threaded = RFNMF(4, loss=loss, n_init=6, max_iter=2, tol=0, random_state=7).fit(X)
    monkeypatch.setattr(_clustering, "available_cpus", lambda: 1)
    sequential = RFNMF(4, loss=loss, n_init=6, max_iter=2, tol=0, random_state=7).fit(X)
    np.testing.assert_array_equal(threaded.cluster_centers_, sequential.cluster_centers_)
    np.testing.assert_array_equal(threaded.labels_, sequential.labels_)


def test_l1_out_of_core_final_assignment_is_the_last_pass_when_the_centres_stay():
    """Out of core, an L1 fit whose last step kept its centres (its labels did not
    change, so neither did the medians) takes that pass's labels and objective as the
    final assignment: no extra pass, the same result as the in-memory fit's final pass.
    A fit stopped while the centres still move makes the final pass."""
    X, _, _ = _gross_outlier_blobs(2400, 10, 6, seed=5)
    Xd = da.from_array(X, chunks=500)
    ref = RFNMF(6, loss="l1", n_init=1, random_state=0).fit(X)
    m = RFNMF(6, loss="l1", n_init=1, random_state=0).fit(Xd)
    assert m.n_passes_ == 1 + sum(m.median_rounds_)                  # no final pass
    np.testing.assert_array_equal(np.asarray(m.labels_), ref.labels_)
    np.testing.assert_array_equal(m.cluster_centers_, ref.cluster_centers_)
    assert m.objective_ == pytest.approx(ref.objective_, rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        short = RFNMF(6, loss="l1", n_init=1, init="random", max_iter=1, tol=0,
                      random_state=0).fit(Xd)
    assert short.n_passes_ == 1 + sum(short.median_rounds_) + 1      # the final pass


@pytest.mark.parametrize("chunks", [1200, 250])
def test_l1_out_of_core_step_that_repeats_the_last_pass_makes_none(chunks):
    """Out of core with tol=0, an L1 fit stops when its centres stop moving: the step
    that confirms it is given the centres the last step's pass was given, so that pass's
    labels, objective and exact medians are its own and it makes no pass (it made a
    fused pass before: 5 passes for 3 iterations on the benchmark's data, now 4).  The
    final centres are the exact medians of the final clusters (NumPy's), on one chunk
    and on many."""
    X, _, _ = _gross_outlier_blobs(1200, 6, 4, seed=3)
    m = RFNMF(4, loss="l1", n_init=1, tol=0.0, random_state=0).fit(
        da.from_array(X, chunks=(chunks, 6)))
    assert m.median_rounds_[-1] == 0 and min(m.median_rounds_[:-1]) >= 1
    assert m.n_passes_ == 1 + sum(m.median_rounds_)         # no final pass either
    labels = np.asarray(m.labels_)
    for c in range(4):
        np.testing.assert_array_equal(m.cluster_centers_[c], np.median(X[labels == c], axis=0))
    assert m.objective_ == pytest.approx(np.abs(X - m.cluster_centers_[labels]).sum(),
                                         rel=1e-12)


@pytest.mark.parametrize("loss", ["l1", "l21", "l2"])
@pytest.mark.parametrize("lazy", [False, True])
def test_missing_feature_no_sample_observes_gets_zero_centres(loss, lazy):
    """A feature no sample observes (with an all-NaN row and a feature observed once):
    its centre value was NaN (the middle of an empty range, inf and -inf) and predict put
    every complete row in one cluster.  Its centres are now 0 in every cluster, so it
    does not change which centre is nearest."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0, 0, 0, 0], [5, 5, 5, 5, 5], [0, 5, 0, 5, 0]])
    y = np.repeat([0, 1, 2], 20)
    X = centres[y] + rng.normal(scale=0.3, size=(60, 5))
    Xm = X.copy()
    Xm[:, 2] = np.nan                     # never observed
    Xm[1:, 4] = np.nan                    # observed once
    Xm[7] = np.nan                        # a row with nothing observed
    Xin = da.from_array(Xm, chunks=(20, 5)) if lazy else Xm
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = RFNMF(3, loss=loss, n_init=2, random_state=0, missing="mask").fit(Xin)
        pred = np.asarray(est.predict(X))
    assert np.isfinite(est.cluster_centers_).all()
    np.testing.assert_array_equal(est.cluster_centers_[:, 2], 0.0)
    assert clustering_accuracy(y, pred) == 1.0
    keep = np.arange(60) != 7
    assert clustering_accuracy(y[keep], np.asarray(est.labels_)[keep]) == 1.0


def test_an_increase_is_not_convergence():
    """RFNMF's L2,1 first step after seeding is a plain mean (a weight 1/||x - f|| at a
    seed that is a data point would pin it): it can raise the objective, and the driver's
    "decrease" rule took that rise for convergence — 22 of 30 single restarts on these
    blobs stopped at their second iteration (seed 1: 1005.8, against 962.7 when run on)."""
    from daskrnmf._driver import iterate

    values = iter([10.0, 12.0, 11.0, 10.5, 10.5])

    def step(state, active):
        return state, np.array([next(values)])

    _, log = iterate(step, None, n_restarts=1, max_iter=5, tol=1e-4)
    assert log.n_iter[0] == 5 and log.converged[0]        # ran on after the rise
    X = make_outlier_blobs(300, random_state=0)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = RFNMF(3, n_init=1, random_state=1).fit(X)
    h = m.objective_history_
    assert m.n_iter_ > 2 and h[-1] < h[1] and h[-1] < h[0]


def _separated_blobs(n, seed, boundary_row=False):
    """Three clusters 20 apart (Laplace noise, float32), or with one row halfway between
    two centres (its cluster is a tie at any medians near them)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0, 0, 0, 0], [20, 0, 20, 0], [0, 20, 0, 20]], dtype=float)
    X = centres[rng.integers(0, 3, n)] + rng.laplace(size=(n, 4))
    if boundary_row:
        X[0] = 0.5 * (np.median(X[np.abs(X - centres[1]).sum(1) < 20], axis=0)
                      + np.median(X[np.abs(X - centres[2]).sum(1) < 20], axis=0))
    return X.astype(np.float32)


@pytest.mark.parametrize("chunks, seed", [(600, 0), (97, 0), (600, 1), (97, 1)])
def test_l1_out_of_core_certified_collection_round_ends_the_fit(chunks, seed, dask_config):
    """Out of core, the first step's collection round (after the bracket histograms of
    the fused pass) also certifies that no row could change cluster for any medians
    inside their windows: then the fit has converged there, and the step that would
    assign the rows to those medians makes no pass: 3 passes for 3 iterations where
    there were 4 (the first pass, the fused pass, the collection round).  Labels and
    centres are the in-memory fit's, the centres NumPy's medians of the final clusters,
    the objective theirs to rounding."""
    X = _separated_blobs(600, seed)
    # a collection budget below X's values: the bracket round, then a collection
    dask_config({"daskrnmf.median-collect-values": 512})
    m = RFNMF(3, loss="l1", n_init=1, tol=0, random_state=seed).fit(
        da.from_array(X, chunks=(chunks, 4)))
    ref = RFNMF(3, loss="l1", n_init=1, tol=0, random_state=seed).fit(X)
    assert m.median_rounds_ == [2, 0, 0] and m.n_iter_ == ref.n_iter_ == 3
    assert m.n_passes_ == 3
    labels = np.asarray(m.labels_)
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_array_equal(m.cluster_centers_, ref.cluster_centers_)
    X64 = X.astype(np.float64)
    medians = np.stack([np.median(X64[labels == c], axis=0) for c in range(3)])
    # (the centres in X's dtype, as every fitted array; the fit's own are float64)
    np.testing.assert_array_equal(m.cluster_centers_, medians.astype(np.float32))
    objective = np.abs(X64 - medians[labels]).sum()
    assert m.objective_ == pytest.approx(objective, rel=1e-12)
    np.testing.assert_allclose(m.objective_history_, ref.objective_history_, rtol=1e-12)


@pytest.mark.parametrize("boundary_row, n_init", [(True, 1), (False, 3)])
def test_l1_out_of_core_uncertain_row_keeps_the_assignment_pass(boundary_row, n_init,
                                                                dask_config):
    """A row that sits between two clusters (a tie at medians near theirs) fails the
    certificate: the fit makes the assignment pass as before (4 passes), with the
    in-memory fit's labels and centres.  So does a fit whose restarts all run on X (X
    within the seeding sample) and are compared by their objectives: a certified
    objective is the assignment's to rounding only, and two restarts that reach one
    partition must tie as they did."""
    X = _separated_blobs(600, 0, boundary_row=boundary_row)
    dask_config({"daskrnmf.median-collect-values": 512})
    m = RFNMF(3, loss="l1", n_init=n_init, tol=0, random_state=0).fit(
        da.from_array(X, chunks=(97, 4)))
    ref = RFNMF(3, loss="l1", n_init=n_init, tol=0, random_state=0).fit(X)
    assert m.median_rounds_[:2] == [2, 1] and m.n_passes_ >= 4
    np.testing.assert_array_equal(np.asarray(m.labels_), ref.labels_)
    np.testing.assert_array_equal(m.cluster_centers_, ref.cluster_centers_)
