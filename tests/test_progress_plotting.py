"""ProgressBar as a callback of batch and streaming fits; the plotting functions."""

import io
import json
import logging

import numpy as np
import pytest

from daskrnmf import NMF, ONMFO, ORNMF, RFNMF, ProgressBar
from daskrnmf.datasets import make_ordered_segments, make_outlier_blobs


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(scope="module")
def blobs():
    return np.abs(make_outlier_blobs(n_per_cluster=40, random_state=0)[0])


def test_bar_redraws_one_line_on_a_terminal_and_counts_batch_iterations(blobs):
    out = _Terminal()
    bar = ProgressBar("fit", stream=out)
    m = RFNMF(3, n_init=2, random_state=0, callback=bar).fit(blobs)
    bar.close()
    text = out.getvalue()
    # one redraw per driver step (the kept restart may stop before the others), one per
    # pass outside the iterations, and the last line
    redraws = text.split("\r")[1:]
    iterations = [r for r in redraws if r.startswith("fit: iteration ")]
    assert len(iterations) == bar.steps >= m.n_iter_ and text.endswith("\n")
    assert f"fit: iteration {m.n_iter_}, objective " in text
    best = np.nanmin(m.objective_history_[-1:])
    assert f"objective {best:.6g}" in iterations[-1]
    assert redraws[-1].startswith(f"fit: fitted: {m.n_iter_} iterations, objective "
                                  f"{m.objective_:.6g}, {m.n_passes_} passes over X")


def test_bar_counts_onmfo_batches_against_their_total(blobs):
    out = _Terminal()
    bar = ProgressBar(stream=out)
    ONMFO(3, max_iter=2, tol=0, batch_size=40, max_inner_iter=10, random_state=0, callback=bar).fit(blobs)
    n_batches = -(-blobs.shape[0] // 40)
    assert bar.steps == 2 * n_batches
    assert f"batch {2 * n_batches}/{2 * n_batches} (pass 2)" in out.getvalue()
    assert "[####################]" in out.getvalue()


def test_bar_is_quiet_in_batch_logs_unless_asked(blobs, caplog):
    out = io.StringIO()                     # not a terminal
    NMF(2, max_iter=4, callback=ProgressBar(stream=out)).fit(blobs)
    assert out.getvalue() == ""
    with caplog.at_level(logging.INFO, logger="daskrnmf"):
        NMF(2, max_iter=4, callback=ProgressBar("nmf", stream=out, log=True)).fit(blobs)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("nmf: ")]
    assert len([line for line in lines if line.startswith("nmf: iteration ")]) == 4
    assert lines[-1].startswith("nmf: fitted: 4 iterations") and out.getvalue() == ""


def test_plots(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from daskrnmf import plotting

    X, y = make_ordered_segments(n_features=30, n_segments=4, segment_length=15, noise=0.05,
                                 random_state=0)
    m = ORNMF(4, n_clusters=4, max_iter=30, random_state=0).fit(X)
    n = NMF(4, max_iter=30, random_state=0).fit(X)
    fig = plotting.plot_objective(m, n, log=True)
    assert len(fig.axes[0].lines) == 2 and fig.axes[0].get_yscale() == "log"
    fig = plotting.plot_components(m, (5, 6), n_cols=2)
    img = fig.axes[0].images[0].get_array()
    assert img.shape == (2 * 6 + 1, 2 * 7 + 1)
    with pytest.raises(ValueError, match="holds 20 pixels"):
        plotting.plot_components(m, (4, 5))
    fig = plotting.plot_ordered_codes(m.fit_transform(X), boundaries=m.boundaries_,
                                      jumps=m.jumps_)
    top, bottom = fig.axes[:2]
    assert len(bottom.lines) == 1 + len(m.boundaries_)     # the jumps and one line per boundary
    path = plotting.savefig(fig, tmp_path / "codes.png", dpi=50)
    axes = json.loads(plotting.read_png_metadata(path)["Description"])
    assert [a["xlabel"] for a in axes] == ["", "sample (stored order)"]
    assert axes[1]["xticks"] and all(t == int(t) for t in axes[1]["xticks"])


def test_objective_plot_one_quantity_per_axis_in_the_png(tmp_path):
    """A stream's per-sample mean per pass and a batch model's total per iteration go to
    separate panels; the saved PNG says so in its metadata, with integer x ticks."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskrnmf import RobustNMF, plotting

    X = np.abs(np.random.default_rng(0).random((60, 8)))
    online = ONMFO(2, max_iter=3, batch_size=20, max_inner_iter=10, random_state=0).fit(X)
    batch = RobustNMF(2, max_iter=7, max_inner_iter=10, random_state=0).fit(X)
    nmf = NMF(2, max_iter=5, random_state=0).fit(X)
    fig = plotting.plot_objective(online, batch, nmf, labels=["ONMFO", "RobustNMF", "NMF"])
    path = plotting.savefig(fig, tmp_path / "objective.png", title="objective", dpi=50)
    meta = plotting.read_png_metadata(path)
    assert meta["Title"] == "objective"
    axes = json.loads(meta["Description"])
    assert [(a["xlabel"], a["ylabel"]) for a in axes] == [plotting.STREAM_AXES,
                                                          plotting.ITERATION_AXES]
    assert [line["label"] for line in axes[0]["lines"]] == ["ONMFO"]
    assert [line["label"] for line in axes[1]["lines"]] == ["RobustNMF", "NMF"]
    assert axes[0]["lines"][0]["x"] == [1, online.objective_history_.size]
    assert axes[1]["lines"][0]["x"] == [1, batch.n_iter_]
    for a in axes:
        assert a["xticks"] and all(t == int(t) for t in a["xticks"]), a["xticks"]
        assert a["xlim"][0] <= 1 and a["xlim"][1] >= a["lines"][0]["x"][1]
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="pass ax as a list of 2 axes"):
        plotting.plot_objective(online, batch, ax=ax)
    plt.close("all")


def test_png_text_chunks_are_read_with_the_standard_library(tmp_path):
    import struct
    import zlib

    from daskrnmf.plotting import read_png_metadata

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"tEXt", b"Title\0plain")
           + chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"packed"))
           + chunk(b"iTXt", b"Description\0\0\0en\0\0" + "axe \u00e9".encode())
           + chunk(b"IEND", b""))
    (tmp_path / "x.png").write_bytes(png)
    assert read_png_metadata(tmp_path / "x.png") == {"Title": "plain", "Comment": "packed",
                                                    "Description": "axe \u00e9"}
    (tmp_path / "y.png").write_bytes(b"GIF89a")
    with pytest.raises(ValueError, match="not a PNG"):
        read_png_metadata(tmp_path / "y.png")


def _saved_axes(fig, path):
    from daskrnmf import plotting

    plotting.savefig(fig, path, dpi=50)
    return json.loads(plotting.read_png_metadata(path)["Description"])


def test_objective_axis_is_linear_with_distinct_labels_over_a_narrow_range(tmp_path):
    """An objective that falls by 0.02 % (the usual tail of a fit) on a linear axis whose
    tick labels differ; a log axis only for a range beyond a decade."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskrnmf import plotting

    narrow = np.array([4.62870e7, 4.62800e7, 4.62785e7, 4.62780e7])
    (a,) = _saved_axes(plotting.plot_objective(narrow), tmp_path / "narrow.png")
    assert a["yscale"] == "linear"
    assert len(a["yticklabels"]) >= 3 and len(set(a["yticklabels"])) == len(a["yticklabels"])
    assert "+" not in a["yoffset"]          # a factor (x10^7) at most, never an offset
    (a,) = _saved_axes(plotting.plot_objective(np.array([1e4, 1e2, 20.0])), tmp_path / "w.png")
    assert a["yscale"] == "log"
    with pytest.raises(ValueError, match="log must be True, False or 'auto'"):
        plotting.plot_objective(narrow, log="yes")
    plt.close("all")


def test_objectives_of_different_losses_get_their_own_panel_and_legend(blobs, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskrnmf import plotting

    l21, l1 = (RFNMF(3, loss=loss, n_init=1, max_iter=3, random_state=0).fit(blobs)
               for loss in ("l21", "l1"))
    axes = _saved_axes(plotting.plot_objective(l21, l1), tmp_path / "losses.png")
    assert [(a["ylabel"], [line["label"] for line in a["lines"]]) for a in axes] == [
        ("objective (L2,1 loss)", ["RFNMF (l21)"]), ("objective (L1 loss)", ["RFNMF (l1)"])]
    plt.close("all")


def test_components_unfold_as_a_numpy_reshape_by_default():
    """An image flattened by NumPy (row-major) is drawn upright; order="F" for the
    bundled column-major faces."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskrnmf import plotting

    img = np.zeros((4, 3))
    img[0] = 1.0                                    # a bright top row
    shown = plotting.plot_components(img.reshape(1, -1), (4, 3)).axes[0].images[0].get_array()
    np.testing.assert_array_equal(shown[1:5, 1:4], img)
    shown = plotting.plot_components(img.reshape(1, -1, order="F"), (4, 3),
                                     order="F").axes[0].images[0].get_array()
    np.testing.assert_array_equal(shown[1:5, 1:4], img)
    with pytest.raises(ValueError, match="order must be 'C'"):
        plotting.plot_components(img.reshape(1, -1), (4, 3), order="K")
    plt.close("all")


def test_save_does_not_warn_about_a_progress_bar_but_about_a_users_callback(blobs, tmp_path):
    import warnings

    import daskrnmf

    m = NMF(2, max_iter=2, callback=ProgressBar(stream=io.StringIO())).fit(blobs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # a warning fails the test
        m.save(tmp_path / "bar.zarr")
    assert daskrnmf.load(tmp_path / "bar.zarr").callback is None
    m.set_params(callback=lambda info: False)
    with pytest.warns(UserWarning, match="parameter 'callback' not saved"):
        m.save(tmp_path / "user.zarr")
