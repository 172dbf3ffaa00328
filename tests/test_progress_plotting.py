"""ProgressBar as a callback of batch and streaming fits; the plotting functions."""

import io
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
    assert text.count("\r") == bar.steps == m.n_iter_ and text.endswith("\n")
    assert f"fit: iteration {m.n_iter_}, objective " in text
    best = np.nanmin(m.objective_history_[-1:])
    assert f"objective {best:.6g}" in text.split("\r")[-1]


def test_bar_counts_onmfo_batches_against_their_total(blobs):
    out = _Terminal()
    bar = ProgressBar(stream=out)
    ONMFO(3, n_passes=2, batch_size=40, max_inner_iter=10, random_state=0, callback=bar).fit(blobs)
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
    assert len(lines) == 4 and out.getvalue() == ""


def test_plots(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from daskrnmf import plotting

    X, y = make_ordered_segments(n_features=30, n_segments=4, segment_length=15, noise=0.05,
                                 random_state=0)
    m = ORNMF(4, n_clusters=4, max_iter=30, random_state=0).fit(X)
    n = NMF(4, max_iter=30, random_state=0).fit(X)
    fig = plotting.plot_objective(m, n)
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
    fig.savefig(tmp_path / "codes.png")
    assert (tmp_path / "codes.png").stat().st_size > 1000
