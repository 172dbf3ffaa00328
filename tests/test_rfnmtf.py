"""RFNMTF against the exact in-memory update rules (eq. 20-22), planted recovery, invariances."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import SpectralBiclustering
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import RFNMTF
from daskrnmf.datasets import make_coclusters
from daskrnmf.metrics import clustering_accuracy

from .reference import rfnmtf_reference


@pytest.fixture(scope="module")
def planted():
    # the case: 8 x 6 blocks, 5 % of the entries replaced by gross outliers
    return make_coclusters(1000, 120, 8, 6, outlier_fraction=0.05, random_state=0)


@pytest.fixture(scope="module")
def small():
    X, r, c, _ = make_coclusters(300, 40, 4, 3, noise=2.0, outlier_fraction=0.05, random_state=1)
    return X, r, c


def _start(X, K, L, seed):
    """A deliberately poor start: random block values and column labels."""
    g = np.random.default_rng(seed)
    return g.uniform(X.min(), np.median(X) * 2, size=(K, L)), g.integers(0, L, X.shape[1])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("chunks", [None, 300, 47])
def test_matches_exact_reference(small, chunks):
    X, _, _ = small
    S0, c0 = _start(X, 4, 3, 0)
    data = X if chunks is None else da.from_array(X, chunks=(chunks, X.shape[1]))
    m = RFNMTF(4, 3, init=(S0, c0), max_iter=8, tol=0.0).fit(data)
    S, c, r, hist = rfnmtf_reference(X, S0, c0, m.n_iter_)
    np.testing.assert_array_equal(m.block_medians_, S)  # medians are exact order statistics
    np.testing.assert_array_equal(m.column_labels_, c)
    np.testing.assert_allclose(m.objective_history_, hist, rtol=1e-12)
    final = np.abs(X[:, None, :] - S[:, c][None]).sum(-1)
    np.testing.assert_array_equal(np.asarray(m.row_labels_), final.argmin(1))
    np.testing.assert_allclose(m.objective_, final.min(1).sum(), rtol=1e-12)
    assert m.n_iter_ == 8


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_matches_reference_with_histogram_rounds(small, dask_config):
    # budgets forced small: the S step histograms and refines over several passes
    dask_config({"daskrnmf.median-collect-values": 500,
                 "daskrnmf.median-histogram-cells": 64})
    X, _, _ = small
    S0, c0 = _start(X, 4, 3, 1)
    m = RFNMTF(4, 3, init=(S0, c0), max_iter=4, tol=0.0).fit(da.from_array(X, chunks=(37, 40)))
    S, c, _, hist = rfnmtf_reference(X, S0, c0, 4)
    np.testing.assert_array_equal(m.block_medians_, S)
    np.testing.assert_array_equal(m.column_labels_, c)
    np.testing.assert_allclose(m.objective_history_, hist, rtol=1e-12)
    assert max(m.median_rounds_) >= 3


def test_empty_row_and_column_clusters_reseeded():
    X, _, _, _ = make_coclusters(60, 12, 2, 2, noise=0.5, outlier_fraction=0.0, random_state=2)
    lo, hi = X.min(), X.max()
    S0 = np.array([[lo, hi, hi], [hi, lo, lo], [1e6, 1e6, 1e6]])  # row cluster 2 wins nothing
    c0 = np.zeros(12, dtype=int)  # column clusters 1 and 2 start empty
    m = RFNMTF(3, 3, init=(S0, c0), max_iter=1, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X)
    S, c, _, _ = rfnmtf_reference(X, S0, c0, 1)
    np.testing.assert_array_equal(m.column_labels_, c)
    assert np.all(np.bincount(c, minlength=3) > 0)
    np.testing.assert_array_equal(m.block_medians_, S)
    assert np.all(np.isfinite(m.block_medians_))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_objective_with_median_tol_within_tolerance(small):
    X, _, _ = small
    m = RFNMTF(4, 3, n_init=1, init="random", max_iter=30, tol=0.0, median_tol=1e-3,
               random_state=0).fit(X)
    h = m.objective_history_
    # an approximate median is off by at most median_tol * range per entry
    slack = 1e-3 * (X.max() - X.min()) * X.size
    assert np.all(np.diff(h) <= slack), h


@pytest.mark.parametrize("random_state", [0, 1, 2])
def test_recovers_planted_coclusters_with_gross_outliers(planted, random_state):
    X, r, c, _ = planted
    m = RFNMTF(8, 6, random_state=random_state).fit(X)
    assert clustering_accuracy(r, m.row_labels_) >= 0.99
    assert clustering_accuracy(c, m.column_labels_) >= 0.99


def test_recovers_planted_coclusters_out_of_core_input(tmp_path):
    import zarr

    X, r, c, _ = make_coclusters(3000, 120, 8, 6, outlier_fraction=0.05, random_state=3)
    z = zarr.create_array(str(tmp_path / "X.zarr"), shape=X.shape, chunks=(250, 120), dtype="f8")
    z[:] = X
    m = RFNMTF(8, 6, init_size=800, random_state=0).fit(str(tmp_path / "X.zarr"))
    assert isinstance(m.row_labels_, np.ndarray)   # owned by the model, not a graph over X
    assert clustering_accuracy(r, m.row_labels_) >= 0.99
    assert clustering_accuracy(c, m.column_labels_) >= 0.99


def test_l2_spectral_biclustering_does_worse_on_the_same_data(planted):
    X, r, c, _ = planted
    sb = SpectralBiclustering((8, 6), random_state=0).fit(X)
    assert clustering_accuracy(r, sb.row_labels_) < 0.9
    Xc, rc, cc, _ = make_coclusters(1000, 120, 8, 6, outlier_fraction=0.0, random_state=0)
    clean = SpectralBiclustering((8, 6), random_state=0).fit(Xc)
    assert clustering_accuracy(rc, clean.row_labels_) == 1.0  # the outliers are what break it


def test_pass_count_and_speculative_s_round(planted):
    X, _, _, _ = planted
    seen = []
    m = RFNMTF(8, 6, n_init=2, random_state=0,
               callback=lambda info: seen.append(info["n_passes"]) and False).fit(
                   da.from_array(X, chunks=(250, X.shape[1])))
    per_iter = np.diff([1] + seen)  # feature stats + row sample come first, one pass
    assert m.n_passes_ == seen[-1] + 1  # + the final row step
    # an iteration is the fused pass plus the S rounds it did not finish
    assert np.all(per_iter >= 1) and np.all(per_iter <= 1 + np.array(m.median_rounds_))
    # once the column labels stop moving, the fused pass's speculative round (with the
    # warm windows) finishes S: one pass per iteration
    assert per_iter[-1] == 1 and m.median_rounds_[-1] == 1
    # in memory the block medians are selected after the fused pass: one pass per
    # iteration, no median rounds, the same fit
    seen_np = []
    mn = RFNMTF(8, 6, n_init=2, random_state=0,
                callback=lambda info: seen_np.append(info["n_passes"]) and False).fit(X)
    assert np.all(np.diff([1] + seen_np) == 1) and not any(mn.median_rounds_)
    np.testing.assert_array_equal(mn.row_labels_, m.row_labels_)
    np.testing.assert_array_equal(mn.block_medians_, m.block_medians_)


def test_predict_transform_and_api(small):
    X, _, _ = small
    m = RFNMTF(4, 3, n_init=2, random_state=0).fit(X)
    np.testing.assert_array_equal(m.predict(X), m.row_labels_)
    T = m.transform(X)
    np.testing.assert_allclose(T, np.abs(X[:, None] - m.row_prototypes_[None]).sum(-1))
    Xd = da.from_array(X, chunks=(50, X.shape[1]))
    assert isinstance(m.predict(Xd), da.Array)
    np.testing.assert_array_equal(m.predict(Xd).compute(), m.row_labels_)
    np.testing.assert_array_equal(RFNMTF(4, 3, n_init=2, random_state=0).fit_predict(X), m.row_labels_)
    assert m.block_medians_.shape == (4, 3) and m.column_labels_.shape == (X.shape[1],)
    c = clone(m).set_params(n_row_clusters=2)
    assert c.n_row_clusters == 2 and c.get_params()["n_column_clusters"] == 3
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :5])


@pytest.mark.parametrize("kwargs, match", [
    ({"n_row_clusters": 301}, "n_row_clusters=301 must be <= n_samples=300"),
    ({"max_iter": -3}, r"The 'max_iter' parameter of RFNMTF must be an int in the range \[1, inf\). Got -3"),
    ({"init": "kmeans"}, "The 'init' parameter of RFNMTF must be"),
    ({"init": (np.ones((4, 3)), np.zeros(39, dtype=int))}, "column labels of shape"),
    ({"init": (np.ones((4, 2)), np.zeros(40, dtype=int))}, "block values of shape"),
    ({"init": (np.ones((4, 3)), np.full(40, 3))}, "values in"),
    ({"init_size": 0}, "The 'init_size' parameter"),
])
def test_bad_parameters(small, kwargs, match):
    X, _, _ = small
    params = {"n_row_clusters": 4, "n_column_clusters": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        RFNMTF(**params).fit(X)


def test_bad_input(small):
    X, _, _ = small
    bad = X.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        RFNMTF(4, 3).fit(bad)
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        RFNMTF(4, 3).fit(da.from_array(bad, chunks=(50, 40)))
    with pytest.raises(ValueError, match="2D"):
        RFNMTF(4, 3).fit(X[:, 0])
    with pytest.raises(ValueError, match="chunked along its columns"):
        RFNMTF(4, 3).fit(da.from_array(X, chunks=(50, 20)))


def test_block_bracket_matches_its_numpy_twin_and_holds_the_medians(planted):
    """The first S step's windows: order statistics of each block's sample values at the
    row-counted ranks (a NumPy sort per block), and on planted data they hold the block
    medians of all of X."""
    from daskrnmf._median_search import block_bracket
    X, rows, cols, _ = planted
    K, L, z = 8, 6, 4.0
    sample = X[::5]
    labels = np.stack([rows[::5], (rows[::5] + 1) % K], axis=1)     # two "restarts"
    C = np.stack([cols, cols])
    lo, hi = block_bracket(sample, labels, C, K, L, z=z, min_count=10)
    lo, hi = lo.reshape(2, K, L), hi.reshape(2, K, L)
    for r in range(2):
        full = np.stack([rows, (rows + 1) % K], axis=1)[:, r]
        for k in range(K):
            m = int((labels[:, r] == k).sum())
            for l in range(L):
                V = np.sort(sample[labels[:, r] == k][:, C[r] == l].ravel())
                half = 0.5 * z / np.sqrt(m)
                a = int(np.floor((0.5 - half) * (V.size - 1)))
                b = int(np.ceil((0.5 + half) * (V.size - 1)))
                assert lo[r, k, l] == V[a] and hi[r, k, l] == V[b]
                med = np.median(X[full == k][:, C[r] == l])
                assert lo[r, k, l] <= med <= hi[r, k, l]
    # too few sample rows in a cluster: no bracket
    lo, hi = block_bracket(sample[:20], labels[:20], C, K, L)
    assert np.isnan(lo).all() and np.isnan(hi).all()


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_first_s_step_bracketed_by_the_sample_gives_the_same_fit(planted, monkeypatch,
                                                                 dask_config):
    """With the default initialisation the sample brackets the first S step's medians
    (histograms of the brackets, then collections: here two rounds, not four); the fit is
    the one without the brackets, bit for bit — also with budgets so small that
    brackets miss, are dropped and refine over more rounds."""
    from daskrnmf.models import rfnmtf
    X, _, _, _ = planted
    data = da.from_array(X, chunks=(250, X.shape[1]))

    def fit():
        return RFNMTF(8, 6, n_init=2, random_state=0, max_iter=3, tol=0.0).fit(data)

    def same(a, b):
        np.testing.assert_array_equal(a.block_medians_, b.block_medians_)
        np.testing.assert_array_equal(a.column_labels_, b.column_labels_)
        np.testing.assert_array_equal(np.asarray(a.row_labels_), np.asarray(b.row_labels_))

    dask_config({"daskrnmf.median-collect-values": 2**14,
                 "daskrnmf.median-histogram-cells": 2**10})
    with_bracket = fit()
    real = rfnmtf.block_bracket
    monkeypatch.setattr(rfnmtf, "block_bracket", lambda *a: tuple(
        np.full_like(w, np.nan) for w in real(*a)))
    without = fit()
    same(with_bracket, without)
    assert with_bracket.median_rounds_[0] == 2 < without.median_rounds_[0]
    monkeypatch.setattr(rfnmtf, "block_bracket", real)
    dask_config({"daskrnmf.median-collect-values": 300,
                 "daskrnmf.median-histogram-cells": 64})
    same(fit(), without)


def test_initialisation_sample_comes_with_the_first_pass(planted, monkeypatch):
    """The "k-medians++" initialisation's rows are the first pass's uniform sample (drawn
    with the value checks, no pass of its own), for Dask input and any init_size."""
    from daskrnmf.models import rfnmtf

    def no_pass(*a, **k):
        raise AssertionError("a separate sampling pass")

    monkeypatch.setattr(rfnmtf, "sample_rows", no_pass)
    X, _, _, _ = planted
    for init_size in (None, 300):
        m = RFNMTF(8, 6, n_init=2, random_state=0, init_size=init_size).fit(
            da.from_array(X, chunks=(250, X.shape[1])))
        assert m.n_iter_ >= 1


def test_restarts_screened_on_the_sample_pick_the_same_winner(monkeypatch):
    """Only the sample's best candidate runs on X (one restart in the callback's
    objective); on planted co-clusters it is the restart that wins when the n_init best
    run on X, on a sample smaller than X and on one that is all of X."""
    from daskrnmf.models import rfnmtf

    X, r, c, _ = make_coclusters(1500, 60, 5, 4, outlier_fraction=0.05, random_state=3)
    seen = []

    def restarts(info):
        seen.append(info["objective"].shape[0])

    for init_size in (400, 1500):
        seen.clear()
        screened = RFNMTF(5, 4, n_init=4, init_size=init_size, random_state=1,
                          callback=restarts).fit(X)
        assert set(seen) == {1}
        monkeypatch.setattr(rfnmtf._CoFit, "kept_on_x", 4)
        seen.clear()
        every = RFNMTF(5, 4, n_init=4, init_size=init_size, random_state=1,
                       callback=restarts).fit(X)
        monkeypatch.undo()
        assert set(seen) == {4}
        np.testing.assert_array_equal(screened.row_labels_, every.row_labels_)
        np.testing.assert_array_equal(screened.column_labels_, every.column_labels_)
        np.testing.assert_array_equal(screened.block_medians_, every.block_medians_)
        assert clustering_accuracy(r, screened.row_labels_) == 1.0


def test_further_candidates_only_when_the_first_disagree(planted, monkeypatch):
    """The initialisation draws its further candidates only when no two of the first
    n_init reached the same lowest sample objective: on the planted benchmark set they
    agree, and drawing all the candidates anyway picks the same winner; on much noisier
    data they do not, and the further candidates are drawn."""
    from daskrnmf.models import rfnmtf

    counts = []
    real = rfnmtf._CoFit._candidates

    def candidates(self, *args):
        counts.append(args[-1])
        return real(self, *args)

    monkeypatch.setattr(rfnmtf._CoFit, "_candidates", candidates)
    real_agreed = rfnmtf._agreed
    X, r, c, _ = planted
    agreed = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
    assert counts == [10]
    assert clustering_accuracy(r, agreed.row_labels_) == 1.0
    counts.clear()
    monkeypatch.setattr(rfnmtf, "_agreed", lambda objective: False)
    every = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
    assert counts == [10, 30]
    np.testing.assert_array_equal(agreed.row_labels_, every.row_labels_)
    np.testing.assert_array_equal(agreed.column_labels_, every.column_labels_)
    np.testing.assert_array_equal(agreed.block_medians_, every.block_medians_)
    monkeypatch.setattr(rfnmtf, "_agreed", real_agreed)
    counts.clear()
    Xn, _, _, _ = make_coclusters(200, 30, 4, 3, noise=8.0,
                                  outlier_fraction=0.1, random_state=0)
    RFNMTF(4, 3, n_init=4, random_state=0).fit(Xn)
    assert counts == [4, 12]
    assert real_agreed(np.array([3.0, 2.0, 2.0 * (1 + 1e-14), 5.0]))
    assert not real_agreed(np.array([3.0, 2.0, 2.0 * (1 + 1e-9), 5.0]))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_s_step_keeps_s_where_rows_and_columns_did_not_move(planted, monkeypatch):
    """In memory, a restart whose row and column labels are those of its last S step
    (and no row cluster empty) keeps S instead of selecting the same medians again:
    the fit (initialisation's co-fit of its candidates and the fit on X) equals the one
    that selects every step, bit for bit, with fewer selections."""
    from daskrnmf.models import rfnmtf

    X, _, _, _ = planted
    calls = []
    real = rfnmtf.block_medians
    monkeypatch.setattr(rfnmtf, "block_medians",
                        lambda *a: calls.append(1) or real(*a))
    # (X is the initialisation's sample: its S steps read X's values sorted once)
    swept = rfnmtf.SortedValues.block_medians
    monkeypatch.setattr(rfnmtf.SortedValues, "block_medians",
                        lambda self, *a: calls.append(1) or swept(self, *a))
    kept = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
    n_kept = len(calls)
    calls.clear()
    step = rfnmtf._CoFit.step

    def forgetful(self, state, active):
        self._rows = None                       # no last labels: every step selects
        return step(self, state, active)

    monkeypatch.setattr(rfnmtf._CoFit, "step", forgetful)
    every = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
    np.testing.assert_array_equal(kept.block_medians_, every.block_medians_)
    np.testing.assert_array_equal(kept.row_labels_, every.row_labels_)
    np.testing.assert_array_equal(kept.column_labels_, every.column_labels_)
    assert kept.n_iter_ == every.n_iter_
    assert n_kept < len(calls)


def test_candidates_that_start_alike_are_co_fitted_once(monkeypatch):
    """Candidates whose column clusters are the same up to their names share the rows'
    profiles (their row fits the restarts of one fit, each from its own seed), and those
    whose row and column clusters both are start from the same co-clustering and are
    co-fitted once: on the benchmark's planted sets (gross entries 0, 5 and 10 %) the fit
    equals the one that profiles and co-fits every candidate (the same objective, the
    same partitions), with fewer candidates co-fitted on the clean set."""
    from sklearn.metrics import adjusted_rand_score

    from daskrnmf.models import rfnmtf

    fitted, profiles = [], {}
    real_run, real_kmedians = rfnmtf.run_quiet, rfnmtf.kmedians_labels

    def run_quiet(step, state, **kw):
        fitted.append(kw["n_restarts"])
        return real_run(step, state, **kw)

    def kmedians_labels(X, k, n_restarts, seed, **kw):
        if k == 8:      # row fits: their profile's columns (in any order), by their seeds
            for s in kw.get("seeds") or [seed]:
                profiles[s] = sorted(np.ascontiguousarray(X.T).tobytes()[i * X.shape[0] * 8:
                                                                       (i + 1) * X.shape[0] * 8]
                                     for i in range(X.shape[1]))
        return real_kmedians(X, k, n_restarts, seed, **kw)

    monkeypatch.setattr(rfnmtf, "run_quiet", run_quiet)
    monkeypatch.setattr(rfnmtf, "kmedians_labels", kmedians_labels)
    for i, frac in enumerate([0.0, 0.05, 0.10]):
        X, r, c, _ = make_coclusters(1000, 120, 8, 6, outlier_fraction=frac, random_state=i)
        fitted.clear()
        merged = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
        n_merged, shared = fitted[0], dict(profiles)
        fitted.clear()
        profiles.clear()
        monkeypatch.setattr(rfnmtf._CoFit, "merge_starts", False)
        every = RFNMTF(8, 6, n_init=10, random_state=0).fit(X)
        monkeypatch.setattr(rfnmtf._CoFit, "merge_starts", True)
        assert fitted[0] == 10
        # every candidate's row fit, seeded by its own seed, on its own profile's columns
        assert shared == profiles
        assert n_merged <= 10 and (frac or n_merged < 5)
        assert merged.objective_ == pytest.approx(every.objective_, rel=1e-12)
        assert adjusted_rand_score(every.row_labels_, merged.row_labels_) == 1.0
        assert adjusted_rand_score(every.column_labels_, merged.column_labels_) == 1.0
        assert clustering_accuracy(r, merged.row_labels_) == 1.0


def test_cluster_names_in_order_of_appearance():
    """The key of a labelling is the same for any renaming of its clusters and differs
    for another partition; the first positions locate each name."""
    from daskrnmf.models.rfnmtf import _first_of_each, _named_in_order

    a = np.array([2, 2, 0, 1, 0, 2])
    key, first = _named_in_order(a, 4)
    assert key == _named_in_order(np.array([1, 1, 3, 0, 3, 1]), 4)[0]
    assert key != _named_in_order(np.array([2, 2, 0, 1, 1, 2]), 4)[0]
    np.testing.assert_array_equal(first, [2, 3, 0, -1])
    np.testing.assert_array_equal(_first_of_each([b"x", b"y", b"x", b"z", b"y"]),
                                  [0, 1, 0, 3, 1])


def test_in_memory_fit_from_a_smaller_sample_brackets_its_first_s_step(monkeypatch):
    """X in memory, larger than the initialisation's sample: the first S step's medians
    are counted below and gathered inside the sample's windows; the fit equals the one
    that selects them around the sample's S, bit for bit."""
    from daskrnmf.models import rfnmtf

    X, r, _, _ = make_coclusters(1200, 60, 4, 3, outlier_fraction=0.05, random_state=4)
    windows = []
    real = rfnmtf.block_medians

    def spy(*args, window=None, **kw):
        windows.append(window is not None)
        return real(*args, window=window, **kw)

    monkeypatch.setattr(rfnmtf, "block_medians", spy)
    bracketed = RFNMTF(4, 3, n_init=3, init_size=300, random_state=0).fit(X)
    assert any(windows)
    monkeypatch.setattr(rfnmtf, "block_medians",
                        lambda *args, window=None, **kw: real(*args, **kw))
    plain = RFNMTF(4, 3, n_init=3, init_size=300, random_state=0).fit(X)
    np.testing.assert_array_equal(bracketed.block_medians_, plain.block_medians_)
    np.testing.assert_array_equal(bracketed.row_labels_, plain.row_labels_)
    np.testing.assert_array_equal(bracketed.column_labels_, plain.column_labels_)
    assert clustering_accuracy(r, bracketed.row_labels_) == 1.0


def test_background_value_is_waited_for_and_its_error_raised_in_the_caller():
    """The initialisation's sort on a thread of its own: ``get`` gives the value (started
    or not, as often as asked) and raises the thread's error in the caller."""
    from daskrnmf.models.rfnmtf import _Background

    lazy = _Background(np.sort, np.array([3.0, 1.0, 2.0]))
    np.testing.assert_array_equal(lazy.get(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(lazy.get(), [1.0, 2.0, 3.0])
    started = _Background(np.sort, np.array([2.0, 1.0]))
    started.start()
    np.testing.assert_array_equal(started.get(), [1.0, 2.0])
    failing = _Background(np.reshape, np.arange(3), (2, 2))
    failing.start()
    with pytest.raises(ValueError):
        failing.get()


def test_first_fit_compiles_one_median_kernel_of_each_kind(small, monkeypatch):
    """A fit in memory whose initialisation's sample is all of X (n_samples <=
    init_size) reads every block median off X's values sorted once (never the selection
    kernel ``block_medians``), and its k-medians fits (columns and rows) all take their
    medians off sorted values (``perm`` given, never the selection kernel): Numba
    compiles one median kernel of each kind for a first fit (the compile wait of issue 38).  The
    same fit as with ``block_medians`` (its S steps are the same numbers)."""
    from daskrnmf.kernels import kmedians
    from daskrnmf.models import rfnmtf

    X, _, _ = small
    selected, markers = [], []
    real_block, real_update = rfnmtf.block_medians, kmedians._update
    monkeypatch.setattr(rfnmtf, "block_medians",
                        lambda *a, **k: selected.append(1) or real_block(*a, **k))
    monkeypatch.setattr(kmedians, "_update",
                        lambda *a: markers.append(a[0] is None) or real_update(*a))
    model = RFNMTF(4, 3, n_init=2, random_state=0).fit(X)
    assert not selected
    assert markers and set(markers) == {False}
    # the same numbers as the selection: the final S is the block medians of the labels
    want = real_block(X, model.row_labels_, model.column_labels_, 4, 3)
    np.testing.assert_array_equal(model.block_medians_, want)


def test_first_fit_calls_two_kernels_of_its_own(small, monkeypatch):
    """A fit in memory calls, of the compiled kernels in RFNMTF's own modules (the
    k-medians loop, the median selections, the co-clustering), only the column costs and
    the median sweep (clusters of features and blocks of X alike), so a first fit
    compiles no more of them (issue 38's compile wait: the k-medians loop's bookkeeping,
    the ranks of the sample's rows and the positions of its sorted values are NumPy).  Every Numba dispatcher those modules
    look up is replaced by a recorder of its calls from Python."""
    from numba.core.registry import CPUDispatcher

    from daskrnmf.kernels import cocluster, kmedians, median_select

    called = set()

    def recorder(name, kernel):
        def call(*args, **kwargs):
            called.add(name)
            return kernel(*args, **kwargs)
        return call

    for module in (cocluster, kmedians, median_select):
        for name, value in vars(module).copy().items():
            if isinstance(value, CPUDispatcher):
                monkeypatch.setattr(module, name, recorder(name, value))
    X, _, _ = small
    RFNMTF(4, 3, n_init=2, random_state=0).fit(X)
    assert called == {"_column_costs", "_sweep_medians"}
