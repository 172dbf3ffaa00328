"""Every per-chunk kernel against a plain NumPy twin on the same data."""

import os
import warnings

import numpy as np
import pytest

from daskrnmf.kernels import rng as krng
from daskrnmf.kernels.assign import distances, nearest
from daskrnmf.kernels.cocluster import argmin_ties_low, column_costs, prototypes
from daskrnmf.kernels.median_rounds import median_round, merge_median_round, select_collected
from daskrnmf.kernels.sums import cluster_sums, merge_worst_fit, worst_fit


@pytest.mark.parametrize("metric, k, d", [("l1", 6, 37), ("l2", 6, 37), ("l2", 40, 120)])
def test_nearest_matches_numpy(rng, metric, k, d):
    # l2 with k * d >= GEMM_MIN_WORK: the certified matrix-product path
    from daskrnmf.kernels.assign import GEMM_MIN_WORK

    assert (k * d >= GEMM_MIN_WORK) == (k == 40)
    X = rng.normal(size=(500, d))
    C = rng.normal(size=(3, k, d))
    labels, dist = nearest(X, C, metric)
    for r in range(3):
        diff = X[:, None, :] - C[r][None]
        D = np.abs(diff).sum(-1) if metric == "l1" else np.sqrt((diff ** 2).sum(-1))
        np.testing.assert_array_equal(labels[:, r], D.argmin(1))
        np.testing.assert_allclose(dist[:, r], D.min(1), rtol=1e-12)
        np.testing.assert_allclose(distances(X, C[r], metric), D, rtol=1e-12)


def test_nearest_ties_go_to_lowest_index():
    X = np.zeros((4, 3))
    C = np.ones((1, 3, 3))  # three identical centres
    labels, _ = nearest(X, C, "l1")
    assert (labels == 0).all()


@pytest.mark.parametrize("metric, d", [("l2", 9), ("l2", 64), ("l2", 1100), ("l1", 9),
                                       ("l1", 67)])
def test_nearest_rows_do_not_depend_on_block(metric, d):
    """Bitwise: no BLAS blocking effects, and the vectorised loops' summation order does
    not depend on where a row starts in memory (blocks of odd sizes, an unaligned copy)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, d))
    C = rng.normal(size=(2, 4, d))
    whole = nearest(X, C, metric)
    parts = [nearest(X[s:s + 17], C, metric) for s in range(0, 200, 17)]
    np.testing.assert_array_equal(whole[1], np.concatenate([p[1] for p in parts]))
    np.testing.assert_array_equal(whole[0], np.concatenate([p[0] for p in parts]))
    raw = np.empty(X.size + 1)
    shifted = raw[1:].reshape(X.shape)           # 8 bytes off the array's alignment
    shifted[:] = X
    np.testing.assert_array_equal(nearest(shifted, C, metric)[1], whole[1])


def test_cluster_sums_matches_numpy(rng):
    X = rng.normal(size=(300, 7))
    labels = rng.integers(0, 4, size=(300, 2))
    w = rng.random((300, 2))
    sums, wsum, counts = cluster_sums(X, labels, w, 4)
    for r in range(2):
        for c in range(4):
            m = labels[:, r] == c
            np.testing.assert_allclose(sums[r, c], (w[m, r, None] * X[m]).sum(0), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(wsum[r, c], w[m, r].sum(), rtol=1e-12)
            assert counts[r, c] == m.sum()


def test_worst_fit_merge_equals_whole(rng):
    X = rng.normal(size=(100, 3))
    res = rng.integers(0, 5, size=(100, 2)).astype(float)  # many ties
    whole = worst_fit(res, 0, X, 6)
    parts = merge_worst_fit([worst_fit(res[s:s + 13], s, X[s:s + 13], 6) for s in range(0, 100, 13)])
    for key in ("res", "idx", "rows"):
        np.testing.assert_array_equal(whole[key], parts[key])
    order = np.lexsort((np.arange(100), -res[:, 0]))[:6]
    np.testing.assert_array_equal(whole["idx"][0], order)
    np.testing.assert_array_equal(whole["rows"][0], X[order])
    # without rows (X in memory): the same indices and residuals, merged alike
    bare = merge_worst_fit([worst_fit(res[s:s + 13], s, X[s:s + 13], 6, with_rows=False)
                            for s in range(0, 100, 13)])
    assert bare["rows"] is None
    for key in ("res", "idx"):
        np.testing.assert_array_equal(whole[key], bare[key])


def test_block_medians_match_numpy(rng):
    """Exact block medians (RFNMTF's S in memory) against np.median of every block, on
    tied and heavy-tailed data, with and without guesses (exact, off, partly missing),
    float64 and float32 rows, empty blocks NaN."""
    from daskrnmf.kernels.median_select import block_medians

    for trial in range(120):
        n, d = int(rng.integers(1, 50)), int(rng.integers(1, 15))
        K, L = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        X = (rng.integers(0, 4, (n, d)).astype(float) if trial % 2
             else np.round(rng.standard_cauchy((n, d)), 1))
        rows, cols = rng.integers(0, K, n), rng.integers(0, L, d)
        for Xk in (X, X.astype(np.float32)):
            want = np.full((K, L), np.nan)
            for k in range(K):
                for l in range(L):
                    b = Xk[rows == k][:, cols == l].astype(np.float64)
                    if b.size:
                        want[k, l] = np.median(b)
            for guess in (None, want, want + 0.3, rng.normal(size=(K, L)),
                          np.where(rng.random((K, L)) < 0.5, np.nan, want)):
                got = block_medians(np.ascontiguousarray(Xk), rows, cols, K, L, guess)
                np.testing.assert_array_equal(got, want)


@pytest.fixture(params=["compiled", "numpy"])
def median_path(request, monkeypatch):
    """Group orders and medians by the compiled kernels, or by NumPy (small inputs,
    :data:`~daskrnmf.kernels.median_select.SMALL_VALUES`): the same numbers."""
    from daskrnmf.kernels import median_select

    if request.param == "compiled":
        monkeypatch.setattr(median_select, "SMALL_VALUES", -1)
    return request.param


def test_group_order_is_a_stable_argsort(rng, median_path):
    from daskrnmf.kernels.median_select import group_order

    for n, G in ((0, 3), (1, 1), (50, 4), (1000, 11)):
        lab = rng.integers(0, G, n)
        order, ends = group_order(lab, G)
        np.testing.assert_array_equal(order, np.argsort(lab, kind="stable"))
        np.testing.assert_array_equal(ends, np.cumsum(np.bincount(lab, minlength=G)))


@pytest.mark.parametrize("metric", ["l1", "l2"])
def test_pairwise_seeding_matches_numpy_and_direct_seeding(rng, metric):
    from daskrnmf.kernels.assign import pairwise_distances, seed_potentials_pairwise
    from daskrnmf.models._clustering import pairwise_worth, robust_kmedians_pp

    X = rng.integers(0, 9, size=(120, 7)).astype(float)    # ties; exact products
    X[5] = X[9]
    D = pairwise_distances(X, metric)
    want = np.linalg.norm(X[:, None] - X[None], ord=1 if metric == "l1" else 2, axis=2)
    np.testing.assert_allclose(D, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(D, D.T)
    assert not np.diag(D).any()
    cand = np.array([0, 5, 9, 119])
    cap = np.where(rng.random(120) < 0.2, np.inf, rng.uniform(0, 20, 120))
    for power in (1, 2):
        np.testing.assert_allclose(seed_potentials_pairwise(D, cand, cap, power),
                                   (np.minimum(want[:, cand], cap[:, None]) ** power).sum(0),
                                   rtol=1e-12)
    # seeding from the matrix: the seeds of seeding without it (integer data: the
    # distances are exact either way)
    for seed in range(5):
        np.testing.assert_array_equal(
            robust_kmedians_pp(X, 6, np.random.default_rng(seed), metric, pairwise=D),
            robust_kmedians_pp(X, 6, np.random.default_rng(seed), metric))
    assert pairwise_worth(165, 10, 15, 16) and not pairwise_worth(1797, 10, 10, 16)
    assert not pairwise_worth(5000, 10, 50, 20)          # the matrix would be too large


@pytest.mark.parametrize("metric", ["l1", "l2"])
def test_nearest_split_over_threads_equals_one_thread(rng, metric, monkeypatch):
    import daskrnmf.kernels.assign as A

    X = rng.normal(size=(301, 9)).astype(np.float32)
    C = rng.normal(size=(3, 4, 9))
    one = A.nearest(X, C, metric)
    monkeypatch.setattr(A, "ROW_THREADS_MIN_WORK", 0)
    for threads in (2, 3, 400):
        got = A.nearest(X, C, metric, threads=threads)
        np.testing.assert_array_equal(got[0], one[0])
        np.testing.assert_array_equal(got[1], one[1])


@pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2,
                    reason="needs fork and two cores")
def test_split_rows_works_in_a_forked_child():
    # the row pool of a parent that used it is made again in a forked child (the
    # parent's threads do not run there: submitting to its pool would hang)
    import threading

    from daskrnmf.kernels.blocks import split_rows

    seen = []
    both = threading.Barrier(2)         # two parts at once: the pool starts two threads

    def part(a, b):
        both.wait(20)
        seen.append((a, b))

    split_rows(part, 10, 2)
    assert sorted(seen) == [(0, 5), (5, 10)]
    with warnings.catch_warnings():     # (Python >= 3.12 warns about fork with threads)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:                                        # the child: exit 0 when it works
        import threading

        done = threading.Event()
        threading.Thread(target=lambda: (split_rows(lambda a, b: None, 10, 2), done.set()),
                         daemon=True).start()
        os._exit(0 if done.wait(20) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _plan(E, n_bins, hist_mask, lo, hi, coll_mask, clo, chi):
    slot = np.full(E, -1, dtype=np.int64)
    slot[hist_mask] = np.arange(hist_mask.sum())
    return {"hist_slot": slot, "hlo": lo, "hhi": hi, "n_bins": n_bins, "n_hist": int(hist_mask.sum()),
            "coll": coll_mask, "clo": clo, "chi": chi}


def test_median_round_matches_numpy_twin(rng):
    n, d, k, R = 400, 3, 2, 2
    X = rng.normal(size=(n, d))
    labels = rng.integers(0, k, size=(n, R))
    E = R * k * d
    lo, hi = np.full(E, -1.0), np.full(E, 1.5)
    hist_mask = np.arange(E) % 2 == 0
    coll_mask = np.arange(E) % 3 == 0
    clo, chi = np.full(E, -0.2), np.full(E, 0.3)
    plan = _plan(E, 16, hist_mask, lo, hi, coll_mask, clo, chi)
    out = median_round(X, labels, k, plan)
    for r in range(R):
        for c in range(k):
            for j in range(d):
                e = (r * k + c) * d + j
                vals = X[labels[:, r] == c, j]
                if hist_mask[e]:
                    inside = vals[(vals >= -1.0) & (vals <= 1.5)]
                    assert out["hbelow"][e] == (vals < -1.0).sum()
                    expect, _ = np.histogram(inside, bins=16, range=(-1.0, 1.5))
                    np.testing.assert_array_equal(out["hist"][plan["hist_slot"][e]], expect)
                    assert out["hmin"][e] == inside.min() and out["hmax"][e] == inside.max()
                if coll_mask[e]:
                    assert out["cbelow"][e] == (vals < -0.2).sum()
                    got = np.sort(out["vals"][out["keys"] == e])
                    np.testing.assert_array_equal(got, np.sort(vals[(vals >= -0.2) & (vals <= 0.3)]))
    # merging block results equals the whole-array result
    parts = [median_round(X[s:s + 50], labels[s:s + 50], k, plan) for s in range(0, n, 50)]
    merged = merge_median_round(parts)
    for key in ("hbelow", "hist", "hmin", "hmax", "cbelow"):
        np.testing.assert_array_equal(merged[key], out[key])
    np.testing.assert_array_equal(np.sort(merged["vals"]), np.sort(out["vals"]))


@pytest.mark.parametrize("n", [1000, 9000])
def test_select_collected_is_numpy_median(rng, n):
    """Both ways: NumPy's sort (a small collection) and the compiled selection (past
    ``SORT_MAX_VALUES``), with ties on half the values."""
    from daskrnmf.kernels.median_select import SORT_MAX_VALUES

    assert (n > SORT_MAX_VALUES) == (n == 9000)
    keys = rng.integers(0, 5, size=n).astype(np.int32)
    vals = rng.normal(size=n)
    vals[::2] = np.round(vals[::2])
    ents = np.array([0, 2, 4])
    counts = np.bincount(keys, minlength=5)[ents]
    got = select_collected(keys, vals, 5, ents, (counts - 1) // 2, counts // 2)
    np.testing.assert_array_equal(got, [np.median(vals[keys == e]) for e in ents])


def test_small_collection_compiles_no_selection(rng, monkeypatch):
    """A collection of a few thousand values (a small fit's S step or L1 step on a
    cluster) is ranked by NumPy's sort: the compiled selection is not called, so a
    first fit does not wait for its compilation (issue 38)."""
    from daskrnmf.kernels import median_rounds

    def compiled(*args):
        raise AssertionError("the compiled selection was called")

    monkeypatch.setattr(median_rounds, "_select_collected", compiled)
    keys = rng.integers(0, 7, size=3600).astype(np.int32)
    vals = rng.normal(size=3600)
    ents = np.arange(7)
    counts = np.bincount(keys, minlength=7)
    got = select_collected(keys, vals, 7, ents, (counts - 1) // 2, counts // 2)
    np.testing.assert_array_equal(got, [np.median(vals[keys == e]) for e in ents])


def test_rng_depends_on_global_index_only():
    idx = np.arange(1000, dtype=np.uint64)
    whole = krng.uniform(7, 3, idx)
    parts = np.concatenate([krng.uniform(7, 3, idx[s:s + 99]) for s in range(0, 1000, 99)])
    np.testing.assert_array_equal(whole, parts)
    assert 0 < whole.min() and whole.max() < 1
    assert abs(whole.mean() - 0.5) < 0.05
    assert not np.array_equal(whole, krng.uniform(8, 3, idx))
    ints = krng.integers(7, 3, idx, 4)
    assert set(np.unique(ints)) == {0, 1, 2, 3}


def _median_round_loop(X, labels, K, plan, columns, n_groups):
    """The plain twin of :func:`median_round`: every (row, restart, feature) value to its
    (restart, cluster, column group) entry, one at a time."""
    E = plan["hist_slot"].shape[0]
    out = {"hbelow": np.zeros(E, np.int64), "hmin": np.full(E, np.inf),
           "hmax": np.full(E, -np.inf), "cbelow": np.zeros(E, np.int64),
           "cin": np.zeros(E, np.int64),
           "hist": np.zeros((plan["n_hist"], plan["n_bins"]), np.int64)}
    keys, vals = [], []
    B = plan["n_bins"]
    for i in range(X.shape[0]):
        for r in range(labels.shape[1]):
            for j in range(X.shape[1]):
                e = (r * K + labels[i, r]) * n_groups + columns[r, j]
                v = X[i, j]
                s = plan["hist_slot"][e]
                lo, hi = plan["hlo"][e], plan["hhi"][e]
                if s >= 0 and v < lo:
                    out["hbelow"][e] += 1
                elif s >= 0 and v <= hi:
                    w = (hi - lo) / B
                    out["hist"][s, min(max(int((v - lo) / w) if w > 0 else 0, 0), B - 1)] += 1
                    out["hmin"][e] = min(out["hmin"][e], v)
                    out["hmax"][e] = max(out["hmax"][e], v)
                if plan["coll"][e] and v < plan["clo"][e]:
                    out["cbelow"][e] += 1
                elif plan["coll"][e] and v <= plan["chi"][e]:
                    out["cin"][e] += 1
                    keys.append(e)
                    vals.append(v)
    out["keys"], out["vals"] = np.array(keys, dtype=np.int64), np.array(vals)
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("histograms, collections", [(True, True), (False, True),
                                                     (True, False)])
@pytest.mark.parametrize("groups", ["features", "column groups"])
def test_median_round_matches_a_plain_loop(rng, groups, histograms, collections, dtype,
                                           monkeypatch):
    """RFNMF's rounds (every feature its own group) and RFNMTF's (column groups, mapped
    onto per-feature entries) take the branch-free per-feature kernels (a round with no
    histogram, the count-only one; a round with no collection, the histogram-only one);
    a plain loop over every value is their twin: ties on bin edges, NaN (missing
    values), one-point and empty windows, several restarts, float32 blocks (compared and
    collected as float64)."""
    import daskrnmf.kernels.median_rounds as M

    if not collections:     # the first step's bracket round: the histogram-only kernel
        monkeypatch.setattr(M, "_median_round_features", None)
    n, d, k, R = 500, 9, 3, 2
    X = np.round(rng.normal(size=(n, d)), 1).astype(dtype)
    X[rng.random(X.shape) < 0.05] = np.nan
    labels = rng.integers(0, k, size=(n, R))
    if groups == "features":
        columns, L = None, d
    else:
        L = 4
        columns = rng.integers(0, L, size=(R, d))
    E = R * k * L
    lo = np.round(rng.uniform(-1.5, 1.5, E), 1)
    width = np.where(rng.random(E) < 0.2, 0.0, np.round(rng.uniform(0, 2, E), 1))
    plan = _plan(E, 10, (rng.random(E) < 0.6) & histograms, lo, lo + width,  # one-point windows
                 (rng.random(E) < 0.5) & collections, np.full(E, -0.3),
                 np.where(rng.random(E) < 0.2, -0.4, 0.4))
    out = median_round(X, labels, k, plan, columns)
    assert out["vals"].dtype == np.float64
    ref = _median_round_loop(X, labels, k, plan,
                             np.tile(np.arange(d), (R, 1)) if columns is None else columns, L)
    for key in ("hbelow", "hist", "hmin", "hmax", "cbelow", "cin", "keys", "vals"):
        np.testing.assert_array_equal(out[key], ref[key], err_msg=key)
    assert not out["dropped"].any()


def test_median_round_with_column_groups_matches_numpy_twin(rng):
    # RFNMTF's entries: (restart, row cluster, column cluster) blocks
    n, d, K, L, R = 300, 7, 3, 2, 2
    X = rng.normal(size=(n, d))
    labels = rng.integers(0, K, size=(n, R))
    columns = rng.integers(0, L, size=(R, d))
    E = R * K * L
    plan = _plan(E, 8, np.ones(E, bool), np.full(E, -1.0), np.full(E, 1.0),
                 np.ones(E, bool), np.full(E, -0.5), np.full(E, 0.5))
    out = median_round(X, labels, K, plan, columns)
    for r in range(R):
        for k in range(K):
            for g in range(L):
                e = (r * K + k) * L + g
                vals = X[labels[:, r] == k][:, columns[r] == g].ravel()
                inside = vals[(vals >= -1.0) & (vals <= 1.0)]
                assert out["hbelow"][e] == (vals < -1.0).sum()
                np.testing.assert_array_equal(out["hist"][plan["hist_slot"][e]],
                                              np.histogram(inside, bins=8, range=(-1.0, 1.0))[0])
                assert out["cbelow"][e] == (vals < -0.5).sum()
                np.testing.assert_array_equal(np.sort(out["vals"][out["keys"] == e]),
                                              np.sort(vals[(vals >= -0.5) & (vals <= 0.5)]))
    parts = [median_round(X[s:s + 41], labels[s:s + 41], K, plan, columns) for s in range(0, n, 41)]
    merged = merge_median_round(parts)
    for key in ("hbelow", "hist", "hmin", "hmax", "cbelow"):
        np.testing.assert_array_equal(merged[key], out[key])


def test_column_costs_matches_numpy(rng):
    n, d, K, L, R = 200, 9, 4, 3, 2
    X = rng.normal(size=(n, d))
    labels = rng.integers(0, K, size=(n, R))
    S = rng.normal(size=(R, K, L))
    got = column_costs(X, labels, S)
    for r in range(R):
        expect = np.abs(X[:, :, None] - S[r][labels[:, r]][:, None, :]).sum(axis=0)
        np.testing.assert_allclose(got[r], expect, rtol=1e-12)
    parts = sum(column_costs(X[s:s + 23], labels[s:s + 23], S) for s in range(0, n, 23))
    np.testing.assert_allclose(parts, got, rtol=1e-12)
    assert column_costs(X[:0], labels[:0], S).shape == (R, d, L)


def test_prototypes_and_tie_tolerant_argmin(rng):
    S = rng.normal(size=(2, 3, 4))
    columns = rng.integers(0, 4, size=(2, 10))
    P = prototypes(S, columns)
    for r in range(2):
        np.testing.assert_array_equal(P[r], S[r][:, columns[r]])
    cost = np.array([[3.0, 1.0, 1.0 + 1e-14, 2.0], [5.0, 5.0, 4.0, 4.0 * (1 - 1e-13)]])
    np.testing.assert_array_equal(argmin_ties_low(cost), [1, 2])  # near-ties: lowest index
    generic = rng.normal(size=(50, 6))  # no near-ties: the plain argmin
    np.testing.assert_array_equal(argmin_ties_low(generic), generic.argmin(axis=1))


def test_group_medians_match_numpy_fuzz(median_path):
    from daskrnmf.kernels.median_select import group_medians

    rng = np.random.default_rng(11)
    for trial in range(40):
        n, d, G = int(rng.integers(1, 60)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
        X = rng.integers(-3, 4, size=(n, d)).astype(float) if trial % 2 else rng.normal(size=(n, d))
        g = rng.integers(0, G, n)
        order = np.argsort(g, kind="stable")
        out = np.full((G, d), np.nan)
        group_medians(np.ascontiguousarray(X.T), order, np.cumsum(np.bincount(g, minlength=G)), out)
        for c in range(G):
            want = np.median(X[g == c], axis=0) if (g == c).any() else np.full(d, np.nan)
            np.testing.assert_array_equal(out[c], want)


@pytest.mark.parametrize("n", [1, 7, 64, 65, 200])
def test_group_medians_from_ranks_match_numpy(n, median_path):
    """Medians read off ranks (bit arrays of 1 to 4 words, a word boundary at 64) equal
    NumPy's: ties, NaN left out (nanmedian; all-NaN and empty groups untouched), one
    group and many, and equal :func:`group_medians` bit for bit."""
    from daskrnmf.kernels.median_select import group_medians, group_medians_ranked, rank_rows

    rng = np.random.default_rng(n)
    for trial in range(30):
        d, G = int(rng.integers(1, 9)), (1 if trial % 5 == 0 else int(rng.integers(2, 7)))
        X = (rng.integers(-2, 3, size=(n, d)).astype(float) if trial % 3 == 0
             else rng.standard_cauchy(size=(n, d)))
        if trial % 4 == 1:
            X[rng.random((n, d)) < 0.3] = np.nan
            X[:, 0] = np.nan                    # a feature no row observes
        g = rng.integers(0, G, n)
        order = np.argsort(g, kind="stable")
        ends = np.cumsum(np.bincount(g, minlength=G))
        Xt = np.ascontiguousarray(X.T)
        out = group_medians_ranked(rank_rows(Xt), order, ends, np.full((G, d), np.nan))
        for c in range(G):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN slices
                want = (np.nanmedian(X[g == c], axis=0) if (g == c).any()
                        else np.full(d, np.nan))
            np.testing.assert_array_equal(out[c], want)
        np.testing.assert_array_equal(
            out, group_medians(Xt, order, ends, np.full((G, d), np.nan)))


def test_kmedians_from_ranks_gives_the_same_labels():
    """RFNMTF's column clustering reads its medians off ranks: the same labels as
    selecting them, restart by restart (ties and gross entries included)."""
    from daskrnmf.kernels.median_select import rank_rows
    from daskrnmf.models._clustering import kmedians_labels

    rng = np.random.default_rng(3)
    for trial in range(4):
        X = rng.normal(size=(300, 40)) + 5 * (np.arange(40) % 4)   # 40 "columns" to cluster
        if trial % 2:
            X = np.round(X)
        X[rng.random(X.shape) < 0.05] = 100.0
        Xt = np.ascontiguousarray(X.T)          # a column per row, as RFNMTF clusters them
        # the general fit (CentroidFit) with and without ranks
        a = kmedians_labels(Xt, 4, 6, seed=trial, compiled=False)
        b = kmedians_labels(Xt, 4, 6, seed=trial, ranked=rank_rows(X), compiled=False)
        np.testing.assert_array_equal(a, b)


def test_kmedians_restarts_from_given_seeds_are_the_one_restart_fits():
    """Restarts seeded from a list of seeds (RFNMTF's row fits that share a profile) give
    the labels of as many one-restart fits from those seeds."""
    from daskrnmf.models._clustering import kmedians_labels

    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 6)) + 6 * rng.integers(0, 5, (400, 1))
    X[rng.random(X.shape) < 0.05] = 80.0
    seeds = [11, 5, 11, 902]
    got = kmedians_labels(X, 5, len(seeds), None, seeds=seeds)
    for r, s in enumerate(seeds):
        np.testing.assert_array_equal(got[:, r], kmedians_labels(X, 5, 1, s)[:, 0])


def test_cluster_medians_by_one_sweep_match_numpy():
    """Medians per cluster and feature read off each feature's sorted values (the
    members' middle ones as they are met) equal :func:`numpy.median`, with ties, odd
    and even clusters, one-member and empty clusters; clusters not asked for are left."""
    from daskrnmf.kernels.kmedians import _cluster_medians_sorted, feature_sweep
    from daskrnmf.kernels.median_select import middle_ranks, rank_rows

    rng = np.random.default_rng(5)
    for trial in range(40):
        n, d, k = int(rng.integers(1, 60)), int(rng.integers(1, 7)), int(rng.integers(1, 6))
        X = (rng.integers(-2, 3, size=(n, d)).astype(float) if trial % 2
             else rng.standard_cauchy(size=(n, d)))
        labels = rng.integers(0, k, n).astype(np.int64)
        counts = np.bincount(labels, minlength=k).astype(np.int64)
        sweep = feature_sweep(rank_rows(np.ascontiguousarray(X.T)))
        out = np.full((k, d), -7.0)
        todo = rng.random(k) < 0.7                  # the clusters asked for
        lo, hi = middle_ranks(counts, todo)
        _cluster_medians_sorted(sweep, labels, np.repeat(lo, d), np.repeat(hi, d),
                                np.count_nonzero(todo & (counts > 0)),
                                np.zeros(k * d, np.int64), out)
        for c in range(k):
            want = (np.median(X[labels == c], axis=0) if counts[c] and todo[c]
                    else np.full(d, -7.0))
            np.testing.assert_array_equal(out[c], want)


def _random_blocking(rng, trial, n_max):
    """A small X (ties on odd trials, heavy tails on even ones, float32 every fifth) and
    random row and column clusters: ``(X, rows, cols, K, L)``."""
    n, d = int(rng.integers(1, n_max)), int(rng.integers(1, 30))
    K, L = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    X = (rng.integers(0, 3, (n, d)).astype(float) if trial % 2
         else rng.standard_cauchy((n, d)))
    if trial % 5 == 0:
        X = X.astype(np.float32)
    return X, rng.integers(0, K, n), rng.integers(0, L, d), K, L


def test_bracketed_block_medians_match_numpy():
    """Block medians counted below and gathered inside windows equal ``np.median`` of
    every block, whether the windows hold the medians (narrow, or a single point), miss
    them (above, below), are NaN or infinite: ties, heavy tails, float32, empty blocks
    NaN, one block and many."""
    from daskrnmf.kernels.median_select import block_medians

    rng = np.random.default_rng(12)
    for trial in range(80):
        X, rows, cols, K, L = _random_blocking(rng, trial, 60)
        want = np.full((K, L), np.nan)
        for k in range(K):
            for l in range(L):
                block = X[rows == k][:, cols == l].astype(np.float64)
                if block.size:
                    want[k, l] = np.median(block)
        known = np.where(np.isnan(want), 0.0, want)
        spread = rng.random((K, L))
        for lo, hi in [(known - spread, known + spread), (known, known),
                       (known + 1 + spread, known + 2 + spread),
                       (known - 2 - spread, known - 1 - spread),
                       (np.full((K, L), np.nan), np.full((K, L), np.nan)),
                       (np.full((K, L), -np.inf), np.full((K, L), np.inf))]:
            got = block_medians(X, rows, cols, K, L, window=(lo, hi))
            np.testing.assert_array_equal(got, want)


def test_block_medians_from_sorted_values_match_numpy():
    """Block medians read off X's values sorted once (one sweep per blocking) equal
    ``np.median`` of every block and :func:`block_medians`: ties, odd and even blocks,
    empty row or column clusters, one block, float32."""
    from daskrnmf.kernels.blocks import as_kernel_block
    from daskrnmf.kernels.median_select import SortedValues, block_medians

    rng = np.random.default_rng(11)
    for trial in range(60):
        X, rows, cols, K, L = _random_blocking(rng, trial, 50)
        n, d = X.shape
        sv = SortedValues(X)
        for _ in range(2):                          # one sort, many blockings
            got = sv.block_medians(rows, cols, K, L)
            for k in range(K):
                for l in range(L):
                    block = X[rows == k][:, cols == l]
                    want = np.median(block.astype(np.float64)) if block.size else np.nan
                    np.testing.assert_array_equal(got[k, l], want)
            np.testing.assert_array_equal(
                got, block_medians(as_kernel_block(X), rows, cols, K, L))
            rows, cols = rng.integers(0, K, n), rng.integers(0, L, d)


def _general_kmedians(X, F0, max_iter=30, tol=1e-4):
    """The general in-memory fit the compiled one reproduces: CentroidFit under iterate."""
    from daskrnmf._blocks import RowBlocks
    from daskrnmf._driver import iterate
    from daskrnmf.models._clustering import CentroidFit
    from daskrnmf.reductions import feature_stats

    blocks = RowBlocks(X)
    assert len(blocks.sizes) == 1
    fit = CentroidFit(blocks, feature_stats(blocks), k=F0.shape[1], R=F0.shape[0],
                      metric="l1", loss="l1", seed=0, median_tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        F, log = iterate(fit.step, F0.copy(), n_restarts=F0.shape[0], max_iter=max_iter,
                         tol=tol)
    return nearest(X, F, "l1")[0], F, np.array(log.history)


@pytest.mark.parametrize("n, d, k, R", [(1000, 6, 8, 1), (120, 400, 6, 40), (50, 3, 4, 5),
                                        (5, 4, 8, 3), (300, 20, 10, 7)])
def test_compiled_kmedians_is_the_general_fit(n, d, k, R):
    """:func:`kmedians_fit` (compiled iterations; restarts in threads when R x n x d x k
    is large, the (120, 400, 6, 40) case) gives the general fit's labels, centres and
    objective history bit for bit: planted clusters with gross entries, integer data
    full of ties, random centres (clusters empty and re-seeded), fewer rows than
    clusters, restarts stopping at different iterations."""
    from daskrnmf.kernels.kmedians import THREADS_MIN_WORK, kmedians_fit
    from daskrnmf.kernels.median_select import rank_rows

    rng = np.random.default_rng(n + d)
    for trial in range(3):
        if trial == 0:
            X = rng.integers(0, 4, (n, d)).astype(float)
        else:
            centres = rng.uniform(0, 10, (k, d))
            X = centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))
            X[rng.random((n, d)) < 0.05] = 100.0
        F0 = (X[rng.integers(0, n, (R, k))] if trial < 2       # seeds: rows of X
              else rng.uniform(X.min(), X.max(), (R, k, d)))   # far away: empty clusters
        want_labels, want_F, want_hist = _general_kmedians(X, F0)
        # medians read off sorted features, and selected
        for ranked in (rank_rows(np.ascontiguousarray(X.T)), None):
            labels, F, hist = kmedians_fit(X, ranked, F0, 30, 1e-4)
            np.testing.assert_array_equal(labels, want_labels)
            np.testing.assert_array_equal(F, want_F)
            np.testing.assert_array_equal(hist, want_hist)
    assert (X.size * k * R >= THREADS_MIN_WORK) == (R == 40)


def test_compiled_kmedians_runs_from_numbas_cache(tmp_path):
    """The kernels load from Numba's on-disk cache in a new process and give the same
    labels and objectives, bit for bit, as freshly compiled (a recursive pairwise sum
    crashed there: it is walked with a stack now; and a compiled caller of the
    vectorised distance kernel summed differently once loaded: it is called from Python)."""
    import subprocess
    import sys

    # 40 restarts on 120 x 400 (the shape that showed the summation drift, 3 of 40
    # objectives): labels and objective histories, medians sorted and selected
    code = ("import hashlib, numpy as np; from daskrnmf.kernels.kmedians import kmedians_fit; "
            "from daskrnmf.kernels.median_select import rank_rows; "
            "g = np.random.default_rng(0); X = g.normal(size=(120, 400)); "
            "F0 = X[g.integers(0, 120, (40, 6))]; "
            "out = [kmedians_fit(X, r, F0, 30, 1e-4) for r in "
            "(rank_rows(np.ascontiguousarray(X.T)), None)]; "
            "assert all((o[0] == out[0][0]).all() for o in out); "
            "print(hashlib.sha256(b''.join(a.tobytes() for o in out for a in o)).hexdigest())")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[0].stdout == runs[1].stdout
    assert any(tmp_path.rglob("*.nbi"))


@pytest.mark.parametrize("spread", [1.0, 1e-3])
def test_nnls_with_a_kept_factor_matches_scipy_through_a_chain_of_warm_solves(spread):
    """The active set keeps its Cholesky factor from one solve to the next on the same A
    (columns appended, and removed by Givens rotations at any position, as in the rounds
    of :mod:`daskrnmf.kernels.cd_rows`): every solve of the chain equals SciPy's NNLS of
    its right-hand side, and the factor stays that of A on the passive set."""
    from scipy.optimize import nnls

    from daskrnmf.kernels.nnls import _nnls_row

    rs = np.random.default_rng(1)
    k = 12
    G = rs.normal(size=(40, k))
    G[:, 1] = G[:, 0] + spread * rs.normal(size=40)
    A = G.T @ G
    amax = float(np.abs(np.diag(A)).max())
    idx, z = np.empty(k, dtype=np.int64), np.empty(k)
    L, passive = np.empty((k, k)), np.zeros(k, dtype=np.bool_)
    tol = 32 * k * np.finfo(np.float64).eps
    x, s = np.zeros(k), -1
    base = rs.normal(size=40)
    sizes = []
    for step in range(60):
        # the target drifts, and jumps now and then: the support grows and shrinks
        y = base + (0.3 if step % 7 else 3.0) * rs.normal(size=40)
        s = _nnls_row(A, G.T @ y, x, tol, True, amax, idx, z, L, passive, s)
        ref = nnls(G, y)[0]
        np.testing.assert_allclose(x, ref, rtol=1e-6, atol=1e-8 * max(1.0, ref.max()))
        P = idx[:s]
        assert sorted(P) == list(np.flatnonzero(passive)) and set(P) >= set(np.flatnonzero(x))
        np.testing.assert_allclose(np.tril(L[:s, :s]) @ np.tril(L[:s, :s]).T, A[np.ix_(P, P)],
                                   rtol=1e-9, atol=1e-9 * amax)
        sizes.append(s)
    assert min(sizes) < max(sizes) - 2          # the chain did add and remove columns


@pytest.mark.parametrize("spread", [1.0, 1e-3])
def test_nnls_with_tabled_inverses_matches_scipy_and_its_table_is_every_inverse(spread):
    """The NNLS of the fused cd solve (k <= TABLE_MAX_K, written inside
    :func:`~daskrnmf.kernels.cd_rows._cd_rows`): with an alpha_R no residual reaches (r
    stays 0, so a row's h is the NNLS of b = W x), every solve of a chain of warm starts
    equals SciPy's NNLS, and the table it reads (filled for every passive set at once,
    each set bordered from its largest subset) holds the inverse of A on each set, zero
    elsewhere."""
    from scipy.optimize import nnls

    from daskrnmf.kernels.cd_rows import prepare_components, solve_rows_fused
    from daskrnmf.kernels.nnls import TABLE_MAX_K

    rs = np.random.default_rng(1)
    k = TABLE_MAX_K
    G = rs.normal(size=(40, k))
    G[:, 1] = G[:, 0] + spread * rs.normal(size=40)
    A = G.T @ G
    prep = prepare_components(G.T, np.float64)
    assert prep.table is not None                   # the tabled NNLS, not the factored one
    tab = prep.table
    x = np.zeros((1, k))
    base = rs.normal(size=40)
    sizes = []
    for step in range(60):
        y = base + (0.3 if step % 7 else 3.0) * rs.normal(size=40)
        # warm from the last solve's h: the support grows and shrinks from there
        x, r, _ = solve_rows_fused(y[None], G.T, 1e30, 100, 0.0, h=x, prepared=prep)
        assert (r == 0).all()
        ref = nnls(G, y)[0]
        np.testing.assert_allclose(x[0], ref, rtol=1e-6, atol=1e-8 * max(1.0, ref.max()))
        sizes.append(np.count_nonzero(x))
    assert min(sizes) < max(sizes) - 2          # the chain did add and remove columns
    for P in rs.choice(np.arange(1, 1 << k), 300, replace=False):
        members = [c for c in range(k) if (P >> c) & 1]
        ref = np.zeros((k, k))
        ref[np.ix_(members, members)] = np.linalg.inv(A[np.ix_(members, members)])
        np.testing.assert_allclose(tab[P], ref, rtol=1e-6,
                                   atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("metric,n_features", [("l1", 7), ("l2", 7), ("l2", 64)])
@pytest.mark.parametrize("missing", [False, True])
def test_float32_blocks_give_the_float64_results(rng, metric, n_features, missing):
    """float32 blocks enter the assignment, distance and fused-pass kernels as they are;
    every value is widened exactly, so labels, distances and statistics equal those of a
    float64 copy bit for bit (the loop, the certified product at 64 x 80 and the masked
    kernels)."""
    from daskrnmf.reductions import AssignSpec, assign_chunk
    X = rng.normal(size=(300, n_features)).astype(np.float32)
    if missing:
        X[rng.random(X.shape) < 0.05] = np.nan
    k = 80 if n_features == 64 else 4
    C = rng.normal(size=(2, k, n_features))
    for a, b in zip(nearest(X, C, metric), nearest(X.astype(np.float64), C, metric)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(distances(X, C[0], metric),
                                  distances(X.astype(np.float64), C[0], metric))
    for stats in ("sums", "counts"):
        spec = AssignSpec(metric=metric, n_clusters=k, eps=1e-9, n_worst=3, seed=0, restarts=2,
                          stats=stats, weights="l21", squared=False, missing=missing)
        (pa, la), (pb, lb) = (assign_chunk(x, 10, C, spec)
                              for x in (X, X.astype(np.float64)))
        np.testing.assert_array_equal(la, lb)
        for key in pa:
            if key == "worst":
                for w in pa[key]:
                    np.testing.assert_array_equal(pa[key][w], pb[key][w])
            else:
                np.testing.assert_array_equal(pa[key], pb[key], err_msg=key)


def test_every_kernel_declares_fastmath():
    """Numba gives a kernel without its own ``fastmath`` setting the flag of the kernel
    that first compiles it, and caches that variant under the signature alone: the
    NNLS row solver reached from the fastmath coordinate-descent loop (ONMFO) and from
    plain Python (NMF.transform) gave different bits depending on which ran first in a
    process or wrote the cache (ONMFO's codes and NMF.transform differed by up to 1e-11
    relative with the order; measured in fresh caches, a process each).  Every kernel
    states its flag."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import daskrnmf

    unset = []
    for mod in pkgutil.walk_packages(daskrnmf.__path__, "daskrnmf."):
        if mod.name.endswith("__main__"):
            continue
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            if (isinstance(obj, CPUDispatcher) and obj.__module__ == mod.name
                    and "fastmath" not in obj.targetoptions):
                unset.append(f"{mod.name}.{name}")
    assert not unset, unset



def test_kernels_cache_where_the_user_can_write_when_the_installation_is_read_only(tmp_path):
    """A read-only installation with a read-only home (the package's ``__pycache__`` and
    the user's cache directory refuse new files, as Numba checks them): the kernels
    still import (Numba refused every ``cache=True`` function there: 'no locator
    available'), compile into this user's directory under TMPDIR, and a second process
    loads them from it."""
    import subprocess
    import sys

    code = ("import importlib.util, os, sys, tempfile; "
            "blocked = (importlib.util.find_spec('daskrnmf').submodule_search_locations[0], "
            "os.environ['XDG_CACHE_HOME']); real = tempfile.TemporaryFile\n"
            "def refuse(*a, dir=None, **k):\n"
            "    if dir is not None and os.path.abspath(dir).startswith(blocked):\n"
            "        raise PermissionError(30, 'Read-only file system', dir)\n"
            "    return real(*a, dir=dir, **k)\n"
            "tempfile.TemporaryFile = refuse\n"
            "import numpy as np, numba; from daskrnmf.kernels import median_select\n"
            "median_select.SMALL_VALUES = -1     # the compiled counting sort\n"
            "order, ends = median_select.group_order(np.array([1, 0, 1]), 2)\n"
            "assert order.tolist() == [1, 0, 2] and ends.tolist() == [1, 3]\n"
            "from daskrnmf.kernels import median_select as median\n"
            "print(numba.config.CACHE_DIR, sum(median._group_order.stats.cache_hits.values()))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "home-cache"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    where = [run.stdout.split() for run in runs]
    assert where[0][0] == where[1][0]
    assert where[0][0].startswith(str(tmp_path / "tmp" / "daskrnmf-numba-cache-"))
    assert any((tmp_path / "tmp").rglob("*.nbi"))
    assert (where[0][1], where[1][1]) == ("0", "1")     # compiled, then loaded


def test_a_constant_argument_compiles_no_kernel_of_its_own():
    """A kernel that compiled callers call with constants (``_select(a, 0, k)``,
    ``_nnls_row(..., True, ..., -1)``) compiles for the arguments' plain types, once:
    Numba compiled a literal 0 or True apart from the variable's type, the same machine
    code again on the first fit's wait."""
    from numba import njit, types

    from daskrnmf.kernels.median_select import _select

    @njit(cache=False)
    def caller(a):
        return _select(a, 3, 0) + _select(a, a.shape[0], 1)

    assert caller(np.array([3.0, 1.0, 2.0])) == 3.0
    for sig in _select.signatures:
        assert not any(isinstance(t, types.Literal) for t in sig), sig


def test_median_round_certificate_holds_for_any_medians_inside_the_windows(rng):
    """The certificate of a collection round (RFNMF L1): a row it certifies keeps its
    label for medians anywhere inside the windows (their corners and random points, as
    :func:`nearest` assigns), a row at a tie is not certified, and the counts below /
    above the windows and the rows' distances to them are NumPy's."""
    from types import SimpleNamespace

    from daskrnmf._median_search import certified_plan

    R, k, d = 2, 3, 5
    centres = rng.uniform(0, 10, size=(R, k, d))
    centres[0, 2] += 40.0                           # far from row 0, the tie below
    half = rng.uniform(0, 0.3, size=(R, k, d)) * (rng.random((R, k, d)) < 0.8)
    lo, hi = (centres - half).ravel(), (centres + half).ravel()
    point = half.ravel() == 0           # resolved entries: their median is the window
    search = SimpleNamespace(resolved=point, value=np.where(point, lo, np.nan))
    E = lo.size
    plan = certified_plan(search, {"hist_slot": np.full(E, -1), "hlo": np.zeros(E),
                                   "hhi": np.zeros(E), "n_bins": 8, "n_hist": 0,
                                   "coll": ~point, "clo": np.where(point, 0.0, lo),
                                   "chi": np.where(point, 0.0, hi), "max_collect": None}, R, k)
    assert "certify" in plan
    X = (centres[0][rng.integers(0, k, 300)] + rng.normal(scale=2.5, size=(300, d)))
    X[0] = 0.5 * (centres[0, 0] + centres[0, 1])    # L1-equidistant from two centres
    X = X.astype(np.float32)
    labels = nearest(X, centres, "l1")[0].astype(np.int64)
    medians = [np.where(rng.random((R, k, d)) < 0.5, centres - half, centres + half)
               for _ in range(8)] + [centres + half * rng.uniform(-1, 1, size=(R, k, d))
                                     for _ in range(8)]
    certified = []
    for i in range(X.shape[0]):
        out = median_round(X[i:i + 1], labels[i:i + 1], k, plan)["certify"]
        if not out["uncertain"]:
            certified.append(i)
            for M in medians:
                np.testing.assert_array_equal(nearest(X[i:i + 1], M, "l1")[0], labels[i:i + 1])
    assert 0 not in certified and 100 < len(certified) < X.shape[0]
    rows = np.array(certified)
    out = median_round(X[rows], labels[rows], k, plan)["certify"]
    assert out["uncertain"] == 0
    e = ((np.arange(R)[None, :] * k + labels[rows]) * d)[:, :, None] + np.arange(d)
    v = np.broadcast_to(X[rows].astype(np.float64)[:, None, :], e.shape)
    below, above = v < lo[e], v > hi[e]
    for got, want in ((out["nb"], np.bincount(e[below], minlength=E)),
                      (out["na"], np.bincount(e[above], minlength=E))):
        np.testing.assert_array_equal(got, want)
    outside = np.maximum(lo[e] - v, 0.0) + np.maximum(v - hi[e], 0.0)
    np.testing.assert_allclose(out["outside"], outside.sum(axis=(0, 2)), rtol=1e-12)


@pytest.mark.parametrize("n_values", [9, 9000])     # NumPy's sort / the compiled selection
def test_a_zero_median_of_collected_values_is_positive_zero(n_values):
    # tied -0.0 and 0.0 at the median ranks: +0.0 whichever the ranks meet (the sort of a
    # few values and the selection of many had given either sign)
    from daskrnmf.kernels import median_rounds as mr

    rng = np.random.default_rng(0)
    keys = np.repeat(np.arange(3, dtype=np.int32), n_values // 3)
    vals = rng.choice([-0.0, 0.0], keys.size)
    vals[: n_values // 3 // 2 - 1] = -1.0       # entry 0's middle ranks among the zeros
    cnt = np.bincount(keys, minlength=3)
    got = mr.select_collected(keys, vals, 3, np.arange(3), (cnt - 1) // 2, cnt // 2)
    assert np.array_equal(got, np.zeros(3)) and not np.signbit(got).any()


@pytest.mark.parametrize("dtype, hw_dtype", [(np.float64, np.float64),
                                             (np.float32, np.float64),
                                             (np.float64, np.float32)])
@pytest.mark.parametrize("masked", [False, True])
def test_residual_norms_match_the_plain_formula(dtype, hw_dtype, masked):
    """``kernels.mu.residual_norms`` (one (n, d) array, einsum's row sums) against
    ``sqrt(((X - H W) ** 2).sum(axis=1))``, over the observed entries with a mask; X in
    float32 or float64, rows of every kind (a zero row, one exactly reconstructed), no
    rows at all; the result float64 whenever X, H or W is (float32 H and W do not make
    it float32)."""
    from daskrnmf.kernels.mu import residual_norms

    rng = np.random.default_rng(3)
    H, W = rng.random((9, 4)).astype(hw_dtype), rng.random((4, 7)).astype(hw_dtype)
    X = rng.random((9, 7)).astype(dtype)
    X[2] = 0.0
    X[5] = (H[5] @ W).astype(dtype)
    mask = rng.random((9, 7)) < 0.7 if masked else None
    if masked:
        X = np.where(mask, X, 0).astype(dtype)
    E = X.astype(np.float64) - H.astype(np.float64) @ W.astype(np.float64)
    want = np.sqrt(((E * mask if masked else E) ** 2).sum(axis=1))
    got = residual_norms(X, H, W, mask)
    assert got.dtype == np.float64 and got.shape == (9,)
    exact = dtype == hw_dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-13 if exact else 1e-6,
                               atol=1e-15 if exact else 1e-6)
    assert residual_norms(X[:0], H[:0], W, None if mask is None else mask[:0]).shape == (0,)
