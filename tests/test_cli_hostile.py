"""Issue 40, "hostile use, round two": no wait without end, and no deep error where a clear
one-line message can be given before any work.

Most cases never start a cluster (configurations and arguments are refused first); the
wait for workers uses one in-process scheduler without workers."""

import json
import os
import subprocess
import sys

import dask
import numpy as np
import pytest
import yaml
import zarr

from daskrnmf import cli, cluster
from daskrnmf.cluster import connect


@pytest.fixture
def no_start(monkeypatch):
    """``make_cluster`` and ``_client`` that record a start (and start nothing)."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise RuntimeError("a cluster was started")

    monkeypatch.setattr(cluster, "make_cluster", refuse)
    monkeypatch.setattr(cluster, "_client", refuse)
    return calls


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    g = zarr.open_group(str(d / "l.zarr"), mode="w")
    y = np.arange(12) % 3
    g.create_array("y", shape=y.shape, dtype=y.dtype, chunks=(4,))[...] = y
    return d


def _evaluate(labels, *where):
    y = str(labels / "l.zarr" / "y")
    return cli.main(["evaluate", y, y, *where])


# ------------------------------------------------------------------ waits without end
@pytest.mark.parametrize("n_workers", [0, -1])
def test_a_local_config_without_workers_is_refused_at_once(labels, no_start, capsys, tmp_path,
                                                           n_workers):
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump({"cluster": "local", "n_workers": n_workers}))
    capsys.readouterr()
    assert _evaluate(labels, "--cluster", str(config)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(config) in err and "'n_workers'" in err
    assert not no_start


@pytest.mark.parametrize("kind, command", [("slurm", "sbatch"), ("pbs", "qsub")])
def test_a_jobqueue_config_without_its_submit_command_is_refused_at_once(
        no_start, monkeypatch, tmp_path, kind, command):
    pytest.importorskip("dask_jobqueue")
    monkeypatch.setenv("PATH", str(tmp_path))       # no sbatch, no qsub
    config = tmp_path / f"{kind}.yaml"
    config.write_text(yaml.safe_dump({"cluster": kind, "cores": 1, "memory": "1GiB"}))
    with pytest.raises(ValueError, match=f"'{command}', which is not on the PATH") as info:
        with connect(config):
            pass
    assert str(config) in str(info.value) and not no_start


@pytest.fixture(scope="module")
def workerless():
    """An in-process scheduler that has no workers."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as c:
        yield c.scheduler_address


def test_a_scheduler_without_workers_fails_after_the_configured_timeout(workerless):
    with dask.config.set({"daskrnmf.worker-timeout": "0.3s"}):
        with pytest.raises(TimeoutError, match="has no workers after 0.3 s") as info:
            with connect(scheduler_address=workerless):
                pass
    assert f"the scheduler at {workerless}" in str(info.value)


def test_the_cli_waits_worker_timeout_seconds_and_says_for_what(labels, workerless, capsys):
    capsys.readouterr()
    assert _evaluate(labels, "--scheduler-address", workerless, "--worker-timeout", "0.2") == 1
    err = capsys.readouterr().err
    assert err == (f"daskrnmf: error: the scheduler at {workerless} has no workers after 0.2 s; "
                   "start workers for it, or wait longer with --worker-timeout SECONDS (dask "
                   "config 'daskrnmf.worker-timeout').\n")


# ------------------------------------------------------------------ deep errors, named
def test_an_unknown_key_of_a_local_config_is_named_with_its_file(labels, no_start, capsys,
                                                                 tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(yaml.safe_dump({"cluster": "local", "n_workers": 1, "procesess": False}))
    capsys.readouterr()
    assert _evaluate(labels, "--cluster", str(config)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"daskrnmf: error: cluster configuration {config}: unknown key "
                          "'procesess' for a 'local' cluster") and err.count("\n") == 1
    assert not no_start


def test_a_garbage_scheduler_file_is_named(no_start, tmp_path):
    for text in ("garbage", json.dumps({"type": "Scheduler"}), "[1, 2]"):
        (tmp_path / "s.json").write_text(text)
        with pytest.raises(ValueError, match=f"scheduler file {tmp_path / 's.json'} is not a "
                                             "Dask scheduler file"):
            with connect(scheduler_file=str(tmp_path / "s.json")):
                pass
    assert not no_start


def test_bad_tls_files_are_named_with_what_is_wrong(no_start, tmp_path):
    pytest.importorskip("cryptography")
    from distributed.security import Security

    def files(stem):
        sec, out = Security.temporary(), {}
        for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
            out[key] = str(tmp_path / f"{stem}-{key}.pem")
            with open(out[key], "w") as fh:
                fh.write(getattr(sec, key))
        return out

    good, other = files("good"), files("other")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    junk = str(tmp_path / "junk.pem")
    for bad, message in [({"tls_ca_file": junk}, f"tls_ca_file {junk} is not a PEM certificate"),
                         ({"tls_client_cert": junk},
                          f"tls_client_cert {junk} is not a PEM certificate"),
                         ({"tls_client_key": other["tls_client_key"]},
                          f"tls_client_key {other['tls_client_key']} is not the private key "
                          "of tls_client_cert")]:
        with pytest.raises(ValueError, match=message):
            with connect(scheduler_address="tls://127.0.0.1:1", tls={**good, **bad}):
                pass
    assert not no_start


def test_a_failure_on_a_worker_is_one_line_on_stderr(labels, tmp_path):
    # issue 40: a task that raises on a worker process logs distributed's "Compute Failed"
    # block with a traceback (distributed.worker, at ERROR) on the command's stderr, above
    # the clear last line; only that line is printed now (all of it with --debug)
    g = zarr.open_group(str(tmp_path / "p.zarr"), mode="w")
    g.create_array("p", shape=(12,), dtype="f8", chunks=(4,))[...] = np.r_[np.zeros(11), np.nan]
    (tmp_path / "procs.yaml").write_text(yaml.safe_dump(
        {"cluster": "local", "n_workers": 1, "threads_per_worker": 1, "memory_limit": "1GiB"}))
    proc = subprocess.run(
        [sys.executable, "-m", "daskrnmf", "evaluate", str(tmp_path / "p.zarr" / "p"),
         str(labels / "l.zarr" / "y"), "--cluster", str(tmp_path / "procs.yaml")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    # distributed's "Event loop was unresponsive" WARNING: a loaded machine, not the error
    lines = [line for line in proc.stderr.splitlines()
             if "Event loop was unresponsive" not in line]
    assert lines == ["daskrnmf: error: labels_pred holds NaN or infinity; every sample "
                     "needs a label."], proc.stderr


def test_evaluate_refuses_empty_labels_before_a_cluster_starts(no_start, capsys, tmp_path):
    g = zarr.open_group(str(tmp_path / "e.zarr"), mode="w")
    g.create_array("e", shape=(0,), dtype="i8", chunks=(4,))
    e = str(tmp_path / "e.zarr" / "e")
    capsys.readouterr()
    assert cli.main(["evaluate", e, e]) == 1
    assert capsys.readouterr().err == (f"daskrnmf: error: the labels {e} and {e} are empty "
                                       "(0 samples); there is nothing to compare.\n")
    assert not no_start


# ------------------------------------------------------------------ make-data, up front
def test_make_data_refuses_a_negative_seed_before_a_cluster_starts(no_start, capsys, tmp_path):
    capsys.readouterr()
    assert cli.main(["make-data", "blobs", str(tmp_path / "o.zarr"), "--random-state", "-1"]) == 2
    assert "argument --random-state: must be a non-negative integer, got -1" in \
        capsys.readouterr().err
    assert not no_start and not os.listdir(tmp_path)


@pytest.mark.parametrize("generator, option, value, message", [
    ("blobs", "--n-samples", "100000000000000", "more than the"),
    ("blobs", "--n-features", "100000000", "of memory available"),
    ("coclusters", "--n-samples", "100000000000", "of memory available"),
])
def test_make_data_refuses_sizes_that_cannot_fit_before_writing(no_start, capsys, tmp_path,
                                                                generator, option, value,
                                                                message):
    capsys.readouterr()
    assert cli.main(["make-data", generator, str(tmp_path / "o.zarr"), option, value]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"daskrnmf: error: make-data {generator}: ") and message in err
    assert err.count("\n") == 1 and option in err
    assert not no_start and not os.listdir(tmp_path)    # no output, no *.partial-*


@pytest.mark.parametrize("generator, argv, message", [
    ("faces", ["--n-samples", "300"], "faces is the ORL set of 400 images of 32 x 32 pixels"),
    ("faces", ["--n-features", "24"], "faces is the ORL set of 400 images of 32 x 32 pixels"),
    ("segments", ["--n-samples", "100"], "--n-samples must be a multiple of 8"),
])
def test_make_data_refuses_sizes_a_generator_cannot_honour(no_start, capsys, tmp_path,
                                                          generator, argv, message):
    capsys.readouterr()
    assert cli.main(["make-data", generator, str(tmp_path / "o.zarr"), *argv]) == 1
    assert message in capsys.readouterr().err
    assert not no_start and not os.listdir(tmp_path)


# ------------------------------------------------------------------ choose-k, up front
@pytest.mark.parametrize("targets, message", [
    (["--output", "{d}"], "--output {d} is a directory; give a file name"),
    (["--plot", "{d}"], "--plot {d} is a directory; give a file name"),
    (["--output", "{d}/no/such/table.md"], "the directory of --output {d}/no/such/table.md "
                                           "does not exist"),
    (["--plot", "{d}/k.xyz"], "--plot {d}/k.xyz: matplotlib cannot write '.xyz' files"),
    (["--output", "{d}/k.png", "--plot", "{d}/k.png"], "--output and --plot are the same file"),
])
def test_choose_k_checks_its_output_files_before_the_work(labels, no_start, capsys, tmp_path,
                                                          targets, message):
    argv = ["choose-k", "RFNMF", str(labels / "l.zarr" / "y"), "--ks", "2-3", "--overwrite",
            *[t.format(d=tmp_path) for t in targets]]
    capsys.readouterr()
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(d=tmp_path) in err
    assert not no_start and not os.listdir(tmp_path)


def test_choose_k_checks_its_arguments_before_a_cluster_starts(labels, no_start, capsys,
                                                               tmp_path):
    g = zarr.open_group(str(tmp_path / "x.zarr"), mode="w")
    g.create_array("X", shape=(6, 2), dtype="f8", chunks=(3, 2))[...] = 1.0
    base = ["choose-k", "RFNMF", str(tmp_path / "x.zarr" / "X")]
    for extra, message in [(["--ks", "2-3", "--random-state", "-1"],
                            "The 'random_state' parameter of choose_k must be an int in the "
                            "range [0, 4294967295]"),
                           (["--ks", "2-8"], "The largest k (8) must be <= n_samples=6.")]:
        capsys.readouterr()
        assert cli.main(base + extra) == 1
        assert message in capsys.readouterr().err
    assert not no_start


@pytest.mark.parametrize("model, extra, message", [
    # the command knows no model's parameters: the model says what it has and accepts
    ("RFNMTF", ["--loss", "l1"], "--loss is not a parameter of RFNMTF."),
    ("RFNMF", ["--n-column-clusters", "2"], "--n-column-clusters is not a parameter of RFNMF."),
    ("RFNMF", ["--loss", "l3"], "The 'loss' parameter of RFNMF must be a str among"),
])
def test_choose_k_model_options_are_the_models_own(labels, no_start, capsys, tmp_path, model,
                                                   extra, message):
    g = zarr.open_group(str(tmp_path / "x.zarr"), mode="w")
    g.create_array("X", shape=(6, 2), dtype="f8", chunks=(3, 2))[...] = 1.0
    capsys.readouterr()
    assert cli.main(["choose-k", model, str(tmp_path / "x.zarr" / "X"), "--ks", "2-3",
                     *extra]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not no_start


def test_a_table_or_figure_is_written_whole(tmp_path):
    """choose-k's files: a write that fails leaves the earlier file as it was and no
    temporary beside it."""
    from daskrnmf import _stores

    table = tmp_path / "k.md"
    table.write_text("earlier")

    def dies(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _stores.write_file_whole(table, dies)
    assert table.read_text() == "earlier" and os.listdir(tmp_path) == ["k.md"]
    seen = []

    def writes(tmp):
        seen.append(tmp)
        with open(tmp, "w") as fh:
            fh.write("new")

    _stores.write_file_whole(table, writes)
    assert table.read_text() == "new" and seen[0].endswith(".md")   # formats read from it
    assert os.listdir(tmp_path) == ["k.md"]


@pytest.mark.parametrize("config, message", [
    ({"cluster": "local", "n_workers": 1, "processes": False, "memory_limit": "lots"},
     "Could not interpret 'lots' as a byte unit"),
    ({"cluster": "slurm", "cores": 1, "memory": "1GiB", "coresx": 3},
     "Got unexpected keyword argument 'coresx'"),
])
def test_a_value_the_cluster_refuses_is_named_with_its_file(monkeypatch, tmp_path, config,
                                                            message):
    if config["cluster"] == "slurm":
        pytest.importorskip("dask_jobqueue")
        (tmp_path / "sbatch").write_text("#!/bin/sh\nexit 1\n")     # never run: refused first
        (tmp_path / "sbatch").chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=f"^cluster configuration {path}: {message}"):
        with connect(path):
            pass


def test_a_batch_job_the_batch_system_refuses_fails_at_once(monkeypatch, tmp_path):
    # an sbatch that is there but refuses the job: the error, not a wait for workers
    pytest.importorskip("dask_jobqueue")
    (tmp_path / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition "
                                     "specified: compute' >&2\nexit 1\n")
    (tmp_path / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({"cluster": "slurm", "cores": 1, "memory": "1GiB",
                                    "queue": "compute"}))
    with dask.config.set({"daskrnmf.worker-timeout": 60}):   # a bound, should it regress
        with pytest.raises(ValueError, match=f"^cluster configuration {path}: the batch system "
                                             "refused the workers' job: sbatch: error: invalid "
                                             "partition specified: compute"):
            with connect(path):
                pass
