"""ONMFO and RobustNMF (Zhao & Tan) against literal dense implementations of their updates;
equivalences (per-sample algorithm, partial_fit, alpha_R -> inf), chunking, checkpoints, input."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import dask.array as da
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import ONMFO, RobustNMF
from daskrnmf import _checkpoint, _stream
from daskrnmf._driver import passes_converged
from daskrnmf.datasets import corrupt_images
from daskrnmf.kernels.outliers import (block_statistics, initial_codes, solve_codes,
                                       solve_codes_cd, update_components,
                                       update_components_cd)
from daskrnmf._stream import Feed, batch_order, batch_rows, make_batches, unit_bounds
from daskrnmf.models._outliers import initial_components as _initial_components
from daskrnmf.models._outliers import SolveSpec, add_statistics, solve_batch_piece
from daskrnmf.models._onmfo_stream import pass_error

from .reference import _mu, onmfo_reference, robust_nmf_reference
from .test_checkpoint import saved_stream
from .reference import planted_outliers as planted


@pytest.fixture(scope="module")
def data():
    return planted()


def _h0(lam):
    def start(v, W):
        h, r = initial_codes(v[None, :], W.T, lam)
        return h[0], r[0]
    return start


# ---------------------------------------------------------------- kernels
def test_solve_codes_equals_per_sample_updates_and_never_increases(data):
    X, _, _, _ = data
    W = np.random.default_rng(1).uniform(size=(4, X.shape[1]))
    x = X[:9]
    h, r = solve_codes(x, W, 1.5, 25)
    for i in range(9):
        hi, ri = _h0(1.5)(x[i], W.T)
        for _ in range(25):
            hi = _mu(hi * (W @ x[i]), W @ W.T @ hi + W @ ri)
            ri = _mu(ri * x[i], W.T @ hi + ri + 1.5)
        np.testing.assert_allclose(h[i], hi, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(r[i], ri, rtol=1e-10, atol=1e-12)
    # Lemmas 1-2: every (16) and every (17) step lowers (3) or leaves it
    obj = []
    h, r = initial_codes(x, W, 1.5)
    for _ in range(40):
        h = _mu(h * (x @ W.T), h @ W @ W.T + r @ W.T)
        obj.append(block_statistics(x, h, r, W, 1.5)["loss"])
        r = _mu(r * x, h @ W + r + 1.5)
        obj.append(block_statistics(x, h, r, W, 1.5)["loss"])
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1]))


def test_block_statistics_and_w_update_match_numpy(data):
    X, _, _, _ = data
    rng = np.random.default_rng(2)
    W = rng.uniform(size=(4, X.shape[1]))
    h, r = rng.uniform(size=(30, 4)), rng.uniform(size=(30, X.shape[1]))
    st = block_statistics(X[:30], h, r, W, 0.7)
    np.testing.assert_allclose(st["A"], sum(np.outer(h[i], X[i]) for i in range(30)))
    np.testing.assert_allclose(st["B"], sum(np.outer(h[i], h[i]) for i in range(30)))
    np.testing.assert_allclose(st["C"], sum(np.outer(h[i], r[i]) for i in range(30)))
    np.testing.assert_allclose(st["loss"], 0.5 * np.sum((X[:30] - h @ W - r) ** 2) + 0.7 * r.sum())
    Wt = W.T.copy()   # (18) in the paper's orientation
    for _ in range(5):
        Wt = _mu(Wt * st["A"].T, Wt @ st["B"] + st["C"].T)
    np.testing.assert_allclose(update_components(W, st["A"], st["B"], st["C"], 5), Wt.T, rtol=1e-12)


# ---------------------------------------------------------------- the "cd" solver
def _objective_3(x, h, W, r, lam):
    res = x - h @ W - r
    return 0.5 * np.sum(res * res, axis=1) + lam * r.sum(axis=1)


def test_cd_codes_meet_the_kkt_conditions_and_never_increase(data):
    X, _, W_true, _ = data
    x, W = X[:40], W_true + 0.05
    h, r, rounds = solve_codes_cd(x, W, 1.0, 500, 1e-12)
    # r is the exact minimiser for h; h satisfies the KKT conditions of its NNLS for x - r
    np.testing.assert_allclose(r, np.maximum(x - h @ W - 1.0, 0.0), atol=1e-12)
    grad = -(x - r - h @ W) @ W.T
    scale = np.abs(x @ W.T).max()
    assert np.all(h >= 0) and np.all(grad >= -1e-6 * scale)
    assert np.all(np.abs(grad[h > 0]) <= 1e-6 * scale)
    assert rounds.max() < 500
    # each round lowers every row's objective (a majoriser is minimised exactly)
    prev = None
    for t in range(0, 8):
        h_t, r_t, _ = solve_codes_cd(x, W, 1.0, t, 0.0)
        f = _objective_3(x, h_t, W, r_t, 1.0)
        if prev is not None:
            assert np.all(f <= prev * (1 + 1e-12) + 1e-12)
        prev = f
    # rows are solved on their own: a row's codes do not depend on its block
    h5, _, _ = solve_codes_cd(x[5:6], W, 1.0, 500, 1e-12)
    np.testing.assert_allclose(h5, h[5:6], rtol=1e-9, atol=1e-12)


def test_cd_and_mu_reach_the_same_objective_of_the_convex_subproblems(data):
    X, _, W_true, _ = data
    x, W = X[:30], W_true + 0.05
    h_cd, r_cd, _ = solve_codes_cd(x, W, 1.0, 500, 1e-12)
    h_mu, r_mu = solve_codes(x, W, 1.0, 20000)
    f_cd, f_mu = _objective_3(x, h_cd, W, r_cd, 1.0).sum(), _objective_3(x, h_mu, W, r_mu, 1.0).sum()
    assert f_cd <= f_mu * (1 + 1e-9) and f_mu <= 1.01 * f_cd
    # (15), W given A, B, C: HALS sweeps and the rounds of (18) reach the same value
    st = block_statistics(x, h_cd, r_cd, W, 1.0)
    surrogate = lambda V: 0.5 * np.trace(V.T @ st["B"] @ V) - np.sum(V * (st["A"] - st["C"]))  # noqa: E731
    W0 = np.full_like(W, W.mean())
    W_cd, sweeps = update_components_cd(W0, st["A"], st["B"], st["C"], 2000, 1e-12)
    W_mu = update_components(W0, st["A"], st["B"], st["C"], 20000)
    assert surrogate(W_cd) <= surrogate(W_mu) + 1e-9 * abs(surrogate(W_mu))
    assert abs(surrogate(W_mu) - surrogate(W_cd)) <= 0.01 * abs(surrogate(W_cd))
    values = [surrogate(update_components_cd(W0, st["A"], st["B"], st["C"], t, 0.0)[0])
              for t in range(6)]
    assert np.all(np.diff(values) <= 1e-9 * np.abs(values[:-1]))


def test_cd_kernels_match_numpy_twins(data):
    from daskrnmf.kernels.outliers import hals_codes

    rng = np.random.default_rng(0)
    W = rng.uniform(size=(4, 12))
    G, b = W @ W.T, rng.uniform(size=(9, 4))
    h = rng.uniform(size=(9, 4))
    want = h.copy()
    for _ in range(3):
        for i in range(9):
            for j in range(4):
                want[i, j] = max(0.0, want[i, j] + (b[i, j] - want[i] @ G[:, j]) / G[j, j])
    np.testing.assert_allclose(hals_codes(h.copy(), G, b, 3), want, rtol=1e-12)
    # the fused block step: objective (3) of x - P and, in P, min(x, P + lam)
    from daskrnmf.kernels.outliers import residual_target

    for dt in (np.float64, np.float32):
        x = rng.uniform(0, 3, size=(9, 12)).astype(dt)
        P = rng.uniform(0, 3, size=(9, 12)).astype(dt)
        e = (x - P).astype(np.float64)
        q = np.minimum(e, 0.7)
        loss = residual_target(x, P_out := P.copy(), 0.7)
        np.testing.assert_allclose(loss, (q * (e - q / 2)).sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(P_out, np.minimum(x, P + dt(0.7)), rtol=1e-6)
    A, B, C = rng.uniform(size=(4, 12)), G, rng.uniform(size=(4, 12)) * 0.1
    V = rng.uniform(size=(4, 12))
    want = V.copy()
    for j in range(4):
        want[j] = np.maximum(want[j] + (A[j] - C[j] - B[j] @ want) / B[j, j], 0.0)
    np.testing.assert_allclose(update_components_cd(V, A, B, C, 1, 0.0)[0], want, rtol=1e-12)


def test_robust_nmf_cd_never_increases_and_matches_mu(data):
    # on Dask blocks the same fit: tests/test_protocol.py
    X = data[0]
    cd = RobustNMF(4, random_state=0, max_iter=400, tol=1e-7).fit(X)
    hist = cd.objective_history_
    assert np.all(np.diff(hist) <= 1e-12 * hist[:-1])
    assert cd.objective_ <= hist[-1] * (1 + 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mu = RobustNMF(4, solver="mu", random_state=0, max_iter=3000, tol=0).fit(X)
    assert abs(mu.objective_ - cd.objective_) <= 0.01 * cd.objective_
    assert cd.n_iter_ < 400


def test_onmfo_solvers_agree_and_converge_by_passes(data):
    X = data[0]
    kw = dict(n_components=4, random_state=0)
    cd = ONMFO(**kw).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mu = ONMFO(**kw, solver="mu", max_inner_iter=300, inner_tol=1e-6).fit(X)
    assert cd.n_iter_ < cd.max_iter and 0 < cd.n_inner_iter_ < cd.max_inner_iter
    f = {name: _objective_3(X, *m.decompose(X)[:1], m.components_, m.decompose(X)[1], 1.0).sum()
         for name, m in (("cd", cd), ("mu", mu))}
    assert abs(f["cd"] - f["mu"]) <= 0.01 * f["mu"]


# ---------------------------------------------------------------- ONMFO equivalences
@pytest.mark.parametrize("shuffle, one_row_chunks", [(False, False), (True, False), (True, True)])
def test_batches_of_one_sample_are_the_papers_per_sample_algorithm(data, shuffle, one_row_chunks):
    X = data[0][:60]
    # batch_size=1 (the paper's multiplicative solver and sums), on NumPy or one-row chunks
    Xin = da.from_array(X, chunks=(1, -1)) if one_row_chunks else X
    model = ONMFO(4, alpha_R=2.0, max_iter=1, tol=0, batch_size=1, shuffle=shuffle,
                  solver="mu", max_inner_iter=40, inner_tol=0, max_w_iter=5,
                  forget_power=0, random_state=3).fit(Xin)
    order = batch_order(3, 0, 60, shuffle)
    W0 = _initial_components(3, 4, X.shape[1], X[order[0]].mean())
    W = onmfo_reference(X.T, W0.T, 2.0, 40, 5, _h0(2.0), order)
    np.testing.assert_allclose(model.components_, W.T, rtol=1e-8, atol=1e-12)
    assert model.n_steps_ == 60 and model.n_samples_seen_ == 60 and model.n_passes_ == 1


def test_forget_power_scales_the_past_statistics(data):
    X = data[0][:40]
    model = ONMFO(4, alpha_R=2.0, max_iter=1, tol=0, batch_size=1, shuffle=False,
                  solver="mu", max_inner_iter=20, inner_tol=0, max_w_iter=3,
                  forget_power=3.0, random_state=3).fit(X)
    W0 = _initial_components(3, 4, X.shape[1], X[0].mean())
    W = onmfo_reference(X.T, W0.T, 2.0, 20, 3, _h0(2.0), np.arange(40), forget=3.0)
    np.testing.assert_allclose(model.components_, W.T, rtol=1e-8, atol=1e-12)
    plain = onmfo_reference(X.T, W0.T, 2.0, 20, 3, _h0(2.0), np.arange(40))
    assert np.abs(W - plain).max() > 1e-3 * np.abs(plain).max()


def test_many_batches_a_pass_converge_in_few_passes_to_a_long_run(monkeypatch):
    # the schedule of a large X on small data: batches of 50 rows, 80 W updates a pass
    # (fewer rows than this and the pass objective's sampling noise is above tol)
    monkeypatch.setattr(_stream, "BATCH_ROWS", 50)
    X = planted(n=4000, d=20, k=4, rho=0.02, seed=3)[0]

    def objective(model):
        H, R = model.decompose(X)
        return _objective_3(X, H, model.components_, R, 1.0).sum()

    fit = ONMFO(4, random_state=0).fit(X)
    assert fit.n_steps_ == 80 * fit.n_iter_ and fit.n_iter_ <= 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        long = ONMFO(4, max_iter=30, tol=0, random_state=0).fit(X)
    assert objective(fit) <= 1.01 * objective(long)


def test_two_passes_decide_only_when_their_objectives_are_precise():
    h, tol = [6.56, 6.545], 1e-2
    # precise (relative errors <= tol / 4) and not lowered by more than tol: converged
    assert passes_converged(h, tol, [0.001, 0.0009])
    # too noisy, unknown (NaN: fewer than 16 batches), or no errors: three passes needed
    for errors in ([0.001, 0.003], [np.nan, 0.001], [0.001, np.nan], None):
        assert not passes_converged(h, tol, errors)
        assert passes_converged(h + [6.552], tol, None if errors is None
                                else errors + [0.001])
    assert not passes_converged([7.02, 6.40], tol, [0.001, 0.001])    # still improving
    assert not passes_converged(h, 0.0, [0.0, 0.0])                   # tol=0: max_iter
    # the error of a pass: from the spread of its (>= 16) second-half batches' losses
    losses = np.random.default_rng(0).normal(5.0, 0.5, size=40)
    se = pass_error([40, losses.sum(), (losses ** 2).sum()])
    assert se == pytest.approx(losses.std(ddof=1) / np.sqrt(40) / losses.mean(), rel=1e-9)
    assert np.isnan(pass_error([15, 75.0, 380.0])) and np.isnan(pass_error(None))


def test_precise_passes_stop_a_pass_sooner_at_the_long_runs_objective(monkeypatch):
    # 160 W updates a pass of dense small noise: each pass objective's relative error
    # (about 0.2 %) is below tol / 4, so the second pass that did not lower the first by
    # tol stops the fit (three passes in a row were needed before: four here)
    monkeypatch.setattr(_stream, "BATCH_ROWS", 250)
    clean = planted(n=40_000, d=20, k=4, rho=0.0, seed=3)[1]
    X = clean + np.random.default_rng(1).uniform(0, 0.3, size=clean.shape)

    def objective(model):
        H, R = model.decompose(X)
        return _objective_3(X, H, model.components_, R, 1.0).sum()

    fit = ONMFO(4, random_state=1).fit(X)
    assert fit.n_iter_ == 3 and fit.n_steps_ == 3 * 160
    h = fit.objective_history_
    assert h[2] > 0.99 * h[1] and h[1] < 0.99 * h[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        long = ONMFO(4, max_iter=8, tol=0, random_state=1).fit(X)
    assert objective(fit) <= 1.002 * objective(long)


@pytest.mark.parametrize("damage", ["older", "error", "sums"])
def test_a_checkpoint_without_or_with_damaged_pass_errors(tmp_path, damage):
    # a checkpoint of the version before the pass errors has neither field: it resumes
    # (those passes' errors unknown, NaN); damaged ones are refused
    X = np.random.default_rng(0).gamma(2.0, 1.0, size=(160, 6))     # 8 batches a pass
    kw = {"n_components": 3, "max_iter": 3, "max_inner_iter": 5, "random_state": 0, "tol": 0}
    ck = tmp_path / "ck"
    ONMFO(**kw, checkpoint=ck, callback=lambda info: info["iteration"] == 12).fit(X)
    arrays, attrs = _checkpoint.load(ck)
    attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    state = attrs["runs"][0]["skeleton"]["items"][0]
    if damage == "older":
        for field in ("history_se", "half"):
            i = state["keys"].index(field)
            del state["keys"][i], state["items"][i]
    else:
        field = "history_se" if damage == "error" else "half"
        state["items"][state["keys"].index(field)] = {"t": "py", "v": [-1.0, 0.0, 0.0]}
    _checkpoint.save(ck, arrays, attrs)
    if damage != "older":
        with pytest.raises(ValueError, match="is damaged: its (pass error|batch losses)"):
            ONMFO(**kw, checkpoint=ck).fit(X, resume=True)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        resumed = ONMFO(**kw, checkpoint=ck).fit(X, resume=True)
        full = ONMFO(**kw).fit(X)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    np.testing.assert_array_equal(resumed.objective_history_, full.objective_history_)


def test_fit_equals_partial_fit_over_the_same_chunk_order(data):
    X = da.from_array(data[0], chunks=(23, -1))
    fit = ONMFO(4, max_iter=1, tol=0, batch_size=23, max_inner_iter=50, random_state=5).fit(X)
    stream = ONMFO(4, max_inner_iter=50, random_state=5)
    blocks = X.to_delayed().ravel()
    for b in batch_order(5, 0, len(blocks)):
        stream.partial_fit(X.blocks[int(b)])
    np.testing.assert_allclose(stream.components_, fit.components_, rtol=1e-12, atol=1e-14)
    assert stream.n_steps_ == fit.n_steps_ == len(blocks)


def test_huge_alpha_r_forces_no_outliers_and_gives_online_nmf(data):
    X = data[0][:80]
    model = ONMFO(4, alpha_R=1e12, max_iter=1, tol=0, batch_size=1, shuffle=False,
                  solver="mu", max_inner_iter=30, inner_tol=0, max_w_iter=3,
                  forget_power=0, random_state=0).fit(X)
    W0 = _initial_components(0, 4, X.shape[1], X[0].mean())
    no_r = lambda v, W: (_h0(0.0)(v, W)[0], np.zeros_like(v))   # noqa: E731
    W = onmfo_reference(X.T, W0.T, 0.0, 30, 3, no_r, np.arange(80))
    np.testing.assert_allclose(model.components_, W.T, rtol=1e-6, atol=1e-9)
    _, R = model.decompose(X)
    assert R.max() < 1e-9 * X.max()


def test_default_batches_do_not_depend_on_the_chunking(data, monkeypatch, local_cluster):
    from distributed import Client

    # three row groups of 100 rows, read whole whatever the chunks (one of 64 rows spans
    # two groups); their batches' rows drawn from the seed alone
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 40 * 100)
    X = data[0]
    kw = dict(n_components=4, max_iter=3, tol=0, max_inner_iter=30, random_state=1)
    ref = ONMFO(**kw).fit(X)
    assert ref.n_steps_ == 3 * 9
    fits = [ONMFO(**kw).fit(da.from_array(X, chunks=(rows, -1))) for rows in (7, 64)]
    with Client(local_cluster):
        fits.append(ONMFO(**kw).fit(da.from_array(X, chunks=(64, -1))))
    for got in fits[:2]:        # in-process: the same bits
        np.testing.assert_array_equal(got.components_, ref.components_)
        np.testing.assert_array_equal(got.objective_history_, ref.objective_history_)
    # on the cluster's workers (tcp, their own BLAS threads): the same to rounding
    np.testing.assert_allclose(fits[2].components_, ref.components_, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fits[2].objective_history_, ref.objective_history_, rtol=1e-12)


def _arranged_feed_runs(X, units, batches, pieces, passes):
    """Each pass's row groups through a Feed with ONMFO's layout and prepare: per batch,
    whether it came as a view of its group (a slice) and its values; and the number of
    blocks prepared (one a read)."""
    from daskrnmf.models._onmfo_stream import GroupLayout, group_prepare

    prepared = []

    def prepare(block, start, **kwargs):
        prepared.append(start)
        return group_prepare("ONMFO", False)(block, start, **kwargs)

    feed = Feed(X, pieces, bounds=unit_bounds(batches, units),
                layout=GroupLayout(3, units, batches, True), prepare=prepare)
    got = {}
    for p in passes:
        for unit in units:          # the group wanted for this pass before it is taken
            for b in unit:
                feed.want(b, p)
        for unit in units:
            rows = [batch_rows(3, p, units, batches, b) for b in unit]
            # the batches' rows found in the block kept, or told by its layout
            run = feed.submit_run(unit, lambda items: [(x.base is not None, x.copy())
                                                      for x, _ in items],
                                  rows=None if p % 2 else rows, use=p, laid_out=p % 2 == 1)
            for b, r, (view, x) in zip(unit, rows, feed.take_run(run)):
                got[p, b] = (view, x, r)
    feed.close()
    return got, len(prepared)


@pytest.mark.parametrize("distributed", [False, True])
def test_row_groups_are_put_in_batch_order_where_read(monkeypatch, local_cluster,
                                                      distributed):
    # ONMFO's default batches take random rows of their group; the worker that reads a
    # group (or the reader thread, without a distributed client) puts it in the pass's
    # batch order (and checks it) once, so each batch is a slice of it, not gathered by
    # the worker solving the batches one after another
    from distributed import Client

    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 5 * 60)         # 60 rows a group
    X = np.random.default_rng(0).random((150, 5)).astype(np.float32)
    batches, pieces, units = make_batches(np.zeros((150, 5)), None)
    assert len(units) == 3 and all(len(u) > 1 for u in units)
    bad = X.copy()
    bad[70, 2] = -1
    Xd, bad = (da.from_array(M, chunks=(40, -1)) for M in (X, bad))
    with Client(local_cluster) if distributed else contextlib.nullcontext() as client:
        if distributed:
            Xd = client.persist(Xd)
        got, n_prepared = _arranged_feed_runs(Xd, units, batches, pieces, (0, 1))
        for (p, b), (view, x, r) in got.items():
            assert view, (p, b)
            np.testing.assert_array_equal(x, X[r])
        # read and prepared once a group a pass (on workers: counted there)
        assert n_prepared == (0 if distributed else 3 * 2)
        # a negative value is refused where its group is read, naming the group's rows
        with pytest.raises(ValueError, match=r"Negative values .* in rows 50\.\.99"):
            _arranged_feed_runs(bad, units, batches, pieces, (0,))


def test_a_group_held_for_the_next_pass_is_rearranged_not_read_again(monkeypatch):
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 5 * 60)
    X = np.random.default_rng(1).random((150, 5))
    batches, pieces, units = make_batches(X, None)
    from daskrnmf.models._onmfo_stream import GroupLayout

    reads = []
    feed = Feed(da.from_array(X, chunks=(50, -1)), pieces, bounds=unit_bounds(batches, units),
                layout=GroupLayout(5, units, batches, True),
                prepare=lambda block, start, **kw: reads.append(start) or block)
    unit = units[1]
    for p in (0, 1):                # wanted for both passes before either is solved
        for b in unit:
            feed.want(b, p)
    for p in (0, 1):
        rows = [batch_rows(5, p, units, batches, b) for b in unit]
        run = feed.submit_run(unit, lambda items: [(x.base is not None, x.copy())
                                                  for x, _ in items], rows=rows, use=p)
        for r, (view, x) in zip(rows, feed.take_run(run)):
            assert view
            np.testing.assert_array_equal(x, X[r])
    assert reads == [batches[unit[0]][0]]     # read (and prepared) once for both passes
    feed.close()


def test_laid_out_groups_keep_each_batch_s_dtype_and_their_own(monkeypatch):
    # a group is checked where it is read but kept as stored (no float64 copy of uint8
    # data), and each batch still takes its own work dtype: float32 data with one value
    # above 1e15 solves that batch in float64 only, as NumPy X does (the group had been
    # widened whole, other bits than NumPy's)
    from daskrnmf.models._onmfo_stream import GroupLayout, group_prepare

    X = np.random.default_rng(0).random((400, 6)).astype(np.float32)
    X[3, 2] = 2e15
    kw = dict(n_components=3, max_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = ONMFO(**kw).fit(X)
        got = ONMFO(**kw).fit(da.from_array(X, chunks=(100, -1)))
    np.testing.assert_array_equal(got.components_, ref.components_)
    np.testing.assert_array_equal(got.objective_history_, ref.objective_history_)
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 6 * 200)
    U = (np.arange(800 * 6) % 7).astype(np.uint8).reshape(800, 6)
    batches, pieces, units = make_batches(U, None)
    feed = Feed(da.from_array(U, chunks=(100, -1)), pieces, bounds=unit_bounds(batches, units),
                layout=GroupLayout(0, units, batches, True),
                prepare=group_prepare("ONMFO", False))
    feed.want(units[0][0], 0)
    held = [feed._data(entry) for entry in feed.chunks.values()]
    held = [h.result() if hasattr(h, "result") else h for h in held]
    assert held and all(h.dtype == np.uint8 for h in held)
    feed.close()


def test_resumed_with_x_changed_the_checksum_is_named_first(tmp_path, monkeypatch):
    # a resumed fit whose X changed (a negative entry) in a group read before it stopped:
    # the checksum mismatch is the error (the group's check where it is read had raised
    # first, naming the negative value instead)
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 6 * 200)     # groups of 200 rows

    class Killed(Exception):
        pass

    X = np.random.default_rng(0).random((800, 6))
    kw = dict(n_components=3, max_iter=3, tol=0, random_state=0, checkpoint=str(tmp_path),
              checkpoint_every=1)

    def stop(info):
        if info.get("iteration") == 11:         # in the second pass (8 batches a pass)
            raise Killed

    with pytest.raises(Killed):
        ONMFO(callback=stop, **kw).fit(da.from_array(X, chunks=(100, -1)))
    Y = X.copy()
    Y[150, 3] = -1.0
    with pytest.raises(ValueError, match="X changed since the checkpoint"):
        ONMFO(**kw).fit(da.from_array(Y, chunks=(100, -1)), resume=True)


def test_a_group_bad_in_two_pieces_is_named_as_without_a_cluster(monkeypatch, local_cluster):
    # with a Client a row group is checked piece by piece (its pieces of X's chunks):
    # the message was the first failing piece's (1 NaN, not 2; min -1, not -5; the
    # negative value, not the NaN), not the group's, as without a Client
    from distributed import Client

    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 4 * 200)     # groups of 200 rows
    X = np.random.default_rng(0).random((400, 4))

    def message(A):
        with pytest.raises(ValueError) as info:
            ONMFO(2, max_iter=1, random_state=0).fit(da.from_array(A, chunks=(100, -1)))
        return str(info.value)

    for bad in ([np.nan, np.nan], [-1.0, -5.0], [-1.0, np.nan]):
        A = X.copy()
        A[[210, 350], 0] = bad          # in one group, in two of its pieces
        alone = message(A)
        with Client(local_cluster):
            assert message(A) == alone

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_the_digest_of_rows_in_parts_is_that_of_their_concatenation(dtype):
    from daskrnmf._stores import digest, digest_rows

    X = (np.random.default_rng(0).random((37, 4)) * 200).astype(dtype)
    for cuts in ([37], [10, 37], [1, 2, 20, 37]):
        parts = np.split(X, cuts[:-1])
        assert digest_rows(parts) == digest(X)
    assert digest_rows([X[:, 1]]) == digest(X[:, 1])          # 1-D, a strided view
    assert digest_rows([X[:5]]) != digest(X[:6])


def test_a_row_group_read_in_pieces_on_a_cluster_has_the_group_s_checksum(
        monkeypatch, local_cluster):
    # with a distributed Client a row group is put together from its pieces of X's
    # chunks and put in order in one copy (_arranged_parts); its checksum, recorded in
    # checkpoints, is still that of the group's rows as stored, as the reader thread
    # without a Client computes it (a checkpoint of either resumes with the other)
    from distributed import Client

    from daskrnmf._stream import chunk_checksum
    from daskrnmf.models._onmfo_stream import GroupLayout, group_prepare

    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 5 * 60)         # 60 rows a group
    X = np.random.default_rng(0).random((150, 5)).astype(np.float32)
    batches, pieces, units = make_batches(np.zeros((150, 5)), None)
    Xd = da.from_array(X, chunks=(40, -1))         # groups of 50 rows across chunks

    def checksums():
        feed = Feed(Xd, pieces, checksums={}, bounds=unit_bounds(batches, units),
                    layout=GroupLayout(3, units, batches, True),
                    prepare=group_prepare("ONMFO", False))
        sums = []
        for unit in units:
            run = feed.submit_run(unit, lambda items: [float(x.sum()) for x, _ in items],
                                  use=0, laid_out=True)
            sums.append(feed.take_run(run))
        feed.close()
        return feed.checksums, sums

    alone, sums = checksums()
    with Client(local_cluster):
        assert checksums() == (alone, sums)
    edges = unit_bounds(batches, units)
    assert alone == {f"{a}:{b}": chunk_checksum(X[a:b]) for a, b in zip(edges, edges[1:])}


def test_batches_and_pieces(monkeypatch):
    X = da.zeros((100, 3), chunks=((30, 30, 40), (3,)))
    # default: n/8 = 13 rows, one row group (whatever the chunks), each batch one piece
    batches, pieces, units = make_batches(X, None)
    assert batches == [(s * 100 // 8, (s + 1) * 100 // 8) for s in range(8)]
    assert units == [list(range(8))] and pieces == [[b] for b in batches]
    assert make_batches(da.zeros((100, 3), chunks=(7, 3)), None) == (batches, pieces, units)
    assert make_batches(np.zeros((100, 3)), None) == (batches, pieces, units)
    assert unit_bounds(batches, units) == [0, 100]
    # a large X: batches of BATCH_ROWS rows in row groups of at most UNIT_BYTES (as float64)
    big = np.broadcast_to(np.zeros(1), (10**6, 4096))      # no memory: only its shape is read
    batches, pieces, units = make_batches(big, None)
    group = _stream.UNIT_BYTES // (8 * 4096)
    assert _stream.BATCH_ROWS // 2 < min(b - a for a, b in batches)
    assert max(b - a for a, b in batches) <= _stream.BATCH_ROWS
    edges = unit_bounds(batches, units)
    assert edges[0] == 0 and edges[-1] == 10**6 and max(np.diff(edges)) <= group
    assert [b for u in units for b in u] == list(range(len(batches)))
    # row groups smaller than X: the same batches for every chunking
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 3 * 40)      # 40 rows a group
    batches, pieces, units = make_batches(X, None)
    assert unit_bounds(batches, units) == [0, 33, 66, 100]
    assert batches[:3] == [(0, 11), (11, 22), (22, 33)] and units[0] == [0, 1, 2]
    # a batch_size the user sets is taken exactly, cut at the chunks
    batches, pieces, units = make_batches(X, 45)
    assert batches == [(0, 45), (45, 90), (90, 100)] and units == [[0], [1], [2]]
    assert pieces[0] == [(0, 30), (30, 45)] and pieces[1] == [(45, 60), (60, 90)]


def test_sub_batches_cover_their_unit_once_per_pass_in_random_rows():
    X = np.zeros((100, 3))
    batches, _, units = make_batches(X, None)
    for p in range(2):
        order = batch_order(0, p, units)
        rows = [batch_rows(0, p, units, batches, int(b)) for b in order]
        np.testing.assert_array_equal(np.sort(np.concatenate(rows)), np.arange(100))
        assert [len(r) for r in rows] == [b - a for a, b in (batches[int(b)] for b in order)]
        assert not np.array_equal(rows[0], np.arange(*batches[int(order[0])]))
    assert batch_rows(0, 0, [[0], [1]], [(0, 5), (5, 10)], 1) is None


def test_planted_components_and_outliers_are_recovered(data):
    from sklearn.decomposition import MiniBatchNMF

    X, clean, W_true, mask = data
    model = ONMFO(4, alpha_R=1.0, max_iter=3, tol=0, batch_size=20, random_state=0).fit(X)
    W = model.components_
    cos = (W / np.linalg.norm(W, axis=1, keepdims=True)) @ \
        (W_true / np.linalg.norm(W_true, axis=1, keepdims=True)).T
    rows, cols = linear_sum_assignment(-cos)
    assert cos[rows, cols].min() > 0.97
    H, R = model.decompose(X)
    found = R > 2.0
    assert (found & mask).sum() / found.sum() > 0.95          # precision
    assert (found & mask).sum() / mask.sum() > 0.9            # recall
    e_onmfo = np.mean((clean - model.inverse_transform(H)) ** 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mb = MiniBatchNMF(4, batch_size=20, max_iter=3, random_state=0).fit(X)
    e_mb = np.mean((clean - mb.transform(X) @ mb.components_) ** 2)
    assert e_onmfo < 0.3 * e_mb
    # the objective per sample falls from pass to pass on this stationary stream
    assert model.objective_history_[-1] < model.objective_history_[0]


def test_decompose_and_transform_on_dask_are_chunked_like_x(data):
    X = data[0]
    model = ONMFO(4, batch_size=50, max_inner_iter=40, random_state=0).fit(X)
    Xd = da.from_array(X, chunks=(70, -1))
    H, R = model.decompose(Xd)
    assert H.chunks[0] == Xd.chunks[0] and R.chunks == Xd.chunks
    Hn, Rn = model.decompose(X)
    np.testing.assert_allclose(H.compute(), Hn, rtol=1e-10)
    np.testing.assert_allclose(R.compute(), Rn, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.transform(Xd).compute(), Hn, rtol=1e-10)
    np.testing.assert_allclose(model.inverse_transform(Hn), Hn @ model.components_)


def test_distributed_feed_reads_ahead_and_matches_numpy(data, local_cluster):
    from distributed import Client

    X = data[0]
    ref = ONMFO(4, batch_size=25, max_inner_iter=30, random_state=2).fit(X)
    with Client(local_cluster) as client:
        Xd = da.from_array(X, chunks=(25, -1))
        got = ONMFO(4, batch_size=25, max_inner_iter=30, random_state=2).fit(Xd)
        _, pieces, _ = make_batches(Xd, 25)
        feed = Feed(Xd, pieces)
        spec = SolveSpec(alpha_R=1.0, n_iter=5, where="X")
        assert feed.client is client
        feed.want(0)
        feed.want(1)
        feed.solve(0, solve_batch_piece, add_statistics, ref.components_, spec)
        assert (None, 0) not in feed.pending and 0 not in feed.chunks   # solved, released
        ahead = [feed.chunks[c][0] for c in feed.pending[None, 1]]
        client.gather(ahead)   # batch 1 was read while batch 0 was solved: only waits here
        assert all(f.status == "finished" for f in ahead)
        feed.close()
    np.testing.assert_allclose(got.components_, ref.components_, rtol=1e-10, atol=1e-13)


# ---------------------------------------------------------------- RobustNMF
@pytest.mark.parametrize("chunks", [None, 41])
def test_robust_nmf_equals_dense_updates_and_never_increases(data, chunks):
    X = data[0]
    Xin = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    model = RobustNMF(4, alpha_R=1.0, solver="mu", max_iter=30, tol=0, inner_tol=0,
                      random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        H = model.fit_transform(Xin)
    W0 = _initial_components(4, 4, X.shape[1], X.mean())
    H0, R0 = initial_codes(X, W0, 1.0)
    W, Hr, _, hist = robust_nmf_reference(X.T, W0.T, H0.T, R0.T, 1.0, 30)
    np.testing.assert_allclose(model.components_, W.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.objective_history_, hist, rtol=1e-10)
    assert np.all(np.diff(model.objective_history_) <= 1e-12 * hist[:-1])
    assert model.n_passes_ == 1 + 1 + 30 + 1   # checks, initial H/R, iterations, final
    # fit_transform is fit(X).transform(X): the codes solved again with the final W
    np.testing.assert_allclose(np.asarray(H), model.transform(X), rtol=1e-9, atol=1e-12)


def test_online_is_close_to_batch_on_corrupted_faces():
    from daskrnmf.datasets import load_orl

    X, _ = load_orl()
    clean, noisy, _ = corrupt_images(X[:120], 0.2, random_state=0)
    # both at their defaults
    online = ONMFO(16, random_state=0).fit(noisy)
    batch = RobustNMF(16, random_state=0).fit(noisy)
    e = {}
    for name, m in (("online", online), ("batch", batch)):
        H, _ = m.decompose(noisy)
        e[name] = np.mean((clean - m.inverse_transform(H)) ** 2)
    e_plain = np.mean((clean - noisy) ** 2)
    assert e["online"] < 1.2 * e["batch"] and e["online"] < 0.5 * e_plain


# ---------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("stop, position, n_stat", [(13, (1, 4), 4), (3, (0, 3), 3),
                                                    (4, (0, 4), 1)])
def test_stopped_fit_resumes_to_the_uninterrupted_result(data, tmp_path, monkeypatch, stop,
                                                         position, n_stat):
    # three row groups of 100 rows (each read whole from five chunks), three batches each;
    # stopped mid-pass 2, and just before and just after the first pass's statistics
    # start again (before its fourth batch, its second group's first)
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 40 * 100)
    X = da.from_array(data[0], chunks=(20, -1))
    kw = dict(n_components=4, max_iter=2, tol=0, max_inner_iter=30, random_state=7)
    full = ONMFO(**kw).fit(X)
    ckpt = tmp_path / "ckpt"
    ONMFO(**kw, checkpoint=ckpt, checkpoint_every=3,
          callback=lambda info: info["iteration"] == stop).fit(X)
    saved, _ = saved_stream(ckpt)
    assert (saved["pass_"], saved["pos"]) == position
    assert saved["n_steps"] == saved["iteration"] == stop
    assert saved["n_stat"] == n_stat        # batches in the statistics since they started
    resumed = ONMFO(**kw, checkpoint=ckpt).fit(X, resume=True)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    np.testing.assert_array_equal(resumed.objective_history_, full.objective_history_)
    assert resumed.n_steps_ == full.n_steps_ == 18
    if stop != 13:
        return
    assert set(saved["chunk_sha256"]) == {"0:100", "100:200", "200:300"}
    # a finished checkpoint resumes to itself; a different run is refused by name
    again = ONMFO(**kw, checkpoint=ckpt).fit(X, resume=True)
    np.testing.assert_array_equal(again.components_, full.components_)
    with pytest.raises(ValueError, match=r'another fit: alpha_R="auto" there, 2.0 here'):
        ONMFO(**{**kw, "alpha_R": 2.0}, checkpoint=ckpt).fit(X, resume=True)
    with pytest.raises(ValueError, match="needs the 'checkpoint' parameter"):
        ONMFO(**kw).fit(X, resume=True)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    import zarr

    path = tmp_path / "c"
    _checkpoint.claim(path)
    _checkpoint.save(path, {"W": np.ones((2, 3))}, {"pass": 0})
    real = zarr.Group.create_array
    calls = []

    def dying(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed while writing")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(zarr.Group, "create_array", dying)
    with pytest.raises(KeyboardInterrupt):
        _checkpoint.save(path, {"W": np.full((2, 3), 2.0), "A": np.zeros(2)}, {"pass": 1})
    arrays, attrs = _checkpoint.load(path)
    assert attrs["pass"] == 0 and np.all(arrays["W"] == 1) and set(arrays) == {"W"}
    monkeypatch.setattr(zarr.Group, "create_array", real)
    (path / "unrelated.txt").write_text("not ours")
    _checkpoint.save(path, {"W": np.full((2, 3), 3.0)}, {"pass": 2})
    assert sorted(os.listdir(path)) == [_checkpoint.MARKER, _checkpoint.SUBDIR, "unrelated.txt"]
    assert sorted(os.listdir(path / _checkpoint.SUBDIR)) == ["LATEST", "gen-00000001"]
    assert _checkpoint.load(path)[1]["pass"] == 2


def test_killed_process_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGKILL the fitting process mid-stream, then resume in this one."""
    X = np.random.default_rng(0).gamma(2.0, 1.0, size=(2000, 30))
    np.save(tmp_path / "X.npy", X)
    ckpt = tmp_path / "ckpt"
    kw = dict(n_components=5, max_iter=2, tol=0, batch_size=20, max_inner_iter=20, random_state=11)
    script = textwrap.dedent(f"""
        import time, numpy as np
        from daskrnmf import ONMFO
        X = np.load({str(tmp_path / 'X.npy')!r})
        ONMFO(**{kw!r}, checkpoint={str(ckpt)!r}, checkpoint_every=2,
              callback=lambda info: time.sleep(0.03)).fit(X)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            state = saved_stream(ckpt)[0] if (ckpt / _checkpoint.SUBDIR / "LATEST").exists() \
                else None
            if state and state["n_steps"] >= 30:
                break
            assert proc.poll() is None, "the fit ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    saved, _ = saved_stream(ckpt)
    assert 30 <= saved["n_steps"] < 200, saved     # killed mid-stream, not after it
    resumed = ONMFO(**kw, checkpoint=ckpt).fit(X, resume=True)
    full = ONMFO(**kw).fit(X)
    np.testing.assert_array_equal(resumed.components_, full.components_)


# ---------------------------------------------------------------- input
def test_bad_input_is_refused_and_changes_nothing(data, tmp_path):
    X = data[0].copy()
    X[5, 3] = -1.0
    model = ONMFO(4, checkpoint=tmp_path / "ck")
    with pytest.raises(ValueError,
                       match=r"Negative values in data passed to ONMFO \(input X, min -1"):
        model.fit(X)
    assert not hasattr(model, "components_") and not (tmp_path / "ck").exists()
    with pytest.raises(ValueError, match=r"Negative values in data passed to ONMFO"):
        model.fit(da.from_array(X, chunks=(50, -1)))     # found while streaming: checkpoint released
    assert not hasattr(model, "components_") and not (tmp_path / "ck").exists()
    Xn = data[0].copy()
    Xn[7, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        ONMFO(4).fit(da.from_array(Xn, chunks=(50, -1)))
    with pytest.raises(ValueError, match=r"The 'alpha_R' parameter of ONMFO must be a float in "
                                         r"the range \(0, inf\) or a str among \{'auto'\}\. "
                                         r"Got -1 instead\."):
        ONMFO(4, alpha_R=-1).fit(data[0])
    with pytest.raises(ValueError, match="The 'max_iter' parameter of ONMFO"):
        ONMFO(4, max_iter=0, tol=0).fit(data[0])
    with pytest.raises(ValueError, match="Negative values"):
        RobustNMF(4).fit(X)
    fitted = ONMFO(4, max_inner_iter=5, random_state=0).fit(data[0])
    with pytest.raises(ValueError, match="X has 3 features, but ONMFO is expecting 40 features"):
        fitted.transform(np.ones((2, 3)))
    with pytest.raises(ValueError, match="Negative values"):
        fitted.decompose(X)
    with pytest.raises(ValueError, match="Negative values"):   # checked in every Dask block
        fitted.decompose(da.from_array(X, chunks=(50, -1)))[1].compute()
    with pytest.raises(ValueError, match="NaN or infinity"):
        fitted.transform(da.from_array(Xn, chunks=(50, -1))).compute()
    before = fitted.components_.copy()
    with pytest.raises(ValueError, match="Negative values"):
        fitted.partial_fit(X)
    np.testing.assert_array_equal(fitted.components_, before)


@pytest.mark.parametrize("cls", [ONMFO, RobustNMF])
def test_lam_still_works_with_a_future_warning(data, cls):
    kw = dict(max_iter=3) if cls is RobustNMF else dict(max_iter=1, tol=0, batch_size=100)
    with pytest.warns(FutureWarning, match="'lam' of .* was renamed to 'alpha_R'"):
        old = cls(4, lam=3.0, max_inner_iter=10, random_state=0, **kw)
    assert old.alpha_R == 3.0 and "lam" not in old.get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        got = old.fit(data[0]).components_
        new = cls(4, alpha_R=3.0, max_inner_iter=10, random_state=0, **kw).fit(data[0])
    np.testing.assert_array_equal(got, new.components_)
    with pytest.warns(FutureWarning):
        assert cls(4).set_params(lam=2.0).alpha_R == 2.0


@pytest.mark.parametrize("cls", [ONMFO, RobustNMF])
def test_decompose_keeps_float32(data, cls):
    X = data[0][:120].astype(np.float32)
    kw = dict(max_iter=5) if cls is RobustNMF else dict(max_iter=1, tol=0, batch_size=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = cls(3, max_inner_iter=10, random_state=0, **kw).fit(X)
    # parameters, transform and outputs of every model: tests/test_protocol.py
    H, R = m.decompose(X)
    assert H.dtype == R.dtype == np.float32
    H64, R64 = m.decompose(X.astype(np.float64))
    assert H64.dtype == R64.dtype == np.float64
    outputs = m._outputs(da.from_array(X, chunks=(50, -1)))
    assert set(outputs) == {"H", "R"} and outputs["R"].chunks[0] == (50, 50, 20)


def test_driver_callback_dict_and_progress_bar(data):
    import io

    from daskrnmf import ProgressBar

    seen = []
    ONMFO(3, max_iter=2, tol=0, batch_size=100, max_inner_iter=5, random_state=0,
          callback=lambda info: seen.append(dict(info))).fit(data[0])
    assert [i["iteration"] for i in seen] == list(range(1, 7))
    assert [(i["pass"], i["batch"]) for i in seen] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1),
                                                      (1, 2)]
    assert all(i["max_iter"] == 6 and i["n_batches"] == 3 and i["model"] == "ONMFO"
               for i in seen)
    assert seen[-1]["n_samples_seen"] == 600 and seen[-1]["n_passes"] == 2
    assert seen[0]["objective"][0] == seen[0]["loss"]
    bar = ProgressBar(stream=io.StringIO())
    bar._t0 = 0.0
    assert "batch 4/6 (pass 2)" in bar.describe(seen[3])
    info = {"model": "RFNMF", "iteration": 3, "max_iter": 9, "objective": np.array([5.0, 2.0]),
            "best": 1, "active": np.array([True, True]), "n_passes": 7}
    bar(info)
    line = bar.describe(info)
    assert "objective 2 (restart 2 of 2)" in line and "7 passes" in line
    # restart 2 has converged (NaN from now on) but stays the best: its last objective
    bar({**info, "iteration": 4, "objective": np.array([4.0, np.nan])})
    assert "objective 2 (restart 2 of 2)" in bar.describe({**info, "iteration": 4,
                                                           "objective": np.array([4.0, np.nan])})


def test_corrupt_images_follows_the_protocol():
    X = np.random.default_rng(0).uniform(0, 255, size=(50, 100))
    clean, noisy, mask = corrupt_images(X, 0.3, random_state=1)
    assert clean.max() == pytest.approx(50.0) and noisy.max() <= 50.0
    assert abs(mask.mean() - 0.3) < 0.02
    np.testing.assert_array_equal(noisy[~mask], clean[~mask])
    assert np.all(noisy[mask] >= np.minimum(clean[mask] + 30, 50) - 1e-12)
    _, replaced, m2 = corrupt_images(X, 0.3, mode="replace", random_state=1)
    assert np.all((replaced[m2] >= 30) & (replaced[m2] <= 50))
    with pytest.raises(ValueError, match="mode"):
        corrupt_images(X, 0.3, mode="swap")


@pytest.mark.parametrize("case", ["rank_deficient", "collinear"])
def test_fused_cd_rows_stay_exact_on_a_near_singular_W(case):
    # more components than features, or two nearly collinear components: the fused solve
    # (which then keeps the factored NNLS, not tabled inverses) reaches the vectorised
    # solve's objective
    from daskrnmf.kernels.cd_rows import solve_rows_fused
    from daskrnmf.kernels.outliers import huber_rows

    rng = np.random.default_rng(5)
    if case == "rank_deficient":
        W = rng.gamma(1.0, 1.0, size=(10, 6))
    else:
        W = rng.gamma(1.0, 1.0, size=(8, 40))
        W[1] = W[0] * (1 + 1e-9)
    x = rng.gamma(1.0, 1.0, size=(400, W.shape[0])) @ W
    x[rng.random(x.shape) < 0.05] += 30.0
    h_f, _, _ = solve_rows_fused(x, W, 1.0, 200, 1e-10)
    h_v, _, _ = solve_codes_cd(x, W, 1.0, 200, 1e-10, mask=np.ones(x.shape, bool))
    f_f = huber_rows(x - h_f @ W, 1.0).sum()
    f_v = huber_rows(x - h_v @ W, 1.0).sum()
    assert f_f <= f_v * (1 + 1e-6)


@pytest.mark.parametrize("dtype,k", [(np.float64, 6), (np.float32, 6), (np.float32, 14)])
def test_fused_cd_rows_match_the_vectorised_solve(dtype, k):
    # complete rows run in one compiled loop; the (m, d)-array path of the masked solve
    # with every entry observed is the same algorithm (k = 14: above TABLE_MAX_K, the
    # NNLS with an updated factor instead of tabled inverses)
    from daskrnmf.kernels.cd_rows import solve_rows_fused
    from daskrnmf.kernels.nnls import TABLE_MAX_K, support_table
    from daskrnmf.kernels.outliers import huber_rows

    assert (support_table(k) is None) == (k > TABLE_MAX_K)
    rng = np.random.default_rng(3)
    W = rng.gamma(1.0, 1.0, size=(k, 40))
    x = (rng.gamma(1.0, 1.0, size=(300, k)) @ W).astype(dtype)
    x[rng.random(x.shape) < 0.05] += 30.0                    # gross outliers
    h_f, r_f, n_f = solve_rows_fused(x, W, 1.0, 200, 1e-10)
    h_v, r_v, n_v = solve_codes_cd(x, W, 1.0, 200, 1e-10, mask=np.ones(x.shape, bool))
    f_f = huber_rows(x.astype(np.float64) - h_f @ W, 1.0)
    f_v = huber_rows(x.astype(np.float64) - h_v @ W, 1.0)
    np.testing.assert_allclose(f_f, f_v, rtol=1e-5, atol=1e-9 * f_v.max())
    np.testing.assert_allclose(r_f, np.maximum(x - (h_f @ W).astype(dtype) - 1.0, 0), atol=1e-4)
    assert r_f.dtype == dtype and h_f.dtype == np.float64
    # rows are solved on their own: a row's result does not depend on its block
    h_1, _, _ = solve_rows_fused(x[7:8], W, 1.0, 200, 1e-10)
    np.testing.assert_array_equal(h_1, h_f[7:8])
    # the per-row objectives the kernel returns (summed by the batch statistics in place
    # of a pass over the residual) are (3) at the h, r it returns
    h_l, r_l, _, loss = solve_rows_fused(x, W, 1.0, 200, 1e-10, return_loss=True)
    np.testing.assert_array_equal(h_l, h_f)
    ref = _objective_3(x.astype(np.float64), h_l, W, r_l.astype(np.float64), 1.0)
    np.testing.assert_allclose(loss, ref, rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-9 * ref.max())
    st = block_statistics(x, h_l, r_l, W, 1.0)
    assert st["loss"] == pytest.approx(ref.sum(), rel=1e-4)
    # into reused buffers (dirty, larger than the slice) and with one NNLS table's memory
    # kept across the calls: the same numbers
    out = (np.full((400, k), 7.0), np.full((400, 40), 7.0, dtype=dtype),
           np.full(400, 7, dtype=np.int64), np.full(400, 7.0))
    table = support_table(k)
    for lo, hi in ((0, 300), (10, 130), (290, 300)):
        h_o, r_o, n_o, loss_o = solve_rows_fused(x[lo:hi], W, 1.0, 200, 1e-10,
                                                 return_loss=True, out=out, table=table)
        np.testing.assert_array_equal(h_o, h_l[lo:hi])
        np.testing.assert_array_equal(r_o, r_l[lo:hi])
        np.testing.assert_array_equal(n_o, n_f[lo:hi])
        np.testing.assert_array_equal(loss_o, loss[lo:hi])


@pytest.mark.parametrize("k", [1, 4, 5, 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_cd_rows_residual_four_codes_at_a_time_on_every_support_size(k, dtype):
    """The fused solve's residual takes h's non-zero codes four at a time, the support
    padded with zero codes: rows of every support size (none, one, exactly four, more
    than four, all k), a row of zeros right after a row whose codes are all non-zero (no
    code of that row may reach it), k below, at and between multiples of four and d = 7:
    each row's r, objective and h those of its NumPy twin (r = max(0, x - h W -
    alpha_R), (3) at (h, r), the vectorised solve's objective), and the row alone in its
    block the same bit for bit."""
    from daskrnmf.kernels.cd_rows import solve_rows_fused
    from daskrnmf.kernels.outliers import huber_rows

    rng = np.random.default_rng(21)
    d = 7
    W = rng.gamma(1.0, 1.0, size=(k, d)) + 0.1
    rows = []
    for size in (k, 0, 1, min(4, k), min(5, k), k, 0, max(k - 1, 0)):
        codes = np.zeros(k)
        codes[rng.permutation(k)[:size]] = rng.gamma(2.0, 1.0, size=size) + 0.5
        rows.append(codes @ W)
    x = np.array(rows)
    x[2, 3] += 25.0                              # gross entries: r non-zero there
    x[5, 0] += 25.0
    x = x.astype(dtype)
    h, r, rounds, loss = solve_rows_fused(x, W, 1.0, 200, 1e-12, return_loss=True)
    x64 = x.astype(np.float64)
    Wd = W.astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(r, np.maximum(x - (h.astype(dtype) @ Wd) - 1.0, 0.0),
                               atol=tol * x.max())
    np.testing.assert_allclose(loss, _objective_3(x64, h, W, r.astype(np.float64), 1.0),
                               rtol=tol, atol=tol * x.max())
    for i in (1, 6):                             # the rows of zeros
        assert (h[i] == 0).all() and (r[i] == 0).all() and loss[i] == 0.0
    assert r[2, 3] > 0 and r[5, 0] > 0
    h_v, _, _ = solve_codes_cd(x, W, 1.0, 200, 1e-12, mask=np.ones(x.shape, bool))
    f_v = huber_rows(x64 - h_v @ W, 1.0)
    np.testing.assert_allclose(huber_rows(x64 - h @ W, 1.0), f_v, rtol=1e-5,
                               atol=1e-6 * x.max())
    for i in range(x.shape[0]):
        h_i, r_i, n_i, loss_i = solve_rows_fused(x[i:i + 1], W, 1.0, 200, 1e-12,
                                                 return_loss=True)
        np.testing.assert_array_equal(h_i[0], h[i])
        np.testing.assert_array_equal(r_i[0], r[i])
        assert n_i[0] == rounds[i] and loss_i[0] == loss[i]


@pytest.mark.parametrize("dtype,case", [(np.float64, "tabled"), (np.float32, "tabled"),
                                        (np.float64, "k14"), (np.float64, "collinear")])
def test_fused_cd_rows_in_slices_with_prepared_components_match_the_vectorised_solve(
        dtype, case):
    """Rows most of whose r stays 0 (sparse outliers on a few rows: the fused solve stops
    them without the NNLS that would return their h again) and rows with gross entries,
    solved in slices with one :func:`prepare_components` (tabled NNLS; k = 14: above
    TABLE_MAX_K; two collinear components: the factored NNLS): the masked NumPy twin's
    objectives; each slice's rows as in one call."""
    from daskrnmf.kernels.cd_rows import prepare_components, solve_rows_fused
    from daskrnmf.kernels.outliers import huber_rows

    rng = np.random.default_rng(11)
    k = 14 if case == "k14" else 6
    W = rng.gamma(1.0, 1.0, size=(k, 30))
    if case == "collinear":
        W[1] = W[0] * (1 + 1e-9)
    codes = rng.gamma(2.0, 1.0, size=(120, k)) * (rng.random((120, k)) < 0.5)
    x = codes @ W + 0.3 * rng.random((120, 30))      # noise below alpha_R: r stays 0
    gross = rng.random(120) < 0.3
    x[gross] += 30.0 * (rng.random((gross.sum(), 30)) < 0.1)
    x = x.astype(dtype)
    prep = prepare_components(W, dtype)
    assert (prep.table is None) == (case != "tabled")
    h_v, r_v, n_v = solve_codes_cd(x, W, 1.0, 200, 1e-10, mask=np.ones(x.shape, bool))
    h_1, r_1, n_1, loss_1 = solve_rows_fused(x, W, 1.0, 200, 1e-10, return_loss=True)
    out = (np.empty((50, k)), np.empty((50, 30), dtype=dtype), np.empty(50, dtype=np.int64),
           np.empty(50))
    for lo in range(0, 120, 50):
        h_s, r_s, n_s, loss_s = solve_rows_fused(x[lo:lo + 50], W, 1.0, 200, 1e-10,
                                                 return_loss=True, out=out, prepared=prep)
        np.testing.assert_array_equal(h_s, h_1[lo:lo + 50])
        np.testing.assert_array_equal(r_s, r_1[lo:lo + 50])
        np.testing.assert_array_equal(n_s, n_1[lo:lo + 50])
        np.testing.assert_array_equal(loss_s, loss_1[lo:lo + 50])
    x64 = x.astype(np.float64)
    f_1, f_v = huber_rows(x64 - h_1 @ W, 1.0), huber_rows(x64 - h_v @ W, 1.0)
    assert (r_1 == 0).all(axis=1).sum() >= 60          # most rows end with r = 0
    np.testing.assert_allclose(f_1, f_v, rtol=1e-5, atol=1e-9 * f_v.max())
    np.testing.assert_allclose(loss_1, f_1, rtol=1e-5, atol=1e-9 * f_v.max())
    # a row whose r is 0 in its last two rounds stops without the NNLS of b = W x again:
    # a warm start at its h is at that NNLS's solution (one round, the same h; bit for
    # bit with tabled inverses, whose solve has no state carried from round to round)
    zero = (r_1 == 0).all(axis=1) & (n_1 >= 2)
    h_w, r_w, n_w = solve_rows_fused(x[zero], W, 1.0, 200, 1e-10, h=h_1[zero])
    assert (n_w == 1).all() and (r_w == 0).all()
    if case == "tabled":
        np.testing.assert_array_equal(h_w, h_1[zero])
    np.testing.assert_allclose(h_w, h_1[zero], rtol=1e-9, atol=1e-12 * h_1.max())


@pytest.fixture(scope="module")
def wide_k():
    """300 x 30 and k above n_features: the warm-started NNLS's passive set had more
    columns than W W^T's rank (779 NaN codes at k = 50; ONMFO at k = 90 ended in
    LinAlgError "SVD did not converge" on its NaN W)."""
    return np.abs(np.random.default_rng(0).normal(size=(300, 30)))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_robust_nmf_with_more_components_than_features_gives_finite_codes(wide_k):
    est = RobustNMF(50, max_iter=10, random_state=0).fit(wide_k)
    H, R = est.decompose(wide_k)
    assert np.isfinite(H).all() and np.isfinite(R).all()
    assert np.isfinite(est.components_).all()
    # the codes are a minimum of (3) per sample: no worse than the fit's own objective
    assert _objective_3(wide_k, H, est.components_, R, est.alpha_R_).sum() <= (
        est.objective_ * (1 + 1e-6))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_onmfo_with_far_more_components_than_features_fits(wide_k):
    est = ONMFO(90, max_iter=1, random_state=0).fit(wide_k)
    assert np.isfinite(est.components_).all()
    assert np.isfinite(est.transform(wide_k)).all()


# ---------------------------------------------------------------- alpha_R="auto"
def _fits(model, X):
    model.fit(X)
    H, R = model.decompose(X)
    return model, H, R


@pytest.mark.parametrize("cls", [ONMFO, RobustNMF])
def test_auto_alpha_makes_the_fit_independent_of_the_units_of_X(cls, data):
    """X * c gives alpha_R_ * c and the same fit scaled: R and H W by c, W and H each by
    sqrt(c) (W's start is sqrt(mean / k)); an absolute alpha_R (the old default 1.0)
    gave another fit."""
    X, c = data[0], 3.7
    m1, H1, R1 = _fits(cls(4, random_state=0), X)
    m2, H2, R2 = _fits(cls(4, random_state=0), X * c)
    s = np.sqrt(c)
    np.testing.assert_allclose(R2, R1 * c, rtol=1e-7, atol=1e-9 * R2.max())
    np.testing.assert_allclose(m2.components_, m1.components_ * s, rtol=1e-7,
                               atol=1e-9 * m2.components_.max())
    np.testing.assert_allclose(H2, H1 * s, rtol=1e-7, atol=1e-9 * H2.max())
    assert (R1 > 0).sum() == (R2 > 0).sum() > 0
    assert m1.alpha_R_ > 0 and m2.alpha_R_ == pytest.approx(m1.alpha_R_ * c, rel=1e-12)


def test_auto_alpha_in_partial_fit_comes_from_the_first_call_and_is_kept(data, tmp_path):
    from daskrnmf import load
    from daskrnmf.models._outliers import auto_alpha

    X, c = data[0], 0.3
    fits = []
    for scale in (1.0, c):
        m = ONMFO(4, random_state=0)
        m.partial_fit(X[:100] * scale)
        first = m.alpha_R_
        assert first == auto_alpha(X[:100].max(axis=0) * scale)
        m.partial_fit(X[100:200] * scale * 10)      # larger values: alpha_R_ kept
        assert m.alpha_R_ == first
        fits.append(m)
    np.testing.assert_allclose(fits[1].components_, fits[0].components_ * np.sqrt(c),
                               rtol=1e-7, atol=1e-9)
    # saved with the model: a loaded model continues with it
    loaded = load(fits[0].save(tmp_path / "m"))
    assert loaded.alpha_R_ == fits[0].alpha_R_
    loaded.partial_fit(X[200:])
    fits[0].partial_fit(X[200:])
    np.testing.assert_array_equal(loaded.components_, fits[0].components_)


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    """The package's blob data: 5 % of the rows with a quarter of their entries replaced
    by U[0, 100] values, 1.25 % of the entries (4000 x 16, 8 components < 10 clusters)."""
    import zarr

    from daskrnmf.datasets import make_zarr_blobs

    path = make_zarr_blobs(tmp_path_factory.mktemp("blobs") / "b.zarr", n_samples=4000,
                           n_features=16, chunk_rows=1000)
    X = zarr.open_array(path + "/X", mode="r")[:]
    rows = zarr.open_array(path + "/outlier", mode="r")[:]
    return X, rows.mean() * 4 / 16      # 4 entries of each outlier row


@pytest.mark.parametrize("cls", [ONMFO, RobustNMF])
def test_auto_alpha_flags_about_the_corrupted_fraction_of_blobs(cls, blobs):
    X, corrupted = blobs
    model = cls(random_state=0).fit(X)
    flagged = float((model.decompose(X)[1] > 0).mean())
    # alpha_R = 1 flagged 23 % of the entries here
    assert corrupted / 2 < flagged < 2 * corrupted, (flagged, corrupted,
                                                          getattr(model, "alpha_R_", None))


@pytest.mark.parametrize("cls", [ONMFO, RobustNMF])
def test_explicit_alpha_is_used_as_given(cls, data):
    X = data[0]
    kw = dict(n_components=4, alpha_R=0.8, random_state=0)
    model = cls(**kw).fit(X)
    assert model.alpha_R_ == 0.8
    assert cls(**kw).fit(X * 5).alpha_R_ == 0.8             # not scaled with X
    H, R = model.decompose(X)
    # transform/decompose use the fitted value, not a parameter set after the fit
    model.set_params(alpha_R="auto")
    H2, R2 = model.decompose(X)
    np.testing.assert_array_equal(H, H2)
    np.testing.assert_array_equal(R, R2)
    with pytest.raises(ValueError, match=r"The 'alpha_R' parameter of \w+ must be a float "
                       r"in the range \(0, inf\) or a str among \{'auto'\}. Got 'big' "
                       r"instead."):
        cls(alpha_R="big").fit(X)


def test_a_resumed_auto_alpha_run_keeps_the_checkpoint_s_value(data, tmp_path):
    X = da.from_array(data[0], chunks=(20, -1))
    kw = dict(n_components=4, max_iter=2, tol=0, max_inner_iter=30, random_state=7)
    full = ONMFO(**kw).fit(X)
    ckpt = tmp_path / "ckpt"
    ONMFO(**kw, checkpoint=ckpt, callback=lambda info: info["iteration"] == 7).fit(X)
    assert saved_stream(ckpt)[0]["alpha_R_"] == full.alpha_R_
    resumed = ONMFO(**kw, checkpoint=ckpt).fit(X, resume=True)
    assert resumed.alpha_R_ == full.alpha_R_
    np.testing.assert_array_equal(resumed.components_, full.components_)


def test_the_convergence_warning_counts_passes():
    """ONMFO's max_iter counts passes over X, and its warning says so (it said
    'iterations', the batch models' word, where a step is a batch)."""
    X = np.random.default_rng(0).gamma(2.0, 1.0, size=(400, 8))
    with pytest.warns(ConvergenceWarning, match=r"within max_iter=2 passes;"):
        ONMFO(3, max_iter=2, tol=1e-9, random_state=0).fit(X)
