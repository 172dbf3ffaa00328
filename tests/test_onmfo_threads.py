"""ONMFO's batches, solved one after the other, use the threads of their process: a
batch's slices solved at once, their statistics added in slice order, so that the fit is
the same, bit for bit, whatever the number of threads (issue 38)."""

import threading

import numpy as np
import pytest

from daskrnmf import ONMFO
from daskrnmf.models import _onmfo_stream, _outliers, onmfo

from .reference import planted_outliers as planted


@pytest.fixture(scope="module")
def data():
    return planted()[0]


class Seen(set):
    """The threads that solved slices; ``wait``: a slice's thread waits (at most 10 s)
    until that many have come, so that each thread of a solve takes some slices however
    fast the first one is."""

    wait = 1


@pytest.fixture
def slices(monkeypatch):
    """Slices of 8 rows (the 300 x 40 X's default batches, 37-38 rows: 5 a batch), and
    the threads that solve them, recorded (:class:`Seen`)."""
    monkeypatch.setattr(_outliers, "SOLVE_ROWS", 8)
    seen = Seen()
    real = _outliers._solve_slice
    came = threading.Condition()

    def spy(*args):
        with came:
            seen.add(threading.get_ident())
            came.notify_all()
            came.wait_for(lambda: len(seen) >= seen.wait, timeout=10)
        return real(*args)

    monkeypatch.setattr(_outliers, "_solve_slice", spy)
    return seen


def fitted(X, **kw):
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=1, **kw).fit(X)
    return model.components_, model.objective_history_, model.n_iter_


def assert_same(a, b):
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_a_piece_s_statistics_are_the_same_bits_on_any_number_of_threads(data, slices):
    W = planted()[2] + 0.1
    spec = _outliers.SolveSpec(alpha_R=2.0, n_iter=30, where="ONMFO", tol=1e-2)
    one = _outliers.solve_batch_piece(data[:100], 0, W, spec)
    assert len(slices) == 1
    for threads in (2, 3):
        slices.clear()
        slices.wait = threads
        st = _outliers.solve_batch_piece(
            data[:100], 0, W, _outliers.SolveSpec(**{**spec.__dict__, "threads": threads}))
        # 13 slices: each thread takes some (the pool's threads may be more than asked)
        assert len(slices) >= threads
        assert st.keys() == one.keys()
        for key in one:
            assert np.array_equal(st[key], one[key]), key


@pytest.mark.parametrize("batch_size", [None, 40])
def test_numpy_x_fits_the_same_bits_on_one_two_or_three_threads(data, slices, monkeypatch,
                                                                batch_size):
    out = {}
    for threads in (1, 2, 3):
        for module in (onmfo, _onmfo_stream):   # the in-process step; the row-group runs
            monkeypatch.setattr(module, "process_threads", lambda threads=threads: threads)
        slices.clear()
        slices.wait = threads
        out[threads] = fitted(data, batch_size=batch_size)
        assert len(slices) >= threads if threads > 1 else len(slices) == 1
    assert_same(out[2], out[1])
    assert_same(out[3], out[1])


def test_a_two_thread_worker_fits_the_same_bits_as_a_one_thread_worker(data, slices):
    import dask.array as da
    from distributed import Client, LocalCluster

    X = da.from_array(data, chunks=(50, -1))
    out = {}
    for threads in (1, 2):
        with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                          dashboard_address=None) as cluster, Client(cluster):
            slices.clear()
            slices.wait = threads
            out[threads] = fitted(X)
            # the row groups' tasks solve on all the worker's threads (one: no pool)
            assert len(slices) >= threads if threads > 1 else len(slices) == 1
    assert_same(out[2], out[1])
    assert_same(out[1], fitted(data))


def test_outside_a_worker_the_batches_are_solved_by_one_thread():
    # the user's process: more threads competed with BLAS's own, and limiting BLAS there
    # (threadpoolctl) left it on one thread for good when two fits overlapped
    from daskrnmf._stream import process_threads

    assert process_threads() == 1


def test_a_larger_pool_does_not_shut_down_the_one_another_thread_took(monkeypatch):
    # a thread takes the pool, another asks for more threads before the first submits
    monkeypatch.setattr(_outliers, "_POOL", None)
    taken = _outliers._solve_pool(1)
    assert _outliers._solve_pool(2) is not taken
    assert taken.submit(lambda: 7).result(timeout=10) == 7
