"""An adversarial review of ONMFO's move into the one driver (its checkpoint through
:mod:`daskrnmf._resume`, its passes the driver's ``rule="passes"``) and of
``MNMF.score`` through ``RowBlocks.map_reduce``: each test is a defect found there."""

import os
import shutil
import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from daskrnmf import ONMFO
from daskrnmf import _checkpoint

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
