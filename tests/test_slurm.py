"""HPC batch jobs on a real SLURM (issue 39): a private single-node SLURM started from
Debian's packages by tests/slurm/start.sh (``.ci/run`` installs ``slurm-wlm`` and
``munge``; the tests skip, saying why, where they are missing or not run as root).

- the shipped ``examples/slurm_job.sh``, its resources overridden on the ``sbatch``
  command line, ends with the result of a local fit and a clean log (no Dask INFO lines,
  no cancelled step, no traceback, no scratch left);
- a dask-jobqueue configuration submits worker jobs that are gone afterwards;
- a job stopped at its walltime (SIGTERM to the batch shell, as ``--signal=B:TERM``
  sends it) checkpoints, resubmits itself, and the next job finishes with exactly the
  uninterrupted result: for a streaming model (ONMFO) and for a batch model whose
  checkpoint holds per-block state written by the workers (NMF's H);
- a worker job of a dask-jobqueue cluster cancelled (``scancel``) in the middle of a fit
  loses nothing: the fit's chained per-block state is on the scratch directory
  (``--scratch``, dask config ``daskrnmf.scratch-directory``), Dask recomputes what the
  worker held, and the fit ends with the uninterrupted result.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
import zarr

from daskrnmf import NMF, ONMFO, RFNMF

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, os.pardir, "examples")
ENV = os.path.dirname(os.path.dirname(sys.executable))     # this virtual environment

if not shutil.which("slurmctld") or not shutil.which("munged"):
    pytest.skip("SLURM is not installed (apt-get install slurm-wlm munge, as .ci/run does)",
                allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("the private SLURM runs its daemons as root", allow_module_level=True)
if not os.path.exists(os.path.join(ENV, "bin", "activate")):
    pytest.skip("the job script activates a virtual environment; this Python is not in one",
                allow_module_level=True)


def _free_port_pair():
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free consecutive ports")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    where = tmp_path_factory.mktemp("slurm")
    state = where / "daemons"
    subprocess.run(["bash", os.path.join(HERE, "slurm", "start.sh"), str(state),
                    str(_free_port_pair())], check=True, capture_output=True, timeout=60)
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf"), "DASKRNMF_ENV": ENV,
           "DASKRNMF_INTERFACE": "lo", "PYTHONPATH": os.path.dirname(HERE)}
    env.pop("DASKRNMF_DEBUG", None)
    # the data: planted clusters in a Zarr store of four chunks
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(4000, 6)) + np.repeat(np.eye(3, 6) * 6, [1334, 1333, 1333],
                                                       axis=0))
    g = zarr.open_group(str(where / "in.zarr"), mode="w")
    g.create_array("X", shape=X.shape, dtype=X.dtype, chunks=(1000, 6))[...] = X
    try:
        yield where, env, np.asarray(X)
    finally:
        subprocess.run(["bash", os.path.join(HERE, "slurm", "stop.sh"), str(state)],
                       capture_output=True, timeout=60)


def _run(env, *args, timeout=60):
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout,
                          check=True).stdout


def _state(env, job):
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job)], env=env,
                         capture_output=True, text=True).stdout
    state = re.search(r"JobState=(\S+)", out)
    code = re.search(r"ExitCode=(\d+):(\d+)", out)
    return (state.group(1) if state else None), (int(code.group(1)) if code else None)


def _wait(env, job, timeout=180, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                       "NODE_FAIL", "OUT_OF_MEMORY")):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state, code = _state(env, job)
        if state in until:
            return state, code
        time.sleep(0.25)
    subprocess.run(["scancel", str(job)], env=env)
    raise AssertionError(f"job {job} did not end in {timeout} s (state {state})")


def _batch_shell(env, job):
    """The process id of the job's batch script (slurmd runs it as ``slurm_script``)."""
    for line in _run(env, "scontrol", "listpids", str(job)).splitlines()[1:]:
        pid = int(line.split()[0])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"slurm_script" in fh.read():
                    return pid
        except OSError:
            continue
    raise AssertionError(f"no batch shell found for job {job}")


def _sbatch(env, where, *args, tasks=2):
    out = _run(env, "sbatch", "--parsable", "-N1", f"-n{tasks}", f"--ntasks-per-node={tasks}",
               "-c1", "--mem=3G", "-t", "5", "-o", str(where / "job-%j.log"),
               os.path.join(EXAMPLES, "slurm_job.sh"), *args)
    return int(out.strip().split(";")[0])


def _clean(log):
    """What a job log must not hold: Dask's INFO lines, a killed or cancelled step, a
    traceback, an error (NMF's progress line of its last pass, "pass 20 (final error)", is
    not one)."""
    bad = [line for line in log.splitlines()
           if re.search(r" - (distributed|tornado)\S* - INFO - |CANCELLED|Killed|forcing job "
                        r"termination|Traceback|(?<!\(final )[Ee]rror|Ignoring provided "
                        r"memory", line)]
    assert not bad, log


def _leftovers(where, job):
    tmp = os.environ.get("TMPDIR", "/tmp")
    return [p for p in (os.path.join(tmp, f"daskrnmf-job-{job}"),
                        str(where / f"scheduler-{job}.json")) if os.path.exists(p)]


def test_the_shipped_job_script_gives_the_local_result_and_a_clean_log(slurm):
    where, env, X = slurm
    out = where / "rfnmf.zarr"
    job = _sbatch(env, where, "RFNMF", str(where / "in.zarr" / "X"), str(out),
                  "--n-clusters", "3", "--random-state", "0", "--max-iter", "20")
    local = RFNMF(3, random_state=0, max_iter=20).fit(X)        # while the job runs
    assert _wait(env, job) == ("COMPLETED", 0), (where / f"job-{job}.log").read_text()
    log = (where / f"job-{job}.log").read_text()
    _clean(log)
    assert "RFNMF fitted in" in log and "iteration 1," in log
    stored = zarr.open_group(str(out), mode="r")
    np.testing.assert_array_equal(stored["labels"][:], local.labels_)
    np.testing.assert_allclose(stored["cluster_centers"][:], local.cluster_centers_,
                               rtol=1e-12)
    assert not _leftovers(where, job)
    assert _run(env, "squeue", "-h").strip() == ""


def test_a_jobqueue_config_submits_worker_jobs_that_are_gone_afterwards(slurm):
    where, env, X = slurm
    config = where / "slurm.yaml"
    config.write_text(yaml.safe_dump({
        "cluster": "slurm", "jobs": 2, "cores": 1, "processes": 1, "memory": "1GiB",
        "walltime": "00:05:00", "interface": "lo", "scheduler_options": {"interface": "lo"},
        "local_directory": str(where / "jq-scratch"),
        "log_directory": str(where / "jq-logs")}))
    out = where / "jq.zarr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daskrnmf", "fit", "RFNMF", str(where / "in.zarr" / "X"),
         "--output", str(out), "--cluster", str(config), "--n-clusters", "3",
         "--random-state", "0", "--max-iter", "20"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        local = RFNMF(3, random_state=0, max_iter=20).fit(X)    # while the command runs
        stderr = proc.communicate(timeout=180)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and " - INFO - " not in stderr
    np.testing.assert_array_equal(zarr.open_group(str(out), mode="r")["labels"][:],
                                  local.labels_)
    logs = os.listdir(where / "jq-logs")
    assert len([name for name in logs if name.endswith(".err")]) >= 2     # two worker jobs ran
    for _ in range(40):                                  # and are gone
        if _run(env, "squeue", "-h").strip() == "":
            break
        time.sleep(0.25)
    assert _run(env, "squeue", "-h").strip() == ""


# A job stopped at its walltime, for a streaming model whose checkpoint is the client's
# state only (ONMFO), and for a batch model whose checkpoint holds per-block state that
# the workers write, each for the blocks it holds (NMF: W, and H block by block; X read
# in 4 blocks of 1,000 rows through dask's array.chunk-size, which the resubmitted job
# inherits with the environment): the log line that says a checkpoint is written, the
# parameters (several steps left at the signal), the environment of the jobs.
WALLTIME = {
    "ONMFO": (r"batch [3-9]\d*/", {"n_components": 3, "batch_size": 500, "max_iter": 6,
                                   "tol": 0, "checkpoint_every": 1, "random_state": 0}, {}),
    "NMF": (r"iteration [2-9]\d*,", {"n_components": 3, "max_iter": 15, "tol": 0,
                                     "random_state": 0}, {"DASK_ARRAY__CHUNK_SIZE": "48000"}),
}


def test_jobs_stopped_at_their_walltime_are_finished_by_the_next_identically(slurm):
    """Each model of WALLTIME in a job of its own, the two jobs side by side (one task,
    one worker, each: the node has two CPUs; a job's fixed cost, processes starting and
    stopping, is most of this test's time)."""
    where, env, X = slurm
    chains = {}
    for model, (reached, params, extra) in WALLTIME.items():
        out, ckpt = where / f"{model}.zarr", where / f"{model}.ckpt"
        job = _sbatch({**env, **extra}, where, model, str(where / "in.zarr" / "X"), str(out),
                      *[f"--{k.replace('_', '-')}={v}" for k, v in params.items()],
                      "--checkpoint", str(ckpt), tasks=1)
        chains[model] = (job, where / f"job-{job}.log", out, ckpt)
    waiting, end = set(chains), time.monotonic() + 120
    while waiting:
        for model in sorted(waiting):
            job, log = chains[model][:2]
            if re.search(WALLTIME[model][0], log.read_text() if log.exists() else ""):
                # a few steps in, a checkpoint written: what --signal=B:TERM@120 does
                os.kill(_batch_shell(env, job), signal.SIGTERM)
                waiting.discard(model)
            else:          # still running
                assert _state(env, job)[0] in ("PENDING", "CONFIGURING", "RUNNING"), \
                    log.read_text() if log.exists() else f"job {job} ended without a log"
        assert time.monotonic() < end, f"{sorted(waiting)}: not a few steps in in 120 s"
        time.sleep(0.1)
    # the uninterrupted fits, in this process while the jobs stop and the next ones start
    local = {model: {"ONMFO": ONMFO, "NMF": NMF}[model](**params)
             for model, (_, params, _) in WALLTIME.items()}
    local["ONMFO"].fit(X)
    with pytest.warns(Warning, match="did not converge"):
        H = local["NMF"].fit_transform(X)
    nexts = {}
    for model, (job, log, out, ckpt) in chains.items():
        assert _wait(env, job) == ("FAILED", 143), log.read_text()
        for _ in range(40):
            first = log.read_text()
            if "continues the checkpoint" in first:
                break
            time.sleep(0.25)
        assert "stopped at the time limit; job" in first, first
        _clean(first)
        assert not out.exists()
        nexts[model] = int(re.search(r"job (\d+) continues the checkpoint", first).group(1))
        if model == "NMF":     # H in the checkpoint, a Zarr group per block of X
            blocks = {p.name for p in ckpt.glob("daskrnmf-checkpoint/gen-*/blocks/*/b*")}
            assert blocks == {f"b{b:06d}" for b in range(4)}, blocks
    for model, (job, log, out, ckpt) in chains.items():
        nxt, params = nexts[model], WALLTIME[model][1]
        assert _wait(env, nxt) == ("COMPLETED", 0), (where / f"daskrnmf-{nxt}.log").read_text()
        second = (where / f"daskrnmf-{nxt}.log").read_text()
        assert "continuing the checkpoint" in second
        _clean(second)
        stored = zarr.open_group(str(out), mode="r")
        if model == "NMF":
            # the next job went on from the last iteration saved, not from the first
            done = [int(n) for n in re.findall(r"NMF: iteration (\d+),", log.read_text())]
            again = [int(n) for n in re.findall(r"NMF: iteration (\d+),", second)]
            assert 1 < again[0] <= done[-1] + 1 and again[-1] == params["max_iter"], second
            np.testing.assert_allclose(stored["H"][:], H, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(stored["objective_history"][:],
                                       local[model].objective_history_, rtol=1e-10)
            scalars = stored.attrs["scalars"]
            assert (scalars["n_iter_"], scalars["n_passes_"]) == (local[model].n_iter_,
                                                                  local[model].n_passes_)
        np.testing.assert_allclose(stored["components"][:], local[model].components_,
                                   rtol=1e-10, atol=1e-12)
        assert not _leftovers(where, job) and not _leftovers(where, nxt)


# 150 iterations: the worker job is cancelled after the third, and the fit must still be
# running when SLURM reports it cancelled (0.5-1 s; 57 more iterations took 2.6 s here,
# 147 take about 6, with room for another test process on the cores)
NMF_PARAMS = dict(n_components=3, max_iter=150, tol=0, random_state=0)


def _has_block_files(scratch):
    """Whether the fit's scratch directory holds a block's file now (a directory of an
    old generation the fit removes while it is listed: not now)."""
    try:
        return any(scratch.rglob("b*.pkl"))
    except FileNotFoundError:
        return False


def _fit_losing_a_worker_job(where, env, name, jobs, timeout=120):
    """``daskrnmf fit NMF`` with a jobqueue config of ``jobs`` worker jobs and a scratch
    directory; once every worker is registered and the fit has done three iterations,
    one worker job is cancelled (SLURM's SIGTERM to its nanny and worker, as a preempted
    or failed node's job gets).  Returns the fit's exit status, its log, the scratch
    directory and the output; a fit that has not ended ``timeout`` seconds after the
    cancel fails the test (it hung)."""
    logs, config = where / f"{name}-logs", where / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "cluster": "slurm", "jobs": jobs, "cores": 1, "processes": 1, "memory": "1GiB",
        "walltime": "00:05:00", "interface": "lo", "scheduler_options": {"interface": "lo"},
        "local_directory": str(where / f"{name}-local"), "log_directory": str(logs)}))
    out, scratch, log = where / f"{name}.zarr", where / f"{name}-scratch", where / f"{name}.log"
    # the workers' INFO lines (in their job logs only) say when each has registered
    env = {**env, "DASK_LOGGING__DISTRIBUTED": "info"}
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daskrnmf", "fit", "NMF", str(where / "in.zarr" / "X"),
             "--output", str(out), "--cluster", str(config), "--scratch", str(scratch),
             "--progress"] + [f"--{k.replace('_', '-')}={v}" for k, v in NMF_PARAMS.items()],
            env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        def registered():
            names = os.listdir(logs) if logs.exists() else []
            return sorted(int(m.group(1)) for m in (re.fullmatch(r"dask-worker-(\d+)\.err", n)
                                                    for n in names)
                          if m and "Registered to" in (logs / m.group(0)).read_text())

        end, spilled = time.monotonic() + 120, False
        while not (len(registered()) == jobs and "iteration 3," in log.read_text()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < end, f"no {jobs} workers and three iterations in 120 s"
            spilled = spilled or _has_block_files(scratch)
            time.sleep(0.05)
        # H, chained from pass to pass, is on the scratch disk, a file per block
        assert spilled or _has_block_files(scratch)
        job = registered()[0]
        _run(env, "scancel", str(job))
        assert _wait(env, job, timeout=30) == ("CANCELLED", 0)
        # the worker job is gone and the fit is still running: it has lost a worker
        assert proc.poll() is None, "the fit ended before the worker job was cancelled"
        assert "Received signal SIGTERM" in (logs / f"dask-worker-{job}.err").read_text()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("the fit hung after losing a worker job:\n"
                                 + log.read_text()) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["scancel", "--name=dask-worker"], env=env)
    for _ in range(40):                                  # no worker job left
        if _run(env, "squeue", "-h").strip() == "":
            break
        time.sleep(0.25)
    assert _run(env, "squeue", "-h").strip() == ""
    assert not os.listdir(scratch)                   # the fit's scratch state removed
    return proc.returncode, log.read_text(), out


def test_a_worker_job_cancelled_mid_fit_loses_nothing(slurm):
    """Two worker jobs, one cancelled in the middle of the fit: the fit goes on with the
    other worker and ends with exactly the result of a fit that lost nothing."""
    where, env, X = slurm
    status, text, out = _fit_losing_a_worker_job(where, env, "loss", jobs=2)
    assert status == 0, text
    assert "Traceback" not in text and f"iteration {NMF_PARAMS['max_iter']}," in text
    stored = zarr.open_group(str(out), mode="r")
    local = NMF(**NMF_PARAMS)
    with pytest.warns(Warning, match="did not converge"):
        H = local.fit_transform(X)
    np.testing.assert_allclose(stored["components"][:], local.components_, rtol=1e-11,
                               atol=1e-12)
    np.testing.assert_allclose(stored["H"][:], H, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(stored["objective_history"][:], local.objective_history_,
                               rtol=1e-11)
    scalars = stored.attrs["scalars"]
    assert (scalars["n_iter_"], scalars["n_passes_"]) == (local.n_iter_, local.n_passes_)


def test_the_only_worker_job_cancelled_mid_fit_ends_it_with_one_clear_line(slurm):
    """The only worker job cancelled: nothing can recompute the work, and no new worker
    comes (dask-jobqueue submits none). The fit ends, after the scheduler's no-workers
    timeout, with one line naming the cause, no output and no scratch left (it waited
    for ever: until the job's walltime on a real cluster).  The timeout is 5 s here
    through dask config; by default it is the worker timeout (tests/test_pbs.py)."""
    where, env, X = slurm
    env = {**env, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "5s"}
    status, text, out = _fit_losing_a_worker_job(where, env, "lost", jobs=1, timeout=60)
    assert status == 1, text
    errors = [line for line in text.splitlines() if "rror" in line]
    assert errors == [line for line in errors if line.startswith("daskrnmf: error: ")] \
        and len(errors) == 1, text
    assert re.search(r"the slurm cluster's scheduler at \S+ lost all its workers and had "
                     r"none for 5 s \(were its workers' batch jobs cancelled", errors[0])
    assert "Traceback" not in text and "marked as failed" not in text
    assert not out.exists() and not [p for p in os.listdir(where) if p.startswith("lost.zarr")]
