"""A user's files are never deleted or changed (issue 40, "a user's files deleted or
changed"): ``--overwrite``/``overwrite=True`` replace only what daskrnmf wrote; nothing
is written into, inside or around an input store, by the CLI or the estimators; an
earlier checkpoint stays until a new one replaces it; scratch left by a killed process is
swept by the next run.

The CLI cases never reach a cluster (``connect`` is replaced by one that fails)."""

import json
import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import zarr

from daskrnmf import ONMFO, RFNMF, _checkpoint, _stores, cli
from daskrnmf.datasets import make_zarr_blobs

from .conftest import snapshot
from .test_checkpoint import saved_stream


@pytest.fixture
def work(tmp_path):
    """An input store, a user's folder with files, a foreign Zarr store, a file."""
    X = np.abs(np.random.default_rng(0).normal(size=(120, 4))) + 0.1
    g = zarr.open_group(str(tmp_path / "in.zarr"), mode="w")
    g.create_array("X", shape=X.shape, dtype=X.dtype, chunks=(40, 4))[...] = X
    thesis = tmp_path / "thesis"
    (thesis / "chapters").mkdir(parents=True)
    (thesis / "main.tex").write_text("\\documentclass{book}")
    (thesis / "chapters" / "one.tex").write_text("chapter one")
    foreign = zarr.open_group(str(tmp_path / "foreign.zarr"), mode="w")
    foreign.create_array("A", shape=(3,), dtype="f8")[...] = 1.0
    foreign.attrs["owner"] = "somebody"
    (tmp_path / "notes.txt").write_text("my notes")
    return tmp_path, X


def _fit_args(tmp_path, output, *extra):
    return ["fit", "RFNMF", str(tmp_path / "in.zarr" / "X"), "--output", str(output),
            "--n-clusters", "2", *extra]


@pytest.mark.parametrize("target", ["thesis", ".", "foreign.zarr", "notes.txt"])
def test_fit_overwrite_never_replaces_what_daskrnmf_did_not_write(work, target, no_cluster,
                                                                  capsys, monkeypatch):
    tmp_path, _ = work
    monkeypatch.chdir(tmp_path / "thesis" if target == "." else tmp_path)
    before = snapshot(tmp_path)
    assert cli.main(_fit_args(tmp_path, target, "--overwrite")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("daskrnmf did not write" in err or "is a file" in err)
    assert snapshot(tmp_path) == before
    assert not no_cluster


def test_a_daskrnmf_store_with_a_users_file_inside_is_not_replaced(work, no_cluster, capsys):
    tmp_path, X = work
    out = tmp_path / "out.zarr"
    cli.write_store(str(out), {"labels": np.zeros(3, dtype=np.int64)}, {"model": "RFNMF"},
                    False)
    (out / "my-analysis.txt").write_text("keep me")
    before = snapshot(tmp_path)
    assert cli.main(_fit_args(tmp_path, out, "--overwrite")) == 1
    assert "my-analysis.txt, which daskrnmf did not write" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_a_daskrnmf_output_is_replaced_with_overwrite(work, capsys):
    tmp_path, _ = work
    cfg = tmp_path / "threads.yaml"
    cfg.write_text("cluster: local\nn_workers: 1\nthreads_per_worker: 1\nprocesses: false\n")
    out = tmp_path / "out.zarr"
    stale = tmp_path / "daskrnmf-state-killed"      # left by a `kill -9`-ed earlier run
    stale.mkdir()
    (stale / _stores._SCRATCH_OWNER).write_text(json.dumps(
        {"host": _stores.socket.gethostname(), "pid": 2**22 + 17, "started": 1.0}))
    args = _fit_args(tmp_path, out, "--cluster", str(cfg), "--max-iter", "3")
    assert cli.main(args) == 0
    assert not stale.exists()                        # swept by this run
    assert not [p for p in os.listdir(tmp_path) if p.startswith("daskrnmf-state-")]
    assert zarr.open_group(str(out), mode="r").attrs["written_by"] == "daskrnmf"
    assert cli.main(args + ["--overwrite"]) == 0
    assert "labels" in zarr.open_group(str(out), mode="r")


def test_make_data_never_replaces_a_users_folder_nor_writes_into_a_store(work, no_cluster,
                                                                        capsys, monkeypatch):
    tmp_path, _ = work
    monkeypatch.chdir(tmp_path / "thesis")
    before = snapshot(tmp_path)
    assert cli.main(["make-data", "blobs", ".", "--overwrite", "--n-samples", "100"]) == 1
    assert "daskrnmf did not write" in capsys.readouterr().err
    for inside in (tmp_path / "in.zarr" / "new", tmp_path / "in.zarr" / "X" / "new"):
        assert cli.main(["make-data", "blobs", str(inside), "--n-samples", "100"]) == 1
        assert "inside the Zarr store" in capsys.readouterr().err
    assert snapshot(tmp_path) == before
    assert not no_cluster


def test_the_output_may_not_replace_the_checkpoint(work, no_cluster, capsys):
    tmp_path, _ = work
    both = tmp_path / "run"
    for ckpt, out in ((both, both), (both, both / "out.zarr"), (both / "ck", both)):
        assert cli.main(["fit", "ONMFO", str(tmp_path / "in.zarr" / "X"), "--output", str(out),
                         "--checkpoint", str(ckpt), "--overwrite",
                         "--n-components", "2"]) == 1
        assert "would overlap the output" in capsys.readouterr().err
    assert not no_cluster


def test_python_api_overwrite_replaces_only_daskrnmf_stores(work):
    tmp_path, X = work
    before = snapshot(tmp_path)
    model = RFNMF(2, random_state=0).fit(X)
    for target in ("thesis", "foreign.zarr", "notes.txt"):
        with pytest.raises(FileExistsError, match="daskrnmf did not write|is a file"):
            model.save(tmp_path / target, overwrite=True)
        with pytest.raises(FileExistsError, match="daskrnmf did not write|is a file"):
            make_zarr_blobs(tmp_path / target, n_samples=50, n_features=2, n_clusters=2,
                            chunk_rows=25, overwrite=True)
    with pytest.raises(ValueError, match="inside the Zarr store"):
        model.save(tmp_path / "in.zarr" / "model")
    assert snapshot(tmp_path) == before
    model.save(tmp_path / "m.zarr")
    model.save(tmp_path / "m.zarr", overwrite=True)                 # its own: replaced
    make_zarr_blobs(tmp_path / "b.zarr", n_samples=50, n_features=2, n_clusters=2, chunk_rows=25)
    make_zarr_blobs(tmp_path / "b.zarr", n_samples=60, n_features=2, n_clusters=2, chunk_rows=25,
                    overwrite=True)
    assert zarr.open_array(str(tmp_path / "b.zarr" / "X"), mode="r").shape == (60, 2)


def test_object_store_overwrite_keeps_other_objects():
    import fsspec

    fs = fsspec.filesystem("memory")
    url = "memory://bucket-user-files/results"
    fs.pipe(url + "/mine.csv", b"a,b\n")
    model = RFNMF(2, random_state=0).fit(np.random.default_rng(0).random((30, 3)))
    with pytest.raises(FileExistsError, match="did not write"):
        model.save(url, overwrite=True)
    assert fs.cat(url + "/mine.csv") == b"a,b\n"
    url2 = "memory://bucket-user-files/model"
    model.save(url2)
    fs.pipe(url2 + "/README", b"mine")
    model.save(url2, overwrite=True)                    # a committed location: replaced
    assert fs.cat(url2 + "/README") == b"mine"          # and the user's object kept


@pytest.mark.parametrize("where", ["in.zarr", "in.zarr/X", "in.zarr/X/ck", "in.zarr/ck", "."])
def test_estimator_checkpoint_never_in_or_around_the_input(work, where, monkeypatch):
    tmp_path, _ = work
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path / "in.zarr")
    path = str(tmp_path / "in.zarr" / "X")
    for data in (path, zarr.open_array(path, mode="r"), da.from_zarr(path)):
        with pytest.raises(ValueError, match="would write into the input store"):
            ONMFO(n_components=2, checkpoint=where, max_iter=2).fit(data)
    assert snapshot(tmp_path / "in.zarr") == before


@pytest.mark.parametrize("bad", ["", "   "])
def test_an_empty_checkpoint_path_is_refused(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="The 'checkpoint' parameter of ONMFO must be a "
                                         "non-empty path"):
        ONMFO(n_components=2, checkpoint=bad).fit(np.ones((20, 3)))
    assert os.listdir(tmp_path) == []


def _onmfo(ckpt, **kw):
    return ONMFO(n_components=2, checkpoint=str(ckpt), batch_size=20, max_iter=2,
                 max_inner_iter=5, random_state=0, **kw)


def _earlier_run(tmp_path):
    X = np.random.default_rng(1).random((80, 4))
    ckpt = tmp_path / "run.ckpt"
    _onmfo(ckpt).fit(X)
    saved, _ = saved_stream(str(ckpt))
    assert saved is not None
    return X, ckpt, saved["W"]


def test_a_failed_overwrite_run_keeps_the_earlier_checkpoint(tmp_path):
    X, ckpt, W = _earlier_run(tmp_path)
    bad = X.copy()
    bad[70, 1] = np.nan                  # found while streaming, in the last batch
    with pytest.raises(ValueError, match="NaN"):
        _onmfo(ckpt).fit(da.from_array(bad, chunks=(20, 4)), overwrite_checkpoint=True)
    saved, _ = saved_stream(str(ckpt))
    assert np.array_equal(saved["W"], W)         # the new run saved nothing before the NaN
    assert _checkpoint.holds_run(str(ckpt))


def test_a_failed_fresh_run_leaves_no_empty_checkpoint(tmp_path):
    ckpt = tmp_path / "fresh.ckpt"

    def boom(info):
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        ONMFO(n_components=2, checkpoint=str(ckpt), batch_size=20, checkpoint_every=100,
              callback=boom, random_state=0).fit(np.random.default_rng(0).random((80, 4)))
    assert not ckpt.exists()


def test_a_users_file_in_a_generation_folder_is_kept(tmp_path):
    X, ckpt, _ = _earlier_run(tmp_path)
    sub = ckpt / _checkpoint.SUBDIR
    gen = sorted(p for p in os.listdir(sub) if p.startswith("gen-"))[-1]
    (sub / gen / "my-notes.txt").write_text("keep")
    (sub / gen / "c").mkdir()                    # a folder named like chunk storage
    (sub / gen / "c" / "notes.txt").write_text("keep too")
    _onmfo(ckpt).fit(X, overwrite_checkpoint=True)
    assert (sub / gen / "my-notes.txt").read_text() == "keep"
    assert (sub / gen / "c" / "notes.txt").read_text() == "keep too"
    assert _checkpoint.load(str(ckpt)) is not None


def test_scratch_of_a_dead_process_is_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / "daskrnmf-state-stale"
    stale.mkdir()
    (stale / "g000001").mkdir()
    (stale / _stores._SCRATCH_OWNER).write_text(json.dumps(
        {"host": _stores.socket.gethostname(), "pid": int(dead.stdout), "started": 1.0}))
    unknown = tmp_path / "daskrnmf-state-unknown"        # no owner record: not ours to judge
    unknown.mkdir()
    mine = _stores.make_scratch(str(tmp_path))           # a live owner: kept by a second sweep
    _stores.sweep_scratch(str(tmp_path))
    assert not stale.exists() and unknown.exists() and os.path.isdir(mine)
