"""The ``daskrnmf`` command end to end: real stores, a real scheduler and workers started
from a scheduler file, jobqueue job scripts, and one-line errors with non-zero exits."""

import json
import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import yaml
import zarr

import daskrnmf
from daskrnmf import RFNMF, cli
from daskrnmf.cli._params import parse_parameters_section
from daskrnmf.cluster import connect, load_config, make_cluster
from daskrnmf.metrics import clustering_accuracy

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "cluster_configs")


ADDRESS = {}


@pytest.fixture(scope="module")
def cluster():
    """One in-process cluster for the module: every command connects to it by address
    (the CLI's own code paths, without a cluster start per command)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://",
                      dashboard_address=":0") as c:   # tcp: subprocesses connect too
        yield c


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, cluster):
    d = tmp_path_factory.mktemp("cli")
    ADDRESS[d] = cluster.scheduler_address
    # for the commands run as subprocesses: an in-process cluster of their own
    (d / "threads.yaml").write_text(yaml.safe_dump(
        {"cluster": "local", "n_workers": 1, "threads_per_worker": 2, "processes": False}))
    assert cli.main(["make-data", "blobs", str(d / "b.zarr"), "--n-samples", "6000",
                     "--n-features", "6", "--n-clusters", "3", "--chunk-rows", "1000",
                     "--scheduler-address", cluster.scheduler_address]) == 0
    return d


def run(workdir, *argv):
    return cli.main([*argv, "--scheduler-address", ADDRESS[workdir]]
                    if argv[0] in ("fit", "evaluate", "make-data") else list(argv))


def test_fit_writes_a_complete_store_and_evaluate_reads_it(workdir, capsys):
    out = workdir / "rfnmf.zarr"
    assert run(workdir, "fit", "RFNMF", str(workdir / "b.zarr"), "--component", "X",
               "--output", str(out), "--n-clusters", "3", "--n-init", "2",
               "--random-state", "0") == 0
    g = zarr.open_group(str(out), mode="r")
    labels = g["labels"]
    assert labels.shape == (6000,) and g["cluster_centers"].shape == (3, 6)
    attrs = dict(g.attrs)
    assert attrs["model"] == "RFNMF" and attrs["params"]["n_clusters"] == 3
    assert attrs["scalars"]["n_iter_"] >= 1 and "dask" in attrs["versions"]
    assert attrs["fit_seconds"] > 0 and len(g["objective_history"][:]) == attrs["scalars"]["n_iter_"]
    # the same fit in Python gives the same labels
    m = RFNMF(3, n_init=2, random_state=0).fit(str(workdir / "b.zarr" / "X"))
    np.testing.assert_array_equal(labels[:], np.asarray(m.labels_))
    assert not [p for p in os.listdir(workdir) if ".partial-" in p]
    capsys.readouterr()
    assert run(workdir, "evaluate", str(out / "labels"), str(workdir / "b.zarr" / "y"),
               "--json") == 0
    scores = json.loads(capsys.readouterr().out)
    acc = clustering_accuracy(da.from_zarr(str(workdir / "b.zarr" / "y")), labels[:])
    assert scores["ACC"] == pytest.approx(acc) and scores["n_samples"] == 6000
    assert run(workdir, "info", str(out)) == 0
    assert "labels: shape (6000,)" in capsys.readouterr().out


def test_factorizations_write_h_and_outliers_r(workdir):
    out = workdir / "onmfo.zarr"
    assert run(workdir, "fit", "onmfo", str(workdir / "b.zarr" / "X"), "--output", str(out),
               "--n-components", "3", "--max-inner-iter", "20", "--random-state", "1",
               "--max-iter", "2") == 0
    g = zarr.open_group(str(out), mode="r")
    assert g["H"].shape == (6000, 3) and g["R"].shape == (6000, 6)
    assert g["components"].shape == (3, 6) and 1 <= g.attrs["scalars"]["n_passes_"] <= 2
    ckpt = workdir / "onmfo.ckpt"
    again = workdir / "onmfo2.zarr"
    assert run(workdir, "fit", "ONMFO", str(workdir / "b.zarr" / "X"), "--output", str(again),
               "--n-components", "3", "--max-inner-iter", "20", "--random-state", "1",
               "--checkpoint", str(ckpt)) == 0
    resumed = workdir / "onmfo3.zarr"          # a finished checkpoint resumes to its end
    assert run(workdir, "fit", "ONMFO", str(workdir / "b.zarr" / "X"), "--output", str(resumed),
               "--n-components", "3", "--max-inner-iter", "20", "--random-state", "1",
               "--checkpoint", str(ckpt), "--resume") == 0
    np.testing.assert_array_equal(zarr.open_group(str(resumed), mode="r")["components"][:],
                                  zarr.open_group(str(again), mode="r")["components"][:])
    out = workdir / "nmf.zarr"
    assert run(workdir, "fit", "NMF", str(workdir / "b.zarr" / "X"), "--output", str(out),
               "--n-components", "3", "--max-iter", "5") == 0
    assert zarr.open_group(str(out), mode="r")["H"].shape == (6000, 3)


def test_existing_output_is_kept_unless_overwrite(workdir, capsys):
    out = workdir / "keep.zarr"
    args = ["fit", "RFNMF", str(workdir / "b.zarr" / "X"), "--output", str(out),
            "--n-clusters", "2", "--n-init", "1", "--max-iter", "2"]
    assert run(workdir, *args) == 0
    before = zarr.open_group(str(out), mode="r").attrs["fit_seconds"]
    capsys.readouterr()
    assert run(workdir, *args) == 1
    assert capsys.readouterr().err.strip() == \
        f"daskrnmf: error: output {out} exists; pass --overwrite to replace it."
    assert zarr.open_group(str(out), mode="r").attrs["fit_seconds"] == before
    assert run(workdir, *args, "--overwrite") == 0
    assert zarr.open_group(str(out), mode="r").attrs["fit_seconds"] != before


def test_a_failed_write_leaves_no_output(workdir, monkeypatch):
    def dying(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(da, "store", dying)
    out = workdir / "dead.zarr"
    assert run(workdir, "fit", "RFNMF", str(workdir / "b.zarr" / "X"), "--output", str(out),
               "--n-clusters", "2", "--n-init", "1", "--max-iter", "2") == 1
    assert not out.exists() and not [p for p in os.listdir(workdir) if ".partial-" in p]


@pytest.fixture(scope="module")
def bad_stores(workdir):
    paths = {}
    for name, arr in {"one_d": np.arange(10.0), "nan": np.where(np.eye(20) > 0, np.nan, 1.0),
                      "negative": -np.ones((20, 3))}.items():
        z = zarr.create_array(str(workdir / f"{name}.zarr"), shape=arr.shape, dtype=arr.dtype,
                              chunks=arr.shape)
        z[...] = arr
        paths[name] = str(workdir / f"{name}.zarr")
    paths["corrupt"] = str(workdir / "corrupt.zarr")     # a chunk zstd cannot decode
    zarr.create_array(paths["corrupt"], shape=(40, 3), dtype="f8", chunks=(20, 3))[...] = 1.0
    with open(os.path.join(paths["corrupt"], "c", "1", "0"), "r+b") as fh:
        fh.write(b"\xff" * 8)
    return paths


@pytest.mark.parametrize("argv, message", [
    (["fit", "RFNMF", "{missing}", "--output", "{out}"], "input {missing} does not exist."),
    (["fit", "RFNMF", "{one_d}", "--output", "{out}"], "must be 2-D (n_samples, n_features)"),
    (["fit", "RFNMF", "{nan}", "--output", "{out}", "--n-clusters", "2"], "NaN or infinite"),
    (["fit", "NMF", "{negative}", "--output", "{out}", "--n-components", "2"],
     "Negative values in data passed to"),
    (["fit", "ONMFO", "{negative}", "--output", "{out}", "--n-components", "2"],
     "Negative values in data passed to"),
    (["fit", "RFNMF", "{nan}", "--output", "{out}", "--max-iter", "-3"],
     "The 'max_iter' parameter of RFNMF must be an int in the range [1, inf). Got -3 instead."),
    (["info", "{missing}"], "store {missing} does not exist."),
    # read on a worker, reported by the client
    (["fit", "RFNMF", "{corrupt}", "--output", "{out}", "--n-clusters", "2"],
     "Cannot read the chunk c/1/0 of the Zarr array {corrupt} (rows 20..39)"),
])
def test_bad_input_is_one_line_and_exit_1(workdir, bad_stores, capsys, argv, message):
    names = {**bad_stores, "missing": str(workdir / "nowhere.zarr"), "out": str(workdir / "x.zarr")}
    argv = [a.format(**names) for a in argv]
    capsys.readouterr()
    assert run(workdir, *argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("daskrnmf: error: ")
    assert message.format(**names) in err
    assert not (workdir / "x.zarr").exists()


def _run_together(*argvs, timeout=300):
    """Run the commands ``argvs`` side by side (each a Python starting and importing: the
    second core works while the first does) and return their ``(returncode, stderr)``."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in argvs]
    try:
        out = []
        for p in procs:
            err = p.communicate(timeout=timeout)[1]
            out.append((p.returncode, err))
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_python_dash_m_reports_usage_errors_with_exit_2_and_no_traceback(workdir, bad_stores):
    (code, err), (code2, err2) = _run_together(
        [sys.executable, "-m", "daskrnmf", "fit", "RFNMF"],
        [sys.executable, "-m", "daskrnmf", "fit", "NMF", bad_stores["negative"],
         "--output", str(workdir / "y.zarr"), "--n-components", "2",
         "--scheduler-address", ADDRESS[workdir]])
    assert code == 2 and "required" in err and "Traceback" not in err
    assert code2 == 1 and "Traceback" not in err2
    assert err2.strip().startswith("daskrnmf: error: Negative values")


def test_fit_against_a_real_scheduler_and_workers_from_a_scheduler_file(workdir, tmp_path):
    sfile = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                               "--scheduler-file", str(sfile), "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", ":0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        for _ in range(2):      # without nannies: one process a worker, not two
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                 str(sfile), "--nthreads", "1", "--memory-limit", "1GiB", "--no-dashboard",
                 "--no-nanny"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        with connect(scheduler_file=str(sfile)) as client:
            client.wait_for_workers(2, timeout=60)
        out = tmp_path / "out.zarr"
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "daskrnmf", "fit", "RFNMF", str(workdir / "b.zarr" / "X"),
             "--output", str(out), "--scheduler-file", str(sfile), "--n-clusters", "3",
             "--n-init", "2", "--random-state", "0", "--loss", "l1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        # the cluster does not change the result: the same fit in this process (while the
        # command starts)
        here = RFNMF(3, n_init=2, random_state=0, loss="l1").fit(str(workdir / "b.zarr" / "X"))
        err = procs[-1].communicate(timeout=300)[1]
        assert procs[-1].returncode == 0, err
        labels = zarr.open_group(str(out), mode="r")["labels"][:]
        np.testing.assert_array_equal(labels, np.asarray(here.labels_))
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.parametrize("kind, directive", [("slurm", "#SBATCH"), ("pbs", "#PBS")])
def test_jobqueue_configs_build_the_expected_job_script(kind, directive):
    pytest.importorskip("dask_jobqueue")
    config = load_config(os.path.join(CONFIGS, f"{kind}.yaml"))
    with make_cluster(config) as cluster:   # nothing is submitted
        script = cluster.job_script()
    assert directive in script
    assert "02:00:00" in script                                   # walltime
    assert "distributed.cli.dask_worker" in script or "dask worker" in script
    assert "--nthreads 2" in script and "--nworkers 4" in script  # 8 cores, 4 processes
    assert "--memory-limit 8.00GiB" in script                     # 32 GiB / 4 processes
    if kind == "slurm":
        assert "#SBATCH -p compute" in script and "#SBATCH --exclusive" in script
    else:
        assert "#PBS -q workq" in script and "select=1:ncpus=8:mem=32GB" in script



def test_a_jobqueue_clusters_dashboard_takes_a_free_port_unless_one_is_asked_for():
    """dask-jobqueue's scheduler would take 8787 ("Port 8787 is already in use" where
    another scheduler has it); one the configuration names is kept."""
    import socket

    pytest.importorskip("dask_jobqueue")
    config = load_config(os.path.join(CONFIGS, "slurm.yaml"))
    with make_cluster(config) as cluster:   # nothing is submitted
        assert cluster.scheduler_spec["options"]["dashboard_address"] == ":0"
        assert cluster.dashboard_link and ":8787/" not in cluster.dashboard_link
    with socket.socket() as sock:           # a port free now
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    config["scheduler_options"] = {"dashboard_address": f":{port}"}
    with make_cluster(config) as cluster:
        assert cluster.scheduler_spec["options"]["dashboard_address"] == f":{port}"

def test_cluster_configs_are_valid(tmp_path):
    for name in os.listdir(CONFIGS):
        config = load_config(os.path.join(CONFIGS, name))
        assert config["cluster"] in ("local", "slurm", "pbs", "scheduler-file", "address")
    (tmp_path / "bad.yaml").write_text("cluster: moon\n")
    with pytest.raises(ValueError, match=r"'cluster' must be one of"):
        with connect(str(tmp_path / "bad.yaml")):
            pass
    with pytest.raises(ValueError, match="does not exist"):
        with connect({"cluster": "scheduler-file", "scheduler_file": str(tmp_path / "no"),
                      "wait": 0}):
            pass
    with pytest.raises(ValueError, match="TLS needs all of"):
        with connect({"cluster": "address", "address": "tls://127.0.0.1:1",
                      "tls_ca_file": "ca.pem"}):
            pass


def test_tls_cluster_serves_a_client_with_credentials_and_refuses_one_without(tmp_path):
    """Certificates made in the test (distributed's temporary security); the client
    connects through daskrnmf.cluster.connect from files, as tls.yaml describes."""
    pytest.importorskip("cryptography")
    from distributed import LocalCluster
    from distributed.security import Security

    sec = Security.temporary()
    files = {}
    for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        files[key] = str(tmp_path / f"{key}.pem")
        with open(files[key], "w") as fh:
            fh.write(getattr(sec, key))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tls://",
                      security=sec, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        with connect({"cluster": "address", "address": address, **files}) as client:
            X = np.abs(np.random.default_rng(0).normal(size=(400, 5)))
            m = RFNMF(3, n_init=1, random_state=0).fit(da.from_array(X, chunks=(100, -1)))
            assert client.run(lambda: 1) and m.labels_.shape == (400,)
        # the handshake alone (a full Client that fails to connect trips over distributed's
        # own event-loop bookkeeping now and then)
        import asyncio

        from distributed.comm import connect as comm_connect

        def handshake(addr, security):
            async def attempt():
                kwargs = security.get_connection_args("client") if security else {}
                comm = await comm_connect(addr, timeout=3, **kwargs)
                await comm.close()
            asyncio.run(attempt())

        handshake(address, sec)                               # the credentials work
        with pytest.raises(TypeError, match="TLS expects"):   # no credentials at all
            handshake(address, None)
        with pytest.raises(OSError):                          # plain TCP: handshake fails
            handshake(address.replace("tls://", "tcp://"), None)
        with pytest.raises(OSError):                          # a certificate of another CA
            handshake(address, Security.temporary())


def test_progress_logs_one_line_per_iteration_in_a_batch_log(workdir):
    fit = [sys.executable, "-m", "daskrnmf", "fit", "NMF", str(workdir / "b.zarr" / "X"),
           "--n-components", "2", "--max-iter", "3", "--scheduler-address", ADDRESS[workdir]]
    (code, err), (quiet_code, quiet) = _run_together(
        fit + ["--output", str(workdir / "p.zarr"), "--progress"],
        fit + ["--output", str(workdir / "q.zarr")])
    assert code == 0, err
    lines = [l for l in err.splitlines() if "daskrnmf INFO NMF: iteration" in l]
    assert len(lines) == 3 and "objective" in lines[-1] and "\r" not in err
    assert quiet_code == 0 and "NMF: iteration" not in quiet
    # warnings are one line each, as errors are
    assert "daskrnmf: warning: NMF did not converge within max_iter=3" in quiet
    assert "data_to_wrap" not in quiet


@pytest.mark.parametrize("generator, sizes, arrays", [
    ("coclusters", ["--n-samples", "300", "--n-features", "24"],
     {"X": (300, 24), "y": (300,), "column_labels": (24,)}),
    ("segments", ["--n-samples", "80", "--n-features", "24"], {"X": (80, 24), "y": (80,)}),
    ("faces", [], {"X": (400, 1024), "y": (400,), "clean": (400, 1024),
                   "outlier": (400, 1024)}),
])
def test_make_data_writes_each_generator(workdir, generator, sizes, arrays):
    out = workdir / f"{generator}.zarr"
    assert run(workdir, "make-data", generator, str(out), *sizes, "--chunk-rows", "100",
               "--rho", "0.2") == 0
    g = zarr.open_group(str(out), mode="r")
    assert {name: a.shape for name, a in g.arrays()} == arrays
    assert g.attrs["generator"] == generator
    if generator == "faces":
        mask = g["outlier"][:]
        assert abs(mask.mean() - 0.2) < 0.01 and g["X"][:].max() <= 50.0


def test_fit_help_lists_each_models_parameters_from_its_signature_and_docstring(capsys):
    from daskrnmf.models import REGISTRY

    for name, spec in REGISTRY.items():
        capsys.readouterr()
        assert cli.main(["fit", name.lower(), "--help"]) == 0     # case-insensitive
        out = " ".join(capsys.readouterr().out.split())
        assert f"parameters of {name}" in out and "--callback" not in out
        for param, value in spec.cls().get_params(deep=False).items():
            if param != "callback" and not isinstance(value, np.ndarray):
                flag = "--" + param.replace("_", "-")
                assert flag in out, (name, flag)
        assert ("--labels" in out) == spec.needs_y and ("--resume" in out) == spec.resumable
        assert ("--checkpoint DIR" in out) == spec.resumable
    capsys.readouterr()
    assert cli.main(["fit", "RFNMF", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--n-clusters INT Number of clusters" in out and "(default: 8)" in out
    assert "--loss {l21,l1,l2}" in out and "(default: 'l21')" in out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"daskrnmf {daskrnmf.__version__}"
    assert cli.main(["make-data", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 100000)" in out and "(default: 0.05)" in out


def test_numpydoc_parameters_parser():
    doc = """Summary.

    Parameters
    ----------
    a, b : int, default=1
        First line
        second line with ``code`` and :func:`numpy.median`.
    c : {"x", "y"}
    callback : callable, optional

    Attributes
    ----------
    d_ : int
        Not a parameter.
    """
    parsed = parse_parameters_section(doc)
    assert parsed == {"a": ("int, default=1", "First line second line with code and numpy.median."),
                      "b": ("int, default=1", "First line second line with code and numpy.median."),
                      "c": ('{"x", "y"}', ""), "callback": ("callable, optional", "")}


def test_outputs_are_chunked_like_the_stored_rows_and_in_the_input_float_dtype(workdir):
    X = zarr.open_array(str(workdir / "b.zarr" / "X"), mode="r")[:]
    f32 = zarr.create_array(str(workdir / "f32.zarr"), shape=X.shape, dtype="float32",
                            chunks=(700, X.shape[1]))
    f32[...] = X.astype(np.float32)
    out = workdir / "f32-nmf.zarr"
    assert run(workdir, "fit", "NMF", str(workdir / "f32.zarr"), "--output", str(out),
               "--n-components", "3", "--max-iter", "3") == 0
    g = zarr.open_group(str(out), mode="r")
    assert g["H"].shape == (6000, 3) and g["H"].chunks == (700, 3)
    assert g["H"].dtype == np.float32
    assert g["components"].dtype == np.float32
    assert daskrnmf.load(out).components_.dtype == np.float32     # the saved model too
    out = workdir / "f32-rfnmf.zarr"
    assert run(workdir, "fit", "RFNMF", str(workdir / "f32.zarr"), "--output", str(out),
               "--n-clusters", "3", "--n-init", "1", "--max-iter", "3") == 0
    g = zarr.open_group(str(out), mode="r")
    assert g["labels"].chunks == (700,) and g["labels"].dtype.kind == "i"
    assert g["cluster_centers"].dtype == np.float32
    out = workdir / "f32-robust.zarr"
    assert run(workdir, "fit", "RobustNMF", str(workdir / "f32.zarr"), "--output", str(out),
               "--n-components", "2", "--max-iter", "2", "--max-inner-iter", "5") == 0
    g = zarr.open_group(str(out), mode="r")
    assert g["H"].chunks == (700, 2) and g["R"].chunks == (700, 6)
    assert g["H"].dtype == g["R"].dtype == np.float32


def test_dask_log_level_drops_dasks_info_records():
    """The CLI's level for Dask's loggers (unless --debug): INFO records such as the
    dashboard's jupyter-server-proxy hint are dropped, warnings kept; restored after."""
    import logging

    from daskrnmf.cluster import dask_log_level

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, parent = Keep(), logging.getLogger("distributed")
    parent.addHandler(handler)
    hint = logging.getLogger("distributed.http.proxy")
    before = parent.level
    try:
        with dask_log_level(logging.WARNING):
            hint.info("To route to workers diagnostics web server please install "
                      "jupyter-server-proxy")
            hint.warning("kept")
        assert records == ["kept"]
        assert parent.level == before
    finally:
        parent.removeHandler(handler)


def test_progress_on_a_local_cluster_shows_the_models_lines_only(workdir):
    """--progress on a LocalCluster of worker processes (the default of a batch job): the
    model's lines, ending on what the model stores; none of Dask's own logging (no
    dashboard hints, no CommClosedError tracebacks as the cluster shuts down)."""
    config = workdir / "processes.yaml"
    config.write_text(yaml.safe_dump({"cluster": "local", "n_workers": 2,
                                      "threads_per_worker": 1, "processes": True}))
    out = workdir / "progress-local.zarr"
    proc = subprocess.run(
        [sys.executable, "-m", "daskrnmf", "fit", "RFNMF", str(workdir / "b.zarr" / "X"),
         "--output", str(out), "--n-clusters", "3", "--n-init", "3", "--max-iter", "20",
         "--random-state", "1", "--progress", "--cluster", str(config)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert not [l for l in lines if "distributed." in l or "jupyter-server-proxy" in l], lines
    progress = [l.split("daskrnmf INFO RFNMF: ", 1)[1] for l in lines
                if "daskrnmf INFO RFNMF: " in l]
    assert progress and len(progress) == len(lines), lines
    # every pass from the first, then the iterations, then what the model stores
    assert progress[0].startswith("pass 1 (feature stats"), progress
    scalars = zarr.open_group(str(out), mode="r").attrs["scalars"]
    assert progress[-1].startswith(f"fitted: {scalars['n_iter_']} iterations, objective "
                                   f"{scalars['objective_']:.6g}, {scalars['n_passes_']} "
                                   "passes over X, "), (progress[-1], scalars)


def test_the_output_store_loads_as_the_fitted_model(workdir):
    out = workdir / "reload.zarr"
    assert run(workdir, "fit", "RFNMF", str(workdir / "b.zarr"), "--component", "X",
               "--output", str(out), "--n-clusters", "3", "--n-init", "2",
               "--random-state", "0") == 0
    X = zarr.open_array(str(workdir / "b.zarr" / "X"), mode="r")[:]
    labels = zarr.open_group(str(out), mode="r")["labels"][:]
    for path in (out, out / "model"):
        model = daskrnmf.load(path)
        assert isinstance(model, RFNMF) and model.n_clusters == 3
        np.testing.assert_array_equal(model.predict(X), labels)
        np.testing.assert_array_equal(model.labels_, labels)
