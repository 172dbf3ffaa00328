"""The command's safety guarantees (issue 17, the CLI and cluster items): the input is
never written (1), ``make-data`` refuses impossible options (8), every location is
checked before a cluster starts and SIGTERM/SIGINT clean up with a documented exit code
(12), usage errors exit 2 and TLS / config errors say what to do (13).

Most cases never reach a cluster (``connect`` is replaced by one that records the call);
the signal cases run the command in a subprocess with an in-process cluster."""

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import yaml
import zarr

from daskrnmf import cli, cluster
from daskrnmf.cluster import connect, load_config, security_from

from .conftest import snapshot


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("safety")
    rng = np.random.default_rng(0)
    g = zarr.open_group(str(d / "d.zarr"), mode="w")
    X = np.abs(rng.normal(size=(3000, 4)))
    g.create_array("X", shape=X.shape, dtype=X.dtype, chunks=(500, 4))[...] = X
    y = rng.integers(0, 2, size=3000)
    g.create_array("y", shape=y.shape, dtype=y.dtype, chunks=(500,))[...] = y
    os.symlink(d / "d.zarr", d / "link.zarr")
    (d / "threads.yaml").write_text(yaml.safe_dump(
        {"cluster": "local", "n_workers": 1, "threads_per_worker": 1, "processes": False}))
    (d / "procs.yaml").write_text(yaml.safe_dump(
        {"cluster": "local", "n_workers": 1, "threads_per_worker": 1,
         "memory_limit": "1GiB"}))
    return d


# ------------------------------------------------------------------ item 1
@pytest.mark.parametrize("inp, output", [
    (["{d}/d.zarr/X"], "{d}/d.zarr"),                      # the store holding the input
    (["{d}/d.zarr/X"], "{d}/d.zarr/X"),                    # the input array itself
    (["{d}/d.zarr/X"], "{d}/d.zarr/results"),              # inside the input store
    (["{d}/d.zarr", "--component", "X"], "{d}/d.zarr"),    # store + component
    (["{d}/d.zarr/X"], "{d}/link.zarr"),                   # a symlink to the store
    (["{d}/link.zarr/X"], "{d}/d.zarr/X"),                 # input through the symlink
    (["{d}/d.zarr/X"], "{d}/sub/../d.zarr"),               # an alias of the path
    (["{d}/d.zarr/X"], "{d}"),                             # a directory around it
])
def test_the_input_is_never_written(data, no_cluster, capsys, inp, output):
    before = snapshot(data / "d.zarr")
    (data / "sub").mkdir(exist_ok=True)
    argv = ["fit", "RFNMF", *[a.format(d=data) for a in inp], "--output",
            output.format(d=data), "--overwrite", "--n-clusters", "2"]
    capsys.readouterr()
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "daskrnmf never writes its input" in err
    assert not no_cluster
    assert snapshot(data / "d.zarr") == before


def test_checkpoint_and_scratch_inside_the_input_are_refused(data, no_cluster, capsys):
    for extra, what in [(["--checkpoint", str(data / "d.zarr" / "ckpt")], "checkpoint"),
                        (["--scratch", str(data / "d.zarr")], "scratch directory")]:
        capsys.readouterr()
        assert cli.main(["fit", "ONMFO", str(data / "d.zarr" / "X"), "--output",
                         str(data / "o.zarr"), *extra]) == 1
        assert f"daskrnmf: error: {what}" in capsys.readouterr().err
    assert not no_cluster and not (data / "d.zarr" / "ckpt").exists()


# ------------------------------------------------------------------ item 8
@pytest.mark.parametrize("option, value", [
    ("--outlier-fraction", "2.5"), ("--outlier-fraction", "-0.1"),
    ("--outlier-fraction", "nan"), ("--n-samples", "0"), ("--n-features", "0"),
    ("--n-clusters", "0"), ("--chunk-rows", "0"), ("--rho", "1.5"), ("--n-samples", "ten"),
])
def test_make_data_refuses_impossible_options_with_exit_2(data, no_cluster, capsys,
                                                           option, value):
    out = data / "made.zarr"
    capsys.readouterr()
    assert cli.main(["make-data", "blobs", str(out), option, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and "Traceback" not in err
    assert not out.exists() and not no_cluster


# ------------------------------------------------------------------ item 12
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (unwritable even for root)")
@pytest.mark.parametrize("model, extra, message", [
    ("RFNMF", ["--output", "/proc/daskrnmf-out.zarr"],
     "the directory of output /proc is not writable"),
    ("ONMFO", ["--output", "{d}/o.zarr", "--checkpoint", "/proc/daskrnmf-ckpt"],
     "checkpoint directory /proc/daskrnmf-ckpt is not writable"),
    ("RFNMF", ["--output", "{d}/o.zarr", "--scratch", "/proc/daskrnmf-scratch"],
     "scratch directory /proc/daskrnmf-scratch is not writable"),
    ("RFNMF", ["--output", "{d}/threads.yaml/o.zarr"], "does not exist"),
])
def test_unwritable_locations_fail_before_a_cluster_starts(data, no_cluster, capsys, model,
                                                           extra, message):
    capsys.readouterr()
    assert cli.main(["fit", model, str(data / "d.zarr" / "X"),
                     *[a.format(d=data) for a in extra]]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not no_cluster


def test_an_earlier_checkpoint_is_replaced_only_with_overwrite(data, monkeypatch, capsys):
    ckpt = str(data / "earlier.ckpt")
    base = ["fit", "ONMFO", str(data / "d.zarr" / "X"), "--n-components", "2",
            "--max-inner-iter", "10", "--random-state", "0", "--checkpoint", ckpt,
            "--cluster", str(data / "threads.yaml")]
    assert cli.main([*base, "--output", str(data / "first.zarr")]) == 0
    calls = []
    monkeypatch.setattr(cluster, "connect", lambda *a, **k: calls.append(a))
    capsys.readouterr()
    assert cli.main([*base, "--output", str(data / "second.zarr")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds an earlier run's checkpoint" in err
    assert "--resume" in err and "--overwrite" in err and not calls
    monkeypatch.undo()
    assert cli.main([*base, "--output", str(data / "second.zarr"), "--overwrite"]) == 0
    assert (data / "second.zarr").exists()


def _start(data, tmp_path, config, model="RobustNMF"):
    """The command in its own session (as a batch job), fitting until stopped."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.zarr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daskrnmf", "fit", model, str(data / "d.zarr" / "X"),
         "--output", str(out), "--n-components", "2", "--max-iter", "1000000", "--tol", "0",
         "--progress", "--scratch", str(scratch), "--cluster", str(data / config)],
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    timer = threading.Timer(240, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:              # until the fit is well under way
            seen.append(line)
            if "iteration 3" in line:
                break
    finally:
        timer.cancel()
    assert proc.poll() is None, "".join(seen)
    assert glob.glob(str(scratch / "daskrnmf-state-*"))     # the run's scratch is there
    return proc, scratch, out


def _stop(proc, signum, group=False):
    tic = time.monotonic()
    os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
    try:
        rest = proc.stderr.read()
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return code, rest, time.monotonic() - tic


def test_sigterm_mid_fit_removes_scratch_and_partial_output_and_exits_143(data, tmp_path):
    proc, scratch, out = _start(data, tmp_path, "threads.yaml")
    code, rest, seconds = _stop(proc, signal.SIGTERM)
    assert code == 143, rest
    lines = [line for line in rest.splitlines() if "INFO" not in line
             and "Event loop was unresponsive" not in line]   # a loaded machine
    assert lines == ["daskrnmf: terminated (SIGTERM); partial output and scratch removed"]
    assert os.listdir(scratch) == []
    assert not out.exists() and not glob.glob(str(out) + ".partial-*")


def test_ctrl_c_to_the_process_group_is_one_line_and_exit_130(data, tmp_path):
    """Ctrl-C reaches every process of the group: worker processes too, which used to
    print a traceback each."""
    proc, scratch, out = _start(data, tmp_path, "procs.yaml")
    code, rest, seconds = _stop(proc, signal.SIGINT, group=True)
    assert code == 130, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    lines = [line for line in rest.splitlines() if "INFO" not in line
             and "Event loop was unresponsive" not in line]   # a loaded machine
    assert lines == ["daskrnmf: interrupted (SIGINT); partial output and scratch removed"]
    assert os.listdir(scratch) == [] and not glob.glob(str(out) + ".partial-*")


# ------------------------------------------------------------------ item 13
@pytest.mark.parametrize("argv, message", [
    (["fit", "KMeans", "{X}", "--output", "{out}"], "invalid choice: 'KMeans'"),
    (["fit", "RFNMF", "{X}", "--output", "{out}", "--n-clusterz", "2"],
     "unrecognized arguments: --n-clusterz"),
    (["fit", "RFNMF", "{X}", "--output", "{out}", "--max-iter", "2.5"],
     "argument --max-iter: expected an integer, got '2.5'"),
    (["fit", "RFNMF", "{X}", "--output", "{out}", "--callback", "print"],
     "unrecognized arguments: --callback"),
    (["fit", "MNMF", "{X}", "--output", "{out}"], "the following arguments are required: --labels"),
    (["fit", "RFNMF", "{X}", "--output", "{out}", "--labels", "{X}"],
     "unrecognized arguments: --labels"),
    (["fit", "ONMFO", "{X}", "--output", "{out}", "--resume"], "give --checkpoint DIR"),
    (["fit", "RFNMF", "{X}"], "the following arguments are required: --output"),
    (["evaluate", "{X}"], "the following arguments are required: true"),
    (["fit", "RFNMF", "{X}", "--output", "{out}", "--tls-ca-file", "ca.pem"],
     "--tls-* options go with --scheduler-address"),
])
def test_usage_errors_exit_2(data, no_cluster, capsys, argv, message):
    # (--resume for a model the registry does not mark resumable: every registered model
    # is resumable now; tests/test_cli_resume.py registers one that is not)
    names = {"X": str(data / "d.zarr" / "X"), "out": str(data / "u.zarr")}
    capsys.readouterr()
    assert cli.main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not no_cluster and not (data / "u.zarr").exists()


def test_model_names_are_case_insensitive_and_failures_exit_1(data, capsys):
    capsys.readouterr()
    assert cli.main(["fit", "rfnmf", str(data / "d.zarr" / "X"), "--output",
                     str(data / "o.zarr"), "--max-iter", "-3"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("daskrnmf: error: ") and "max_iter" in err


def test_tls_address_without_certificates_says_what_to_pass(data, capsys):
    y = str(data / "d.zarr" / "y")
    capsys.readouterr()
    assert cli.main(["evaluate", y, y, "--scheduler-address", "tls://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ssl_context" not in err
    for what in ("--tls-ca-file", "--tls-client-cert", "--tls-client-key", "tls_ca_file",
                 "cluster_configs/tls.yaml"):
        assert what in err


def test_certificate_paths_in_a_yaml_are_relative_to_the_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    for name in ("ca.pem", "client.pem", "client.key"):
        (conf / name).write_text("")
    (conf / "tls.yaml").write_text(
        "cluster: address\naddress: tls://127.0.0.1:1\ntls_ca_file: ca.pem\n"
        "tls_client_cert: client.pem\ntls_client_key: client.key\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config("../conf/tls.yaml")
    assert config["tls_ca_file"] == str(conf / "ca.pem")
    assert config["tls_client_cert"] == str(conf / "client.pem")
    assert config["tls_client_key"] == str(conf / "client.key")
    pytest.importorskip("cryptography")
    from distributed.security import Security

    sec = Security.temporary()
    for key, name in (("tls_ca_file", "ca.pem"), ("tls_client_cert", "client.pem"),
                      ("tls_client_key", "client.key")):
        (conf / name).write_text(getattr(sec, key))
    assert security_from(config).tls_ca_file == str(conf / "ca.pem")


def test_tls_flags_reach_the_connection(monkeypatch, tmp_path):
    seen = {}

    class Client:
        def __init__(self, address, security=None, timeout=None):
            seen.update(address=address, security=security)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait_for_workers(self, n_workers, timeout=None):   # connect waits for one
            pass

    import distributed

    monkeypatch.setattr(distributed, "Client", Client)
    pytest.importorskip("cryptography")
    from distributed.security import Security

    sec = Security.temporary()
    files = {}
    for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        files[key] = str(tmp_path / f"{key}.pem")
        (tmp_path / f"{key}.pem").write_text(getattr(sec, key))
    with connect(scheduler_address="tls://127.0.0.1:1", tls=files):
        pass
    assert seen["address"] == "tls://127.0.0.1:1"
    assert seen["security"].tls_client_cert == files["tls_client_cert"]
    with pytest.raises(ValueError, match="go with a scheduler address"):
        with connect(tls=files):
            pass


def test_a_coroutine_left_unawaited_by_a_signal_does_not_follow_the_last_line(monkeypatch,
                                                                            capsys):
    # SIGTERM in the middle of a store call (zarr's asynchronous API): the coroutine it
    # had made was never awaited, and its RuntimeWarning was printed after "terminated
    # (SIGTERM)" when the interrupt's frames were freed; the job log's last line must be
    # the termination's, with no warning about the interrupted work
    import warnings

    from daskrnmf import cli
    from daskrnmf.cli import _run

    async def open_group():
        return None

    def interrupted(args, parser):
        _pending = open_group()                 # made, never awaited
        _run_signals[0].received = signal.SIGTERM
        raise KeyboardInterrupt                 # its frame holds the coroutine

    _run_signals = []
    real = _run.Signals

    class Recorded(real):
        def __enter__(self):
            _run_signals.append(self)
            return super().__enter__()

    monkeypatch.setattr(cli, "Signals", Recorded)
    monkeypatch.setattr("daskrnmf.cli._data.cmd_info", interrupted)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["info", "anything.zarr"]) == 143
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["daskrnmf: terminated (SIGTERM); partial output and scratch removed"]
