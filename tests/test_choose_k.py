"""daskrnmf.choose_k: planted k recovered (clean and with gross outliers), the chunk-wise
scores equal their NumPy twins, clear parameter errors, the figure and the CLI."""

import doctest
import json
import warnings

import dask.array as da
import matplotlib
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

import daskrnmf
from daskrnmf import RFNMF, choose_k, cli
from daskrnmf._blocks import RowBlocks
from daskrnmf.kernels.assign import distances
from daskrnmf.selection import (N_BINS, ChooseKResult, adjusted_rand_from_table, recommend,
                                score_centers, silhouette_values)

matplotlib.use("Agg")


def planted(k, n, d=16, outliers=0.0, seed=0):
    """As benchmarks/bench_choose_k.py: make_zarr_blobs-like clusters, 5 % gross rows."""
    rng = np.random.default_rng([seed, k])
    centres = rng.uniform(2.0, 10.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    X = centres[y] + rng.normal(size=(n, d))
    rows = np.flatnonzero(rng.random(n) < outliers)
    cols = np.argsort(rng.random((rows.size, d)), axis=1)[:, :d // 4]
    X[rows[:, None], cols] = rng.uniform(0.0, 100.0, size=(rows.size, d // 4))
    return np.maximum(X, 0.0), y


@pytest.mark.parametrize("k, outliers, loss", [(3, 0.0, "l1"), (6, 0.05, "l1"),
                                               (9, 0.05, "l1"), (5, 0.05, "l21")])
def test_planted_k_is_recommended(k, outliers, loss):
    X, _ = planted(k, 800, outliers=outliers, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = choose_k(RFNMF(loss=loss, n_init=2), X, range(max(2, k - 2), k + 3), n_seeds=3,
                       random_state=0)
    assert res.k == k, res
    i = list(res.ks).index(k)
    assert res.scores["stability"][i] >= 0.9
    assert res.scores["silhouette"][i + 1] < res.scores["silhouette"][i]   # a split costs


def _twin(X, F, metric):
    labels = [np.argmin(distances(X, f, metric), axis=1) for f in F]
    sil = [silhouette_values(distances(X, f, metric)) for f in F]
    ari = [adjusted_rand_score(labels[s], labels[t])
           for s in range(len(F)) for t in range(s + 1, len(F))]
    # a cluster's median lies between its lower and upper middle values
    low = [np.mean([np.sort(v[lab == c])[((lab == c).sum() - 1) // 2] for c in np.unique(lab)])
           for v, lab in zip(sil, labels)]
    high = [np.mean([np.sort(v[lab == c])[(lab == c).sum() // 2] for c in np.unique(lab)])
            for v, lab in zip(sil, labels)]
    return np.array(ari), (np.array(low), np.array(high)), np.array([v.mean() for v in sil])


@pytest.mark.parametrize("metric", ["l1", "l2"])
@pytest.mark.parametrize("chunking", ["one block", "many blocks", "dask"])
def test_chunkwise_scores_equal_numpy_twin(metric, chunking):
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(loc=c, size=(150, 4)) for c in (0.0, 3.0, 6.0)])
    X[::37] += 50.0                                          # gross rows
    F = rng.normal(loc=3.0, scale=2.0, size=(4, 5, 4))       # 4 seeds, k = 5
    blocks = {"one block": lambda: RowBlocks(X, block_rows=10_000),
              "many blocks": lambda: RowBlocks(X, block_rows=37),
              "dask": lambda: RowBlocks(da.from_array(X, chunks=(61, 4)))}[chunking]()
    got = score_centers(blocks, F, metric)
    ari, cmed, smean = _twin(X, F, metric)
    np.testing.assert_allclose(got["ari"], ari, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["silhouette_mean"], smean, rtol=1e-12)
    low, high = cmed                       # the histogram medians: within one bin of them
    assert np.all(got["silhouette"] >= low - 1.0 / N_BINS)
    assert np.all(got["silhouette"] <= high + 1.0 / N_BINS)
    assert np.all(high - low < 0.05)


def test_adjusted_rand_from_table_edge_cases():
    assert adjusted_rand_from_table(np.array([[5, 0], [0, 3]])) == 1.0
    assert adjusted_rand_from_table(np.array([[8]])) == 1.0
    a, b = [0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2]
    t = np.zeros((3, 3), int)
    np.add.at(t, (a, b), 1)
    assert adjusted_rand_from_table(t) == pytest.approx(adjusted_rand_score(a, b), abs=1e-15)


def test_dask_and_zarr_input_give_the_numpy_result(tmp_path):
    X, _ = planted(4, 600, outliers=0.05, seed=1)
    kw = dict(n_seeds=2, random_state=0)
    ref = choose_k(RFNMF(loss="l1", n_init=2), X, [3, 4, 5], **kw)
    path = str(tmp_path / "X.zarr")
    da.from_array(X, chunks=(97, 16)).to_zarr(path)
    got = choose_k(RFNMF(loss="l1", n_init=2), path, [3, 4, 5], **kw)
    assert got.k == ref.k == 4
    for key in ("objective", "stability", "silhouette", "silhouette_mean"):
        np.testing.assert_allclose(got.scores[key], ref.scores[key], rtol=1e-9)


def test_data_larger_than_max_samples_is_read_twice_whatever_the_ks(tmp_path):
    """Issue 38: choose_k read X 178-323 times (a fit per k, then a scoring pass). Larger
    than ``max_samples`` rows (or lazy), X is read twice: the first pass draws a uniform
    sample (chunk-independent) that every fit uses, the second scores every k on X. The
    planted k is still recommended, and the result is the same for NumPy input and two
    chunkings; its scores are X's (equal to scoring the chosen centres on X directly)."""
    X, _ = planted(5, 3000, outliers=0.05, seed=105)
    kw = dict(n_seeds=3, random_state=0, max_samples=1000)
    results = []
    for data in (X, da.from_array(X, chunks=(700, 16)), da.from_array(X, chunks=(1100, 16))):
        res = choose_k(RFNMF(loss="l1", n_init=3), data, range(2, 9), **kw)
        assert (res.k, res.n_passes, res.n_fitted) == (5, 2, 1000)
        results.append(res)
    for other in results[1:]:
        for key in ("stability", "silhouette"):          # from integer tables: exact
            np.testing.assert_array_equal(other.scores[key], results[0].scores[key])
        for key in ("objective", "silhouette_mean"):      # float sums: to rounding
            np.testing.assert_allclose(other.scores[key], results[0].scores[key], rtol=1e-12)
    # every row of X read exactly twice, counted where the values come from (not by the
    # library's own pass counter), whatever the number of k and seeds
    class Recorded:
        def __init__(self, X):
            self.X, self.shape, self.dtype, self.ndim = X, X.shape, X.dtype, 2
            self.reads = np.zeros(X.shape[0], dtype=int)

        def __getitem__(self, index):
            self.reads[index[0]] += 1
            return self.X[index]

    source = Recorded(X)
    res = choose_k(RFNMF(loss="l1", n_init=3), da.from_array(source, chunks=(700, 16)),
                   range(2, 12), n_seeds=5, random_state=0, max_samples=1000)
    assert res.k == 5 and res.n_passes == 2
    assert np.all(source.reads == 2), np.unique(source.reads)


def test_max_samples_is_checked():
    X, _ = planted(3, 100, seed=1)
    with pytest.raises(ValueError, match="The 'max_samples' parameter of choose_k must be an int "
                                         r"in the range \[2, inf\)"):
        choose_k(RFNMF(), X, [2, 3], max_samples=1)
    with pytest.raises(ValueError, match=r"largest k \(6\) must be <= max_samples=5"):
        choose_k(RFNMF(), X, [2, 6], max_samples=5)


def test_rule():
    ks = [2, 3, 4, 5]
    # the best silhouette at 3, but 4 is near the top and stable: 4 (nearby groups kept)
    assert recommend(ks, [1, 1, 1, 0.6], [0.5, 0.62, 0.61, 0.7], 0.9, 0.05)[0] == 4
    assert recommend(ks, [1, 1, 1, 0.6], [0.5, 0.62, 0.61, 0.7], 0.9, 0.0)[0] == 3
    # none stable: the most stable
    assert recommend(ks, [0.2, 0.5, 0.4, 0.3], [0.5, 0.6, 0.7, 0.8], 0.9, 0.05)[0] == 3
    # one seed: no stability, silhouette only
    assert recommend(ks, [np.nan] * 4, [0.5, 0.6, 0.7, 0.3], 0.9, 0.05)[0] == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_seeds=0), "The 'n_seeds' parameter of choose_k must be an int in the range "
                      "[1, inf). Got 0 instead."),
    (dict(n_seeds=2.0), "The 'n_seeds' parameter of choose_k must be an int"),
    (dict(ks=[3]), "The 'ks' parameter of choose_k must be a sequence of at least 2"),
    (dict(ks=[1, 2, 3]), "The 'ks' parameter of choose_k"),
    (dict(ks="3-5"), "The 'ks' parameter of choose_k"),
    (dict(stability_threshold=1.5), "The 'stability_threshold' parameter of choose_k must "
                                    "be a float in the range [0, 1]. Got 1.5 instead."),
    (dict(tolerance=1.0), "The 'tolerance' parameter of choose_k"),
    (dict(random_state="x"), "The 'random_state' parameter of choose_k"),
    (dict(ks=[2, 500]), "The largest k (500) must be <= n_samples=60."),
    (dict(estimator=daskrnmf.NMF()), "choose_k supports the clustering models RFNMF, RFNMTF"),
    (dict(estimator="ONMFO"), "choose_k supports the clustering models"),
    (dict(estimator=RFNMF(init=np.zeros((3, 2)))), "its 'init' must be"),
    (dict(estimator=RFNMF(loss="l3")), "The 'loss' parameter of RFNMF"),
])
def test_bad_parameters_give_clear_errors(kwargs, message):
    X = np.random.default_rng(0).random((60, 2))
    args = dict(estimator=RFNMF(), ks=[2, 3])
    args.update(kwargs)
    with pytest.raises(ValueError) as info:
        choose_k(args.pop("estimator"), X, args.pop("ks"), **args)
    assert message in str(info.value)


@pytest.fixture(scope="module")
def small_result():
    X, _ = planted(3, 300, seed=2)
    return choose_k("rfnmf", X, [2, 3, 4], n_seeds=2, random_state=0)


def test_result_plot_repr_and_markdown(small_result, tmp_path):
    from daskrnmf.plotting import read_png_metadata, savefig

    res = small_result
    assert isinstance(res, ChooseKResult) and res.model == "RFNMF" and res.k == 3
    assert set(res.scores) >= {"objective", "stability", "silhouette", "silhouette_mean"}
    assert all(v.shape == (3,) for v in res.scores.values())
    assert "k=3" in repr(res) and "*  3" in repr(res)
    md = res.to_markdown()
    assert md.count("\n") == 4 and "**recommended**" in md.splitlines()[3]
    fig = res.plot()
    axes = json.loads(read_png_metadata(savefig(fig, tmp_path / "k.png"))["Description"])
    assert len(axes) == 3                                  # one quantity per panel
    assert axes[2]["xlabel"] == "k (n_clusters)"
    assert all(float(t).is_integer() for t in axes[2]["xticks"])
    assert {a["lines"][0]["label"] for a in axes} == {"objective", "stability", "silhouette"}
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_rfnmtf_is_fitted_per_seed():
    rng = np.random.default_rng(0)
    X = np.repeat(rng.uniform(0, 10, size=(3, 8)), 40, axis=0) + rng.normal(size=(120, 8))
    res = choose_k(daskrnmf.RFNMTF(n_column_clusters=2, n_init=2), np.maximum(X, 0), [2, 3, 4],
                   n_seeds=2, random_state=0)
    assert res.k_parameter == "n_row_clusters"
    # its row prototypes live in the 2 column clusters' space, where the 3 planted row
    # groups need not stay apart: the stable k it recommends is what the rule promises
    assert res.stable[list(res.ks).index(res.k)]
    assert res.scores["stability"][list(res.ks).index(3)] >= 0.9
    assert np.all(np.isfinite(res.scores["silhouette"]))


def test_examples_section_runs():
    import daskrnmf.selection as mod

    assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


def test_cli_choose_k_writes_its_table_and_plot(tmp_path, local_cluster, capsys):
    X, _ = planted(3, 400, outliers=0.05, seed=3)
    store = str(tmp_path / "b.zarr")
    da.from_array(X, chunks=(100, 16)).to_zarr(store, component="X")
    out, png = tmp_path / "k.md", tmp_path / "k.png"
    argv = ["choose-k", "rfnmf", store, "--component", "X", "--ks", "2-4", "--n-seeds", "2",
            "--n-init", "2", "--loss", "l1", "--output", str(out), "--plot", str(png),
            "--scheduler-address", local_cluster.scheduler_address]
    assert cli.main(argv) == 0
    assert "recommended k = 3" in capsys.readouterr().out
    text = out.read_text()
    assert "| k | objective |" in text and "Recommended k = 3." in text
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert cli.main(argv) == 1                                     # kept unless --overwrite
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert cli.main(["choose-k", "NMF", store, "--ks", "2-4"]) == 1
    assert "choose-k supports RFNMF, RFNMTF" in capsys.readouterr().err
    assert cli.main(["choose-k", "RFNMF", store, "--ks", "5"]) == 2   # usage error


def test_rfnmf_screened_restarts_and_missing_values(monkeypatch):
    # X larger than the seeding sample: each seed's restarts are screened there and one
    # per seed runs on X, with no separate objectives pass; NaN entries with
    # missing="mask" are masked as RFNMF masks them
    import daskrnmf.models._clustering as clustering

    rng = np.random.default_rng(3)
    centres = rng.uniform(2, 10, size=(4, 6))
    X = centres[rng.integers(0, 4, 1200)] + rng.normal(size=(1200, 6))
    X[rng.random(X.shape) < 0.05] = np.nan
    monkeypatch.setattr(clustering, "SEED_SAMPLE_ROWS", 300)
    model = daskrnmf.RFNMF(n_init=3, missing="mask")
    res = choose_k(model, X, [3, 4, 5], n_seeds=2, random_state=0)
    assert res.k == 4
    one = daskrnmf.RFNMF(4, n_init=3, missing="mask", random_state=0).fit(X)
    i = list(res.ks).index(4)
    # the fit's passes (first pass, iterations, no final labels pass) + the scoring pass
    assert res.scores["n_passes"][i] <= one.n_passes_ + 1
    assert np.isfinite(res.scores["objective"]).all()
