"""Issue 40, "hostile use, round two": no wait without end, and no deep error where a clear
one-line message can be given before any work.

Most cases never start a cluster (configurations and arguments are refused first); the
wait for workers uses one in-process scheduler without workers."""

import json
import os

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
