"""Object stores: Zarr paths as fsspec URLs with ``storage_options`` everywhere — fit's X,
the CLI's input, output and checkpoint, ``save``/``load`` — against a real S3-protocol
server on 127.0.0.1 (moto in server mode: HTTP and SigV4 signatures, credentials checked
against its IAM), not a mock of boto or s3fs; and a ``memory://`` round trip.

Writes on an object store follow the commit-marker rule of :mod:`daskrnmf.io`: a fresh
prefix, then one PUT of a pointer; an interrupted write leaves the previous result."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
pytest.importorskip("boto3")

import zarr  # noqa: E402

import daskrnmf  # noqa: E402
from daskrnmf import ONMFO, RFNMF, RNMF, _checkpoint, cli, io  # noqa: E402

from .test_checkpoint import saved_stream  # noqa: E402

BUCKET = "daskrnmf-test"
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 that checks credentials: an IAM user allowed s3:*
    is made, then authentication is enforced (moto accepts any key otherwise).  AWS
    variables and files of the environment are hidden so nothing leaks in."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.server import ThreadedMotoServer

    import boto3

    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)   # no line per request
    empty = tmp_path_factory.mktemp("aws") / "none"
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith("AWS_"):
                mp.delenv(key)
        mp.setenv("AWS_CONFIG_FILE", str(empty))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        before = settings.INITIAL_NO_AUTH_ACTION_COUNT
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            admin = dict(endpoint_url=endpoint, region_name="us-east-1",
                         aws_access_key_id="testing", aws_secret_access_key="testing")
            iam = boto3.client("iam", **admin)
            iam.create_user(UserName="daskrnmf")
            iam.put_user_policy(UserName="daskrnmf", PolicyName="s3", PolicyDocument=json.dumps(
                {"Version": "2012-10-17",
                 "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            key = iam.create_access_key(UserName="daskrnmf")["AccessKey"]
            boto3.client("s3", **admin).create_bucket(Bucket=BUCKET)
            settings.INITIAL_NO_AUTH_ACTION_COUNT = 0        # from now on: real credentials
            ActionAuthenticatorMixin.request_count = 0
            client_kwargs = {"endpoint_url": endpoint, "region_name": "us-east-1"}
            yield {"endpoint": endpoint,
                   "options": {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"],
                               "client_kwargs": client_kwargs},
                   "wrong": {"key": key["AccessKeyId"], "secret": "not-the-secret",
                             "client_kwargs": client_kwargs}}
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = before
            server.stop()


@pytest.fixture(scope="module")
def cluster(local_cluster):
    """The session's cluster (the CLI connects by its address), with a Client for the
    module: the data fixture writes through it."""
    from distributed import Client

    with Client(local_cluster):
        yield local_cluster


@pytest.fixture(scope="module")
def data(tmp_path_factory, s3, cluster):
    """The same small blobs array, local and on S3 (chunks of 200 rows)."""
    from daskrnmf.datasets import make_zarr_blobs

    d = tmp_path_factory.mktemp("os")
    local = make_zarr_blobs(str(d / "blobs.zarr"), n_samples=1200, n_features=6,
                            n_clusters=3, chunk_rows=200, random_state=0)
    X = zarr.open_array(local + "/X", mode="r")
    url = f"s3://{BUCKET}/in/blobs.zarr/X"
    z = zarr.open_array(url, mode="w", shape=X.shape, chunks=X.chunks, dtype=X.dtype,
                        storage_options=s3["options"])
    z[...] = X[...]
    return {"dir": d, "local": local + "/X", "url": url, "X": X[...]}


def fs_of(s3):
    import s3fs

    return s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)


def listing(s3, prefix=""):
    fs = fs_of(s3)
    return sorted(fs.find(f"{BUCKET}/{prefix}"))


def members(s3, url):
    """The names directly under ``url`` (objects and prefixes)."""
    prefix = url.split("://", 1)[1].rstrip("/") + "/"
    return {p[len(prefix):].split("/")[0] for p in fs_of(s3).find(prefix)}


def fresh(name):
    return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------- fit from S3
@pytest.mark.parametrize("make", [lambda: RFNMF(n_clusters=3, n_init=2, max_iter=5,
                                                random_state=0),
                                  lambda: RNMF(n_components=3, max_iter=5, random_state=0)],
                         ids=["RFNMF", "RNMF"])
def test_fit_from_s3_equals_the_local_fit(data, s3, make):
    remote = make().fit(data["url"], storage_options=s3["options"])
    local = make().fit(data["local"])
    for key in ("components_", "cluster_centers_"):
        if hasattr(local, key):
            np.testing.assert_array_equal(getattr(remote, key), getattr(local, key))
    if hasattr(local, "labels_"):
        np.testing.assert_array_equal(remote.labels_, local.labels_)
    np.testing.assert_array_equal(remote.objective_history_, local.objective_history_)


def test_reading_is_left_to_the_workers(data, s3):
    """The client builds a graph that holds the store, not the data: each task reads its
    chunk from S3 where it runs."""
    from daskrnmf.io import check_array

    X = check_array(data["url"], estimator_name="RFNMF", storage_options=s3["options"])
    assert X.numblocks[0] == 1 or X.chunks[0][0] % 200 == 0
    assert len(pickle.dumps(X.__dask_graph__())) < data["X"].nbytes / 4
    np.testing.assert_array_equal(X.compute(), data["X"])
    z = io.open_array(data["url"], storage_options=s3["options"])
    assert z.read_only and isinstance(z.store, zarr.storage.FsspecStore)


# ---------------------------------------------------------------- CLI: S3 in, S3 out
def test_cli_fits_from_s3_and_writes_to_s3(data, s3, cluster, capsys):
    out = fresh("out/rfnmf.zarr")
    argv = ["fit", "RFNMF", data["url"], "--output", out, "--storage-options",
            json.dumps(s3["options"]), "--n-clusters", "3", "--n-init", "2", "--max-iter", "5",
            "--random-state", "0", "--scheduler-address", cluster.scheduler_address]
    assert cli.main(argv) == 0, capsys.readouterr().err
    model = daskrnmf.load(out, storage_options=s3["options"])
    local = RFNMF(n_clusters=3, n_init=2, max_iter=5, random_state=0).fit(data["local"])
    np.testing.assert_array_equal(model.labels_, local.labels_)
    labels = io.open_array(out + "/labels", storage_options=s3["options"])
    assert labels.chunks == (200,)
    np.testing.assert_array_equal(labels[...], local.labels_)
    # committed: the pointer names one version, nothing else is there
    pointer = io.read_pointer(out, s3["options"])
    names = members(s3, out)
    assert names == {io.POINTER, pointer}
    # an existing output is kept unless --overwrite
    assert cli.main(argv) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert io.read_pointer(out, s3["options"]) == pointer
    assert cli.main(argv + ["--overwrite"]) == 0
    assert io.read_pointer(out, s3["options"]) != pointer
    names = members(s3, out)
    assert len(names) == 2              # the old version was removed after the commit


def test_cli_refuses_to_write_into_its_input_url_and_bad_options(data, s3, capsys):
    so = json.dumps(s3["options"])
    before = listing(s3)
    inside = data["url"].rsplit("/", 1)[0] + "/out.zarr"
    code = cli.main(["fit", "RFNMF", data["url"].rsplit("/", 1)[0], "--component", "X",
                     "--output", inside, "--storage-options", so, "--n-clusters", "3"])
    assert code == 1 and "never writes its input" in capsys.readouterr().err
    code = cli.main(["fit", "RFNMF", data["url"], "--output", fresh("out/x"),
                     "--storage-options", "[1, 2]", "--n-clusters", "3"])
    assert code == 2 and "expected a JSON object" in capsys.readouterr().err
    assert listing(s3) == before


def test_save_and_load_a_model_on_s3(data, s3):
    model = RFNMF(n_clusters=3, n_init=1, max_iter=5, random_state=0).fit(data["X"])
    url = fresh("models/rfnmf.zarr")
    assert model.save(url, storage_options=s3["options"]) == url
    again = daskrnmf.load(url, storage_options=s3["options"])
    np.testing.assert_array_equal(again.predict(data["X"]), model.predict(data["X"]))
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        model.save(url, storage_options=s3["options"])
    other = RFNMF(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(data["X"])
    other.save(url, overwrite=True, storage_options=s3["options"])
    assert daskrnmf.load(url, storage_options=s3["options"]).n_clusters == 2


# ---------------------------------------------------------------- ONMFO checkpoint on S3
KW = dict(n_components=3, max_iter=2, tol=0, batch_size=20, max_inner_iter=10, random_state=11)


def test_killed_onmfo_with_a_checkpoint_on_s3_resumes_to_the_same_result(s3, tmp_path):
    """SIGKILL a process fitting ONMFO with its checkpoint on S3, mid-stream (perhaps in
    the middle of writing a generation), then resume in this process."""
    X = np.random.default_rng(0).gamma(2.0, 1.0, size=(600, 8))
    np.save(tmp_path / "X.npy", X)
    ckpt = fresh("ckpt/onmfo")
    so = s3["options"]
    script = textwrap.dedent(f"""
        import time, numpy as np
        from daskrnmf import ONMFO
        X = np.load({str(tmp_path / 'X.npy')!r})
        ONMFO(**{KW!r}, checkpoint={ckpt!r}, checkpoint_every=2,
              callback=lambda info: time.sleep(0.02)).fit(X, storage_options={so!r})
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            state = saved_stream(ckpt, so)[0] if _checkpoint.holds_run(ckpt, so) else None
            if state and state["n_steps"] >= 10:
                break
            assert proc.poll() is None, "the fit ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    saved, _ = saved_stream(ckpt, so)
    assert 10 <= saved["n_steps"] < 60, saved     # killed mid-stream, not after it
    with pytest.raises(ValueError, match="earlier run"):   # never a silent fresh start
        ONMFO(**KW, checkpoint=ckpt).fit(X, storage_options=so)
    resumed = ONMFO(**KW, checkpoint=ckpt).fit(X, resume=True, storage_options=so)
    full = ONMFO(**KW).fit(X)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    gens = [p for p in listing(s3, ckpt.split(BUCKET + "/")[1]) if "/gen-" in p]
    assert {p.split("/gen-")[1].split("/")[0] for p in gens} == {
        _checkpoint.load(ckpt, so)[1]["_file"].rsplit("gen-", 1)[1]}   # one generation left


def test_checkpoint_write_on_s3_is_atomic(s3, monkeypatch):
    so = s3["options"]
    url = fresh("ckpt/atomic")
    _checkpoint.claim(url, storage_options=so)
    _checkpoint.save(url, {"W": np.ones((2, 3))}, {"pass": 0}, storage_options=so)
    real = zarr.Group.create_array
    calls = []

    def dying(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed while writing")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(zarr.Group, "create_array", dying)
    with pytest.raises(KeyboardInterrupt):
        _checkpoint.save(url, {"W": np.full((2, 3), 2.0), "A": np.zeros(2)}, {"pass": 1},
                         storage_options=so)
    arrays, attrs = _checkpoint.load(url, so)
    assert attrs["pass"] == 0 and np.all(arrays["W"] == 1) and set(arrays) == {"W"}
    monkeypatch.setattr(zarr.Group, "create_array", real)
    _checkpoint.save(url, {"W": np.full((2, 3), 3.0)}, {"pass": 2}, storage_options=so)
    arrays, attrs = _checkpoint.load(url, so)
    assert attrs["pass"] == 2 and attrs["_file"].endswith("gen-00000002")  # 1 not reused
    sub = url.split(BUCKET + "/")[1] + "/" + _checkpoint.SUBDIR
    assert {p.split(sub + "/")[1].split("/")[0] for p in listing(s3, sub)} == {
        "LATEST", "gen-00000002"}


# ---------------------------------------------------------------- wrong credentials
def test_wrong_credentials_are_a_clear_error_before_any_work(data, s3, cluster, capsys):
    before = listing(s3)
    with pytest.raises(PermissionError) as info:
        RFNMF(n_clusters=3).fit(data["url"], storage_options=s3["wrong"])
    message = str(info.value)
    assert f"Access to {data['url']} was denied" in message and "storage_options" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__

    calls = []
    ck = fresh("ckpt/denied")
    with pytest.raises(PermissionError, match=f"Access to {ck} was denied"):
        ONMFO(**KW, checkpoint=ck, callback=lambda i: calls.append(1)).fit(
            data["X"], storage_options=s3["wrong"])
    assert not calls                                    # no batch was streamed

    model = RFNMF(n_clusters=3, n_init=1, max_iter=2, random_state=0).fit(data["X"][:100])
    with pytest.raises(PermissionError, match="was denied"):
        model.save(fresh("models/denied"), storage_options=s3["wrong"])
    with pytest.raises(PermissionError, match="was denied"):
        daskrnmf.load(data["url"], storage_options=s3["wrong"])

    out = fresh("out/denied.zarr")
    code = cli.main(["fit", "RFNMF", data["url"], "--output", out, "--storage-options",
                     json.dumps(s3["wrong"]), "--n-clusters", "3",
                     "--scheduler-address", cluster.scheduler_address])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"Access to {data['url']} was denied" in err
    # a readable input but an output that cannot be written: refused before the fit
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/out.zarr"
    code = cli.main(["fit", "RFNMF", data["url"], "--output", missing, "--storage-options",
                     json.dumps(s3["options"]), "--n-clusters", "3",
                     "--scheduler-address", cluster.scheduler_address])
    err = capsys.readouterr().err
    assert code == 1 and missing in err and "bucket" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="no-such-bucket"):
        RFNMF(n_clusters=3).fit(missing + "/X", storage_options=s3["options"])
    assert listing(s3) == before                        # nothing written anywhere


# ---------------------------------------------------------------- interrupted writes
def test_an_interrupted_output_write_leaves_the_previous_result(data, s3, monkeypatch):
    so = s3["options"]
    out = fresh("out/interrupted.zarr")
    first = {"labels": np.zeros(1200, dtype=np.int64), "centers": np.ones((3, 6))}
    cli.write_store(out, first, {"run": 1}, False, n_rows=1200, row_chunk=200,
                    storage_options=so)
    committed = io.read_pointer(out, so)
    real = zarr.Group.create_array
    calls = []

    def dying(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed while writing")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(zarr.Group, "create_array", dying)
    second = {"labels": np.ones(1200, dtype=np.int64), "centers": np.zeros((3, 6))}
    with pytest.raises(KeyboardInterrupt):
        cli.write_store(out, second, {"run": 2}, True, n_rows=1200, row_chunk=200,
                        storage_options=so)
    monkeypatch.setattr(zarr.Group, "create_array", real)
    assert io.read_pointer(out, so) == committed
    np.testing.assert_array_equal(io.open_array(out, "labels", storage_options=so)[...], 0)
    # a SIGKILL leaves its half-written version behind: still nobody reads it, and the
    # next committed write removes it
    orphan = io.new_version(out)
    zarr.open_group(orphan, mode="w", storage_options=so).create_array(
        "labels", shape=(1200,), dtype="i8", chunks=(200,))
    np.testing.assert_array_equal(io.open_array(out, "labels", storage_options=so)[...], 0)
    cli.write_store(out, second, {"run": 2}, True, n_rows=1200, row_chunk=200,
                    storage_options=so)
    np.testing.assert_array_equal(io.open_array(out + "/labels", storage_options=so)[...], 1)
    names = members(s3, out)
    assert names == {io.POINTER, io.read_pointer(out, so)}

    # the same for a model file
    url = fresh("models/interrupted.zarr")
    model = RFNMF(n_clusters=3, n_init=1, max_iter=2, random_state=0).fit(data["X"][:300])
    model.save(url, storage_options=so)
    calls.clear()
    monkeypatch.setattr(zarr.Group, "create_array", dying)
    with pytest.raises(KeyboardInterrupt):
        RFNMF(n_clusters=2, n_init=1, max_iter=2, random_state=0).fit(data["X"][:300]).save(
            url, overwrite=True, storage_options=so)
    monkeypatch.setattr(zarr.Group, "create_array", real)
    assert daskrnmf.load(url, storage_options=so).n_clusters == 3
    assert len(members(s3, url)) == 2


# ---------------------------------------------------------------- memory://
def test_memory_url_round_trip(data, cluster):
    base = f"memory://daskrnmf-{uuid.uuid4().hex[:6]}"
    z = zarr.open_array(base + "/X.zarr", mode="w", shape=data["X"].shape, chunks=(200, 6),
                        dtype=data["X"].dtype)
    z[...] = data["X"]
    model = RFNMF(n_clusters=3, n_init=1, max_iter=5, random_state=0).fit(base + "/X.zarr")
    local = RFNMF(n_clusters=3, n_init=1, max_iter=5, random_state=0).fit(data["local"])
    np.testing.assert_array_equal(model.labels_, local.labels_)
    model.save(base + "/model.zarr")
    again = daskrnmf.load(base + "/model.zarr")
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)
    cli.write_store(base + "/out.zarr", {"labels": model.labels_}, {"run": 1}, False,
                    n_rows=1200, row_chunk=200)
    np.testing.assert_array_equal(io.open_array(base + "/out.zarr/labels")[...], model.labels_)


def test_commit_removes_only_its_own_versions():
    # a user's folder named like a version ("v-data") is never taken for an old version,
    # and a reader follows the pointer, not what is left at the location itself
    import fsspec

    from daskrnmf import io

    fs = fsspec.filesystem("memory")
    base = f"memory://commit-{os.getpid()}-{time.time_ns()}/loc"
    fs.pipe(base.split("://", 1)[1] + "/v-data/keep.txt", b"mine")
    abandoned = io.new_version(base)              # an interrupted write's prefix
    fs.pipe(abandoned.split("://", 1)[1] + "/payload", b"x")
    version = io.new_version(base)
    fs.pipe(version.split("://", 1)[1] + "/payload", b"x")
    io.commit(base, version)
    names = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base.split("://", 1)[1], detail=False)}
    assert "v-data" in names and io.read_pointer(base) in names
    assert len([n for n in names if n.startswith("v-") and n != "v-data"]) == 1
    assert io.resolve(base) == f"{base}/{io.read_pointer(base)}"


def test_batch_model_checkpoint_on_s3_resumes_exactly(data, s3):
    """A batch model's checkpoint on S3: its per-block state (H) written by the workers
    under the generation's prefix, then read back by them when resumed."""
    from daskrnmf import NMF
    from daskrnmf._resume import RunCheckpoint

    so = s3["options"]
    ckpt = fresh("ckpt/nmf")
    kw = {"n_components": 3, "max_iter": 6, "tol": 0.0, "random_state": 0}
    original = RunCheckpoint.save

    def dying(self, state, problem, log, iteration):
        original(self, state, problem, log, iteration)
        if iteration == 3:
            raise KeyboardInterrupt
    RunCheckpoint.save = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            NMF(**kw, checkpoint=ckpt).fit(data["url"], storage_options=so)
    finally:
        RunCheckpoint.save = original
    blocks = [p for p in listing(s3, ckpt.split(BUCKET + "/")[1]) if "/blocks/" in p]
    assert any("/b000000/a/zarr.json" in p for p in blocks), blocks    # H, by block
    resumed = NMF(**kw, checkpoint=ckpt).fit(data["url"], resume=True, storage_options=so)
    full = NMF(**kw).fit(data["url"], storage_options=so)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    gens = {p.split("/gen-")[1].split("/")[0] for p in listing(s3, ckpt.split(BUCKET + "/")[1])
            if "/gen-" in p}
    assert len(gens) == 1          # the generation resumed from is gone once the fit ended
