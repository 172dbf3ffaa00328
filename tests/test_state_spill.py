"""Chained per-block state on a distributed cluster is written to a scratch directory and
read back by the next pass, so a lost worker's blocks can be recomputed from files."""

import gc
import glob
import os
import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from daskrnmf import _blocks
from daskrnmf._blocks import RowBlocks, SpilledState


def _step(block, start, state, c):
    """A chained state: every pass adds ``c`` times the block to the previous state."""
    prev = np.zeros_like(block) if state is None else state
    new = prev + c * block
    return float(new.sum()), new


def _add(parts):
    return sum(parts)


def _run(X):
    blocks = RowBlocks(X)
    state = [None] * blocks.n_blocks
    totals, dirs = [], []
    for c in (1.0, 2.0, 3.0):
        total, state = blocks.map_reduce(_step, _add, args=(c,), state=state, keep_state=True)
        totals.append(total)
        if isinstance(state, SpilledState):
            dirs.append(state.directory)
    return blocks, state, totals, dirs


@pytest.mark.parametrize("chunk_rows", [40, 7])
def test_spilled_state_equals_in_memory_state(client, tmp_path, chunk_rows):
    rng = np.random.default_rng(0)
    x = rng.random((40, 3))
    X = da.from_array(x, chunks=(chunk_rows, 3))
    _, _, expected_totals, _ = _run(x)   # NumPy path, in memory
    with dask.config.set({"daskrnmf.scratch-directory": str(tmp_path)}):
        blocks, state, totals, dirs = _run(X)
    assert isinstance(state, SpilledState) and len(state) == X.numblocks[0]
    np.testing.assert_allclose(totals, expected_totals, rtol=1e-14)
    got = np.concatenate(dask.compute(*state))
    np.testing.assert_array_equal(got, 6.0 * x)
    # one generation per chained pass; the consumed ones are gone, the last is on disk
    assert len(dirs) == 3
    assert not os.path.exists(dirs[0]) and not os.path.exists(dirs[1])
    assert sorted(os.listdir(dirs[2])) == [f"b{b:06d}.pkl" for b in range(X.numblocks[0])]
    scratch = os.path.dirname(dirs[2])
    assert os.path.dirname(scratch) == str(tmp_path)
    # the last generation lives while a graph refers to it, and goes with it
    H = da.concatenate([da.from_delayed(s, (n, 3), dtype=float)
                        for s, n in zip(state, blocks.sizes)])
    del state, blocks
    gc.collect()
    np.testing.assert_array_equal(H.compute(), 6.0 * x)
    del H
    gc.collect()
    assert not os.path.exists(scratch)


def _state_sum(state, c):
    return c * float(state.sum())


@pytest.mark.parametrize("spill", [True, False])
def test_map_state_reduces_the_state_without_reading_x(client, tmp_path, spill):
    """A state pass (MNMF's SVM step) over spilled or in-memory state equals the NumPy
    twin and is not counted as a pass over X."""
    x = np.random.default_rng(1).random((40, 3))
    where = str(tmp_path) if spill else None
    with dask.config.set({"daskrnmf.scratch-directory": where}):
        blocks, state, _, _ = _run(da.from_array(x, chunks=(7, 3)))
        if not spill:
            blocks._scratch = None
            _, state = blocks.map_reduce(_step, _add, args=(6.0,), keep_state=True,
                                         state=[None] * blocks.n_blocks)
        n_passes = blocks.n_passes
        total = blocks.map_state(_state_sum, _add, state, args=(0.5,))
    assert isinstance(state, SpilledState) == spill
    assert total == pytest.approx(0.5 * 6.0 * x.sum(), rel=1e-12)
    assert blocks.n_passes == n_passes and blocks.n_state_passes == 1
    numpy_blocks, numpy_state, _, _ = _run(x)
    assert numpy_blocks.map_state(_state_sum, _add, numpy_state, args=(0.5,)) == \
        pytest.approx(total, rel=1e-12)


def test_local_schedulers_keep_state_in_memory(tmp_path):
    """No client: no worker can be lost, nothing is written."""
    X = da.from_array(np.ones((10, 2)), chunks=(5, 2))
    with dask.config.set({"daskrnmf.scratch-directory": str(tmp_path), "scheduler": "threads"}):
        _, state, totals, dirs = _run(X)
    assert not isinstance(state, SpilledState) and dirs == []
    assert totals == [20.0, 60.0, 120.0]
    assert os.listdir(tmp_path) == []


def test_remote_workers_without_a_shared_scratch_directory_warn(monkeypatch):
    class FarClient:
        def run(self, fn):
            return {"tcp://10.0.0.2:1": "node-17", "tcp://10.0.0.3:1": "node-18"}

    monkeypatch.setattr(_blocks, "active_client", lambda: FarClient())
    with dask.config.set({"daskrnmf.scratch-directory": None}):
        with pytest.warns(RuntimeWarning, match="daskrnmf.scratch-directory"):
            assert _blocks._choose_scratch() is None


def test_state_files_are_written_atomically(tmp_path):
    path = str(tmp_path / "b.pkl")
    state = {"H": np.arange(6.0).reshape(3, 2), "y": np.ones(3)}
    assert _blocks.write_state(state, path) == path
    assert os.listdir(tmp_path) == ["b.pkl"]          # no temporary left behind
    back = _blocks.read_state(path)
    np.testing.assert_array_equal(back["H"], state["H"])


class _Stop(Exception):
    pass


@pytest.mark.parametrize("ending", ["success", "error", "interrupt"])
def test_a_fit_leaves_no_scratch_directory_behind(client, tmp_path, monkeypatch, ending):
    """The spilled state goes with the fit that made it: removed when the fit returns,
    fails or is interrupted (Ctrl-C), not when a traceback that holds it is collected."""
    import tempfile

    from daskrnmf import NMF

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the default scratch root
    X = da.from_array(np.random.default_rng(0).random((60, 4)), chunks=(20, 4))
    during = []

    def callback(info):
        during.append(glob.glob(str(tmp_path / "daskrnmf-state-*")))
        if ending == "error" and info["iteration"] == 2:
            raise _Stop("stopped by the test")
        if ending == "interrupt" and info["iteration"] == 2:
            raise KeyboardInterrupt
        return False

    model = NMF(n_components=2, max_iter=3, tol=0.0, callback=callback, random_state=0)
    with dask.config.set({"daskrnmf.scratch-directory": None, "temporary-directory": None}):
        if ending == "success":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # ConvergenceWarning at max_iter
                model.fit(X)
        else:
            with pytest.raises(_Stop if ending == "error" else KeyboardInterrupt) as caught:
                model.fit(X)
            assert caught.traceback     # still held here, with the fit's frames
    assert during and all(len(found) == 1 for found in during)   # the fit did spill
    assert glob.glob(str(tmp_path / "daskrnmf-state-*")) == []
