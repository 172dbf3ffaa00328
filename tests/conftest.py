import os

# Under pytest-xdist (the README's command runs the suite in two processes) each worker
# process compiles Numba's kernels into a cache directory of its own, inherited by the
# processes it starts (Dask workers, the CLI, batch jobs): Numba numbers a function's
# cache files from the index it read, so two processes saving two signatures of one
# kernel at the same moment could leave an index naming the other's file.  Set before
# Numba is imported; an explicit NUMBA_CACHE_DIR is kept.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and "NUMBA_CACHE_DIR" not in os.environ:
    _CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                          ".pytest_cache", f"numba-{_WORKER}")
    try:
        os.makedirs(_CACHE, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = os.path.abspath(_CACHE)
    except OSError:         # a read-only checkout: the package's own cache directory
        pass

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def no_cluster(monkeypatch):
    """``daskrnmf.cluster.connect`` replaced by one that records its calls and starts
    nothing (it raises): a command that must fail before any cluster starts."""
    from daskrnmf import cluster

    calls = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise RuntimeError("a cluster was started")

    monkeypatch.setattr(cluster, "connect", refuse)
    return calls


def snapshot(path):
    """Every file under ``path`` with its bytes, and every directory: what "changed
    nothing" compares."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = None
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


@pytest.fixture
def dask_config():
    """``dask_config({key: value})`` sets dask config keys for the rest of the test (as
    ``monkeypatch`` sets attributes), and the test's end restores them."""
    import contextlib

    import dask

    with contextlib.ExitStack() as stack:
        yield lambda values: stack.enter_context(dask.config.set(values))


@pytest.fixture(scope="session")
def local_cluster():
    """The session's one in-process ``distributed.LocalCluster``, started on first use.

    Two single-threaded workers, so that a fit's blocks and its per-block state spread over
    more than one worker; tcp, so that tasks and results are serialised as on a real
    cluster and the CLI can connect by ``scheduler_address``.  A test that needs other
    settings (memory limits, worker processes to kill, TLS) starts its own and says why.
    """
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture
def client(local_cluster):
    """A Client of the session's cluster: the default scheduler for this test only."""
    from distributed import Client

    with Client(local_cluster) as c:
        yield c


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def median_cases(rng):
    """Value distributions that stress the median search: ties, integers, heavy tails."""
    n = 3000
    return {
        "normal": rng.normal(size=(n, 5)),
        "integers-with-ties": rng.integers(0, 4, size=(n, 5)).astype(float),
        "mostly-zero": np.where(rng.random((n, 5)) < 0.7, 0.0, rng.exponential(size=(n, 5))),
        "heavy-tail": rng.standard_cauchy(size=(n, 5)) * 1e6,
        "tiny-spread": 1e8 + rng.normal(scale=1e-6, size=(n, 5)),
        "constant": np.full((n, 5), 3.5),
    }


def pytest_terminal_summary(terminalreporter):
    """Print how many of scikit-learn's common checks ran per model (tests/test_common.py)."""
    import re
    from collections import Counter

    counts = {}
    for outcome in ("passed", "failed", "xfailed", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            m = re.search(r"test_sklearn_compatible_estimator\[(\w+)\(", getattr(rep, "nodeid", ""))
            if m and getattr(rep, "when", "call") in ("call", "setup"):
                counts.setdefault(m.group(1), Counter())[outcome] += 1
    if counts:
        terminalreporter.write_sep("-", "scikit-learn common checks per model")
        for model, c in sorted(counts.items()):
            terminalreporter.write_line(
                f"{model}: {sum(c.values())} checks, {c['passed']} passed, {c['failed']} failed, "
                f"{c['xfailed']} expected failures, {c['skipped']} skipped")
