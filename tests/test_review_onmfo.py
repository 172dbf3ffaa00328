"""An adversarial review of ONMFO's move into the one driver (its checkpoint through
:mod:`daskrnmf._resume`, its passes the driver's ``rule="passes"``) and of
``MNMF.score`` through ``RowBlocks.map_reduce``: each test is a defect found there."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import ONMFO, _checkpoint

KW = dict(n_components=3, max_iter=2, max_inner_iter=5, random_state=0, tol=0)


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).gamma(2.0, 1.0, size=(160, 6))     # 8 batches a pass


def _fit(model, X, **kw):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model.fit(X, **kw)
    return model, [w for w in seen if issubclass(w.category, ConvergenceWarning)]


def test_a_run_stopped_by_its_callback_at_its_last_batch_resumes_as_the_unstopped_run(
        X, tmp_path):
    """resume continues a run its callback stopped (``resume_stopped``); stopped at the
    last batch there is nothing left to step, and the resumed fit kept the saved
    'stopped': no ConvergenceWarning and a 'stopped at batch 16/16' last line, where the
    uninterrupted fit (and ONMFO before the driver kept its checkpoint) warns."""
    kw = {**KW, "tol": 1e-9}                # cannot converge in 2 passes
    ck = tmp_path / "ck"
    _, warned = _fit(ONMFO(**kw, checkpoint=ck, callback=lambda info: info["iteration"] == 16),
                     X)
    assert not warned                       # stopped by its callback: no warning
    ref, ref_warned = _fit(ONMFO(**kw), X)
    resumed, resumed_warned = _fit(ONMFO(**kw, checkpoint=ck), X, resume=True)
    assert len(ref_warned) == 1 and len(resumed_warned) == 1
    np.testing.assert_array_equal(resumed.components_, ref.components_)
    assert (resumed.n_iter_, resumed.n_passes_, resumed.n_steps_) == (2, 2, 16)


def _damage(ck, field, value):
    """Rewrite the newest generation with the saved stream's ``field`` set to ``value``
    (a Python value; the arrays keep their SHA-256)."""
    arrays, attrs = _checkpoint.load(ck)
    attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    state = attrs["runs"][0]["skeleton"]["items"][0]
    entry = state["items"][state["keys"].index(field)]
    entry.clear()
    entry.update({"t": "py", "v": value})
    _checkpoint.save(ck, arrays, attrs)


@pytest.mark.parametrize("field, value", [("n_stat", "x"), ("loss_sum", "a"),
                                          ("n_observed", -1), ("inner_rounds", None)])
def test_a_damaged_count_of_the_saved_stream_is_a_value_error(X, tmp_path, field, value):
    """The saved stream's counts and sums are JSON (not SHA-256-checked arrays):
    ``check_restored`` checked W..Bm and the position only, so a damaged count was a
    TypeError in the middle of the resumed stream, or (negative) accepted; ONMFO's own
    checkpoint read them with int()/float() into a ValueError."""
    ck = tmp_path / "ck"
    ONMFO(**KW, checkpoint=ck, callback=lambda info: info["iteration"] == 10).fit(X)
    if value is None:
        arrays, attrs = _checkpoint.load(ck)
        attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
        state = attrs["runs"][0]["skeleton"]["items"][0]
        state["items"][state["keys"].index(field)] = {"t": "none"}
        _checkpoint.save(ck, arrays, attrs)
    else:
        _damage(ck, field, value)
    with pytest.raises(ValueError, match=rf"{ck}\S* is damaged: .*{field}"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


def test_mnmf_score_of_dask_x_with_weights_summing_to_zero_is_refused_as_for_numpy():
    """``MNMF.score`` with sample weights that are all 0: scikit-learn's accuracy_score
    (NumPy X) raises a ValueError; the map_reduce pass of Dask X divided 0 by 0 and
    returned NaN (with a RuntimeWarning)."""
    from daskrnmf import MNMF
    from daskrnmf.datasets import make_margin_gaussians

    X, y = make_margin_gaussians(10, 6, n_noise_directions=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=3, max_iter=1, tol=0, random_state=0).fit(X, y)
    zero = np.zeros(len(y))
    match = "Sample weights must contain at least one non-zero number"
    with pytest.raises(ValueError, match=match):
        est.score(X, y, zero)
    with pytest.raises(ValueError, match=match):
        est.score(da.from_array(X, chunks=(7, -1)), y, da.from_array(zero, chunks=5))


def test_the_pass_line_of_a_resumed_run_counts_the_whole_pass(X, tmp_path, caplog):
    """The driver's pass line counted the batches since the resume ('pass 1: ..., 3
    batches' of 8): its pass start was the resumed iteration, not saved with the run;
    ONMFO's own line said n_batches."""
    ck = tmp_path / "ck"
    ONMFO(**KW, checkpoint=ck, checkpoint_every=1,
          callback=lambda info: info["iteration"] == 5).fit(X)
    with caplog.at_level("INFO", logger="daskrnmf"):
        ONMFO(**KW, checkpoint=ck, verbose=1).fit(X, resume=True)
    lines = [m for m in caplog.messages if m.startswith("ONMFO pass ")]
    assert len(lines) == 2 and all(", 8 batches, " in line for line in lines), lines


def test_changed_x_chunked_otherwise_on_resume_is_refused(tmp_path):
    big = np.random.default_rng(1).gamma(2.0, 1.0, size=(400, 8))
    sampled = {r for a, b in _checkpoint.sample_ranges(len(big)) for r in range(a, b)}
    row = next(r for r in range(len(big)) if r not in sampled)
    kw = {**KW, "batch_size": 20}
    ck = tmp_path / "ck"
    # 20 batches a pass, stopped in the second: every row has been read once
    ONMFO(**kw, checkpoint=ck, callback=lambda info: info["iteration"] == 25).fit(
        da.from_array(big, chunks=(50, -1)))
    changed = big.copy()
    changed[row, 3] += 1.0
    # batch_size= batches are read by X's chunks: X chunked otherwise is refused (its
    # checksums are of the chunks read), the same X chunked alike is checked chunk by chunk
    with pytest.raises(ValueError, match="chunk"):
        ONMFO(**kw, checkpoint=ck).fit(da.from_array(changed, chunks=(40, -1)), resume=True)
    with pytest.raises(ValueError, match="X changed since the checkpoint"):
        ONMFO(**kw, checkpoint=ck).fit(da.from_array(changed, chunks=(50, -1)), resume=True)


def test_a_callback_s_value_error_after_a_save_keeps_the_checkpoint(X, tmp_path):
    """_checkpointing took any ValueError of a fit without the first pass (ONMFO) for bad
    data found while streaming and removed the fresh run's checkpoint, 10 batches saved;
    a ValueError of the callback is not bad data (its comment: one that saved keeps it,
    an error of the callback).  ONMFO's own checkpoint did the same."""
    ck = tmp_path / "ck"

    def callback(info):
        if info["iteration"] == 12:         # after the save at the end of pass 1
            raise ValueError("the user's callback failed")

    with pytest.raises(ValueError, match="the user's callback failed"):
        ONMFO(**KW, checkpoint=ck, checkpoint_every=5, callback=callback).fit(X)
    assert _checkpoint.load(ck) is not None
    ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


def test_a_resumed_stream_may_read_ahead_otherwise(X, tmp_path):
    """``prefetch`` (how many batches or row groups are read ahead) does not decide the
    result: ONMFO's own checkpoint left it out of its fingerprint, the shared one refused
    a resume with another value ('prefetch=2 there, 0 here'), e.g. on a worker with less
    memory."""
    ck = tmp_path / "ck"
    ONMFO(**KW, checkpoint=ck, callback=lambda info: info["iteration"] == 5).fit(X)
    resumed = ONMFO(**KW, prefetch=0, checkpoint=ck).fit(X, resume=True)
    np.testing.assert_array_equal(resumed.components_, ONMFO(**KW).fit(X).components_)


def test_a_damaged_alpha_r_is_refused_where_alpha_r_is_a_number(X, tmp_path):
    """A float ``alpha_R`` is the fit's alpha_R_ (ONMFO's own checkpoint took the
    parameter on resume); the driver's checkpoint restores the saved copy, and a damaged
    one (positive) was used: another fit than the uninterrupted one, silently."""
    kw = {**KW, "alpha_R": 0.5}
    ck = tmp_path / "ck"
    ONMFO(**kw, checkpoint=ck, callback=lambda info: info["iteration"] == 10).fit(X)
    arrays, attrs = _checkpoint.load(ck)
    attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    problem = attrs["runs"][0]["skeleton"]["items"][1]
    problem["items"][problem["keys"].index("alpha_R_")]["v"] = repr(7.0)
    _checkpoint.save(ck, arrays, attrs)
    with pytest.raises(ValueError, match=r"is damaged: its alpha_R_ 7\.0 is not the "
                                         r"parameter alpha_R=0\.5"):
        ONMFO(**kw, checkpoint=ck).fit(X, resume=True)
    # bad data found while streaming, after saves: the fresh run's checkpoint still goes
    bad = X.copy()
    bad[150, 2] = -1.0                      # in the last batch of the first pass
    fresh = tmp_path / "fresh"
    with pytest.raises(ValueError, match="Negative values in data passed to ONMFO"):
        ONMFO(**KW, batch_size=20, shuffle=False, checkpoint=fresh,
              checkpoint_every=1).fit(bad)
    assert not fresh.exists() or _checkpoint.load(fresh) is None


def test_mnmf_score_of_dask_x_with_string_labels_for_number_classes_is_refused():
    """y of strings for classes that are numbers: scikit-learn's 'Mix of label input
    types (string and number)' for NumPy X; the blocks' comparisons of Dask X gave an
    accuracy of 0.0 without a word."""
    from daskrnmf import MNMF
    from daskrnmf.datasets import make_margin_gaussians

    X, y = make_margin_gaussians(10, 6, n_noise_directions=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MNMF(2, semi_max_iter=3, max_iter=1, tol=0, random_state=0).fit(X, y)
    for Xin in (X, da.from_array(X, chunks=(7, -1))):
        with pytest.raises(ValueError, match=r"Mix of label input types \(string and number"):
            est.score(Xin, y.astype(str))
    assert est.score(da.from_array(X, chunks=(7, -1)), y.astype(float)) == est.score(X, y)
