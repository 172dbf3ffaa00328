"""PBS without a PBS server (none is packaged for this machine): the dask-jobqueue job
script that ``cluster_configs/pbs.yaml`` gives through :mod:`daskrnmf.cluster` — its
directives, the resources it asks for beside what its workers use, its worker command as
the job's shell runs it — and that script submitted through stand-ins for ``qsub`` and
``qdel`` that run it as a PBS job would: the workers join and compute, and the jobs
are deleted at the end.  ``examples/pbs_job.sh`` starts its workers with
pbsdsh, never ssh (tests/test_examples.py runs it with stand-ins too)."""

import os
import re
import shlex
import stat
import subprocess
import sys
import time

import dask.array as da
import numpy as np
import pytest

from daskrnmf.cluster import connect, load_config, make_cluster
from tests import test_examples as examples

pytest.importorskip("dask_jobqueue")
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "cluster_configs")
#: a GB in a PBS resource request is 2**30 bytes (dask-jobqueue's pbs_format_bytes_ceil)
PBS_UNITS = {"b": 1, "kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40}


def _config(kind="pbs", **overrides):
    config = load_config(os.path.join(CONFIGS, f"{kind}.yaml"))
    config.update(overrides)
    return config


def _job_script(kind="pbs", **overrides):
    with make_cluster(_config(kind, **overrides)) as cluster:    # nothing is submitted
        return cluster.job_script(), cluster.scheduler_address


def _worker_line(script):
    (line,) = [line for line in script.splitlines() if "distributed.cli.dask_worker" in line]
    return line


def _options(args):
    """``--flag value`` pairs of a worker command as a dict (a flag alone: True)."""
    out, i = {}, 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]], i = args[i + 1], i + 2
        else:
            out[args[i]], i = True, i + 1
    return out


def test_the_pbs_config_gives_its_directives_and_a_worker_command_of_this_python():
    script, address = _job_script()
    assert script.startswith("#!/usr/bin/env bash\n")
    directives = [line for line in script.splitlines() if line.startswith("#PBS")]
    # the queue, the resources of one chunk and the walltime; no -A: the account is null
    assert directives == ["#PBS -N dask-worker", "#PBS -q workq",
                          "#PBS -l select=1:ncpus=8:mem=32GB", "#PBS -l walltime=02:00:00"]
    args = shlex.split(_worker_line(script))
    # the workers run this process's Python (the same path on the compute nodes), and
    # connect to the scheduler that runs where the command runs
    assert args[:4] == [sys.executable, "-m", "distributed.cli.dask_worker", address]
    options = _options(args[4:])
    assert {k: options[k] for k in ("--nworkers", "--nthreads", "--memory-limit", "--nanny",
                                    "--death-timeout")} == {
        "--nworkers": "4", "--nthreads": "2", "--memory-limit": "8.00GiB", "--nanny": True,
        "--death-timeout": "60"}


def _select(script):
    (spec,) = re.findall(r"^#PBS -l (select=\S+)$", script, flags=re.M)
    fields = dict(part.split("=", 1) for part in spec.split(":")[1:])
    number, unit = re.fullmatch(r"(\d+)([kmgt]?b)", fields["mem"], flags=re.I).groups()
    return int(spec.split(":")[0].split("=")[1]), int(fields["ncpus"]), \
        int(number) * PBS_UNITS[unit.lower()]


@pytest.mark.parametrize("overrides", [{}, {"cores": 16, "processes": 8, "memory": "64GiB"},
                                       {"cores": 4, "processes": 1, "memory": "10GiB"}])
def test_the_pbs_request_covers_the_workers_it_starts(overrides):
    """What PBS is asked for (the select line) is what the workers use: as many cores as
    their threads, at least the sum of their memory limits (a job whose workers may use
    more than it asked for is killed by PBS), also when cores or memory are changed in
    the configuration alone."""
    from dask.utils import parse_bytes

    script, _ = _job_script(**overrides)
    chunks, ncpus, mem = _select(script)
    options = _options(shlex.split(_worker_line(script))[4:])
    workers = int(options.get("--nworkers", 1))
    config = _config(**overrides)
    assert chunks == 1
    assert ncpus == config["cores"] == workers * int(options["--nthreads"])
    assert mem >= workers * parse_bytes(options["--memory-limit"])
    assert mem >= parse_bytes(config["memory"])


@pytest.mark.parametrize("kind", ["pbs", "slurm"])
@pytest.mark.parametrize("tmpdir", [None, "/var/tmp/pbs.7.server"])
def test_the_worker_command_as_the_job_shell_runs_it(tmp_path, kind, tmpdir):
    """The job script run by bash, the Python replaced by a stand-in that prints its
    arguments: the workers' local directory is the job's TMPDIR where the batch system
    sets one, else /tmp (an empty $TMPDIR left '--local-directory' without its value,
    and the worker refused to start)."""
    script, address = _job_script(kind)
    stand_in = tmp_path / "python"
    stand_in.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    job = tmp_path / "job.sh"
    job.write_text(script.replace(shlex.quote(sys.executable), str(stand_in), 1))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    proc = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    assert args[:3] == ["-m", "distributed.cli.dask_worker", address]
    assert _options(args[3:])["--local-directory"] == (tmpdir or "/tmp")


def _executable(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def pbs_stand_in(tmp_path, monkeypatch):
    """``qsub`` that runs the submitted script as a PBS job would (in the background, in a
    session of its own, with PBS_JOBID and a TMPDIR of the job's own), prints the job id
    and logs it; ``qdel`` that logs and ends that job (given as ``1.stand-in`` or ``1``)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    q = shlex.quote(str(jobs))
    _executable(stubs / "qsub", f"""set -e
n=1                            # jobs are submitted at once: an atomic counter
while ! mkdir {q}/"$n.id" 2>/dev/null; do n=$((n + 1)); done
id="$n.stand-in"
cp "$1" {q}/"$id.sh"          # dask-jobqueue deletes its script file once submitted
mkdir -p {q}/"tmp.$id"
PBS_JOBID="$id" TMPDIR={q}/"tmp.$id" setsid bash {q}/"$id.sh" > {q}/"$id.log" 2>&1 < /dev/null &
echo $! > {q}/"$id.pid"
echo "qsub $id" >> {q}/calls
echo "$id"
""")
    _executable(stubs / "qdel", f"""echo "qdel $*" >> {q}/calls
kill -TERM -- -"$(cat {q}/"${{1%%.*}}.stand-in.pid")" 2>/dev/null
exit 0
""")
    monkeypatch.setenv("PATH", f"{stubs}{os.pathsep}{os.environ['PATH']}")
    try:
        yield jobs
    finally:                                  # nothing left running, whatever happened
        for pid in jobs.glob("*.pid"):
            try:
                os.killpg(int(pid.read_text()), 9)
            except (ProcessLookupError, ValueError):
                pass


def test_the_pbs_config_submits_its_jobs_whose_workers_compute_and_are_deleted(pbs_stand_in):
    jobs = pbs_stand_in
    config = _config(jobs=2, cores=1, processes=1, memory="1GiB", interface="lo",
                     scheduler_options={"interface": "lo"})
    X = np.arange(600.0).reshape(150, 4)
    with connect(config, worker_timeout=120) as client:
        client.wait_for_workers(2, timeout=120)        # both jobs' workers joined
        # a fit whose workers are all gone fails after the worker timeout, not never
        assert client.cluster.scheduler.no_workers_timeout == 120
        # they compute (fits on such workers: tests/test_slurm.py, on a real SLURM)
        total = da.from_array(X, chunks=10).sum(axis=0).compute()
        ran = client.run(lambda dask_worker: dask_worker.local_directory)
    np.testing.assert_array_equal(total, X.sum(axis=0))
    ids = sorted(p.stem for p in jobs.glob("*.sh"))
    assert ids == ["1.stand-in", "2.stand-in"]                  # jobs: 2 submissions
    # each worker's local directory is in its job's TMPDIR, as set on the node
    dirs = sorted(ran.values())
    assert [d.startswith(str(jobs / f"tmp.{i}") + os.sep) for i, d in zip(ids, dirs)] \
        == [True, True], dirs
    calls = (jobs / "calls").read_text().splitlines()
    # deleted by their sequence number (dask-jobqueue's reading of qsub's "1.server")
    assert sorted(c for c in calls if c.startswith("qdel")) == ["qdel 1", "qdel 2"]


@pytest.fixture
def batch(tmp_path):
    """tests/test_examples.py's stand-ins for the batch system and the environment."""
    return examples.batch.__wrapped__(tmp_path)


def test_pbs_job_starts_its_workers_without_ssh(batch):
    """Every remote start goes through pbsdsh (PBS's task manager): an ssh, rsh, pdsh or
    scp, stand-ins here that log and fail, is never called, also for a node that is not
    the first."""
    tmp, log, env = batch
    stubs = env["PATH"].split(os.pathsep)[0]
    for name in ("ssh", "rsh", "pdsh", "scp"):
        _executable(tmp / "stubs" / name, f'echo "{name} $*" >> {shlex.quote(str(log))}\n'
                                          "exit 255\n")
    assert stubs == str(tmp / "stubs")
    (tmp / "nodes").write_text("node-a\nnode-a\nnode-b\nnode-c\n")
    env.update({"PBS_NODEFILE": str(tmp / "nodes"), "PBS_JOBID": "9", "PBS_O_WORKDIR": str(tmp),
                "INPUT": "in.zarr/X", "OUTPUT": str(tmp / "out.zarr"), "EXPECT_WORKERS": "3",
                "TMPDIR": str(tmp)})
    proc = examples._run("pbs_job.sh", env)
    assert proc.returncode == 0, proc.stderr
    lines = examples._lines(log)
    assert not [line for line in lines if line[0].split()[0] in ("ssh", "rsh", "pdsh", "scp")]
    assert sorted(args.split(" -- ")[0] for program, _, args in lines
                  if program == "pbsdsh") == ["-n 0", "-n 2", "-n 3"]
    assert len([1 for program, _, args in lines
                if program == "dask" and args.startswith("worker")]) == 3


@pytest.mark.parametrize("script", ["pbs_job.sh", "slurm_job.sh"])
def test_the_job_scripts_scheduler_fails_work_that_no_worker_is_left_for(batch, script):
    """Both job scripts (the SLURM one too: its stand-in run needs no SLURM) start their
    scheduler with a no-workers timeout, so a job whose worker tasks are all gone ends
    its fit with an error instead of holding it until the walltime."""
    tmp, log, env = batch
    # the scheduler's stand-in records the timeout it was started with
    examples._script(tmp / "env with space" / "bin" / "dask", (
        f'printf "dask|%s|%s\\n" "${{DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT:-unset}}" '
        f'"$*" >> {shlex.quote(str(log))}\n'))
    (tmp / "nodes").write_text("node-a\n")
    env.update({"PBS_NODEFILE": str(tmp / "nodes"), "PBS_JOBID": "5", "PBS_O_WORKDIR": str(tmp),
                "INPUT": "in.zarr/X", "OUTPUT": str(tmp / "out.zarr"), "TMPDIR": str(tmp),
                "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "1", "SLURM_JOB_ID": "5",
                "SLURM_SUBMIT_DIR": str(tmp), "SLURM_NTASKS_PER_NODE": "1",
                "SLURM_MEM_PER_NODE": "1024"})
    args = ["RFNMF", "in.zarr/X", str(tmp / "out.zarr")] if script == "slurm_job.sh" else []
    proc = examples._run(script, env, args)
    assert proc.returncode == 0, proc.stderr
    (timeout,) = [value for program, value, args in examples._lines(log)
                  if program == "dask" and args.startswith("scheduler")]
    from dask.utils import parse_timedelta

    assert parse_timedelta(timeout) == 600


def test_a_scheduler_that_lost_every_worker_fails_the_work_in_one_clear_error():
    """A scheduler started elsewhere (a job script's) with a no-workers timeout: work it
    cannot run for want of workers ends in NoWorkersError naming the scheduler."""
    import dask
    from distributed import LocalCluster

    from daskrnmf.cluster import NoWorkersError

    with dask.config.set({"distributed.scheduler.no-workers-timeout": "0.5s"}):
        started = LocalCluster(n_workers=1, processes=False, dashboard_address=":0")
    with started, pytest.raises(NoWorkersError, match=(
            f"^the scheduler at {re.escape(started.scheduler_address)} lost all its workers "
            r"and had none for 0\.5 s; the fit stopped\.$")):
        with connect(scheduler_address=started.scheduler_address) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            started.scale(0)                                # the last worker gone
            while client.scheduler_info()["workers"]:
                time.sleep(0.05)
            da.ones(10, chunks=5).sum().compute()
