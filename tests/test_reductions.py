"""Tree reductions against their NumPy twins: one chunk, many chunks, split_every=2."""

import warnings

import dask
import dask.array as da

import numpy as np
import pytest

from daskrnmf import _median_search as search_mod
from daskrnmf._blocks import RowBlocks, tree_reduce
from daskrnmf.kernels import rng as krng
from daskrnmf.reductions import feature_stats, sample_rows

from .conftest import median_cases
from .reference import grouped_medians


def _blockings(X):
    """The same data as one NumPy block, many NumPy blocks, and Dask with fan-in 2 and 8."""
    n = X.shape[0]
    return {
        "numpy-one-block": RowBlocks(X, block_rows=n),
        "numpy-many-blocks": RowBlocks(X, block_rows=max(1, n // 13)),
        "dask-one-chunk": RowBlocks(da.from_array(X, chunks=(n, X.shape[1]))),
        "dask-many-chunks-split2": RowBlocks(da.from_array(X, chunks=(max(1, n // 11), X.shape[1])),
                                             split_every=2),
        "dask-many-chunks-split8": RowBlocks(da.from_array(X, chunks=(max(1, n // 29), X.shape[1]))),
    }


def test_tree_reduce_is_a_tree_not_a_chain():
    parts = [dask.delayed(np.array)([i]) for i in range(27)]
    calls = []

    def combine(xs):
        calls.append(len(xs))
        return np.concatenate(xs)

    root = tree_reduce(parts, combine, 3, wrap=dask.delayed)
    graph = dict(root.__dask_graph__())
    # 27 leaves, fan-in 3: 9 + 3 + 1 combine nodes, depth 3
    combines = [k for k in graph if str(k).startswith("combine")]
    assert len(combines) == 13
    np.testing.assert_array_equal(np.sort(root.compute()), np.arange(27))
    assert max(calls) <= 3


def test_tree_reduce_numpy_equals_dask_structure():
    parts = [np.array([float(i)]) for i in range(10)]
    log = []

    def combine(xs):
        log.append([float(x[0]) for x in xs])
        return np.array([sum(float(x[0]) for x in xs)])

    assert tree_reduce(parts, combine, 4)[0] == 45.0
    assert log[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_feature_stats_matches_numpy(rng):
    X = rng.normal(size=(1000, 6))
    for name, blocks in _blockings(X).items():
        s = feature_stats(blocks)
        np.testing.assert_array_equal(s["min"], X.min(0), err_msg=name)
        np.testing.assert_array_equal(s["max"], X.max(0), err_msg=name)
        assert s["nonfinite"] == 0 and s["n"] == 1000
        assert blocks.n_passes == 1


def test_feature_stats_counts_nonfinite(rng):
    X = rng.normal(size=(100, 3))
    X[5, 1], X[50, 2], X[99, 0] = np.nan, np.inf, -np.inf
    s = feature_stats(RowBlocks(da.from_array(X, chunks=(7, 3))))
    assert s["nonfinite"] == 3
    finite = np.isfinite(X)
    np.testing.assert_array_equal(s["min"], np.where(finite, X, np.inf).min(0))
    np.testing.assert_array_equal(s["max"], np.where(finite, X, -np.inf).max(0))
    assert s["sum"] == pytest.approx(X[finite].sum(), rel=1e-12)


@pytest.mark.parametrize("route", ["compiled", "numpy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
def test_finite_stats_kernel_matches_numpy(rng, dtype, route, monkeypatch):
    """The block statistics against their NumPy twin, by the compiled pass (blocks above
    ``SMALL_ENTRIES`` entries) and by NumPy (small blocks): finite blocks, a block with
    NaN/inf, one whose sum overflows (the masked route), and no rows."""
    from daskrnmf.kernels import sums
    from daskrnmf.kernels.sums import finite_stats
    monkeypatch.setattr(sums, "SMALL_ENTRIES", 0 if route == "compiled" else 10**9)
    calls = _count_calls(monkeypatch, sums, "_column_stats")
    X = (rng.random((200, 5)) * 100).astype(dtype)
    cases = [X]
    if np.dtype(dtype).kind == "f":
        Y = X.copy()
        Y[3, 1], Y[7, 4], Y[9, 4] = np.nan, np.inf, -np.inf
        Z = X.copy()
        Z[:2, 0] = np.finfo(dtype).max
        cases += [Y, Z]
    for x in cases:
        finite = np.isfinite(x.astype(np.float64))
        xf = x.astype(np.float64)
        with np.errstate(over="ignore"):    # the overflowing sum
            lo, hi, bad, total = finite_stats(x)
            expect = np.where(finite, xf, 0.0).sum()
        np.testing.assert_array_equal(lo, np.where(finite, xf, np.inf).min(0))
        np.testing.assert_array_equal(hi, np.where(finite, xf, -np.inf).max(0))
        assert bad == x.size - finite.sum()
        assert total == pytest.approx(expect, rel=1e-12)
    lo, hi, bad, total = finite_stats(X[:0])
    assert np.all(lo == np.inf) and np.all(hi == -np.inf) and bad == 0 and total == 0.0
    # every block with rows took the route asked for
    assert len(calls) == (len(cases) if route == "compiled" else 0)


def _count_calls(monkeypatch, module, name):
    """Wrap ``module.name`` so that its calls are counted (the list returned)."""
    calls, function = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or function(*a))
    return calls


def test_finite_stats_small_blocks_by_numpy_give_the_kernels_numbers(rng, monkeypatch):
    """A block of at most ``SMALL_ENTRIES`` entries takes NumPy's route and one above it
    the compiled pass; on the same block the two give the same numbers bit for bit (its
    sum in the kernel's order: each feature's values in row order from +0.0; of equal
    extremes, +0.0 and -0.0, the first), whatever its dtype and memory layout, and
    NumPy's route warns of nothing where a sum overflows or +inf and -inf meet."""
    from daskrnmf.kernels import sums
    from daskrnmf.kernels.sums import finite_stats

    calls = _count_calls(monkeypatch, sums, "_column_stats")
    edge = sums.SMALL_ENTRIES // 4
    finite_stats(rng.random((edge, 4)))
    assert calls == []
    finite_stats(rng.random((edge + 1, 4)))
    assert calls == [1]
    blocks = []
    for dtype in (np.float32, np.float64, np.int64, np.uint8):
        for n, d in ((300, 7), (5000, 1), (50, 33)):
            x = (rng.random((n, d)) * 1000).astype(dtype)
            blocks += [x, np.asfortranarray(x), x[:, ::-1], x[::2]]
    top = np.finfo(np.float64).max
    over = np.array([[top, -top], [top, -top]])   # columns' sums overflow: masked route
    infs = rng.random((40, 3))
    infs[3, 1], infs[5, 1] = np.inf, -np.inf      # their sum NaN: masked route
    zeros = np.zeros((30, 4))                      # signed zeros: the kernel keeps the
    zeros[10:, 0] = -0.0                           # first of equal extremes in row order
    zeros[:5, 1] = -0.0                            # and sums from +0.0
    zeros[:, 2] = -0.0
    zeros[7, 3] = 2.0
    for x in blocks + [over, infs, zeros, -zeros, np.full((20, 3), -0.0)]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            by_numpy = finite_stats(x)
        monkeypatch.setattr(sums, "SMALL_ENTRIES", -1)
        compiled = finite_stats(x)
        monkeypatch.setattr(sums, "SMALL_ENTRIES", 4 * edge)
        for a, b in zip(by_numpy, compiled):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (x, a, b)


def _labels_per_block(blocks, labels):
    out, s = [], 0
    for size in blocks.sizes:
        out.append(labels[s:s + size])
        s += size
    return out


@pytest.mark.parametrize("case", list(median_cases(np.random.default_rng(0))))
@pytest.mark.parametrize("budget", ["collect-all", "histogram-rounds"])
def test_grouped_medians_exact(case, budget, dask_config):
    X = median_cases(np.random.default_rng(0))[case]
    labels = np.random.default_rng(1).integers(0, 3, size=(X.shape[0], 2))
    labels[:, 1] = np.minimum(labels[:, 1], 1)  # restart 1 leaves cluster 2 empty
    if budget == "histogram-rounds":  # force several histogram rounds before collecting
        dask_config({"daskrnmf.median-collect-values": 64,
                     "daskrnmf.median-histogram-cells": 256})
    lo, hi = X.min(0), X.max(0)
    for name, blocks in _blockings(X).items():
        med, rounds = grouped_medians(blocks, _labels_per_block(blocks, labels), 3, 2, lo, hi)
        for r in range(2):
            for c in range(3):
                m = labels[:, r] == c
                if not m.any():
                    assert np.isnan(med[r, c]).all()
                    continue
                np.testing.assert_array_equal(med[r, c], np.median(X[m], axis=0),
                                              err_msg=f"{name} r={r} c={c}")
        assert rounds == blocks.n_passes
        if budget == "collect-all":
            assert rounds == 1
        elif case not in ("constant",):
            assert rounds >= 2


@pytest.mark.parametrize("value", [0, -5, 2.5, "64", True])
def test_median_budgets_must_be_positive_integers(value, dask_config):
    X = np.random.default_rng(0).normal(size=(50, 2))
    blocks = RowBlocks(X, block_rows=20)
    labels = _labels_per_block(blocks, np.zeros((50, 1), dtype=np.int64))
    for key in ("daskrnmf.median-collect-values", "daskrnmf.median-histogram-cells"):
        with dask.config.set({key: value}), pytest.raises(
                ValueError, match=f"dask config '{key}' must be a positive integer"):
            grouped_medians(blocks, labels, 1, 1, X.min(0), X.max(0))


def test_grouped_medians_tolerance(rng, dask_config):
    dask_config({"daskrnmf.median-collect-values": 16,
                 "daskrnmf.median-histogram-cells": 64})
    X = rng.normal(size=(5000, 4))
    labels = rng.integers(0, 2, size=(5000, 1))
    lo, hi = X.min(0), X.max(0)
    tol = 1e-3
    exact, r_exact = grouped_medians(RowBlocks(X, block_rows=700), _labels_per_block(
        RowBlocks(X, block_rows=700), labels), 2, 1, lo, hi)
    blocks = RowBlocks(X, block_rows=700)
    approx, r_approx = grouped_medians(blocks, _labels_per_block(blocks, labels), 2, 1, lo, hi, tol=tol)
    assert r_approx < r_exact
    for c in range(2):
        vals = np.sort(X[labels[:, 0] == c], axis=0)
        n = vals.shape[0]
        lower, upper = vals[(n - 1) // 2], vals[n // 2]
        slack = tol * (hi - lo)
        assert np.all(approx[0, c] >= lower - slack) and np.all(approx[0, c] <= upper + slack)
        np.testing.assert_array_equal(exact[0, c], np.median(X[labels[:, 0] == c], axis=0))


def test_sample_rows_matches_numpy_twin(rng):
    X = rng.normal(size=(1000, 3))
    keys = krng.uniform(11, 5, np.arange(1000, dtype=np.uint64))
    expect = np.sort(np.argsort(keys)[:77])
    for name, blocks in _blockings(X).items():
        rows, idx = sample_rows(blocks, 77, 11, 5)
        np.testing.assert_array_equal(idx, expect, err_msg=name)
        np.testing.assert_array_equal(rows, X[expect], err_msg=name)
        assert blocks.n_passes == 1
    rows, idx = sample_rows(RowBlocks(X, block_rows=10), 5000, 11, 5)  # more than n: all rows
    np.testing.assert_array_equal(idx, np.arange(1000))


def test_a_sample_threshold_too_low_draws_again_with_the_same_result(rng, monkeypatch):
    """Blocks offer only rows with keys below a threshold; when fewer than the sample's
    size fall below it, a second pass draws the same sample with no threshold."""
    import daskrnmf.reductions as red
    X = rng.normal(size=(1000, 3))
    keys = krng.uniform(11, 5, np.arange(1000, dtype=np.uint64))
    expect = np.sort(np.argsort(keys)[:77])
    assert 77 / 1000 < red.sample_threshold(77, 1000) < 1.0
    for threshold, passes in ((red.sample_threshold(77, 1000), 1), (0.05, 2)):
        blocks = RowBlocks(da.from_array(X, chunks=(90, 3)))
        rows, idx = sample_rows(blocks, 77, 11, 5, threshold=threshold)
        np.testing.assert_array_equal(idx, expect)
        np.testing.assert_array_equal(rows, X[expect])
        assert blocks.n_passes == passes
    skeys = krng.uniform(red.SAMPLE_SEED, red.SAMPLE_STREAM, np.arange(1000, dtype=np.uint64))
    sexpect = np.sort(np.argsort(skeys)[:77])
    for low in (False, True):
        if low:
            monkeypatch.setattr(red, "sample_threshold", lambda size, n: 0.05)
        blocks = RowBlocks(da.from_array(X, chunks=(90, 3)))
        s = feature_stats(blocks, sample_size=77)
        np.testing.assert_array_equal(s["sample"], X[sexpect])
        assert blocks.n_passes == 1 + low


def test_warm_window_collection_is_bounded(dask_config):
    """A warm window planned from the previous iteration's counts (here: 10 values) that
    now holds far more (labels moved: ~1100 here; 13.7M values, 157 MiB, at 1M rows
    before) is capped at twice the budget in every partial result; the medians stay exact."""
    from daskrnmf.kernels.median_rounds import merge_median_round

    dask_config({"daskrnmf.median-collect-values": 64})
    X = np.random.default_rng(0).normal(size=(3000, 3))
    blocks = RowBlocks(X, block_rows=500)
    labels = [np.zeros((n, 1), dtype=np.int64) for n in blocks.sizes]
    warm = (np.full(3, -0.5), np.full(3, 0.5), np.full(3, 10))
    search = search_mod.MedianSearch(X.min(0), X.max(0), warm=warm)
    plan, held = search.first_plan(), []

    def merge(parts):
        out = merge_median_round(parts)
        held.append(out["keys"].size)
        return out

    while plan is not None:
        part = blocks.map_reduce(search_mod.median_refine_chunk, merge, args=(1, plan),
                                 state=labels)
        if search.rounds == 0:
            assert part["dropped"].any() and max(held) <= 2 * 64
        search.update(plan, part)
        plan = search.next_plan()
    np.testing.assert_array_equal(search.value, np.median(X, axis=0))
    assert search.n_approximate == 0


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("moved", [0.002, 0.3])
def test_warm_windows_resized_to_the_budget_resolve_in_one_round(dask_config, moved, known):
    """The previous iteration's windows (here: last histogram bins of ~130 values),
    resized around the previous medians to share the collection budget, hold the new
    medians when few members changed cluster: one round, exact.  When many changed, the
    medians are still exact: the same round's histograms refine the misses, or, when
    the counts come with the round and the warm windows are trusted (no histograms
    beside the collections), the side of the window each median left."""
    from daskrnmf.kernels.median_rounds import merge_median_round

    dask_config({"daskrnmf.median-collect-values": 3000,
                 "daskrnmf.median-histogram-cells": 256})
    rs = np.random.default_rng(2)
    k = 3
    lab = rs.integers(0, k, size=20000)
    X = rs.standard_t(2, size=(20000, 3)) + 2.0 * lab[:, None]     # heavy tails
    X[rs.random(X.shape) < 0.2] = 0.5                              # and ties
    blocks = RowBlocks(X, block_rows=3000)

    def medians(lab, warm):
        labels, s = [], 0
        for n in blocks.sizes:
            labels.append(lab[s:s + n, None].astype(np.int64))
            s += n
        search = search_mod.MedianSearch(np.tile(X.min(0), k), np.tile(X.max(0), k),
                                         warm=warm, counts_given=known,
                                         trust_warm=known and warm is not None)
        plan = search.first_plan()
        n_values = np.repeat(np.bincount(lab, minlength=k), 3) if known else None
        while plan is not None:
            search.update(plan, blocks.map_reduce(search_mod.median_refine_chunk,
                                                  merge_median_round, args=(k, plan),
                                                  state=labels), n_values=n_values)
            n_values = None
            plan = search.next_plan()
        for c in range(k):
            np.testing.assert_array_equal(search.value.reshape(k, 3)[c],
                                          np.median(X[lab == c], axis=0))
        return search

    first = medians(lab, None)
    assert first.rounds >= 2 and np.median(first.final_window[2]) < 200   # narrow
    lab2 = lab.copy()
    change = rs.random(lab.shape[0]) < moved
    lab2[change] = rs.integers(0, k, size=int(change.sum()))
    second = medians(lab2, first.final_window)
    assert second.warm_hit == (moved < 0.01)
    if moved < 0.01:
        assert second.rounds == 1


def test_sample_bracket_holds_the_population_medians():
    """Order statistics z sqrt(m) / 2 ranks either side of a uniform sample's median
    bracket the median of the whole (here: 200 sample draws, 2 clusters x 3 features,
    none missed at z = 4); a cluster with too few sample members gets no bracket, a rank
    interval leaving the sample gets that side's full range (-inf / inf)."""
    rs = np.random.default_rng(4)
    P = np.concatenate([rs.standard_t(2, size=(40000, 3)), 5 + rs.exponential(size=(40000, 3))])
    lab = np.repeat([0, 1], 40000)
    med = np.stack([np.median(P[lab == c], axis=0) for c in range(2)]).ravel()
    for _ in range(200):
        idx = rs.choice(P.shape[0], 400, replace=False)
        lo, hi = search_mod.sample_bracket(P[idx], lab[idx], 2)
        assert np.all((lo <= med) & (med <= hi))
    lo, hi = search_mod.sample_bracket(P[:40], lab[:40], 2)          # 40 of cluster 0
    assert np.isnan(lo[3:]).all() and np.isfinite(lo[:3]).all()
    lo, hi = search_mod.sample_bracket(P[:40], lab[:40], 2, z=10.0)  # wider than the sample
    assert np.all(lo[:3] == -np.inf) and np.all(hi[:3] == np.inf)


@pytest.mark.parametrize("side", ["below", "above", "inside"])
def test_first_round_from_a_bracket_is_exact_when_the_bracket_misses(side):
    """The first round histograms each entry's bracket (with the counts given); a
    median outside it continues on its side and is still exact."""
    from daskrnmf.kernels.median_rounds import merge_median_round

    rs = np.random.default_rng(6)
    X = rs.standard_t(2, size=(6000, 2))
    blocks = RowBlocks(X, block_rows=1000)
    labels = [np.zeros((n, 1), dtype=np.int64) for n in blocks.sizes]
    med = np.median(X, axis=0)
    shift = {"below": 1.0, "above": -1.0, "inside": 0.0}[side]
    bracket = (med + shift - 0.05, med + shift + 0.05)
    search = search_mod.MedianSearch(X.min(0), X.max(0), counts_given=True, bracket=bracket)
    plan = search.first_plan()
    np.testing.assert_array_equal(plan["hlo"], bracket[0])
    n_values = np.full(2, X.shape[0])
    while plan is not None:
        search.update(plan, blocks.map_reduce(search_mod.median_refine_chunk,
                                              merge_median_round, args=(1, plan),
                                              state=labels), n_values=n_values)
        n_values = None
        plan = search.next_plan()
    np.testing.assert_array_equal(search.value, med)
    if side == "inside":
        assert search.rounds == 2


@pytest.mark.parametrize("labels", [np.array([3, 1, 3, 2, 2, 3, 7]),
                                    np.array(["b", "a", "b", "c", "c", "b", "a"]),
                                    np.array([1, "a", 1, "a", 2, 1, 2], dtype=object)])
@pytest.mark.parametrize("chunks", [7, 3, 1])
def test_label_counts_equal_their_numpy_twin(labels, chunks):
    from collections import Counter

    import dask.array as da

    from daskrnmf.reductions import label_counts

    got = label_counts(da.from_array(labels, chunks=chunks))
    assert got == dict(Counter(labels.tolist()))


def _sums_chunk(block, start, state=None):
    """Column sums and the block's first row index; with ``state`` (the previous pass's
    per-block state) that state added, and the new state kept."""
    out = {"sum": np.asarray(block, dtype=np.float64).sum(0), "starts": [start]}
    if state is None:
        return out
    return out, state + out["sum"]


def _row_sums_state(block):
    return np.asarray(block, dtype=np.float64).sum(0)


def _sums_combine(parts):
    return {"sum": np.sum([p["sum"] for p in parts], axis=0),
            "starts": [s for p in parts for s in p["starts"]]}


def test_pass_reads_each_block_in_the_block_task(client, tmp_path, rng):
    """A Zarr source's read runs inside the block's task: no read task of its own (which
    the scheduler placed on one worker and the block's task on the other, moving the
    block), the same numbers as NumPy, a chained state included; an array whose blocks
    depend on another task (a source in a task of its own) keeps its graph."""
    import zarr
    from distributed import get_task_stream

    from daskrnmf._reader import NAME_PREFIX, as_dask

    X = rng.normal(size=(700, 5)).astype(np.float32)
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(64, 5),
                        dtype=X.dtype)
    z[:] = X
    blocks = RowBlocks(as_dask(zarr.open_array(str(tmp_path / "x.zarr"), mode="r"), 100))
    assert all(r is not None for r in blocks._reads)
    twin = RowBlocks(X, block_rows=100)
    with get_task_stream(client) as ts:
        out = blocks.map_reduce(_sums_chunk, _sums_combine)
        st = blocks.per_block(np.zeros, [5] * blocks.n_blocks)
        _, st = blocks.map_reduce(_sums_chunk, _sums_combine, state=st, keep_state=True)
        res, st = blocks.map_reduce(_sums_chunk, _sums_combine, state=st, keep_state=True)
        final = blocks.gather(st)
    names = {str(t["key"][0] if isinstance(t["key"], tuple) else t["key"]) for t in ts.data}
    assert not [n for n in names if n.startswith(NAME_PREFIX)], names
    assert any(n.startswith("_sums_chunk") for n in names)
    ref = twin.map_reduce(_sums_chunk, _sums_combine)
    np.testing.assert_array_equal(out["sum"], ref["sum"])
    assert out["starts"] == ref["starts"] == list(range(0, 700, 100))
    np.testing.assert_array_equal(res["sum"], ref["sum"])
    np.testing.assert_array_equal(final, np.concatenate(
        [2 * X[s:s + 100].astype(np.float64).sum(0) for s in range(0, 700, 100)]))
    # a state made from X's blocks still reads them in tasks of its own
    made = blocks.per_block(_row_sums_state, blocks._blocks)
    res, st = blocks.map_reduce(_sums_chunk, _sums_combine, state=made, keep_state=True)
    np.testing.assert_array_equal(res["sum"], ref["sum"])
    np.testing.assert_array_equal(blocks.gather(st), np.concatenate(
        [2 * X[s:s + 100].astype(np.float64).sum(0) for s in range(0, 700, 100)]))
    # blocks that need another task (the array in a task of its own): kept as they are
    held = RowBlocks(da.from_array(X, chunks=(100, 5), inline_array=False))
    assert all(r is None for r in held._reads)
    np.testing.assert_array_equal(held.map_reduce(_sums_chunk, _sums_combine)["sum"],
                                  ref["sum"])


def test_a_pass_states_share_one_graph():
    """The per-block states of a pass whose reads run inside the block tasks share one
    graph layer: merging their graphs (``dask.persist``, a spill's writes) takes it once,
    not a copy of the pass's graph for each block, quadratic in the number of blocks.
    Measured on a loaded machine: a chained pass over 4 000 blocks on the sync scheduler
    20 s and 2.5 GB on the client (7 s and 0.23 GB before the reads were inlined, 3 s
    and 0.23 GB with one shared layer); over 20 000 blocks the client was killed for
    memory; on a distributed cluster with the state in memory (no scratch directory),
    2 000 blocks took 1.35 GB on the client (0.25 GB before and with one layer)."""
    from dask import delayed
    from dask._expr import HLGExpr
    from dask.highlevelgraph import HighLevelGraph

    from daskrnmf._blocks import _reads_inline

    blocks = RowBlocks(da.random.random((60, 2), chunks=(2, 2)))
    assert all(r is not None for r in blocks._reads)
    st = blocks.per_block(np.zeros, [2] * blocks.n_blocks)
    calls, outs = [], []
    for b, block in enumerate(blocks._blocks):
        call = delayed(_sums_chunk, pure=True, nout=2)(block, blocks.starts[b], st[b])
        calls.append(call)
        outs.append(call[1])
    outs = _reads_inline(outs, calls, blocks._blocks, blocks._reads)
    # the graphs dask.persist / dask.compute merge (one per Delayed)
    merged = HighLevelGraph.merge(*(HLGExpr.from_collection(o).hlg for o in outs))
    assert sum(len(layer) for layer in merged.layers.values()) < 10 * blocks.n_blocks
    with dask.config.set(scheduler="sync"):
        got = dask.compute(*outs)
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(
        [blocks._blocks[b].compute().sum(0) for b in range(blocks.n_blocks)]))


def test_a_read_two_blocks_share_runs_once_a_pass():
    """Blocks that are the same block of another array (``da.concatenate([A, A])``)
    share its read: it stays a task of its own, read once a pass (inlined, it ran once
    in each block's task: twice the reads)."""
    A = da.random.RandomState(0).random_sample((6, 2), chunks=(2, 2))
    blocks = RowBlocks(da.concatenate([A, A, A[:4]]))
    assert all(r is None for r in blocks._reads)
    alone = RowBlocks(da.concatenate([A, A[:4] + 1]))
    assert [r is not None for r in alone._reads] == [True] * 3 + [False] * 2
    with dask.config.set(scheduler="sync"):
        got = blocks.map_reduce(_sums_chunk, _sums_combine)
    a = A.compute()
    twin = RowBlocks(np.concatenate([a, a, a[:4]]), block_rows=2)
    np.testing.assert_array_equal(got["sum"], twin.map_reduce(_sums_chunk, _sums_combine)["sum"])



_READS = []


class _Rows:
    """A row source (not an array: read by its getter, as a Zarr or file source is)."""

    def __init__(self, values):
        self.values, self.shape, self.dtype, self.ndim = values, values.shape, values.dtype, 2

    def __getitem__(self, index):
        return self.values[index]


def _counted_rows(src, index, *args, **kwargs):
    """A row source's getter that counts its calls (in _READS)."""
    _READS.append(index)
    return np.asarray(src[index])


def test_a_block_another_task_needs_is_read_once_a_pass(rng):
    """A pass whose per-block state is made from X's blocks (another task of the pass
    needs each block): the block's read stays a task of its own that both use, once a
    pass (inlined as well, each block was read twice: in the state's task and again in
    the block's task)."""
    from daskrnmf._reader import row_source_as_dask

    X = rng.normal(size=(300, 3))
    blocks = RowBlocks(row_source_as_dask(_Rows(X), 100, _counted_rows, "counted-rows"))
    assert all(r is not None for r in blocks._reads)
    made = blocks.per_block(_row_sums_state, blocks._blocks)
    del _READS[:]
    with dask.config.set(scheduler="sync"):
        res, st = blocks.map_reduce(_sums_chunk, _sums_combine, state=made, keep_state=True)
        assert len(_READS) == blocks.n_blocks
        del _READS[:]
        assert blocks.map_reduce(_sums_chunk, _sums_combine)["sum"].shape == (3,)
        assert len(_READS) == blocks.n_blocks       # a plain pass: each read once, inlined
        final = blocks.gather(st)
    twin = RowBlocks(X, block_rows=100)
    np.testing.assert_array_equal(res["sum"], twin.map_reduce(_sums_chunk, _sums_combine)["sum"])
    np.testing.assert_array_equal(final, np.concatenate(
        [2 * X[s:s + 100].sum(0) for s in range(0, 300, 100)]))


def test_a_dask_without_its_task_specification_keeps_the_graph(monkeypatch):
    """pyproject allows dask from 2024.8, before ``dask._task_spec``: no block's read is
    inlined then (the pass runs on the graph as it is)."""
    import sys
    import types

    from daskrnmf._blocks import _root_reads

    blocks = RowBlocks(da.random.default_rng(0).random((300, 4), chunks=(100, 4)))
    assert all(r is not None for r in blocks._reads)
    monkeypatch.setitem(sys.modules, "dask._task_spec", types.ModuleType("dask._task_spec"))
    assert _root_reads(blocks._blocks) == [None] * 3
