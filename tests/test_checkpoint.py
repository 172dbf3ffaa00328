"""Checkpoints that cannot lie (issue 17, items 2, 3, 4, 6, 9): a directory the library
owns, damage reported by name and never repaired by deleting, a fingerprint of the data,
no silent overwrite of an earlier run, no hang on an impossible position."""

import os
import signal

import dask.array as da
import numpy as np
import pytest

from daskrnmf import ONMFO
from daskrnmf import _checkpoint
from daskrnmf._resume import unflatten

KW = dict(n_components=3, max_iter=2, tol=0, batch_size=20, max_inner_iter=5, random_state=0)


@pytest.fixture
def X():
    return np.random.default_rng(0).gamma(2.0, 1.0, size=(100, 8))


@pytest.fixture(autouse=True)
def no_hang():
    """A test that would loop forever fails after 60 s instead."""
    def fail(*_):
        raise TimeoutError("the fit hung")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def stopped_run(X, path, at=7):
    """A checkpoint of a fit stopped mid-stream (at batch ``at`` of 10)."""
    ONMFO(**KW, checkpoint=path, checkpoint_every=2,
          callback=lambda info: info["iteration"] == at).fit(X)
    return _checkpoint.load(path)


def _plain(skel, arrays):
    """A saved value as plain dicts, lists and values (objects by their fields)."""
    if skel["t"] in ("dict", "obj"):
        return {k: _plain(i, arrays) for k, i in zip(skel["keys"], skel["items"])}
    if skel["t"] in ("list", "tuple"):
        return [_plain(i, arrays) for i in skel["items"]]
    return unflatten(skel, arrays)


def saved_stream(path, storage_options=None):
    """What ONMFO's checkpoint at ``path`` holds, as the driver saved it: the stream's
    state (W, A, B, C, ``pass_``, ``pos``, ``n_steps``, ...) and its listed attributes
    (``alpha_R_``, ``chunk_sha256``) in one dict with the driver's ``iteration``;
    and ``attrs``; ``(None, None)`` while it holds no generation."""
    loaded = _checkpoint.load(path, storage_options)
    if loaded is None:
        return None, None
    arrays, attrs = loaded
    run = attrs["runs"][0]
    value = _plain(run["skeleton"], arrays)
    return {**value["state"], **value["problem"], "iteration": run["iteration"]}, attrs


def _state_entry(attrs, field):
    """The skeleton entry of the saved state's ``field`` (edited in place by a test)."""
    state = attrs["runs"][0]["skeleton"]["items"][0]
    return state["items"][state["keys"].index(field)]


def pointer_dir(path):
    sub = os.path.join(path, getattr(_checkpoint, "SUBDIR", ""))
    return sub if os.path.isdir(sub) else os.fspath(path)


def generation(path):
    sub = pointer_dir(path)
    with open(os.path.join(sub, "LATEST")) as fh:
        return os.path.join(sub, fh.read().strip())


def snapshot(path):
    return sorted(os.path.relpath(os.path.join(root, f), path)
                  for root, _, files in os.walk(path) for f in files)


# ---------------------------------------------------------------- 2: the library's own directory
def test_files_the_library_did_not_create_survive(X, tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "gen-notes.txt").write_text("mine")
    (ck / ".gen-backup").write_text("mine too")
    (ck / "gen-00000003").mkdir()
    (ck / "gen-00000003" / "data.bin").write_bytes(b"\x00" * 10)
    (ck / "LATEST").write_text("my own file")
    ONMFO(**KW, checkpoint=ck, checkpoint_every=1).fit(X)
    assert (ck / "gen-notes.txt").read_text() == "mine"
    assert (ck / ".gen-backup").read_text() == "mine too"
    assert (ck / "gen-00000003" / "data.bin").exists()
    assert (ck / "LATEST").read_text() == "my own file"
    assert (ck / _checkpoint.MARKER).exists()
    sub = ck / _checkpoint.SUBDIR
    assert sorted(os.listdir(sub)) == ["LATEST", "gen-00000009"]   # one per batch, older removed
    # inside its own subfolder too, only the names it writes are removed
    (sub / "gen-keep.txt").write_text("mine")
    ONMFO(**KW, checkpoint=ck, checkpoint_every=1).fit(X, overwrite_checkpoint=True)
    assert (sub / "gen-keep.txt").read_text() == "mine"


def test_a_folder_of_its_name_it_did_not_create_is_refused(X, tmp_path):
    ck = tmp_path / "ck"
    (ck / _checkpoint.SUBDIR).mkdir(parents=True)
    (ck / _checkpoint.SUBDIR / "precious").write_text("x")
    with pytest.raises(ValueError, match="was not created by daskrnmf"):
        ONMFO(**KW, checkpoint=ck).fit(X)
    assert (ck / _checkpoint.SUBDIR / "precious").read_text() == "x"


# ---------------------------------------------------------------- 3 and 6: damage is an error
@pytest.mark.parametrize("damage", ["garbage", "empty", "missing", "names-nothing"])
def test_damaged_pointer_is_an_error_and_deletes_nothing(X, tmp_path, damage):
    ck = tmp_path / "ck"
    stopped_run(X, ck)
    latest = os.path.join(pointer_dir(ck), "LATEST")
    gen = generation(ck)
    if damage == "garbage":
        open(latest, "wb").write(b"\x89PNG\r\n garbage")
    elif damage == "empty":
        open(latest, "w").close()
    elif damage == "missing":
        os.remove(latest)
    else:
        open(latest, "w").write("gen-00000042")
    before = snapshot(ck)
    with pytest.raises(ValueError, match=f"checkpoint pointer {latest}"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)
    with pytest.raises(ValueError, match="earlier run"):   # not a silent fresh start either
        ONMFO(**KW, checkpoint=ck).fit(X)
    assert snapshot(ck) == before and os.path.isdir(gen)


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "truncated", "metadata"])
def test_damaged_chunk_is_an_error_naming_it(X, tmp_path, damage):
    ck = tmp_path / "ck"
    stopped_run(X, ck)
    _, attrs = _checkpoint.load(ck)
    w = os.path.join(generation(ck), _state_entry(attrs, "W")["k"])
    chunks = [os.path.join(r, f) for r, _, fs in os.walk(w) for f in fs if f != "zarr.json"]
    assert chunks
    if damage == "deleted":
        os.remove(chunks[0])
    elif damage == "corrupt":
        with open(chunks[0], "r+b") as fh:
            fh.seek(10)
            fh.write(b"\xff" * 16)
    elif damage == "truncated":
        with open(chunks[0], "r+b") as fh:
            fh.truncate(5)
    else:
        with open(os.path.join(w, "zarr.json"), "w") as fh:
            fh.write("{not json")
    with pytest.raises(ValueError, match="checkpoint .*damaged") as err:
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)
    assert generation(ck) in str(err.value)
    assert os.path.isdir(generation(ck))


def test_nan_in_saved_state_is_an_error(X, tmp_path):
    ck = tmp_path / "ck"
    arrays, attrs = stopped_run(X, ck)
    arrays[_state_entry(attrs, "W")["k"]][0, 0] = np.nan
    attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    _checkpoint.save(ck, arrays, attrs)     # a run that diverged saves NaN faithfully
    with pytest.raises(ValueError, match=r"W holds NaN or infinite values"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


@pytest.mark.parametrize("pass_, position, n_steps", [(1, 5, 15), (1, 7, 17), (0, -1, -1),
                                                      (2, 3, 23), (1, 2, 3)])
def test_position_outside_the_stream_is_an_error_not_a_hang(X, tmp_path, pass_, position,
                                                            n_steps):
    ck = tmp_path / "ck"
    arrays, attrs = stopped_run(X, ck)       # 5 batches per pass
    attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    for field, value in (("pass_", pass_), ("pos", position), ("n_steps", n_steps)):
        _state_entry(attrs, field)["v"] = value
    _checkpoint.save(ck, arrays, attrs)
    with pytest.raises(ValueError, match=r"damaged: its position .* 5 batches per pass"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


# ---------------------------------------------------------------- 6: the data's fingerprint
def test_resume_on_other_data_of_the_same_shape_is_refused(X, tmp_path):
    ck = tmp_path / "ck"
    _, attrs = stopped_run(X, ck)
    assert attrs["data"]["shape"] == [100, 8] and attrs["data"]["dtype"] == "float64"
    assert len(attrs["data"]["rows"]) >= 3
    other = X.copy()
    other[[0, -1]] *= 2.0                    # first and last rows are always sampled
    with pytest.raises(ValueError, match="made from other data than this X: rows 0..63 differ"):
        ONMFO(**KW, checkpoint=ck).fit(other, resume=True)
    with pytest.raises(ValueError, match="dtype float64 there, float32 here"):
        ONMFO(**KW, checkpoint=ck).fit(X.astype(np.float32), resume=True)
    # the same data chunked otherwise: batch_size= batches are read by X's chunks, whose
    # checksums a resume checks, so it is refused as for the batch models (the default
    # batches, X's rows, resume on any chunking: test_resume)
    with pytest.raises(ValueError, match="X was chunked otherwise"):
        ONMFO(**KW, checkpoint=ck).fit(da.from_array(X, chunks=(30, -1)), resume=True)


def test_default_batches_resume_on_x_chunked_otherwise(X, tmp_path):
    """The default batches are X's rows and random_state, never its chunks: a stream
    checkpointed on one chunking resumes on another (or on NumPy) to exactly the
    uninterrupted W."""
    kw = {k: v for k, v in KW.items() if k != "batch_size"}
    ck = tmp_path / "ck"
    ONMFO(**kw, checkpoint=ck, callback=lambda info: info["iteration"] == 5).fit(
        da.from_array(X, chunks=(30, -1)))
    resumed = ONMFO(**kw, checkpoint=ck).fit(da.from_array(X, chunks=(45, -1)), resume=True)
    np.testing.assert_array_equal(resumed.components_, ONMFO(**kw).fit(X).components_)


def test_fingerprint_samples_are_deterministic_and_chunking_free(X):
    a = _checkpoint.data_fingerprint(X)
    b = _checkpoint.data_fingerprint(da.from_array(X, chunks=(17, -1)))
    assert a["rows"] == b["rows"] and a["row_chunks"] is None and b["row_chunks"]
    assert _checkpoint.sample_ranges(10_000) == _checkpoint.sample_ranges(10_000)
    assert _checkpoint.sample_ranges(10_000)[0] == (0, 64)
    assert _checkpoint.sample_ranges(10_000)[-1] == (10_000 - 64, 10_000)


# ---------------------------------------------------------------- 4: no silent overwrite
def test_an_earlier_runs_checkpoint_is_not_overwritten_without_asking(X, tmp_path):
    ck = tmp_path / "ck"
    _, attrs = stopped_run(X, ck)
    before = snapshot(ck)
    with pytest.raises(ValueError, match=r"holds an earlier run's checkpoint.*resume=True.*"
                                         r"overwrite_checkpoint=True"):
        ONMFO(**KW, checkpoint=ck).fit(X)
    assert snapshot(ck) == before
    other = ONMFO(**{**KW, "random_state": 5}, checkpoint=ck).fit(X, overwrite_checkpoint=True)
    now, attrs = saved_stream(ck)
    assert attrs["fingerprint"]["seed"] == "5" and now["n_steps"] == 10
    np.testing.assert_array_equal(now["W"], other._W)
    with pytest.raises(ValueError, match="contradict"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True, overwrite_checkpoint=True)
    # a fresh directory, or one without a run in it, needs no permission
    ONMFO(**KW, checkpoint=tmp_path / "new").fit(X)
    ONMFO(**KW, checkpoint=tmp_path / "new2").fit(X, resume=True)


def test_a_checkpoint_of_the_old_layout_is_not_silently_restarted(X, tmp_path):
    import zarr

    ck = tmp_path / "ck"
    ck.mkdir()
    zarr.open_group(str(ck / "gen-00000004"), mode="w").attrs["pass"] = 0
    (ck / "LATEST").write_text("gen-00000004")
    with pytest.raises(ValueError, match="written by daskrnmf 0.1"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)
    ONMFO(**KW, checkpoint=ck).fit(X)            # afresh, next to it
    assert (ck / "gen-00000004").is_dir() and (ck / "LATEST").read_text() == "gen-00000004"


def test_unwritable_checkpoint_fails_before_any_work(X, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    seen = []
    with pytest.raises(OSError):         # cannot be created: fails before the first batch
        ONMFO(**KW, checkpoint=blocker / "ck", callback=seen.append).fit(X)
    assert seen == []
    with pytest.raises(ValueError, match="is a file, not a directory"):
        ONMFO(**KW, checkpoint=blocker, callback=seen.append).fit(X)
    assert seen == [] and blocker.read_text() == "x"


# ---------------------------------------------------------------- issue 40: oddities
@pytest.mark.parametrize("oddity", ["LATEST a directory", "gen-* a symlink",
                                    "the newest gen-* a symlink"])
def test_foreign_entries_of_our_names_are_refused_naming_them(X, tmp_path, oddity):
    ck = tmp_path / "ck"
    stopped_run(X, ck)
    sub = ck / _checkpoint.SUBDIR
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious").write_text("x")
    if oddity == "LATEST a directory":
        target = sub / "LATEST"
        os.remove(target)
        target.mkdir()
        (target / "precious").write_text("x")
    elif oddity == "gen-* a symlink":
        target = sub / "gen-00000099"
        os.symlink(mine, target)
    else:
        target = sub / (sub / "LATEST").read_text().strip()
        os.rename(target, mine / "gen")
        os.symlink(mine / "gen", target)
    for kw in (dict(resume=True), dict(overwrite_checkpoint=True)):
        with pytest.raises(ValueError, match=f"{target}.* not .*daskrnmf"):
            ONMFO(**KW, checkpoint=ck).fit(X, **kw)
    assert (mine / "precious").read_text() == "x" and os.path.lexists(target)


def test_a_second_fit_on_a_checkpoint_in_use_is_refused(X, tmp_path):
    ck = tmp_path / "ck"
    errors = []

    def second_fit(info):
        if not errors:
            for kw in (dict(), dict(resume=True), dict(overwrite_checkpoint=True)):
                try:
                    ONMFO(**KW, checkpoint=ck).fit(X, **kw)
                    errors.append(None)
                except Exception as exc:    # noqa: BLE001 - the test looks at it below
                    errors.append(exc)
        return False

    first = ONMFO(**KW, checkpoint=ck, checkpoint_every=1, callback=second_fit).fit(X)
    assert len(errors) == 3
    for exc in errors:
        assert isinstance(exc, ValueError) and "in use by another fit" in str(exc), exc
    np.testing.assert_array_equal(saved_stream(ck)[0]["W"], first._W)
    ONMFO(**KW, checkpoint=ck).fit(X, resume=True)      # the lock went with the first fit


@pytest.mark.parametrize("chunks", [None, 50])
def test_resume_on_x_changed_outside_the_fingerprinted_rows_is_refused(tmp_path, chunks):
    big = np.random.default_rng(1).gamma(2.0, 1.0, size=(400, 8))
    sampled = {r for a, b in _checkpoint.sample_ranges(len(big)) for r in range(a, b)}
    row = next(r for r in range(len(big)) if r not in sampled)
    ck = tmp_path / "ck"
    def as_input(a):
        return a if chunks is None else da.from_array(a, chunks=(chunks, -1))
    # 20 batches a pass, stopped in the second: every row has been read once
    ONMFO(**KW, checkpoint=ck, checkpoint_every=5,
          callback=lambda info: info["iteration"] == 25).fit(as_input(big))
    changed = big.copy()
    changed[row, 3] += 1.0
    with pytest.raises(ValueError, match=rf"X changed since the checkpoint {ck}\S* was made: "
                                         r"rows \d+\.\.\d+ differ"):
        ONMFO(**KW, checkpoint=ck).fit(as_input(changed), resume=True)
    ONMFO(**KW, checkpoint=ck).fit(as_input(big), resume=True)      # the same X resumes


def test_a_corrupt_checkpoint_chunk_is_named(X, tmp_path):
    ck = tmp_path / "ck"
    stopped_run(X, ck)
    w = _state_entry(_checkpoint.load(ck)[1], "W")["k"]
    with open(os.path.join(generation(ck), w, "c", "0", "0"), "r+b") as fh:
        fh.write(b"\xff" * 8)
    with pytest.raises(ValueError, match=rf"gen-\d+ is damaged: the chunk {w}/c/0/0 cannot "
                                         "be read"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


def test_a_checkpoint_of_onmfo_s_own_earlier_format_is_refused_as_older(X, tmp_path):
    ck = tmp_path / "ck"
    _checkpoint.claim(ck)
    # what ONMFO saved before the driver kept its checkpoints: a fingerprint of its own,
    # the position as attributes
    _checkpoint.save(ck, {"W": np.ones((3, 8))}, {
        "fingerprint": {"model": "ONMFO", "seed": "0"}, "seed": "0", "pass": 1,
        "position": 2, "n_steps": 7})
    with pytest.raises(ValueError, match=r"gen-\d+ is of an older format .* "
                                         r"overwrite_checkpoint=True to start afresh"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


def test_a_max_iter_below_the_saved_position_is_refused(X, tmp_path):
    ck = tmp_path / "ck"
    ONMFO(**{**KW, "max_iter": 3}, checkpoint=ck,
          callback=lambda info: info["iteration"] == 12).fit(X)     # 5 batches a pass
    with pytest.raises(ValueError, match=r"checkpointed after batch 12, beyond its max_iter "
                                         r"\(10 batches\): resume with a larger max_iter"):
        ONMFO(**KW, checkpoint=ck).fit(X, resume=True)


def test_a_generation_replaced_while_its_pointer_is_read_is_not_damage(tmp_path, monkeypatch):
    """A reader in another process (a progress check, a test polling a fit) that read
    LATEST just before the writer committed the next generation and deleted the one named
    reads the pointer again: it loads the new generation, it does not report the
    checkpoint damaged (nor the vanished generation as a foreign entry)."""
    ck = tmp_path / "ck"
    _checkpoint.claim(ck)
    _checkpoint.save(ck, {"W": np.zeros((2, 3))}, {"n": 1})
    first = _checkpoint.load(ck)[1]["_file"]
    _checkpoint.save(ck, {"W": np.ones((2, 3))}, {"n": 2})
    assert not os.path.exists(first)                  # the commit deleted it
    pointer, stale = _checkpoint._pointer, [os.path.basename(first)]
    monkeypatch.setattr(_checkpoint, "_pointer",
                        lambda sub: stale.pop() if stale else pointer(sub))
    arrays, attrs = _checkpoint.load(ck)
    assert attrs["n"] == 2 and not stale
    np.testing.assert_array_equal(arrays["W"], np.ones((2, 3)))
    # the pointer still names the deleted generation when read again: damage
    monkeypatch.setattr(_checkpoint, "_pointer", lambda sub: os.path.basename(first))
    with pytest.raises(ValueError, match="which is missing from .*: the checkpoint is damaged"):
        _checkpoint.load(ck)


def test_a_generation_deleted_while_the_directory_is_listed_is_not_foreign(tmp_path,
                                                                          monkeypatch):
    ck = tmp_path / "ck"
    _checkpoint.claim(ck)
    _checkpoint.save(ck, {"W": np.zeros((2, 3))}, {"n": 1})
    first = os.path.basename(_checkpoint.load(ck)[1]["_file"])
    _checkpoint.save(ck, {"W": np.ones((2, 3))}, {"n": 2})
    sub = os.path.join(ck, _checkpoint.SUBDIR)
    assert first not in os.listdir(sub)
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listdir(p) + (
        [first] if os.path.samefile(p, sub) else []))     # listed, then deleted
    assert _checkpoint.load(ck)[1]["n"] == 2


def test_a_generation_replaced_while_its_pointer_is_read_in_an_object_store(monkeypatch):
    """The same over fsspec (memory://, the code path of S3): a pointer read just before
    a commit names a generation deleted by it; the pointer is read again."""
    import uuid

    ck = f"memory://ckpt-{uuid.uuid4().hex[:8]}"
    _checkpoint.claim(ck)
    _checkpoint.save(ck, {"W": np.zeros((2, 3))}, {"n": 1})
    first = _checkpoint.load(ck)[1]["_file"].rstrip("/").rsplit("/", 1)[-1]
    _checkpoint.save(ck, {"W": np.ones((2, 3))}, {"n": 2})
    do, stale = _checkpoint._Remote._do, [first.encode()]

    def read(self, kind, fn, *args, **kwargs):
        if stale and getattr(fn, "__name__", "") == "cat_file" and args[0].endswith("LATEST"):
            return stale.pop()
        return do(self, kind, fn, *args, **kwargs)

    monkeypatch.setattr(_checkpoint._Remote, "_do", read)
    arrays, attrs = _checkpoint.load(ck)
    assert attrs["n"] == 2 and not stale
    np.testing.assert_array_equal(arrays["W"], np.ones((2, 3)))
