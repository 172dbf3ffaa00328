"""ORNMF, RNMF and NMF against the paper's dense update rules; ordering, chunking, input."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import NMF, ORNMF, RNMF
from daskrnmf._blocks import RowBlocks
from daskrnmf.datasets import make_ordered_segments
from daskrnmf.models.nmf import _MUFit
from daskrnmf.reductions import feature_stats

from .reference import ornmf_reference


@pytest.fixture(scope="module")
def seq():
    X, y = make_ordered_segments(n_features=30, n_segments=4, segment_length=10, noise=0.1,
                                 random_state=0)
    return X, y


def _engine(X, loss, alpha, init="nndsvda", block_rows=None):
    blocks = RowBlocks(X, block_rows=block_rows) if isinstance(X, np.ndarray) else RowBlocks(X)
    fit = _MUFit(blocks, feature_stats(blocks), k=4, loss=loss, alpha=alpha)
    W0 = fit.init(init, 0)
    H = fit.H if isinstance(X, np.ndarray) else [np.asarray(h.compute()) for h in fit.H]
    return fit, W0, np.concatenate(H) * fit.scale


@pytest.mark.parametrize("loss, alpha", [("l21", 0.3), ("l21", 0.0), ("fro", 0.0)])
@pytest.mark.parametrize("block_rows", [None, 7])
def test_updates_match_dense_paper_rules(seq, loss, alpha, block_rows):
    X, _ = seq
    fit, W0, H0 = _engine(X, loss, alpha, block_rows=block_rows)
    Wr, Hr, hist = ornmf_reference(X, W0, H0, alpha, 15, loss=loss)
    W, got = W0[None], []
    for _ in range(15):
        W, obj = fit.step(W, np.ones(1, bool))
        got.append(obj[0])
    fit.final(W[0])
    np.testing.assert_allclose(W[0], Wr, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(fit.H), Hr, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got, hist, rtol=1e-9)


def test_nndsvda_matches_scikit_learn(seq, monkeypatch):
    from sklearn.decomposition import _nmf

    def exact_svd(X, k, **kwargs):  # scikit-learn's is randomized
        U, S, Vt = np.linalg.svd(X, full_matrices=False)
        return U[:, :k], S[:k], Vt[:k]

    name = "_randomized_svd" if hasattr(_nmf, "_randomized_svd") else "randomized_svd"
    monkeypatch.setattr(_nmf, name, exact_svd)
    X, _ = seq
    _, W0, H0 = _engine(X, "l21", 0.0)
    Ws, Hs = _nmf._initialize_nmf(X, 4, init="nndsvda")
    np.testing.assert_allclose(H0 @ W0, Ws @ Hs, rtol=1e-6, atol=1e-9)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("init, n_init_passes", [("random", 1), ("nndsvda", 3)])
def test_passes_over_x(seq, init, n_init_passes):
    # input checks (which also give the mean for the random init), the initialisation,
    # one pass per iteration, the final errors
    X, _ = seq
    m = ORNMF(4, init=init, max_iter=5, tol=0.0, random_state=0).fit(X)
    assert m.n_passes_ == 1 + n_init_passes + 5 + 1


def test_nmf_reaches_scikit_learn_mu_error(seq):
    from sklearn.decomposition import NMF as SkNMF

    X, _ = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = NMF(4, max_iter=500, tol=1e-8, random_state=0).fit(X)
        sk = SkNMF(4, init="nndsvda", solver="mu", max_iter=500, tol=1e-8, random_state=0).fit(X)
    assert ours.reconstruction_err_ <= sk.reconstruction_err_ * 1.02


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("noise, mode", [(0.0, "every-entry"), (0.2, "every-entry"), (0.5, "fraction")])
@pytest.mark.parametrize("seed", [0, 1])
def test_ornmf_segments_paper_sequences(noise, mode, seed):
    # the paper's Section V-C sets: 8 segments of 20 identical samples, clean, 20 % noise on
    # every entry, 50 % of the entries noisy; the paper reports 100 % ACC on all three
    from daskrnmf.metrics import clustering_accuracy

    X, y = make_ordered_segments(noise=noise, noise_mode=mode, random_state=seed)
    m = ORNMF(8, alpha=0.3, n_clusters=8, max_iter=500, random_state=seed).fit(X)
    # at 50 % one seed in four leaves one sample of 160 in the wrong segment
    assert clustering_accuracy(y, m.labels_) >= (1.0 if noise < 0.5 else 0.99)
    # the 7 strongest jumps of H: most are the true boundaries (noise adds a few inside)
    assert len(set(m.boundaries_) & set(range(20, 160, 20))) >= 6, m.boundaries_
    assert m.jumps_.shape == (159,)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_ornmf_invariant_to_scaling_x(seq):
    # the D_2 floor is relative to H's scale: 7 X gives 7 H, the same W and the same labels
    # (random init; NNDSVDa's fill of zeros with mean(X) is not scale-free, as in sklearn)
    X, _ = seq
    kw = dict(alpha=0.3, n_clusters=4, init="random", max_iter=60, tol=0.0, random_state=0)
    a = ORNMF(4, **kw).fit(X)
    b = ORNMF(4, **kw).fit(7 * X)
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(b.transform(7 * X), 7 * a.transform(X), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(b.labels_, a.labels_)


@pytest.mark.parametrize("Est", [NMF, RNMF])
def test_fit_transform_equals_fit_then_transform(seq, Est):
    X, _ = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        H = Est(4, random_state=0).fit_transform(X)
        H2 = Est(4, random_state=0).fit(X).transform(X)
    np.testing.assert_allclose(H, H2, rtol=1e-12, atol=1e-14)


def test_transform_inverse_transform_and_outputs(seq):
    X, _ = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = RNMF(4, max_iter=300, random_state=0).fit(X)
        H = m.transform(X)
    assert H.shape == (40, 4) and np.all(H >= 0)
    assert m.components_.shape == (4, 30)
    np.testing.assert_allclose(np.linalg.norm(m.components_, axis=1), 1.0)
    rel = np.linalg.norm(X - m.inverse_transform(H)) / np.linalg.norm(X)
    assert rel < 0.2
    Hd = m.transform(da.from_array(X, chunks=(9, 30)))
    np.testing.assert_allclose(Hd.compute(), H, rtol=1e-7, atol=1e-10)


def test_bad_input(seq):
    X, _ = seq
    neg = X.copy()
    neg[2, 3] = -0.5
    with pytest.raises(ValueError, match=r"Negative values in data passed to ORNMF \(input X, min -0.5\)"):
        ORNMF(4).fit(neg)
    fitted = NMF(4, random_state=0).fit(X)
    for data in (neg, da.from_array(neg, chunks=(10, 30))):   # transform: both paths check
        with pytest.raises(ValueError, match="Negative values"):
            np.asarray(fitted.transform(data))
    with pytest.raises(ValueError, match="Negative values"):
        NMF(4).fit(da.from_array(neg, chunks=(10, 30)))
    bad = X.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        RNMF(4).fit(bad)
    with pytest.raises(ValueError, match=r"The 'alpha' parameter of ORNMF must be a float in the range \[0, 1e\+100\]"):
        ORNMF(4, alpha=-1.0).fit(X)
    with pytest.raises(ValueError, match="The 'init' parameter of NMF"):
        NMF(4, init="svd").fit(X)


def test_nndsvda_with_more_components_than_features_is_a_clear_error():
    X = np.abs(np.random.default_rng(0).normal(size=(50, 3)))
    with pytest.raises(ValueError, match=r"init='nndsvda' needs n_components <= min\(n_samples, "
                                         r"n_features\) = 3; got n_components=4"):
        NMF(4, init="nndsvda").fit(X)
    assert NMF(4, init="random", max_iter=5, tol=0).fit(X).components_.shape == (4, 3)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("random_state", [None, np.random.default_rng(0), 2**32 - 1])
def test_labels_with_any_random_state(seq, random_state):
    """The k-means of H is seeded from the fit's 63-bit seed (a ValueError before)."""
    X, _ = seq
    m = ORNMF(4, n_clusters=4, max_iter=5, random_state=random_state).fit(X)
    assert m.labels_.shape == (X.shape[0],)


def test_refit_without_n_clusters_drops_labels(seq):
    X, _ = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = ORNMF(4, n_clusters=4, max_iter=5, random_state=0).fit(X)
        assert m.labels_.shape == (X.shape[0],)
        m.set_params(n_clusters=None).fit(X[:20])
    assert not hasattr(m, "labels_") and m.jumps_.shape == (19,)


def test_fit_transform_of_a_dataframe_warns_nothing(seq):
    pd = pytest.importorskip("pandas")
    X, _ = seq
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)   # a UserWarning subclass
        H = NMF(4, max_iter=20, random_state=0).fit_transform(df)
    assert H.shape == (X.shape[0], 4)


@pytest.mark.parametrize("alpha", [1e300, np.inf])
def test_alpha_beyond_float64_is_refused(seq, alpha):
    """At alpha = 1e300, alpha q_i h_i overflowed in the H update (inf / inf codes) and W's
    update turned the NaN into W = 0: objective_ then was ||X|| with no error.  The
    constraint refuses such alpha with the range."""
    X, _ = seq
    est = ORNMF(4, alpha=alpha)
    with pytest.raises(ValueError, match=r"The 'alpha' parameter of ORNMF must be a float in "
                                         r"the range \[0, 1e\+100\]\. Got "):
        est.fit(X)
    assert not hasattr(est, "components_")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_largest_alpha_gives_finite_results(seq, scale):
    X, _ = seq
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = ORNMF(4, alpha=1e100, max_iter=20, random_state=0).fit(X * scale)
        H = est.transform(X * scale)
    assert np.isfinite(est.objective_) and np.isfinite(H).all()
    assert np.isfinite(est.components_).all() and est.components_.max() > 0


def test_one_sample_fits_in_memory_and_out_of_core():
    """One sample has no jump: the Dask path gave dask's "overlapping depth 1 is larger
    than your array 0" (NMF's default init reaches it now: random for k > min(n, d))."""
    X = np.array([[1.0, 2.0, 3.0, 4.0]])
    for data in (X, da.from_array(X)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = ORNMF(2, max_iter=3, random_state=0).fit(data)
        assert m.jumps_.shape == (0,) and m.boundaries_.shape == (0,)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_jumps_are_in_xs_float_dtype_and_independent_of_the_chunking(seq):
    """jumps_ (n_samples - 1 values kept by the model, as labels_) in X's float dtype,
    computed by the workers: float64 for float32 X before."""
    X, _ = seq
    kw = dict(alpha=0.3, max_iter=3, tol=0.0, random_state=0)
    assert ORNMF(4, **kw).fit(X).jumps_.dtype == np.float64
    X32 = X.astype(np.float32)
    m = ORNMF(4, **kw).fit(X32)
    md = ORNMF(4, **kw).fit(da.from_array(X32, chunks=(7, -1)))
    for est in (m, md):
        assert isinstance(est.jumps_, np.ndarray) and est.jumps_.dtype == np.float32
        assert est.jumps_.shape == (X.shape[0] - 1,)
    np.testing.assert_allclose(md.jumps_, m.jumps_, rtol=1e-5,
                               atol=1e-6 * float(m.jumps_.max()))
    np.testing.assert_array_equal(md.boundaries_, m.boundaries_)
