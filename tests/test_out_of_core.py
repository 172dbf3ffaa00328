"""The fit streams a Zarr array larger than the whole cluster's memory.

Two worker processes are capped at 700 MiB each (a bare read pass over this store
already peaks near 300 MiB per worker: dask, distributed and zarr themselves) (the nanny kills a worker at 95 % of
that) while X is 1485 MB.  Pausing is turned off so that the cap is a hard wall rather
than a slowdown; a sampling thread on each worker records its peak RSS, and the test
fails if any worker was restarted.
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

WORKER_LIMIT = 700 * 2**20


def _start_sampler(dask_worker):
    proc = psutil.Process()
    dask_worker._daskrnmf_peak = proc.memory_info().rss

    def sample():
        while True:
            dask_worker._daskrnmf_peak = max(dask_worker._daskrnmf_peak, proc.memory_info().rss)
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()


def _peak(dask_worker):
    return dask_worker._daskrnmf_peak


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    # written before the capped cluster starts (dask's threaded scheduler), as a real
    # store would exist before the job that clusters it
    path = tmp_path_factory.mktemp("ooc") / "big.zarr"
    # 2.9M x 64 float64 = 1485 MB: more than both workers' limits together (2 x 700 MiB)
    with dask.config.set(scheduler="threads"):
        make_zarr_blobs(path, n_samples=2_900_000, n_features=64, n_clusters=5,
                        outlier_fraction=0.01, chunk_rows=10_000, random_state=0)
    return str(path)


def _compile_kernels():
    """Fill Numba's on-disk cache from this process, so the capped workers load compiled
    kernels instead of JIT-compiling them (LLVM needs ~100 MB while compiling)."""
    X = np.random.default_rng(0).random((300, 64))
    for loss in ("l21", "l1"):
        for init in ("random", "k-medians++"):
            RFNMF(5, loss=loss, init=init, n_init=2, max_iter=2, random_state=0).fit(X)
    RFNMTF(5, 4, n_init=2, max_iter=2, random_state=0).fit(X)
    ORNMF(5, n_clusters=5, max_iter=2).fit(X)
    MNMF(3, max_iter=1, semi_max_iter=2, inner_max_iter=2).fit(X, np.arange(300) % 2)


@pytest.fixture(scope="module")
def capped_cluster(big_store):
    _compile_kernels()
    with dask.config.set({"distributed.worker.memory.pause": False,
                          "distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False}):
        with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=WORKER_LIMIT,
                          dashboard_address=None, processes=True) as cluster, \
                Client(cluster) as client:
            client.run(_start_sampler)
            yield client


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("loss, max_iter", [("l21", 3), ("l1", 8)])
def test_fit_with_worker_memory_below_data_size(capped_cluster, big_store, loss, max_iter):
    client = capped_cluster
    X = da.from_zarr(big_store + "/X")
    assert X.nbytes > 2 * WORKER_LIMIT
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = RFNMF(5, loss=loss, n_init=3, init="random", max_iter=max_iter, tol=1e-3,
                  random_state=0).fit(big_store + "/X")
        y = da.from_zarr(big_store + "/y")
        labels = m.labels_
        assert isinstance(labels, da.Array) and labels.shape == (X.shape[0],)
        acc = clustering_accuracy(y, labels)  # tree-reduced contingency table, all rows
    _check_workers(client, pids)
    assert acc > 0.98
    # feature stats, initialisation, at most 3 passes per iteration, final assignment
    assert m.n_passes_ <= 1 + 2 + 3 * max_iter + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_rfnmtf_with_worker_memory_below_data_size(capped_cluster, big_store):
    client = capped_cluster
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = RFNMTF(5, 4, n_init=2, max_iter=3, tol=1e-3, random_state=0).fit(big_store + "/X")
        acc = clustering_accuracy(da.from_zarr(big_store + "/y"), m.row_labels_)
    _check_workers(client, pids)
    assert acc > 0.98
    assert m.column_labels_.shape == (64,) and m.block_medians_.shape == (5, 4)
    # feature stats + row sample, at most 1 + 3 passes per iteration, final row step
    assert m.n_passes_ <= 2 + 4 * m.n_iter_ + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_ornmf_with_worker_memory_below_data_size(capped_cluster, big_store):
    # H (n x k) stays on the workers with X's blocks; only W, the k x d / k x k
    # statistics and the halo rows travel
    client = capped_cluster
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = ORNMF(5, alpha=0.3, max_iter=4, tol=0.0, random_state=0)
        H = m.fit_transform(big_store + "/X")
        assert isinstance(H, da.Array) and H.shape == (2_900_000, 5)
        # k-means on H (n_clusters) is RFNMF(loss="l2"), tested out of core above
        jumps = m.jumps_
        assert isinstance(jumps, da.Array) and jumps.shape == (2_899_999,)
        top = float(jumps.max().compute())
    _check_workers(client, pids)
    h = m.objective_history_
    assert np.all(np.diff(h) <= 1e-10 * h[:-1])
    assert m.boundaries_.ndim == 1 and m.boundaries_.size >= 1 and top > 0
    # input checks; NNDSVDa: Gram matrix, norms, initial H; one pass per iteration; final
    assert m.n_passes_ == 1 + 3 + m.n_iter_ + 1


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mnmf_with_worker_memory_below_data_size(capped_cluster, big_store):
    # H and the labels stay on the workers with X's blocks; the Newton passes bring back
    # d-vectors and d x d Hessians only.  y is a lazy Dask array derived from the store.
    client = capped_cluster
    pids = client.run(os.getpid)
    with dask.config.set({"array.chunk-size": "5MiB"}):
        y = (da.from_zarr(big_store + "/y") == 0).astype(np.int8)
        m = MNMF(3, max_iter=1, semi_max_iter=2, inner_max_iter=4, tol=0.0, random_state=0)
        m.fit(big_store + "/X", y)
        acc = m.score(big_store + "/X", y)
    _check_workers(client, pids)
    assert acc > 0.95
    # input checks, initial H, semi-NMF, the first SVM step, then G + H + SVM passes
    # input checks, initial H, 2 semi-NMF, every Newton pass (each step capped at 4), one
    # H pass in the iteration
    assert m.inner_passes_[0].max() <= 4
    assert m.n_passes_ == 1 + 1 + 2 + m.inner_passes_[0].sum() + 1


def test_onmfo_streams_with_worker_and_client_memory_below_data_size(capped_cluster, big_store):
    # batches of 100 000 rows = 10 chunks solved in parallel where they were read; only W
    # goes out and the k x d statistics come back; nothing of size n reaches this process
    client = capped_cluster
    pids = client.run(os.getpid)
    me = psutil.Process()
    full = da.from_zarr(big_store + "/X").nbytes
    rss0 = me.memory_info().rss
    with dask.config.set({"array.chunk-size": "5MiB"}):
        m = ONMFO(5, lam=1.0, n_passes=1, batch_size=100_000, max_inner_iter=20,
                  random_state=0).fit(big_store + "/X")
        grown = me.memory_info().rss - rss0
        X = da.from_zarr(big_store + "/X")[:50_000]
        flagged = da.from_zarr(big_store + "/outlier")[:50_000].compute()
        H, R = m.decompose(X)
        r_rows, h = dask.compute(R.sum(axis=1), H)
    _check_workers(client, pids)
    assert grown < 0.1 * full, f"client grew by {grown / 2**20:.0f} MiB"
    assert m.n_steps_ == 29 and m.n_samples_seen_ == 2_900_000 and m.n_passes_ == 1
    assert np.isfinite(m.objective_history_).all() and h.shape == (50_000, 5)
    # the gross corruption lands in R: rows flagged as outliers carry most of it
    assert np.median(r_rows[flagged]) > 20 * np.median(r_rows[~flagged]) + 1.0


def _check_workers(client, pids):
    peaks = {w: round(p / 2**20) for w, p in client.run(_peak).items()}
    assert client.run(os.getpid) == pids, f"a worker was restarted; peak RSS MiB {peaks}"
    assert max(peaks.values()) < 0.95 * WORKER_LIMIT / 2**20, peaks
