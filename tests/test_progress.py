"""Honest progress (issue 39): every pass over X visible from the first, the elapsed time
of the whole fit, a last line equal to what the model stores, ONMFO's bar full when it
converges early, and verbose / ProgressBar(log=True) lines without logging configured."""

import io
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from daskrnmf import NMF, ONMFO, ProgressBar

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def X():
    return np.abs(np.random.default_rng(0).random((60, 5)))


def _lines(caplog, prefix):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]


def test_bar_shows_every_pass_from_the_first_and_ends_on_the_models_numbers(X, caplog):
    seen = []

    class Bar(ProgressBar):
        def __call__(self, info):
            seen.append(dict(info))
            return super().__call__(info)

    with caplog.at_level(logging.INFO, logger="daskrnmf"):
        m = NMF(2, max_iter=3, tol=0.0, random_state=0,
                callback=Bar("nmf", stream=io.StringIO(), log=True)).fit(X)
    lines = _lines(caplog, "nmf: ")
    assert len(lines) == len(seen)                      # one line per event
    # the first pass (feature statistics) is the first line, before any iteration
    assert lines[0].startswith("nmf: pass 1 (feature stats"), lines
    first = next(i for i, e in enumerate(seen) if e["event"] == "iteration")
    assert lines[first].startswith("nmf: iteration 1,"), lines
    # every pass before the first iteration has its own line, numbered from 1
    assert first >= 2 and [e["event"] for e in seen[:first]] == ["pass"] * first
    assert [e["n_passes"] for e in seen[:first]] == list(range(1, first + 1))
    # elapsed counts from the start of the fit, across passes and iterations
    elapsed = [e["elapsed"] for e in seen]
    assert elapsed == sorted(elapsed) and elapsed[0] >= seen[0]["seconds"] > 0
    # the last line: the model's n_iter_, objective_ and n_passes_ (the final pass included)
    assert seen[-1]["event"] == "final" and seen[-1]["final"] is True
    assert (seen[-1]["n_iter"], seen[-1]["objective"], seen[-1]["n_passes"]) == (
        m.n_iter_, m.objective_, m.n_passes_)
    assert lines[-1].startswith(f"nmf: fitted: {m.n_iter_} iterations, objective "
                                f"{m.objective_:.6g}, {m.n_passes_} passes over X, "), lines[-1]
    # the passes after the last iteration (final objective) are shown, and counted
    last_iteration = [e for e in seen if e["event"] == "iteration"][-1]
    assert last_iteration["n_passes"] < seen[-2]["n_passes"] == m.n_passes_


def test_plain_callbacks_see_iterations_only(X):
    """A function callback keeps its contract: one call per iteration (no pass or final
    events), the dict extended by ``event`` and ``elapsed``."""
    seen = []
    m = NMF(2, max_iter=3, tol=0.0, random_state=0, callback=seen.append).fit(X)
    assert [i["iteration"] for i in seen] == list(range(1, m.n_iter_ + 1))
    assert all(i["event"] == "iteration" and i["elapsed"] >= 0 for i in seen)


def test_verbose_logs_every_pass_and_ends_on_the_models_numbers(X, caplog):
    with caplog.at_level(logging.INFO, logger="daskrnmf"):
        m = NMF(2, max_iter=3, tol=0.0, random_state=0, verbose=1).fit(X)
    lines = _lines(caplog, "NMF ")
    assert lines[0].startswith("NMF pass 1 (feature stats"), lines
    assert any(line.startswith("NMF iteration 1:") for line in lines)
    assert lines[-1].startswith(f"NMF fitted: {m.n_iter_} iterations, objective "
                                f"{m.objective_:.6g}, {m.n_passes_} passes over X, "), lines[-1]


def test_onmfo_bar_ends_full_when_it_converges_early(X):
    out = io.StringIO()
    m = ONMFO(2, max_iter=40, tol=0.9, batch_size=20, max_inner_iter=5, random_state=0,
              callback=ProgressBar(stream=out, log=True))
    bar = m.callback
    m.fit(X)
    assert m.n_passes_ < 40              # converged early
    last = bar.describe(bar.final)
    assert last.startswith("[####################] converged after pass "
                           f"{m.n_iter_}"), last
    assert f"{m.n_passes_} passes" in last
    assert f"objective {m.objective_history_[-1]:.4g} per sample" in last
    # the batch lines count against the planned total, not against the early end
    assert bar.last["max_iter"] == 40 * 3 and bar.last["iteration"] == 3 * m.n_passes_


_SCRIPT = """
import logging, numpy as np
from daskrnmf import NMF, ProgressBar
X = np.abs(np.random.default_rng(0).random((60, 5)))
fit = NMF(2, max_iter=2, tol=0.0, random_state=0, verbose=1).fit
fit(X)
NMF(2, max_iter=2, tol=0.0, random_state=0, callback=ProgressBar("bar", log=True)).fit(X)
logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
fit(X)
logging.getLogger().setLevel(logging.WARNING)       # set for other loggers' sake
fit(X)
"""


def test_verbose_and_log_lines_visible_in_a_plain_script():
    """No logging configured: the lines go to stderr (as scikit-learn's verbose prints);
    once the script configures logging, they go through it, not twice; a level that
    would drop them does not hide what verbose asked for."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    plain = [line for line in lines if line.startswith("NMF ")]
    logged = [line[4:] for line in lines if line.startswith("LOG NMF ")]
    assert plain and plain[0].startswith("NMF pass 1 (feature stats"), lines
    assert any(line.startswith("NMF iteration 2:") for line in plain)
    assert plain[-1].startswith("NMF fitted: 2 iterations, objective "), lines
    # fits 1 and 3 printed, fit 2 logged: the same lines, each once
    assert len(plain) == 2 * len(logged)
    heads = [line.split(":")[0] for line in plain]
    assert heads[:len(logged)] == heads[len(logged):] == [line.split(":")[0] for line in logged]
    bar = [line for line in lines if line.startswith("bar: ")]
    assert bar[0].startswith("bar: pass 1 (feature stats") and \
        bar[-1].startswith("bar: fitted: 2 iterations"), lines
