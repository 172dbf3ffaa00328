"""The example job scripts and the quickstart, run for real with stand-ins for the batch
system: ``srun``, ``pbsdsh`` and (in the environment the scripts activate) ``dask``
and ``daskrnmf`` are tiny scripts that log their arguments, so no cluster is
started (tests/test_slurm.py runs the SLURM script on a real SLURM)."""

import os
import shlex
import shutil
import stat
import subprocess

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def batch(tmp_path):
    """A fake environment (bin/activate puts its bin/ first on PATH and marks itself),
    with logging ``dask`` and ``daskrnmf`` in it, and stand-ins for the batch system on
    a PATH that has no ``dask`` or ``daskrnmf`` of its own."""
    log = tmp_path / "commands.log"
    env_dir = tmp_path / "env with space"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "activate").write_text(
        f"export FAKE_ENV_ACTIVE={shlex.quote(str(env_dir))}\n"
        f"export PATH={shlex.quote(str(env_dir / 'bin'))}:\"$PATH\"\n")
    # every logged line: the program, whether the environment was active, its arguments
    logger = f'printf "%s|%s|%s\\n" "$(basename "$0")" "${{FAKE_ENV_ACTIVE:-none}}" "$*" >> {shlex.quote(str(log))}\n'
    _script(env_dir / "bin" / "dask", logger)
    # the fit waits (as the real one waits for the scheduler file) until the workers
    # started in the background have logged, so the log is complete when the job ends
    _script(env_dir / "bin" / "daskrnmf", logger + (
        f'n=0; while [ "$(grep -c "^dask|.*|worker" {shlex.quote(str(log))})" -lt '
        '"${EXPECT_WORKERS:-1}" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done\n'))
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    # srun runs its command in this environment (SLURM's default --export=ALL)
    _script(stubs / "srun", logger + 'while [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
    # pbsdsh runs its command as a task of the job, in a fresh environment
    _script(stubs / "pbsdsh", logger + 'while [ "$1" != "--" ]; do shift; done; shift\n'
                                       'exec env -i HOME="$HOME" PATH=/usr/bin:/bin "$@"\n')
    path = f"{stubs}:/usr/bin:/bin"
    env = {"PATH": path, "HOME": str(tmp_path), "DASKRNMF_ENV": str(env_dir)}
    return tmp_path, log, env


def _run(script, env, args=(), cwd=None):
    return subprocess.run([BASH, os.path.join(EXAMPLES, script), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def _lines(log):
    return [line.split("|", 2) for line in log.read_text().splitlines()]


def test_slurm_job_activates_the_environment_and_runs_scheduler_workers_and_fit(batch):
    tmp, log, env = batch
    env.update({"SLURM_NTASKS": "16", "SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_ID": "42",
                "SLURM_SUBMIT_DIR": str(tmp), "SLURM_NTASKS_PER_NODE": "4",
                "SLURM_MEM_PER_NODE": "32768", "TMPDIR": str(tmp)})
    proc = _run("slurm_job.sh", env, ["RFNMF", "/shared/data.zarr/X", "/shared/out.zarr",
                                      "--n-clusters", "10", "--loss", "l1"])
    assert proc.returncode == 0, proc.stderr
    lines = _lines(log)
    envs = {program: active for program, active, _ in lines}
    assert envs == {"dask": env["DASKRNMF_ENV"], "srun": env["DASKRNMF_ENV"],
                    "daskrnmf": env["DASKRNMF_ENV"]}
    commands = sorted(f"{program} {args}" for program, _, args in lines
                      if not args.startswith("shutdown"))
    scheduler_file = f"{tmp}/scheduler-42.json"
    scratch = f"{tmp}/daskrnmf-job-42"
    worker = (f"dask worker --scheduler-file {scheduler_file} --nthreads 2 --memory-limit "
              f"6963MiB --local-directory {scratch}")             # 85 % of 32 GiB / 4 tasks
    assert commands == sorted([
        f"dask scheduler --scheduler-file {scheduler_file} --port 0 --dashboard-address :0",
        f"srun --ntasks=16 --kill-on-bad-exit=0 {worker}",
        worker,
        f"daskrnmf fit RFNMF /shared/data.zarr/X --output /shared/out.zarr --scheduler-file "
        f"{scheduler_file} --progress --n-clusters 10 --loss l1",
    ])
    shutdown = [args for program, _, args in lines if args.startswith("shutdown")]
    assert shutdown == [f"shutdown --scheduler-file {scheduler_file}"]   # in order, last
    assert "INFO" not in proc.stderr


def test_slurm_job_without_the_environment_stops_with_one_line(batch):
    tmp, log, env = batch
    env.update({"SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "1",
                "DASKRNMF_ENV": str(tmp / "missing")})
    proc = _run("slurm_job.sh", env, ["RFNMF", "in", "out"])
    assert proc.returncode == 1 and "no environment at" in proc.stderr
    assert not log.exists()


@pytest.mark.parametrize("resubmitted", [False, True])
def test_pbs_job_activates_the_environment_on_every_node(batch, resubmitted):
    tmp, log, env = batch
    nodes = tmp / "nodefile"
    nodes.write_text("node-a\nnode-a\nnode-b\n")
    work = tmp / "work dir"
    work.mkdir()
    output = f"{work}/onmfo.zarr"
    if resubmitted:          # the killed predecessor's checkpoint
        (work / "onmfo.zarr.ckpt").mkdir()
        (work / "onmfo.zarr.ckpt" / ".daskrnmf-checkpoint").write_text("")
    env.update({"PBS_NODEFILE": str(nodes), "PBS_JOBID": "7.server", "PBS_O_WORKDIR": str(work),
                "INPUT": "/shared/data.zarr/X", "OUTPUT": output, "EXPECT_WORKERS": "2",
                "TMPDIR": str(tmp)})
    proc = _run("pbs_job.sh", env)
    assert proc.returncode == 0, proc.stderr
    lines = _lines(log)
    scheduler_file = f"{work}/scheduler-7.server.json"
    # one pbsdsh task per node (its first line), each starting workers in the activated
    # environment, although pbsdsh itself gave the command a fresh environment
    tasks = [args for program, _, args in lines if program == "pbsdsh"]
    assert sorted(a.split(" -- ")[0] for a in tasks) == ["-n 0", "-n 2"]
    workers = [(active, args) for program, active, args in lines
               if program == "dask" and args.startswith("worker")]
    scratch = f"{tmp}/daskrnmf-job-7.server"
    assert workers == [(env["DASKRNMF_ENV"], f"worker --scheduler-file {scheduler_file} "
                        "--nworkers 4 --nthreads 2 --memory-limit 6963MiB --local-directory "
                        f"{scratch}")] * 2
    assert [(a, args) for p, a, args in lines if p == "dask" and args.startswith("scheduler")] \
        == [(env["DASKRNMF_ENV"], f"scheduler --scheduler-file {scheduler_file} "
             "--port 0 --dashboard-address :0")]
    (fit,) = [(a, args) for p, a, args in lines if p == "daskrnmf" and args.startswith("fit")]
    assert fit == (env["DASKRNMF_ENV"], f"fit ONMFO /shared/data.zarr/X --output {output} "
                   f"--scheduler-file {scheduler_file} --n-components 49 --max-iter 2 "
                   f"--random-state 0 --checkpoint {output}.ckpt --progress"
                   + (" --resume" if resubmitted else ""))
    assert [args for p, _, args in lines if args.startswith("shutdown")] == \
        [f"shutdown --scheduler-file {scheduler_file}"]


def test_the_scripts_name_their_environment_variable():
    for name in ("slurm_job.sh", "pbs_job.sh"):
        with open(os.path.join(EXAMPLES, name)) as fh:
            text = fh.read()
        assert 'DASKRNMF_ENV=${DASKRNMF_ENV:-$HOME/venvs/daskrnmf}' in text
        assert "bin/activate" in text


def test_quickstart_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch, capsys):
    """The quickstart writes its store to a temporary directory and removes it, also when
    it fails (here: on purpose, after the data is written)."""
    import contextlib
    import runpy
    import socket
    import tempfile
    import warnings

    import distributed

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    class InProcess(distributed.LocalCluster):     # no worker processes: a fast test
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "processes": False})

    monkeypatch.setattr(distributed, "LocalCluster", InProcess)
    main = runpy.run_path(os.path.join(EXAMPLES, "quickstart.py"), run_name="quickstart")["main"]
    # with Dask's default port taken (here, or already by another cluster), no warning
    # that it is ("Port 8787 is already in use", which pyproject.toml filters otherwise)
    with socket.socket() as held, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(OSError):
            held.bind(("", 8787))
            held.listen()
        main(["--n-samples", "3000", "--n-features", "4", "--n-clusters", "3"])
    assert not [w for w in caught if "already in use" in str(w.message)]
    assert "| RFNMF loss=l1" in capsys.readouterr().out
    assert not [p for p in os.listdir(tmp_path) if p.startswith("daskrnmf")]

    import sklearn.cluster

    def broken(*args, **kwargs):
        raise KeyboardInterrupt                   # Ctrl-C during the comparison

    monkeypatch.setattr(sklearn.cluster, "KMeans", broken)
    with pytest.raises(KeyboardInterrupt):
        main(["--n-samples", "3000", "--n-features", "4", "--n-clusters", "3"])
    assert not [p for p in os.listdir(tmp_path) if p.startswith("daskrnmf")]


def test_the_local_config_comment_tells_what_it_asks_for():
    import yaml
    from dask.utils import parse_bytes

    path = os.path.join(os.path.dirname(__file__), os.pardir, "cluster_configs", "local.yaml")
    with open(path) as fh:
        text = fh.read()
    config = yaml.safe_load(text)
    comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    n, limit = config["n_workers"], config["memory_limit"]
    assert f"{n} workers of {config['threads_per_worker']} thread" in comment
    assert f"{parse_bytes(limit) // 2**30} GiB each" in comment
    total = n * parse_bytes(limit)
    assert f"{total // 2**30} GiB in all" in comment and total < 24e9   # 2 cores, 24 GB


def test_object_store_example_fits_saves_and_loads(capsys):
    import runpy

    runpy.run_path(os.path.join(EXAMPLES, "object_store.py"), run_name="example")["main"]()
    out = capsys.readouterr().out
    assert "/blobs.zarr: ACC 1.000" in out
    assert "same predictions True" in out


@pytest.mark.parametrize("model, own_checkpoint", [("ONMFO", True), ("RFNMF", False)])
def test_pbs_job_resumes_the_checkpoint_its_params_name(batch, model, own_checkpoint):
    """MODEL and PARAMS chosen at qsub: --resume follows the checkpoint PARAMS names (it
    followed OUTPUT.ckpt whatever the model, so RFNMF got --resume, which it refuses)."""
    tmp, log, env = batch
    (tmp / "nodes").write_text("node-a\n")
    ckpt = tmp / "mine.ckpt"
    ckpt.mkdir()
    (ckpt / ".daskrnmf-checkpoint").write_text("")
    (tmp / "out.zarr.ckpt").mkdir()                     # a leftover beside the output
    (tmp / "out.zarr.ckpt" / ".daskrnmf-checkpoint").write_text("")
    params = "--n-components 3" + (f" --checkpoint {ckpt}" if own_checkpoint else "")
    env.update({"PBS_NODEFILE": str(tmp / "nodes"), "PBS_JOBID": "8", "PBS_O_WORKDIR": str(tmp),
                "INPUT": "in.zarr/X", "OUTPUT": str(tmp / "out.zarr"), "MODEL": model,
                "PARAMS": params})
    proc = _run("pbs_job.sh", env)
    assert proc.returncode == 0, proc.stderr
    (fit,) = [args for p, _, args in _lines(log) if p == "daskrnmf" and args.startswith("fit")]
    assert fit.startswith(f"fit {model} in.zarr/X") and params in fit
    assert fit.endswith("--resume") == own_checkpoint
