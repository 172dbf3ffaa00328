"""Every model the driver checkpoints (the registry's ``resumable`` ones, ONMFO's stream
among them; its own refusals are tests/test_checkpoint.py's) is resumable with the
guarantees of :mod:`daskrnmf._resume`: killed at any iteration — in the middle of one
(its state not saved yet) or between two (saved) — and resumed, the fit ends with exactly
the uninterrupted result; per-block state is written block by block; other data, other
parameters, other chunking and damaged files are refused."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from daskrnmf import REGISTRY
from daskrnmf._resume import RunCheckpoint

DRIVER_RESUMABLE = [name for name, spec in REGISTRY.items() if spec.resumable]


class Killed(Exception):
    """Stands for the process ending (SIGTERM, a lost node) at that point."""


def _data(name):
    rng = np.random.default_rng(3)
    centres = rng.uniform(0, 5, size=(3, 8))
    X = np.abs(np.concatenate([c + 0.4 * rng.laplace(size=(60, 8)) for c in centres]))
    X = X[rng.permutation(X.shape[0])]
    if name in ("SemiNMF", "MNMF"):
        X = X - X.mean(axis=0)      # data of any sign
    return X


def _labels(name, X, kind="numpy"):
    """y of a classifier (None for the other models)."""
    if name == "MNMF":
        # three classes (three binary problems, each a driver run of its own), string
        # labels; a Dask y for Dask X (never gathered)
        y = np.array(["a", "b", "c"])[np.argmax(X[:, :3], axis=1)]
        return y if kind == "numpy" else da.from_array(y, chunks=50)
    assert not REGISTRY[name].needs_y, name
    return None


def _model(name, **extra):
    cls = REGISTRY[name].cls
    params = {"random_state": 0, "max_iter": 8, "tol": 0.0}
    if "n_clusters" in cls().get_params():
        params["n_clusters"] = 3
    if "n_components" in cls().get_params():
        params["n_components"] = 3
    if name == "RFNMF":
        params.update(loss="l1", n_init=2, tol=1e-12)
    if name == "RFNMTF":
        # a sample smaller than X: the fit on X starts from the sample's best candidate
        # and takes several iterations
        params.update(n_row_clusters=3, n_column_clusters=2, n_init=2, init_size=20)
    if name == "MNMF":
        params.update(semi_max_iter=3, max_inner_iter=2, max_iter=4)
    if name == "ONMFO":
        # a step per batch (8 a pass), every one saved: passes 3 (n_iter_) > iteration 2
        params.update(max_iter=3, checkpoint_every=1, max_inner_iter=5)
    return cls(**{**params, **extra})


FITTED = ("components_", "cluster_centers_", "labels_", "objective_", "objective_history_",
          "n_iter_", "n_passes_", "reconstruction_err_", "median_rounds_", "jumps_",
          "boundaries_")
FITTED += ("block_medians_", "column_labels_", "row_labels_")      # RFNMTF's


def _same(a, b):
    for attr in FITTED + PER_PROBLEM:
        if hasattr(a, attr):
            x, y = getattr(a, attr), getattr(b, attr)
            assert _equal(x, y), attr


# MNMF's fitted attributes per binary problem (lists: one array per problem)
PER_PROBLEM = ("coef_", "intercept_", "pairs_", "inner_passes_", "inner_gaps_")


def _equal(x, y):
    if isinstance(x, list):
        return (isinstance(y, list) and len(x) == len(y)
                and all(_equal(p, q) for p, q in zip(x, y)))
    return np.array_equal(np.asarray(x), np.asarray(y))


def _kill(model, X, at, where, y=None, run=0):
    """Fit ``model`` and stop it at iteration ``at`` of its driver run ``run`` (counted
    from 0): ``"mid"`` before that iteration is saved, ``"between"`` right after."""
    if where == "mid":
        runs = []

        def callback(info):
            if info["iteration"] == 1:
                runs.append(info["model"])
            if len(runs) == run + 1 and info["iteration"] == at:
                raise Killed
        model.set_params(callback=callback)
        with pytest.raises(Killed):
            model.fit(X, y)
        return
    original = RunCheckpoint.save

    def save(self, state, problem, log, iteration):
        original(self, state, problem, log, iteration)
        if self.index == run and iteration == at:
            raise Killed
    RunCheckpoint.save = save
    try:
        with pytest.raises(Killed):
            model.fit(X, y)
    finally:
        RunCheckpoint.save = original


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # ConvergenceWarning of the short fits
        yield


def _as(X, kind):
    return X if kind == "numpy" else da.from_array(X, chunks=(50, X.shape[1]))


@pytest.mark.parametrize("where", ["mid", "between"])
@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("name", DRIVER_RESUMABLE)
def test_killed_and_resumed_is_the_uninterrupted_fit(name, kind, where, tmp_path):
    X = _as(_data(name), kind)
    y = _labels(name, _data(name), kind)
    reference = _model(name).fit(X, y)
    at = 1 if where == "mid" else 2
    assert np.all(np.asarray(reference.n_iter_) > at)
    path = str(tmp_path / "ckpt")
    _kill(_model(name, checkpoint=path), X, at, where, y)
    resumed = _model(name, checkpoint=path).fit(X, y, resume=True)
    _same(reference, resumed)
    # resuming the finished fit again changes nothing
    again = _model(name, checkpoint=path).fit(X, y, resume=True)
    _same(reference, again)


@pytest.mark.parametrize("kind, where", [("numpy", "mid"), ("dask", "between")])
def test_mnmf_killed_in_a_later_binary_problem(kind, where, tmp_path):
    """MNMF makes a driver run per binary problem: killed in the second, the resumed fit
    takes the first from the checkpoint as it ended and continues the second; nothing
    per row is saved (a step recomputes H and the features), only small arrays."""
    X, y = _as(_data("MNMF"), kind), _labels("MNMF", _data("MNMF"), kind)
    reference = _model("MNMF").fit(X, y)
    assert len(reference.pairs_) == 3
    path = tmp_path / "ckpt"
    _kill(_model("MNMF", checkpoint=str(path)), X, 2, where, y, run=1)
    from daskrnmf import _checkpoint

    arrays, attrs = _checkpoint.load(str(path), finite=False)
    assert [r["name"] for r in attrs["runs"]] == ["MNMF ('a' vs 'b')", "MNMF ('a' vs 'c')"]
    assert not attrs.get("block_sha256") and max(a.size for a in arrays.values()) <= 8 * 3
    resumed = _model("MNMF", checkpoint=str(path)).fit(X, y, resume=True)
    _same(reference, resumed)


def test_mnmf_resumed_with_a_larger_max_iter(tmp_path):
    """Every binary problem of a finished fit continues to the new max_iter, the first
    ones too: the passes they add count in n_passes_ as in a fit made with it."""
    X, y = _data("MNMF"), _labels("MNMF", _data("MNMF"))
    path = str(tmp_path / "ckpt")
    _model("MNMF", checkpoint=path, max_iter=2).fit(X, y)
    longer = _model("MNMF", checkpoint=path, max_iter=4).fit(X, y, resume=True)
    _same(_model("MNMF", max_iter=4).fit(X, y), longer)


@pytest.mark.parametrize("name", ["NMF", "RobustNMF"])
def test_per_block_state_written_block_by_block(name, tmp_path):
    X = da.from_array(_data(name), chunks=(50, 8))
    path = tmp_path / "ckpt"
    _model(name, checkpoint=str(path), max_iter=2).fit(X)
    gens = [g for g in os.listdir(path / "daskrnmf-checkpoint") if g.startswith("gen-")]
    assert len(gens) == 1
    blocks = path / "daskrnmf-checkpoint" / gens[0] / "blocks"
    names = os.listdir(blocks)
    assert names
    for entry in names:
        if entry == "zarr.json":
            continue
        parts = sorted(p for p in os.listdir(blocks / entry) if p.startswith("b"))
        assert parts == [f"b{b:06d}" for b in range(X.numblocks[0])]


@pytest.mark.parametrize("source", ["from_array", "zarr"])
def test_resume_under_a_distributed_cluster(client, tmp_path, source):
    """On a cluster the per-block state is spilled to scratch files between passes, and
    read back from the checkpoint by the workers; X in memory (its blocks need the
    array's own task) or read from Zarr by daskrnmf's reader (each block's read inside
    the block's task of a pass)."""
    X = da.from_array(_data("NMF"), chunks=(50, 8))
    if source == "zarr":
        import zarr

        from daskrnmf._reader import as_dask

        X.to_zarr(str(tmp_path / "x.zarr"))
        X = as_dask(zarr.open_array(str(tmp_path / "x.zarr"), mode="r"), 50)
        assert X.numblocks[0] > 1
    reference = _model("NMF").fit(X)
    path = str(tmp_path / "ckpt")
    _kill(_model("NMF", checkpoint=path), X, 3, "between")
    resumed = _model("NMF", checkpoint=path).fit(X, resume=True)
    _same(reference, resumed)


def test_refuses_other_data_parameters_chunking_and_damage(tmp_path):
    X = np.random.default_rng(1).random((400, 8))     # rows the fingerprint does not sample
    path = str(tmp_path / "ckpt")
    _kill(_model("NMF", checkpoint=path), _as(X, "dask"), 2, "between")
    with pytest.raises(ValueError, match="other data"):
        _model("NMF", checkpoint=path).fit(_as(X + 1.0, "dask"), resume=True)
    with pytest.raises(ValueError, match="another fit: n_components=3 there, 2 here.*"
                                         "overwrite_checkpoint=True"):
        _model("NMF", checkpoint=path).set_params(n_components=2).fit(_as(X, "dask"),
                                                                      resume=True)
    with pytest.raises(ValueError, match="chunked otherwise"):
        _model("NMF", checkpoint=path).fit(da.from_array(X, chunks=(40, 8)), resume=True)
    # the same X with one value changed outside the sampled rows: the first pass's
    # statistics differ
    from daskrnmf._checkpoint import sample_ranges

    sampled = set().union(*(range(a, b) for a, b in sample_ranges(X.shape[0])))
    row = next(i for i in range(X.shape[0]) if i not in sampled)
    Y = X.copy()
    Y[row, 3] += 0.5
    with pytest.raises(ValueError, match="X's values differ"):
        _model("NMF", checkpoint=path).fit(_as(Y, "dask"), resume=True)
    # a block's state changed on disk
    sub = os.path.join(path, "daskrnmf-checkpoint")
    gen = next(g for g in os.listdir(sub) if g.startswith("gen-"))
    blocks = os.path.join(sub, gen, "blocks")
    name = next(n for n in os.listdir(blocks) if n != "zarr.json")
    chunk_dir = os.path.join(blocks, name, "b000001")
    for top, _, files in os.walk(chunk_dir):
        for f in files:
            if f != "zarr.json":
                with open(os.path.join(top, f), "r+b") as fh:
                    fh.seek(-1, os.SEEK_END)
                    last = fh.read(1)
                    fh.seek(-1, os.SEEK_END)
                    fh.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(ValueError, match="b000001.*damaged"):
        _model("NMF", checkpoint=path).fit(_as(X, "dask"), resume=True)


def test_resume_needs_a_checkpoint_and_an_earlier_run_is_kept(tmp_path):
    X = _data("RobustNMF")
    with pytest.raises(ValueError, match="resume=True needs the 'checkpoint' parameter"):
        _model("RobustNMF").fit(X, resume=True)
    path = str(tmp_path / "ckpt")
    _model("RobustNMF", checkpoint=path, max_iter=2).fit(X)
    with pytest.raises(ValueError, match="holds an earlier run's checkpoint"):
        _model("RobustNMF", checkpoint=path).fit(X)
    with pytest.raises(ValueError, match="contradict"):
        _model("RobustNMF", checkpoint=path).fit(X, resume=True, overwrite_checkpoint=True)
    # max_iter may grow between the two fits: the run continues
    longer = _model("RobustNMF", checkpoint=path, max_iter=5).fit(X, resume=True)
    _same(_model("RobustNMF", max_iter=5).fit(X), longer)
    fresh = _model("RobustNMF", checkpoint=path, max_iter=3).fit(X, overwrite_checkpoint=True)
    _same(_model("RobustNMF", max_iter=3).fit(X), fresh)


def test_random_state_none_resumes_with_the_saved_seed(tmp_path, monkeypatch):
    X = _as(_data("NMF"), "dask")
    path = str(tmp_path / "ckpt")
    model = _model("NMF", checkpoint=path, random_state=None, init="random")
    _kill(model, X, 2, "between")
    from daskrnmf import _checkpoint

    seed = int(_checkpoint.load(path, finite=False)[1]["seed"])
    resumed = _model("NMF", checkpoint=path, random_state=None, init="random").fit(
        X, resume=True)
    from daskrnmf._base import BaseModel

    monkeypatch.setattr(BaseModel, "_seed", lambda self: seed)   # the 63-bit seed drawn
    _same(_model("NMF", random_state=None, init="random").fit(X), resumed)


SCRIPT = textwrap.dedent("""
    import sys, time, warnings
    import numpy as np, dask.array as da
    from daskrnmf import NMF
    warnings.simplefilter("ignore")
    X = da.from_array(np.load(sys.argv[1]), chunks=(50, 8))
    slow = (lambda info: time.sleep(0.2)) if sys.argv[3] == "slow" else None
    model = NMF(n_components=3, random_state=0, max_iter=25, tol=0.0, checkpoint=sys.argv[2],
                callback=slow).fit(X, resume=sys.argv[3] == "resume")
    np.save(sys.argv[2] + ".W.npy", model.components_)
""")


def test_sigkill_mid_fit_then_resume(tmp_path):
    """A real process killed with SIGKILL (no cleanup at all) at some iteration: the
    next process resumes and ends with the uninterrupted W."""
    X = _data("NMF")
    np.save(tmp_path / "X.npy", X)
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    path = str(tmp_path / "ckpt")
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "X.npy"), path,
                             "slow"])
    sub = os.path.join(path, "daskrnmf-checkpoint")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        gens = [g for g in os.listdir(sub) if g.startswith("gen-")] if os.path.isdir(sub) else []
        if gens and int(max(gens)[4:]) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(path + ".W.npy")
    subprocess.run([sys.executable, str(script), str(tmp_path / "X.npy"), path, "resume"],
                   check=True, timeout=300)
    with dask.config.set(scheduler="threads"):
        reference = NMF_reference(X)
    assert np.array_equal(np.load(path + ".W.npy"), reference)
    shutil.rmtree(path)


def NMF_reference(X):
    from daskrnmf import NMF

    return NMF(n_components=3, random_state=0, max_iter=25, tol=0.0).fit(
        da.from_array(X, chunks=(50, 8))).components_


@pytest.mark.parametrize("where", ["mid", "between"])
@pytest.mark.parametrize("init, kind", [("random", "dask"), ("random", "numpy"),
                                        ("k-medians++", "dask")])
def test_rfnmtf_resumed_with_median_searches_over_several_passes(init, kind, where, tmp_path,
                                                                 monkeypatch):
    """RFNMTF's S step over several passes (budgets forced small): the median search's
    windows and which restarts speculate carry from one iteration to the next; with
    init="random" (its S step over X before the run) two restarts run on X and one stops
    at iteration 4, before the other; X in memory keeps every restart's last row labels.
    Killed at iteration 5 or after 4, the fit ends as if it had not been stopped."""
    from daskrnmf import _median_search

    monkeypatch.setattr(_median_search, "COLLECT_VALUES", 100)
    monkeypatch.setattr(_median_search, "HIST_CELLS", 16)
    X = _as(_data("RFNMTF"), kind)
    extra = {"init": init, "n_column_clusters": 3, "n_row_clusters": 4,
             "tol": 5e-4 if init == "random" else 0.0}
    active = []
    reference = _model("RFNMTF", callback=lambda info: active.append(info["active"]),
                       **extra).fit(X)
    assert reference.n_iter_ > 4
    if init == "random":
        assert [int(a.sum()) for a in active] == [2, 2, 2, 2, 1]
    if kind == "dask":
        assert max(reference.median_rounds_[1:]) > 1     # warm searches of several rounds
    path = str(tmp_path / "ckpt")
    _kill(_model("RFNMTF", checkpoint=path, **extra), X, 5 if where == "mid" else 4, where)
    resumed = _model("RFNMTF", checkpoint=path, **extra).fit(X, resume=True)
    _same(reference, resumed)


def _stop_at(n):
    return lambda info: info["iteration"] >= n


class _FinalKilled(Exception):
    pass


def test_a_run_its_callback_stopped_stays_stopped(tmp_path, monkeypatch):
    """Killed after its callback stopped the run (in the final pass), the resumed fit
    does not run the stopped run on."""
    from daskrnmf.models.nmf import _MUFit

    X = _data("NMF")
    reference = _model("NMF", max_iter=20, callback=_stop_at(3)).fit(X)
    path = str(tmp_path / "ckpt")
    final = _MUFit.final

    def killed(self, W):
        raise _FinalKilled
    monkeypatch.setattr(_MUFit, "final", killed)
    with pytest.raises(_FinalKilled):
        _model("NMF", max_iter=20, callback=_stop_at(3), checkpoint=path).fit(X)
    monkeypatch.setattr(_MUFit, "final", final)
    resumed = _model("NMF", max_iter=20, checkpoint=path).fit(X, resume=True)
    assert resumed.n_iter_ == reference.n_iter_ == 3
    _same(reference, resumed)


def test_a_smaller_max_iter_than_saved_is_refused(tmp_path):
    X = _data("NMF")
    path = str(tmp_path / "ckpt")
    _kill(_model("NMF", checkpoint=path), X, 6, "between")
    with pytest.raises(ValueError, match="after iteration 6, beyond max_iter=4"):
        _model("NMF", checkpoint=path, max_iter=4).fit(X, resume=True)


def test_a_failure_after_a_save_keeps_the_checkpoint(tmp_path):
    """Any error after the first save (a ValueError of the user's callback, a numerical
    error) keeps the checkpoint to resume from; bad data, found in the first pass before
    any save, leaves nothing."""
    X = _data("NMF")
    path = str(tmp_path / "ckpt")

    def bad(info):
        if info["iteration"] == 3:
            raise ValueError("the user's callback saw a bad value")
    with pytest.raises(ValueError, match="the user's callback"):
        _model("NMF", checkpoint=path, callback=bad).fit(X)
    resumed = _model("NMF", checkpoint=path).fit(X, resume=True)
    _same(_model("NMF").fit(X), resumed)
    bad_data = X.copy()
    bad_data[5, 2] = np.nan
    fresh = str(tmp_path / "fresh")
    with pytest.raises(ValueError, match="NaN"):
        _model("NMF", checkpoint=fresh).fit(bad_data)
    assert not os.path.exists(fresh)


def test_killed_before_its_first_pointer_is_no_run(tmp_path):
    """A process killed (no cleanup) between its first generation's rename and the
    pointer naming it committed nothing: the next fit starts afresh, with or without
    resume=True."""
    from daskrnmf import _checkpoint

    X = _data("NMF")
    np.save(tmp_path / "X.npy", X)
    path = str(tmp_path / "ckpt")
    child = textwrap.dedent(f"""
        import os, warnings, numpy as np
        warnings.simplefilter("ignore")
        from daskrnmf import NMF, _checkpoint
        real = _checkpoint._write_pointer
        def killed(sub, name):
            if name.startswith("gen-"):
                os._exit(9)        # SIGKILL right after the generation's rename
            real(sub, name)
        _checkpoint._write_pointer = killed
        NMF(n_components=3, random_state=0, max_iter=8, tol=0.0,
            checkpoint={path!r}).fit(np.load({str(tmp_path / "X.npy")!r}))
    """)
    assert subprocess.run([sys.executable, "-c", child], timeout=300).returncode == 9
    assert any(g.startswith("gen-") for g in os.listdir(os.path.join(path,
                                                                     "daskrnmf-checkpoint")))
    assert not _checkpoint.holds_run(path)
    reference = _model("NMF").fit(X)
    _same(reference, _model("NMF", checkpoint=path).fit(X, resume=True))
    _same(reference, _model("NMF", checkpoint=path).fit(X, overwrite_checkpoint=True))


def test_other_chunking_and_reordered_rows_are_refused(tmp_path):
    """RFNMF with the L2,1 loss keeps no per-block state, yet its sums follow X's
    chunks; two rows swapped where no sampled row is: refused, not mixed."""
    from daskrnmf._checkpoint import sample_ranges

    rng = np.random.default_rng(2)
    X = rng.integers(0, 5, size=(400, 6)).astype(float)
    path = str(tmp_path / "ckpt")
    params = {"loss": "l21", "n_init": 1}
    _kill(_model("RFNMF", checkpoint=path, **params), da.from_array(X, chunks=(50, 6)), 2,
          "between")
    with pytest.raises(ValueError, match="chunked otherwise"):
        _model("RFNMF", checkpoint=path, **params).fit(da.from_array(X, chunks=(40, 6)),
                                                       resume=True)
    sampled = set().union(*(range(a, b) for a, b in sample_ranges(X.shape[0])))
    i, j = [r for r in range(X.shape[0]) if r not in sampled
            and not np.array_equal(X[r], X[r + 1])][0], None
    j = i + 1
    Y = X.copy()
    Y[[i, j]] = Y[[j, i]]
    with pytest.raises(ValueError, match="X's values differ"):
        _model("RFNMF", checkpoint=path, **params).fit(da.from_array(Y, chunks=(50, 6)),
                                                       resume=True)


def test_labels_and_array_parameters_are_fingerprinted(tmp_path):
    from daskrnmf import RFNMTF
    from daskrnmf._resume import param_fingerprint

    X = _data("MNMF")
    y = _labels("MNMF", X)
    path = str(tmp_path / "ckpt")
    _kill(_model("MNMF", checkpoint=path), X, 2, "between", y=y)
    other = y.copy()
    other[:10] = other[10:20]
    with pytest.raises(ValueError, match="the labels y differ"):
        _model("MNMF", checkpoint=path).fit(X, other, resume=True)
    # arrays inside a tuple parameter: by their digest, not numpy's shortened repr
    S = np.zeros((2, 2))
    labels = np.zeros(2000, dtype=int)
    other_labels = labels.copy()
    other_labels[1000] = 1
    a = param_fingerprint(RFNMTF(2, 2, init=(S, labels)))
    b = param_fingerprint(RFNMTF(2, 2, init=(S, other_labels)))
    assert a["init"] != b["init"]


def test_choose_k_with_a_checkpointed_estimator(tmp_path):
    from daskrnmf import RFNMF, choose_k

    X = _data("RFNMF")
    result = choose_k(RFNMF(n_init=2, max_iter=5, random_state=0,
                            checkpoint=str(tmp_path / "ckpt")), X, ks=[2, 3], n_seeds=2)
    assert result.k in (2, 3)
    assert not os.path.exists(tmp_path / "ckpt")


def test_object_store_prune_keeps_the_committed_generation():
    """A generation complete but never named in LATEST (a writer killed before its
    commit) beside a finished run's committed one: a resume that saves nothing (the run
    had ended) prunes the uncommitted one, never the committed one (pruning 'all but the
    newest complete' deleted the generation LATEST names)."""
    import uuid

    from daskrnmf import _checkpoint

    X = _data("NMF")
    url = f"memory://ckpt-{uuid.uuid4().hex[:8]}"
    reference = _model("NMF", checkpoint=url).fit(X)      # finished: nothing left to run
    remote = _checkpoint._Remote(url, None)
    committed = remote.fs.cat_file(f"{remote.sub}/LATEST").decode().strip()
    newer = f"gen-{int(committed[4:]) + 1:08d}"
    remote.fs.pipe_file(f"{remote.sub}/{newer}/.complete", b"")
    for _ in range(2):                  # the second resume reads what the first left
        _same(reference, _model("NMF", checkpoint=url).fit(X, resume=True))
        names = remote._names(remote.sub)
        assert committed in names and newer not in names


@pytest.mark.parametrize("at, where", [(1, "mid"), (1, "between"), (2, "between")])
def test_rfnmf_l1_certified_round_killed_and_resumed(at, where, tmp_path, dask_config):
    """An RFNMF L1 fit out of core whose first step's collection round is certified (no
    row can change cluster: 3 passes for 3 iterations, tests/test_rfnmf.py), killed
    around any of its steps, resumes to the uninterrupted fit: the certified round's
    labels, medians and objective are the saved last pass, which the later steps take
    without a pass."""
    from daskrnmf import RFNMF

    rng = np.random.default_rng(0)
    centres = np.array([[0, 0, 0, 0], [20, 0, 20, 0], [0, 20, 0, 20]], dtype=float)
    X = (centres[rng.integers(0, 3, 600)] + rng.laplace(size=(600, 4))).astype(np.float32)
    X = da.from_array(X, chunks=(97, 4))
    # a collection budget below X's values: the bracket round, then a collection
    dask_config({"daskrnmf.median-collect-values": 512})

    def model(**params):
        return RFNMF(3, loss="l1", n_init=1, tol=0.0, random_state=0, **params)

    reference = model().fit(X)
    assert reference.median_rounds_ == [2, 0, 0] and reference.n_passes_ == 3
    path = str(tmp_path / "ckpt")
    _kill(model(checkpoint=path), X, at, where)
    _same(reference, model(checkpoint=path).fit(X, resume=True))
