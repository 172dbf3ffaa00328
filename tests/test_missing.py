"""Missing values (``missing="mask"``) in the factorization models NMF, RNMF, ORNMF,
RobustNMF and ONMFO: the parameter, the checks, complete data unchanged, the masked
kernels against plain NumPy twins (one chunk and many), out of core, and face pixels
reconstructed."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from daskrnmf import NMF, ONMFO, ORNMF, RNMF, RobustNMF, reductions
from daskrnmf._blocks import RowBlocks
from daskrnmf._stream import batch_order, piece_sum
from daskrnmf.kernels.blocks import check_values
from daskrnmf.kernels.missing import feature_grams, observed, row_grams
from daskrnmf.kernels.nnls import nnls_codes, nnls_codes_each
from daskrnmf.kernels.outliers import (initial_codes, solve_codes,
                                       solve_codes_cd, update_components,
                                       update_components_cd)
from daskrnmf.models._outliers import (SolveSpec, add_statistics, batch_chunk_cd,
                                       initial_components, solve_batch_piece)
from daskrnmf.models.nmf import MUSpec, _MUFit, mu_chunk, mu_combine

from .reference import planted_missing as planted
from .test_common import EXPECTED_FAILED

MODELS = [NMF, RNMF, ORNMF, RobustNMF, ONMFO]


@pytest.fixture(scope="module")
def data():
    return planted()


def _quiet():
    warnings.simplefilter("ignore", ConvergenceWarning)


def _small(cls, **kw):
    base = dict(n_components=3, random_state=0)
    if cls in (NMF, RNMF, ORNMF):
        base.update(max_iter=30, tol=0)
    elif cls is RobustNMF:
        base.update(max_iter=15, tol=0)
    else:
        base.update(max_iter=3, tol=0, batch_size=40)
    return cls(**{**base, **kw})


# ---------------------------------------------------------------- the parameter
@pytest.mark.parametrize("cls", MODELS)
def test_missing_parameter_is_validated(cls, data):
    with pytest.raises(ValueError) as exc:
        cls(missing="x").fit(data[0])
    assert str(exc.value) == (f"The 'missing' parameter of {cls.__name__} must be a str "
                              "among {'mask', 'raise'}. Got 'x' instead.")
    assert cls().missing == "raise"


@pytest.mark.parametrize("cls", MODELS)
def test_allow_nan_tag_follows_missing(cls):
    assert cls().__sklearn_tags__().input_tags.allow_nan is False
    assert cls(missing="mask").__sklearn_tags__().input_tags.allow_nan is True


# 50 iterations for the batch models, as in tests/test_common.py (the checks' read-only
# memmap input runs a Dask graph per pass)
@parametrize_with_checks([cls(n_components=2, missing="mask", random_state=0,
                              **({} if cls is ONMFO else {"max_iter": 50})) for cls in MODELS],
                         expected_failed_checks=lambda e: EXPECTED_FAILED.get(type(e).__name__,
                                                                              {}))
def test_sklearn_checks_with_allow_nan(estimator, check):
    """scikit-learn's own checks with ``allow_nan=True`` (its NaN checks then expect the
    fit to accept NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("lazy", [False, True])
def test_raise_is_the_default_and_a_clear_error(cls, data, lazy):
    Xn = data[1]
    X = da.from_array(Xn, chunks=(30, -1)) if lazy else Xn
    with pytest.raises(ValueError, match=r"NaN or infinit.*missing='mask'"):
        _small(cls).fit(X)


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("lazy", [False, True])
def test_inf_is_still_an_error_with_mask(cls, data, lazy):
    Xn = data[1].copy()
    Xn[5, 3] = np.inf
    X = da.from_array(Xn, chunks=(30, -1)) if lazy else Xn
    with pytest.raises(ValueError, match="infinit"):
        _small(cls, missing="mask").fit(X)


def test_all_missing_is_a_clear_error():
    X = np.full((10, 4), np.nan)
    for Xin in (X, da.from_array(X, chunks=(5, -1))):
        with pytest.raises(ValueError, match="no observed"):
            NMF(2, missing="mask").fit(Xin)


def test_checks_skip_nan_only_with_allow_nan():
    x = np.array([[1.0, np.nan], [2.0, -3.0]])
    with pytest.raises(ValueError, match="NaN or infinity"):
        check_values(x, "X", non_negative=False)
    check_values(x, "X", non_negative=False, allow_nan=True)
    with pytest.raises(ValueError, match="Negative"):
        check_values(x, "X", non_negative=True, allow_nan=True)
    check_values(np.full((2, 2), np.nan), "X", non_negative=True, allow_nan=True)
    assert piece_sum(np.array([[1.0, np.nan], [2.0, 3.0]])) == (6.0, 3)


# ---------------------------------------------------------------- complete data
@pytest.mark.parametrize("cls, kw", [
    (NMF, dict(init="nndsvda")), (NMF, dict(init="random")), (RNMF, {}),
    (ORNMF, dict(alpha=0.3)), (RobustNMF, dict(solver="cd")), (RobustNMF, dict(solver="mu")),
    (ONMFO, dict(solver="cd")), (ONMFO, dict(solver="mu"))])
def test_complete_data_gives_identical_results_with_mask(cls, kw, data):
    X = data[0]
    with warnings.catch_warnings():
        _quiet()
        a = _small(cls, **kw).fit(X)
        b = _small(cls, missing="mask", **kw).fit(X)
        np.testing.assert_array_equal(a.components_, b.components_)
        np.testing.assert_array_equal(a.objective_history_, b.objective_history_)
        np.testing.assert_array_equal(a.transform(X), b.transform(X))
        Xd = da.from_array(X, chunks=(25, -1))
        np.testing.assert_array_equal(np.asarray(a.transform(Xd)), np.asarray(b.transform(Xd)))


# ---------------------------------------------------------------- NMF kernels
def masked_mu_reference(X, W0, H0, n_iter, loss="fro", alpha=0.0):
    """Weighted multiplicative updates (Ho; Blondel, Ho & Van Dooren) written densely: the
    rules of ``tests.reference.ornmf_reference`` with every ``W H`` seen through the mask
    M; then W's rows scaled to unit norm, the scale moved into H."""
    M = ~np.isnan(X)
    X0 = np.where(M, X, 0.0)
    W, H = W0.copy(), H0.copy()
    n = X.shape[0]

    def d1(H, W):
        if loss == "fro":
            return np.ones(n)
        return 1.0 / np.maximum(np.linalg.norm(M * (X0 - H @ W), axis=1), 1e-10)

    hist = []
    for _ in range(n_iter):
        d = d1(H, W)[:, None]
        num, den = d * (X0 @ W.T), d * ((M * (H @ W)) @ W.T)
        if alpha > 0:
            floor = 1e-2 * np.sqrt((H ** 2).sum() / n)
            q = 1.0 / np.maximum(np.linalg.norm(H[1:] - H[:-1], axis=1), floor)
            qp, qn = np.r_[0.0, q], np.r_[q, 0.0]
            hp = np.vstack([np.zeros((1, H.shape[1])), H[:-1]])
            hn = np.vstack([H[1:], np.zeros((1, H.shape[1]))])
            num = num + alpha * (qp[:, None] * hp + qn[:, None] * hn)
            den = den + alpha * (qp + qn)[:, None] * H
        H = np.where(den > 0, H * num / np.where(den > 0, den, 1.0), 0.0)
        res = np.linalg.norm(M * (X0 - H @ W), axis=1)
        pen = alpha * np.linalg.norm(H[1:] - H[:-1], axis=1).sum()
        hist.append(((res ** 2).sum() if loss == "fro" else res.sum()) + pen)
        d = d1(H, W)[:, None]
        W = W * ((H * d).T @ X0) / ((H * d).T @ (M * (H @ W)))
        norms = np.linalg.norm(W, axis=1)
        W, H = W / norms[:, None], H * norms
    return W, H, np.array(hist)


def _masked_stats(blocks):
    import functools

    return blocks.map_reduce(reductions.missing_stats_chunk,
                             functools.partial(reductions.missing_stats_combine, sample_size=0),
                             args=(0,))


@pytest.mark.parametrize("loss, alpha", [("fro", 0.0), ("l21", 0.0), ("l21", 0.3)])
@pytest.mark.parametrize("block_rows", [None, 7])
def test_masked_mu_matches_dense_weighted_updates(data, loss, alpha, block_rows):
    Xn = data[1]
    blocks = RowBlocks(Xn, block_rows=block_rows)
    fit = _MUFit(blocks, _masked_stats(blocks), k=3, loss=loss, alpha=alpha, missing=True)
    W0 = fit.init("nndsvda", 0)
    H0 = np.concatenate(fit.H) * fit.scale
    Wr, Hr, hist = masked_mu_reference(Xn, W0, H0, 15, loss, alpha)
    W, got = W0[None], []
    for _ in range(15):
        W, obj = fit.step(W, np.ones(1, bool))
        got.append(obj[0])
    fit.final(W[0])
    np.testing.assert_allclose(W[0], Wr, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(fit.H), Hr, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got, hist, rtol=1e-9)


def test_mu_chunk_partials_do_not_depend_on_the_blocks(data):
    Xn = data[1]
    rng = np.random.default_rng(3)
    H, W = rng.random((Xn.shape[0], 3)), rng.random((3, Xn.shape[1]))

    def run(bounds):
        starts = np.array(bounds[:-1])
        halo = {"starts": starts, "first": H[starts], "last": H[np.array(bounds[1:]) - 1],
                "col_sq": (H ** 2).sum(axis=0)}
        spec = MUSpec(loss="fro", alpha=0.0, WWt=W @ W.T, scale=np.ones(3), halo=halo,
                      update=True, floor=1e-10, missing=True)
        outs = [mu_chunk(Xn[a:b], a, H[a:b], W, spec) for a, b in zip(bounds[:-1], bounds[1:])]
        return mu_combine([o[0] for o in outs]), np.concatenate([o[1] for o in outs])

    one, H1 = run([0, Xn.shape[0]])
    many, H2 = run([0, 7, 30, 31, 64, 100, Xn.shape[0]])
    np.testing.assert_allclose(H1, H2, rtol=1e-12, atol=1e-14)
    for key in ("A", "loss"):
        np.testing.assert_allclose(one[key], many[key], rtol=1e-12, atol=1e-12)
    # W's denominator: B @ W from complete blocks, Bd from masked ones
    np.testing.assert_allclose(one["B"] @ W + one["Bd"], many["B"] @ W + many["Bd"],
                               rtol=1e-12)
    # against the formulas: H o (M o X) W^T / (M o H W) W^T, then H^T (M o X), H^T (M o HW)
    M = ~np.isnan(Xn)
    X0 = np.where(M, Xn, 0.0)
    Hn = H * (X0 @ W.T) / ((M * (H @ W)) @ W.T)
    np.testing.assert_allclose(H1, Hn, rtol=1e-12)
    np.testing.assert_allclose(one["A"], Hn.T @ X0, rtol=1e-12)
    np.testing.assert_allclose(one["Bd"] + one["B"] @ W, Hn.T @ (M * (Hn @ W)), rtol=1e-12)
    np.testing.assert_allclose(one["loss"], np.sum((M * (X0 - Hn @ W)) ** 2), rtol=1e-12)


@pytest.mark.parametrize("cls", [NMF, RNMF])
def test_masked_nmf_objective_never_increases(cls, data):
    with warnings.catch_warnings():
        _quiet()
        model = cls(3, init="random", max_iter=150, tol=0, missing="mask",
                    random_state=2).fit(data[1])
    h = model.objective_history_
    assert h.size == 150 and np.all(np.isfinite(h))
    assert np.all(np.diff(h) <= 1e-12 * h[:-1])
    assert np.isfinite(model.reconstruction_err_) and np.all(np.isfinite(model.components_))


def test_nmf_transform_fits_the_observed_entries(data):
    Xn = data[1]
    with warnings.catch_warnings():
        _quiet()
        model = NMF(3, missing="mask", random_state=0, max_iter=50).fit(Xn)
    W = model.components_
    H = model.transform(Xn)
    # each row's codes: NNLS of its observed entries on W's observed columns
    from scipy.optimize import nnls

    for i in range(0, Xn.shape[0], 17):
        o = ~np.isnan(Xn[i])
        ref = nnls(W[:, o].T, Xn[i, o])[0]
        np.testing.assert_allclose(H[i], ref, rtol=1e-7, atol=1e-9)
    full = model.inverse_transform(H)
    assert full.shape == Xn.shape and np.all(np.isfinite(full))
    np.testing.assert_allclose(model.fit_transform(Xn), H, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- RobustNMF / ONMFO kernels
def test_grams_match_loops(data):
    Xn = data[1][:20]
    rng = np.random.default_rng(0)
    W, h = rng.random((3, Xn.shape[1])), rng.random((20, 3))
    _, mask = observed(Xn)
    G3 = row_grams(W, mask)
    B = feature_grams(h, mask)
    for i in range(20):
        o = mask[i]
        np.testing.assert_allclose(G3[i], W[:, o] @ W[:, o].T, rtol=1e-12)
    for j in range(Xn.shape[1]):
        o = mask[:, j]
        np.testing.assert_allclose(B[j], h[o].T @ h[o], rtol=1e-12)
    # NNLS with a Gram matrix per row: the shared-Gram solver's rows
    G = W @ W.T
    XG = rng.random((20, 3))
    np.testing.assert_array_equal(nnls_codes_each(np.broadcast_to(G, (20, 3, 3)), XG),
                                  nnls_codes(G, XG))


@pytest.mark.parametrize("solver", ["cd", "mu"])
def test_masked_row_solve_is_the_solve_on_its_observed_columns(data, solver):
    """Each row's masked (h, r) is the unmasked solver's on the row's observed features."""
    Xn = data[1][:25] * 3.0
    W = np.random.default_rng(1).uniform(size=(3, Xn.shape[1]))
    x0, mask = observed(Xn)
    if solver == "cd":
        h, r, _ = solve_codes_cd(x0, W, 0.5, 30, 0.0, mask=mask)
    else:
        h, r = solve_codes(x0, W, 0.5, 40, mask=mask)
    assert np.all(r[~mask] == 0)
    for i in range(25):
        o = mask[i]
        if solver == "cd":
            hi, ri, _ = solve_codes_cd(Xn[i:i + 1, o], W[:, o], 0.5, 30, 0.0)
        else:
            hi, ri = solve_codes(Xn[i:i + 1, o], W[:, o], 0.5, 40)
        np.testing.assert_allclose(h[i], hi[0], rtol=1e-7, atol=1e-10)
        # r = x - h W - alpha_R: a difference of terms of the size of x, to roundoff
        np.testing.assert_allclose(r[i, o], ri[0], rtol=1e-7,
                                   atol=1e-8 * np.abs(Xn[i, o]).max())


def test_masked_w_updates_are_per_column_problems(data):
    rng = np.random.default_rng(5)
    k, d = 3, data[1].shape[1]
    h = rng.random((60, k))
    _, mask = observed(data[1][:60])
    B0 = rng.random((k, 10))
    B0 = B0 @ B0.T
    Bm = feature_grams(h, mask)
    A, C, W = rng.random((k, d)) * 5, rng.random((k, d)), rng.random((k, d))
    got, sweeps = update_components_cd(W, A, B0, C, 6, 0.0, Bm=Bm)
    ref = W.copy()
    for j in range(d):                  # coordinate descent on each column's own problem
        Bj = B0 + Bm[j]
        for _ in range(sweeps):
            for a in range(k):
                g = A[a, j] - C[a, j] - Bj[a] @ ref[:, j]
                ref[a, j] = max(0.0, ref[a, j] + g / Bj[a, a])
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    mu = update_components(W, A, B0, C, 3, Bm=Bm)
    ref = W.copy()
    for _ in range(3):
        den = np.stack([(B0 + Bm[j]) @ ref[:, j] for j in range(d)], axis=1) + C
        ref = ref * A / den
    np.testing.assert_allclose(mu, ref, rtol=1e-12)


def test_batch_statistics_do_not_depend_on_the_pieces(data):
    Xn = data[1] * 3.0
    W = np.random.default_rng(2).uniform(size=(3, Xn.shape[1]))
    spec = SolveSpec(alpha_R=0.5, n_iter=20, where="ONMFO", solver="cd", tol=0.0,
                     missing=True)
    one = solve_batch_piece(Xn, 0, W, spec)
    parts = [solve_batch_piece(Xn[a:a + 13], a, W, spec) for a in range(0, Xn.shape[0], 13)]
    many = add_statistics(parts)
    for key in ("A", "B", "Bm", "C", "loss", "n"):
        np.testing.assert_allclose(one[key], many[key], rtol=1e-9, atol=1e-12)
    # complete pieces carry no Bm; mixed with masked ones, their B adds to each B_j
    mixed = add_statistics([solve_batch_piece(Xn[:60], 0, W, spec),
                            solve_batch_piece(np.nan_to_num(Xn[60:]), 60, W, spec)])
    assert mixed["Bm"].shape == (Xn.shape[1], 3, 3)
    # the cd pass of the batch model: statistics from its exact r and HALS h
    x0, mask = observed(Xn)
    h0, _ = initial_codes(x0, W, 0.5, mask)
    st, _ = batch_chunk_cd(Xn, 0, h0, W, 0.5, True, True)
    st2 = add_statistics([batch_chunk_cd(Xn[a:a + 13], a, h0[a:a + 13], W, 0.5, True, True)[0]
                          for a in range(0, Xn.shape[0], 13)])
    for key in ("A", "B", "Bm", "loss"):
        np.testing.assert_allclose(st[key], st2[key], rtol=1e-9, atol=1e-12)


def masked_robust_nmf_reference(X, W0, H0, R0, lam, n_iter):
    """RobustNMF's multiplicative updates (7), (8), (6) with the mask M, densely (samples as
    rows): h <- h o (M o X) W^T / ((M o hW) W^T + r W^T), r <- r o X / (hW + r + lam),
    W <- W o H^T (M o X) / (H^T (M o HW) + H^T R); objective over observed entries."""
    M = ~np.isnan(X)
    X0 = np.where(M, X, 0.0)
    W, H, R = W0.copy(), H0.copy(), R0.copy()

    def mu(num, den):
        out = np.zeros_like(num)
        np.divide(num, den, out=out, where=den > 0)
        return out

    hist = []
    for _ in range(n_iter):
        H = mu(H * (X0 @ W.T), (M * (H @ W)) @ W.T + R @ W.T)
        R = mu(R * X0, H @ W + R + lam)
        hist.append(0.5 * np.sum((M * (X0 - H @ W - R)) ** 2) + lam * R.sum())
        W = mu(W * (H.T @ X0), H.T @ (M * (H @ W)) + H.T @ R)
    return W, H, R, np.array(hist)


@pytest.mark.parametrize("chunks", [None, 41])
def test_robust_nmf_mu_equals_dense_masked_updates(data, chunks):
    Xn = data[1] * 3.0
    Xin = Xn if chunks is None else da.from_array(Xn, chunks=(chunks, -1))
    model = RobustNMF(3, alpha_R=0.5, solver="mu", max_iter=25, tol=0, missing="mask",
                      random_state=4)
    with warnings.catch_warnings():
        _quiet()
        model.fit(Xin)
    x0, mask = observed(Xn)
    W0 = initial_components(4, 3, Xn.shape[1], np.nanmean(Xn))
    H0, R0 = initial_codes(x0, W0, 0.5, mask)
    W, _, _, hist = masked_robust_nmf_reference(Xn, W0, H0, R0, 0.5, 25)
    np.testing.assert_allclose(model.components_, W, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.objective_history_, hist, rtol=1e-10)
    assert np.all(np.diff(hist) <= 1e-12 * hist[:-1])


@pytest.mark.parametrize("solver", ["cd", "mu"])
def test_robust_nmf_masked_objective_never_increases(data, solver):
    with warnings.catch_warnings():
        _quiet()
        model = RobustNMF(3, alpha_R=0.5, solver=solver, max_iter=40, tol=0,
                          missing="mask", random_state=1).fit(data[1] * 3.0)
    h = model.objective_history_
    assert np.all(np.diff(h) <= 1e-10 * h[:-1])
    H, R = model.decompose(data[1] * 3.0)
    assert np.all(R[np.isnan(data[1])] == 0) and np.all(np.isfinite(H))


# ---------------------------------------------------------------- out of core
# Dask input with NaN is the NumPy fit: tests/test_protocol.py's masked cases.
def test_onmfo_partial_fit_with_nan_equals_fit(data):
    Xn = data[1] * 3.0
    X = da.from_array(Xn, chunks=(23, -1))
    fit = ONMFO(3, max_iter=1, tol=0, batch_size=23, max_inner_iter=50, missing="mask",
                random_state=5).fit(X)
    stream = ONMFO(3, max_inner_iter=50, missing="mask", random_state=5)
    for b in batch_order(5, 0, X.numblocks[0]):
        stream.partial_fit(X.blocks[int(b)])
    np.testing.assert_allclose(stream.components_, fit.components_, rtol=1e-12, atol=1e-14)
    assert np.all(np.isfinite(stream.components_)) and stream._Bm.shape == (24, 3, 3)
    with pytest.raises(ValueError, match="NaN"):
        ONMFO(3).partial_fit(Xn[:10])


def test_onmfo_resumes_a_masked_run_from_its_checkpoint(data, tmp_path):
    from .test_checkpoint import saved_stream

    X = da.from_array(data[1] * 3.0, chunks=(20, -1))
    kw = dict(n_components=3, max_iter=2, tol=0, max_inner_iter=30, random_state=7,
              missing="mask")
    full = ONMFO(**kw).fit(X)
    ckpt = tmp_path / "ckpt"
    ONMFO(**kw, checkpoint=ckpt, checkpoint_every=3,
          callback=lambda info: info["iteration"] == 11).fit(X)     # stops in pass 2
    saved, _ = saved_stream(ckpt)
    assert saved["pass_"] == 1 and saved["Bm"].shape == (24, 3, 3)
    resumed = ONMFO(**kw, checkpoint=ckpt).fit(X, resume=True)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    with pytest.raises(ValueError, match='another fit: missing="mask" there, "raise" here'):
        ONMFO(**{**kw, "missing": "raise"}, checkpoint=ckpt).fit(X, resume=True)


# ---------------------------------------------------------------- faces
@pytest.fixture(scope="module")
def faces():
    from daskrnmf.datasets import load_orl

    X, _ = load_orl()
    X = X / 255.0 * 50.0                 # 400 faces, grey levels in [0, 50] (ONMFO's scale)
    rng = np.random.default_rng(0)
    miss = rng.random(X.shape) < 0.10    # 10 % of the pixels missing completely at random
    Xn = np.where(miss, np.nan, X)
    return X, Xn, miss


# The error on the missing pixels over the observed ones grows with the components per
# face (each pixel's k weights are fitted to its observed faces only): on these 400 faces
# about 1.1 at k = 16, 1.2 at k = 25 and 1.3-1.4 at k = 49 (benchmarks/results/missing.md);
# on 100 faces it is 1.3-1.5 already at k = 16.  NMF's ratio is the same after 100
# multiplicative updates as after 400 (1.117, 1.118 at 150, 1.120 at 200): 100 are enough,
# and with the missing pixels taken as observed zeros the ratio is 1.50 after 100.
@pytest.mark.parametrize("make", [
    lambda: NMF(16, missing="mask", max_iter=100, random_state=0),
    lambda: RobustNMF(16, missing="mask", random_state=0)], ids=["NMF", "RobustNMF"])
def test_missing_face_pixels_are_reconstructed(faces, make):
    X, Xn, miss = faces
    with warnings.catch_warnings():
        _quiet()
        model = make().fit(Xn)
    full = model.inverse_transform(model.transform(Xn))
    err_missing = np.mean((X - full)[miss] ** 2)
    err_observed = np.mean((X - full)[~miss] ** 2)
    assert err_missing <= 1.3 * err_observed, (err_missing, err_observed)


@pytest.mark.parametrize("solver", ["cd", "mu"])
def test_onmfo_all_missing_batches_do_not_move_w(data, solver):
    """A first batch of all-NaN rows made W from its 'mean' 0 (entries ~1e-5) and its zero
    statistics then set W to 0 ("mu": for good).  Such a batch holds no information: the
    fit, and partial_fit, equal those without it."""
    X = data[0] * 3.0
    Xm = np.vstack([np.full((20, X.shape[1]), np.nan), X[:80]])
    kw = dict(n_components=3, solver=solver, max_iter=2, tol=0, batch_size=20,
              max_inner_iter=30, shuffle=False, missing="mask", random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ref = ONMFO(**kw).fit(X[:80])
        got = ONMFO(**kw).fit(Xm)
        np.testing.assert_allclose(got.components_, ref.components_, rtol=1e-12)
        stream, ref_stream = ONMFO(**kw), ONMFO(**kw)
        stream.partial_fit(Xm[:20])
        for s in range(0, 80, 20):
            stream.partial_fit(X[s:s + 20])
            ref_stream.partial_fit(X[s:s + 20])
    np.testing.assert_allclose(stream.components_, ref_stream.components_, rtol=1e-12)
    assert ref.components_.max() > 0.01


def test_onmfo_refuses_an_all_missing_lazy_x(tmp_path):
    """A Dask/Zarr X with no observed value was fitted (W from nothing); the stream's
    first pass, which reads X anyway, finds it and the estimator stays unfitted."""
    X = da.from_array(np.full((30, 4), np.nan), chunks=(10, -1))
    est = ONMFO(2, missing="mask", checkpoint=tmp_path / "ckpt")
    with pytest.raises(ValueError, match="X passed to ONMFO has no observed \\(non-NaN\\) "
                                         "value"):
        est.fit(X)
    assert not hasattr(est, "components_")
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())


@pytest.mark.parametrize("cls, kw", [(NMF, {}), (RobustNMF, dict(solver="cd")),
                                     (RobustNMF, dict(solver="mu")),
                                     (ONMFO, dict(solver="cd")), (ONMFO, dict(solver="mu"))])
def test_feature_no_sample_observes_has_zero_components(cls, kw, data):
    """The components of a feature no sample observes are 0 for every model and solver
    (the "cd" solvers left W's random start there, which inverse_transform then
    'filled' in)."""
    Xn = data[1].copy()
    Xn[:, 5] = np.nan
    with warnings.catch_warnings():
        _quiet()
        warnings.simplefilter("error", RuntimeWarning)
        est = _small(cls, missing="mask", **kw).fit(Xn)
    assert np.isfinite(est.components_).all()
    np.testing.assert_array_equal(est.components_[:, 5], 0.0)
    assert est.components_.max() > 0
