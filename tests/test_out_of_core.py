"""The fit streams a Zarr array larger than a worker's memory limit.

Two worker processes are capped at 580 MiB each (the nanny kills a worker at 95 % of
that) while X is 586 MiB (1.2M x 64 float64).  What the cap leaves a worker above its
baseline (dask, distributed, zarr and the compiled kernels: 320-410 MiB, measured by the
fixture; the nanny counts the shared libraries' resident pages, so a freshly installed
environment, whose library files are all in the page cache, starts ~80 MiB higher than
an old one) is far less than the worker's share of X, so a worker that held its share of X,
or anything of size n_samples x n_features, would be killed.  Pausing is turned off so
that the cap is a hard wall rather than a slowdown; a sampling thread on each worker
records its peak RSS, and the test fails if any worker was restarted.

The test is about memory, not convergence: few iterations and restarts, enough for every
kind of pass a model makes (median rounds, warm-started rounds, Newton passes, ...) and
for its result to be checked against the planted truth.
"""

import os
import threading
import time

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
from distributed import Client, LocalCluster

from daskrnmf import MNMF, ONMFO, ORNMF, RFNMF, RFNMTF
from daskrnmf.datasets import make_zarr_blobs
from daskrnmf.metrics import clustering_accuracy

N_WORKERS = 2
WORKER_LIMIT = 580 * 2**20
N_SAMPLES = 1_200_000         # x 64 float64 = 614 MB (586 MiB), in 120 chunks of 10 000 rows


def _start_sampler(dask_worker):
    proc = psutil.Process()
    dask_worker._daskrnmf_peak = proc.memory_info().rss

    def sample():
        while True:
            dask_worker._daskrnmf_peak = max(dask_worker._daskrnmf_peak, proc.memory_info().rss)
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()


def _peak(dask_worker):
    # None on a worker restarted since the sampler started (killed at the cap)
    return getattr(dask_worker, "_daskrnmf_peak", None)


def _rss():
    return psutil.Process().memory_info().rss


def _read_buffers():
    from daskrnmf import _reader

    return len(_reader._POOL) + len(_reader._SCRATCH)


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    # written before the capped cluster starts (dask's threaded scheduler), as a real
    # store would exist before the job that clusters it
    path = tmp_path_factory.mktemp("ooc") / "big.zarr"
    with dask.config.set(scheduler="threads"):
        make_zarr_blobs(path, n_samples=N_SAMPLES, n_features=64, n_clusters=5,
                        outlier_fraction=0.01, chunk_rows=10_000, random_state=0)
    return str(path)


def _compile_kernels():
    """Load every model's Numba kernels (and, run here first, fill Numba's on-disk cache,
    so the capped workers load compiled kernels instead of JIT-compiling them: LLVM needs
    ~100 MB while compiling)."""
    X = np.random.default_rng(0).random((300, 64))
    for loss in ("l21", "l1"):
        for init in ("random", "k-medians++"):
            RFNMF(5, loss=loss, init=init, n_init=2, max_iter=2, random_state=0).fit(X)
    RFNMTF(5, 4, n_init=2, max_iter=2, random_state=0).fit(X)
    ORNMF(5, n_clusters=5, max_iter=2, random_state=0).fit(X)
    MNMF(3, max_iter=1, semi_max_iter=2, max_inner_iter=2, random_state=0).fit(
        X, np.arange(300) % 2)
    ONMFO(3, max_iter=1, tol=0, batch_size=100, max_inner_iter=5, random_state=0).fit(X)


# A cluster of its own, not the session's (tests/conftest.py): worker processes whose
# memory is capped below their share of X, and whose memory is sampled.
@pytest.fixture(scope="module")
def capped_cluster(big_store):
    _compile_kernels()
    with dask.config.set({"distributed.worker.memory.pause": False,
                          "distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False}):
        with LocalCluster(n_workers=N_WORKERS, threads_per_worker=1,
                          memory_limit=WORKER_LIMIT, dashboard_address=None,
                          processes=True) as cluster, Client(cluster) as client:
            client.run(_compile_kernels)      # from the cache: the kernels' memory is baseline
            baseline = max(client.run(_rss).values())
            share = da.from_zarr(big_store + "/X").nbytes / N_WORKERS
            # the cap leaves a worker less room than its share of X
            assert 0.95 * WORKER_LIMIT - baseline < share, baseline / 2**20
            client.run(_start_sampler)
            _USED.discard(client)
            yield client


# the capped clients whose workers have run a test's work since they (re)started
_USED = set()


@pytest.fixture(autouse=True)
def _mark_used(request):
    yield
    if "capped_cluster" in request.fixturenames:
        _USED.add(request.getfixturevalue("capped_cluster"))


def _fresh_workers(client):
    """Restart the capped workers (the memory earlier tests left in them, freed or not,
    is gone), load the kernels again and start a new peak sampler: a test's peak is its
    own.  Workers that no test has used since they started (the fixture's own, for the
    module's first test) are fresh already: a restart costs seconds (two processes
    starting, importing, loading the kernels)."""
    if client not in _USED:
        return
    client.restart()
    client.run(_compile_kernels)
    client.run(_start_sampler)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_ornmf_with_worker_memory_below_data_size(capped_cluster, big_store):
    # first in the module: on the fixture's fresh workers, no restart (_fresh_workers)
    # H (n x k) stays on the workers with X's blocks; only W, the k x d / k x k
    # statistics and the halo rows travel
    client = capped_cluster
    _fresh_workers(client)
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = ORNMF(5, alpha=0.3, max_iter=2, tol=0.0, random_state=0)
        H = m.fit_transform(big_store + "/X")
        assert isinstance(H, da.Array) and H.shape == (N_SAMPLES, 5)
        # k-means on H (n_clusters) is RFNMF(loss="l2"), tested out of core below
        jumps = m.jumps_
        assert jumps.shape == (N_SAMPLES - 1,)
        top = float(jumps.max().compute() if isinstance(jumps, da.Array) else jumps.max())
    _check_workers(client, pids)
    h = m.objective_history_
    assert h.size == 2 and np.all(np.diff(h) <= 1e-10 * h[:-1])
    assert m.boundaries_.ndim == 1 and m.boundaries_.size >= 1 and top > 0
    # input checks; NNDSVDa: Gram matrix, norms, initial H; one pass per iteration; final
    assert m.n_passes_ == 1 + 3 + m.n_iter_ + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("loss, max_iter", [("l21", 2), ("l1", 1)])
def test_fit_with_worker_memory_below_data_size(capped_cluster, big_store, loss, max_iter):
    # l1: one iteration after the initial F step is enough to run its median rounds both
    # cold (the initial step) and warm-started from the previous windows
    client = capped_cluster
    X = da.from_zarr(big_store + "/X")
    assert X.nbytes > WORKER_LIMIT
    pids = client.run(os.getpid)
    n_init = 5 if loss == "l21" else 3
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = RFNMF(5, loss=loss, n_init=n_init, init="random", max_iter=max_iter, tol=1e-3,
                  random_state=0).fit(big_store + "/X")
        y = da.from_zarr(big_store + "/y")
        labels = m.labels_
        assert labels.shape == (N_SAMPLES,)
        acc = clustering_accuracy(y, labels)  # tree-reduced contingency table, all rows
    _check_workers(client, pids)
    assert acc > 0.98
    # the blocks were read into pooled buffers (daskrnmf._reader), dropped after the fit
    assert set(client.run(_read_buffers).values()) == {0}
    # feature stats, one F step to initialise and one per iteration (the fused pass; for
    # L1 with its median rounds, at most 3 passes), final assignment
    steps = m.median_rounds_ if loss == "l1" else [1] * (1 + m.n_iter_)
    assert m.n_iter_ == max_iter and len(steps) == 1 + m.n_iter_ and max(steps) <= 3
    assert m.n_passes_ == 1 + sum(steps) + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_rfnmtf_with_worker_memory_below_data_size(capped_cluster, big_store):
    # two iterations: the second fuses the S step's first round into the row pass
    client = capped_cluster
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = RFNMTF(5, 4, n_init=1, max_iter=2, tol=1e-3, random_state=0).fit(big_store + "/X")
        acc = clustering_accuracy(da.from_zarr(big_store + "/y"), m.row_labels_)
    _check_workers(client, pids)
    assert acc > 0.98
    assert m.column_labels_.shape == (64,) and m.block_medians_.shape == (5, 4)
    # feature stats + row sample, at most 1 + 3 passes per iteration, final row step
    assert m.n_passes_ <= 2 + 4 * m.n_iter_ + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mnmf_with_worker_memory_below_data_size(capped_cluster, big_store):
    # H and the labels stay on the workers with X's blocks; the Newton passes bring back
    # d-vectors and d x d Hessians only.  y is a lazy Dask array derived from the store.
    # One outer iteration has every kind of pass (semi-NMF, exact codes, initial SVM step,
    # G step, H step, SVM step); the G step is capped at 2 Newton passes over X, the SVM
    # steps read the k features per row kept on the workers.
    client = capped_cluster
    _fresh_workers(client)
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        y = (da.from_zarr(big_store + "/y") == 0).astype(np.int8)
        m = MNMF(3, max_iter=1, semi_max_iter=1, max_inner_iter=2, tol=0.0, random_state=0)
        m.fit(big_store + "/X", y)
        acc = m.score(big_store + "/X", y)
    _check_workers(client, pids)
    assert acc > 0.95       # the majority class alone is 0.8
    inner = m.inner_passes_[0]
    assert inner.shape == (2, 2) and 1 <= inner[1, 0] <= 2 and inner[:, 1].min() >= 1
    # input checks, initial H, 1 semi-NMF, the exact codes of the initial basis, the G
    # step's Newton passes, one H pass in the iteration: the SVM steps do not read X
    assert m.n_passes_ == 1 + 1 + 1 + 1 + inner[1, 0] + 1


def test_onmfo_streams_with_worker_and_client_memory_below_data_size(capped_cluster, big_store):
    # batches of 40 000 rows = 4 chunks solved in parallel where they were read; only W
    # goes out and the k x d statistics come back; nothing of size n reaches this process
    client = capped_cluster
    pids = client.run(os.getpid)
    me = psutil.Process()
    full = da.from_zarr(big_store + "/X").nbytes
    rss0 = me.memory_info().rss
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = ONMFO(5, alpha_R=1.0, max_iter=1, tol=0, batch_size=40_000, max_inner_iter=20,
                  random_state=0).fit(big_store + "/X")
        grown = me.memory_info().rss - rss0
        X = da.from_zarr(big_store + "/X")[:50_000]
        flagged = da.from_zarr(big_store + "/outlier")[:50_000].compute()
        H, R = m.decompose(X)
        r_rows, h = dask.compute(R.sum(axis=1), H)
    _check_workers(client, pids)
    assert grown < 0.1 * full, f"client grew by {grown / 2**20:.0f} MiB"
    assert m.n_steps_ == N_SAMPLES // 40_000 and m.n_samples_seen_ == N_SAMPLES and m.n_passes_ == 1
    assert np.isfinite(m.objective_history_).all() and h.shape == (50_000, 5)
    # the gross corruption lands in R: rows flagged as outliers carry most of it
    assert np.median(r_rows[flagged]) > 20 * np.median(r_rows[~flagged]) + 1.0


def _check_workers(client, pids):
    peaks = {w: p and round(p / 2**20) for w, p in client.run(_peak).items()}
    assert client.run(os.getpid) == pids, f"a worker was restarted; peak RSS MiB {peaks}"
    assert max(peaks.values()) < 0.95 * WORKER_LIMIT / 2**20, peaks
