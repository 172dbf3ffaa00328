"""Workers' memory limits are read before any work: blocks sized to fit, or a clear error
(issue: a 300 MB worker paused forever on a 5 MB fit; Zarr input was cut into ~128 MiB
blocks whatever the limit)."""

import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from daskrnmf import RFNMF
from daskrnmf._blocks import BLOCK_COPIES, WORKER_BASELINE, worker_block_budget
from daskrnmf.io import check_array

# Each test starts a cluster of its own, not the session's (tests/conftest.py): the worker
# memory limit is what it tests, and each test needs another one.

def test_zarr_blocks_sized_from_the_limit(tmp_path):
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=(40_000, 100), chunks=(1000, 100), dtype="f8")
    z[:] = 1.0
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="1GiB",
                      dashboard_address=None) as cluster, Client(cluster):
        budget = worker_block_budget()
        X = check_array(path, estimator_name="RFNMF")
    rows = X.chunks[0][0]
    assert rows % 1000 == 0 and rows * 100 * 8 <= budget
    assert check_array(path, estimator_name="RFNMF").chunks[0][0] == 40_000  # no cluster: 128 MiB
    assert np.all(np.asarray(X[:5]) == 1.0)
    # a limit whose budget is below one stored chunk (32 MB): blocks split the stored chunk
    one = str(tmp_path / "one.zarr")
    zarr.create_array(one, shape=(40_000, 100), chunks=(40_000, 100), dtype="f8")[:] = 1.0
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="560MiB",
                      dashboard_address=None) as cluster, Client(cluster):
        budget = worker_block_budget()
        X = check_array(one, estimator_name="RFNMF")
    # computed after the cluster is gone: an in-process worker watches this whole process's
    # memory (the test session's), and would pause
    total = float(X.sum().compute(scheduler="sync"))
    assert 0 < budget < 40_000 * 100 * 8 and 0 < X.chunks[0][0] < 40_000
    assert X.chunks[0][0] * 100 * 8 <= budget and total == 40_000 * 100


@pytest.fixture(scope="module")
def small_workers():
    # threads only: the limit is what matters here, not separate processes
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="300MB",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def test_budget_follows_the_limit(small_workers):
    expected = int((300e6 * 0.8 - WORKER_BASELINE) // BLOCK_COPIES)
    assert worker_block_budget() == expected < 0


def test_too_small_a_limit_is_a_clear_error_before_any_work(small_workers):
    X = da.random.random((2000, 50), chunks=(500, 50))
    m = RFNMF(2)
    with pytest.raises(MemoryError, match=r"memory limit \(286 MiB\) is too small.*before any "
                                          r"data.*at least \d+ MiB"):
        m.fit(X)
    assert not hasattr(m, "cluster_centers_")


def test_budget_is_per_thread():
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, memory_limit="2GiB",
                      dashboard_address=None) as cluster, Client(cluster):
        two = worker_block_budget()
    assert two == int((2 * 2**30 * 0.8 - WORKER_BASELINE) // (BLOCK_COPIES * 2))


def test_a_stored_chunk_larger_than_a_worker_can_decode_is_refused_up_front(tmp_path):
    """Issue 40: two 700 MiB workers on an array stored in 256 MB chunks ended in
    KilledWorker (a worker decodes a whole stored chunk to read any row of it). Here the
    room is made small through the baseline setting instead of a huge array: a 30.5 MiB
    stored chunk against 20 MiB of room is refused, 3 MiB chunks are read."""
    import dask

    big = str(tmp_path / "big.zarr")
    zarr.create_array(big, shape=(40_000, 100), chunks=(40_000, 100), dtype="f8")   # metadata only
    small = str(tmp_path / "small.zarr")
    zarr.create_array(small, shape=(40_000, 100), chunks=(4_000, 100), dtype="f8")
    with dask.config.set({"daskrnmf.worker-baseline-memory": 540 * 2**20}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                         memory_limit="700MiB", dashboard_address=None) as cluster, \
            Client(cluster):
        with pytest.raises(MemoryError, match=r"stored chunks of .* are 31 MiB each .*leaves "
                                              r"20 MiB per thread.*at least \d+ MiB.*smaller "
                                              r"row chunks"):
            RFNMF(2).fit(big)
        X = check_array(small, estimator_name="RFNMF")
    assert X.chunks[0][0] <= 4_000

