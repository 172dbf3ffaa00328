"""Where a fit runs: a cluster configuration (YAML or dict) turned into a running Client.

One key, ``cluster``, names the kind; the other keys go to its constructor:

``local``
    :class:`distributed.LocalCluster` (``n_workers``, ``threads_per_worker``,
    ``memory_limit``, ...).  With no configuration at all, :func:`connect` starts one
    sized to the machine: one single-threaded worker per core, the memory shared evenly.
``slurm`` / ``pbs``
    ``dask_jobqueue.SLURMCluster`` / ``PBSCluster`` (the ``[hpc]`` extra): ``cores``,
    ``memory``, ``walltime``, ``queue``, ``account``, ``job_extra_directives``, ...; plus
    ``jobs`` (how many batch jobs of workers to submit, default 1).  The scheduler's
    dashboard listens on any free port unless ``scheduler_options`` names a
    ``dashboard_address``.
``scheduler-file``
    Connect to a running scheduler through the file it wrote (``scheduler_file``), as
    batch scripts that start ``dask scheduler --scheduler-file`` and ``dask worker``
    do; the file is waited for up to ``wait`` seconds (default 60).
``address``
    Connect to a running scheduler at ``address``; with ``tls_ca_file``,
    ``tls_client_cert`` and ``tls_client_key`` (paths) over mutually authenticated TLS
    (``distributed.security.Security``, ``require_encryption=True``).  A ``tls://``
    address needs them (or dask config ``distributed.comm.tls.ca-file``,
    ``distributed.comm.tls.client.cert`` and ``distributed.comm.tls.client.key``).

Relative certificate paths in a YAML file are relative to the file's own directory, not
to the working directory.

A configuration is checked before anything starts: a ``local`` one's keys must be
arguments of ``LocalCluster`` or of its workers, with ``n_workers`` at least 1; a
``slurm`` / ``pbs`` one needs dask-jobqueue and the batch system's submit command
(``sbatch`` / ``qsub``) on the ``PATH``; a scheduler file must hold the scheduler's
address; TLS files must be readable certificates and a key that matches.

Waiting for workers: :func:`connect` yields a Client only once the scheduler has at
least one worker, and waits for one at most ``worker_timeout`` seconds (dask config
``daskrnmf.worker-timeout``, default 600 s; the command's ``--worker-timeout``), then
raises :class:`NoWorkersError` naming the scheduler.  Work submitted to a scheduler
without workers would otherwise wait for ever.  Batch jobs of workers may wait in the
queue longer than that: raise it for them.  A cluster started here (``local``, ``slurm``,
``pbs``) that loses all its workers during the work (batch jobs of workers cancelled or
ended; dask-jobqueue submits no new ones) waits for a new one as long, then fails the
work with :class:`NoWorkersError` (its scheduler's ``no-workers-timeout``, unless dask
config ``distributed.scheduler.no-workers-timeout`` sets it); a scheduler of a batch
script that sets that timeout (``examples/*_job.sh``: 10 minutes) gives the same error.
A worker lost while others remain loses nothing: Dask recomputes what it held.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from ._dasklog import (DASK_LOGGERS, NO_TIMED_OUT_TASKS, SILENT, dask_log_level,  # noqa: F401
                       quiet_shutdown, quiet_task_errors, raise_log_levels, restore_log_levels,
                       silence_worker)

KINDS = ("local", "slurm", "pbs", "scheduler-file", "address")
_TLS_KEYS = ("tls_ca_file", "tls_client_cert", "tls_client_key")
#: seconds :func:`connect` waits for a first worker (dask config ``daskrnmf.worker-timeout``)
WORKER_TIMEOUT = 600.0
#: the command that submits a batch job of workers, per jobqueue kind
_SUBMIT = {"slurm": "sbatch", "pbs": "qsub"}
#: the command that lists the batch jobs, per jobqueue kind
_QUEUE = {"slurm": "squeue", "pbs": "qstat"}


class NoWorkersError(TimeoutError):
    """The scheduler had no worker within the worker timeout (see the module's docstring)."""


def load_config(path: str | os.PathLike) -> dict:
    """Read a YAML cluster configuration; a clear ValueError for anything malformed."""
    import yaml

    path = os.fspath(path)
    try:
        with open(path) as fh:
            config = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ValueError(f"cluster configuration {path} does not exist.") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"cluster configuration {path} is not valid YAML: "
                         f"{str(exc).splitlines()[0]}") from None
    if not isinstance(config, dict):
        raise ValueError(f"cluster configuration {path} must be a mapping with a 'cluster' key.")
    here = os.path.dirname(os.path.abspath(path))
    for key in _TLS_KEYS:    # certificates next to the configuration, wherever the job runs
        value = config.get(key)
        if isinstance(value, str) and value:
            value = os.path.expanduser(os.path.expandvars(value))
            config[key] = value if os.path.isabs(value) else os.path.join(here, value)
    return config


def security_from(config: dict) -> Any:
    """``distributed.security.Security`` for the TLS keys of ``config``, or None."""
    given = [k for k in _TLS_KEYS if config.get(k)]
    if not given:
        return None
    if len(given) != len(_TLS_KEYS):
        missing = sorted(set(_TLS_KEYS) - set(given))
        raise ValueError(f"TLS needs all of {list(_TLS_KEYS)}; missing {missing}.")
    from distributed.security import Security

    for key in _TLS_KEYS:
        if not os.path.exists(config[key]):
            raise ValueError(f"{key} {config[key]} does not exist.")
    _check_tls_files(config["tls_ca_file"], config["tls_client_cert"], config["tls_client_key"])
    return Security(tls_ca_file=config["tls_ca_file"], tls_client_cert=config["tls_client_cert"],
                    tls_client_key=config["tls_client_key"], require_encryption=True)


def _check_tls_files(ca_file, cert, key):
    """Load the TLS files as the connection will, one at a time, so that a bad one is
    named (the connection's own ssl.SSLError names none, and comes only once the
    scheduler is reached)."""
    import ssl

    def load(what, path, action):
        try:
            action()
        except (ssl.SSLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise ValueError(f"{what} {path} {_TLS_WHAT[what]} ({reason}).") from None

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    load("tls_ca_file", ca_file, lambda: context.load_verify_locations(cafile=ca_file))
    # a certificate file loads as a (PEM) certificate list; a key file does not
    load("tls_client_cert", cert,
         lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert))
    # an encrypted key: refused (OpenSSL would otherwise prompt for its password on the
    # terminal of a batch job, a wait without end)
    load("tls_client_key", key, lambda: context.load_cert_chain(cert, key, password=b""))


_TLS_WHAT = {"tls_ca_file": "is not a PEM certificate of a CA",
             "tls_client_cert": "is not a PEM certificate",
             "tls_client_key": "is not the private key of tls_client_cert (PEM, unencrypted)"}


def _read_scheduler_file(path):
    """The scheduler's address from a scheduler file (JSON with an ``address``), read
    again for up to half a second while the scheduler may still be writing it."""
    import json

    deadline = time.monotonic() + 0.5
    while True:
        try:
            with open(path) as fh:
                info = json.load(fh)
            if isinstance(info, dict) and isinstance(info.get("address"), str) \
                    and info["address"]:
                return info["address"]
        except (ValueError, UnicodeDecodeError):
            pass
        except OSError as exc:
            raise ValueError(f"scheduler file {path} cannot be read "
                             f"({exc.strerror or exc}).") from None
        if time.monotonic() > deadline:
            raise ValueError(f"scheduler file {path} is not a Dask scheduler file (JSON with "
                             "the scheduler's 'address', as 'dask scheduler --scheduler-file' "
                             "writes).")
        time.sleep(0.1)


def _tls_from_dask_config(address):
    """A ``tls://`` address without certificates: fine when dask's own configuration has
    them; otherwise say what to pass (distributed would only say "TLS expects a
    ssl_context argument")."""
    from distributed.security import Security

    sec = Security()
    if sec.tls_ca_file and sec.tls_client_cert:
        return
    raise ValueError(
        f"the scheduler at {address} speaks TLS and no client certificates were given: pass "
        "--tls-ca-file, --tls-client-cert and --tls-client-key, or a --cluster YAML with "
        "'cluster: address' and the keys tls_ca_file, tls_client_cert and tls_client_key "
        "(see cluster_configs/tls.yaml), or set dask config distributed.comm.tls.ca-file, "
        "distributed.comm.tls.client.cert and distributed.comm.tls.client.key.")


def _local_keys() -> set:
    """The keys a ``local`` configuration may hold: ``LocalCluster``'s arguments and its
    workers' (the rest of LocalCluster's keyword arguments go to every Worker or Nanny,
    where an unknown one fails only inside the worker process, as "Nanny failed to
    start")."""
    import inspect

    from distributed import LocalCluster, Nanny, Worker

    keys = set()
    for cls in (LocalCluster, Worker, Nanny):
        keys.update(name for name, p in inspect.signature(cls.__init__).parameters.items()
                    if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return keys - {"self", "loop", "asynchronous", "start"}


def _positive_count(config, key, where):
    value = config.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: '{key}' must be an integer of at least 1; got {value!r}.")


def check_config(config: dict, where: str = "cluster configuration") -> None:
    """Refuse a ``local``, ``slurm`` or ``pbs`` configuration that cannot give workers,
    before anything starts (a cluster without workers waits for ever).

    Parameters
    ----------
    config : dict
        The configuration, with its ``cluster`` key.
    where : str
        What to name in messages (the YAML file's path).

    Raises
    ------
    ValueError
        An unknown key of a ``local`` configuration, ``n_workers``,
        ``threads_per_worker`` or ``jobs`` below 1, dask-jobqueue missing, or the batch
        system's submit command (``sbatch``, ``qsub``) not on the ``PATH``.
    """
    import shutil

    kind = config.get("cluster")
    if kind == "local":
        unknown = sorted(set(config) - _local_keys() - {"cluster"})
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r} for a 'local' cluster; the "
                             "keys are distributed.LocalCluster's arguments (n_workers, "
                             "threads_per_worker, memory_limit, processes, ...) and its "
                             "workers'.")
        _positive_count(config, "n_workers", where)
        _positive_count(config, "threads_per_worker", where)
    elif kind in _SUBMIT:
        _positive_count(config, "jobs", where)
        try:
            import dask_jobqueue  # noqa: F401
        except ImportError:
            raise ValueError(f"a {kind!r} cluster needs dask-jobqueue: pip install "
                             "'daskrnmf[hpc]'.") from None
        command = _SUBMIT[kind]
        if shutil.which(command) is None:
            raise ValueError(f"{where}: a {kind!r} cluster submits its workers with "
                             f"'{command}', which is not on the PATH of this machine; run "
                             "the command where the batch system is (a login node), or "
                             "start the workers in a batch script and pass --scheduler-file.")


def make_cluster(config: dict) -> Any:
    """The cluster object for a ``local``, ``slurm`` or ``pbs`` configuration (jobqueue
    clusters are created without submitting anything; see ``job_script()``)."""
    config = dict(config)
    kind = config.pop("cluster", None)
    if kind == "local":
        from distributed import LocalCluster

        config.setdefault("dashboard_address", ":0")  # any free port: no clash, no warning
        with _workers_ignore_sigint():
            return LocalCluster(**config)
    if kind in ("slurm", "pbs"):
        config.pop("jobs", None)
        try:
            import dask_jobqueue
        except ImportError:
            raise ValueError(f"a {kind!r} cluster needs dask-jobqueue: pip install "
                             "'daskrnmf[hpc]'.") from None
        cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
        if "dashboard_address" not in config:
            # the scheduler's dashboard on any free port where none was asked for
            # (dask-jobqueue's default, 8787, may be taken on a shared login node: "Port
            # 8787 is already in use"); its scheduler_options otherwise, or dask config
            # jobqueue.<kind>.scheduler-options as dask-jobqueue reads it
            import dask

            options = config.get("scheduler_options")
            if options is None:
                name = config.get("config_name") or kind
                options = dask.config.get(f"jobqueue.{name}.scheduler-options", {})
            config["scheduler_options"] = {"dashboard_address": ":0", **(options or {})}
        failures = []
        cluster = cls(job_cls=_recording_job_class(cls.job_cls, failures), **config)
        cluster.daskrnmf_submit_failures = failures      # read by connect's wait for workers
        return cluster
    raise ValueError(f"make_cluster builds 'local', 'slurm' or 'pbs' clusters; got {kind!r}.")


def _recording_job_class(base, failures):
    """``base`` (a dask-jobqueue Job class) whose submissions that fail are appended to
    ``failures`` instead of raised.

    dask-jobqueue submits in the background: a refused ``sbatch`` / ``qsub`` only ends
    in an exception that nobody retrieves (printed with a traceback whenever it is
    garbage-collected) and a cluster that waits for its workers for ever.  Recorded, the
    refusal ends :func:`connect` at once with the batch system's message.  The refused
    job is marked running (there is no job to wait for) and, when the cluster closes,
    closed without a cancel command (there is no job id to cancel).
    """
    from distributed.core import Status

    class Job(base):
        refused = False

        async def start(self):
            try:
                await super().start()
            except Exception as exc:
                failures.append(exc)
                self.refused = True
                self.status = Status.running    # what SpecCluster asserts after a start

        async def close(self):
            if not self.refused:
                return await super().close()
            self.status = Status.closed         # what SpecCluster asserts after a close

    Job.__name__ = Job.__qualname__ = base.__name__
    return Job


def _refusal(exc):
    """The batch system's own words from a failed submission (dask-jobqueue's message
    quotes the command's stderr after a ``stderr:`` line), else the message's first line."""
    lines = [line.strip() for line in str(exc).splitlines()]
    if "stderr:" in lines:
        after = [line for line in lines[lines.index("stderr:") + 1:] if line]
        if after:
            return after[0]
    return next((line for line in lines if line), type(exc).__name__)


@contextlib.contextmanager
def _workers_ignore_sigint():
    """Worker processes started in here ignore SIGINT (an ignored signal stays ignored
    across the spawn's exec, and Python then installs no KeyboardInterrupt handler).
    Ctrl-C reaches the whole foreground process group; only the client should act on
    it (and close the cluster), not every worker with a traceback of its own."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def local_default() -> dict:
    """LocalCluster sized to the machine: one single-threaded worker per core (at most 8)."""
    import psutil

    n = max(1, min(os.cpu_count() or 1, 8))
    memory = int(psutil.virtual_memory().total * 0.8 / n)
    return {"cluster": "local", "n_workers": n, "threads_per_worker": 1, "memory_limit": memory}


@functools.lru_cache(maxsize=None)
def _client_class(base):
    """``base`` (``distributed.Client``) that cleans up after itself when it fails to start.

    distributed starts a Client's event-loop thread (``LoopRunner.start``) before it
    connects, and a connection that fails raises out of the constructor with that thread
    still running: the caller never gets the object to close.  A failure that is not an
    OSError (no TLS context for a ``tls://`` address, "encryption required" for a
    ``tcp://`` one, ...) even leaves the Client unclosed, and its ``__del__`` then closes
    it from whatever garbage collection happens to run: a collection inside a later
    ``LoopRunner.start`` (which holds the class-wide, non-reentrant ``LoopRunner._lock``)
    deadlocks that thread on the same lock, or, in the new event-loop thread, stalls
    the start 10 s into an AssertionError (issue 17: the fourth failed TLS client in a
    process).  Failures that are OSErrors (a wrong certificate) close the Client but
    never stop its loop: one leaked thread per attempt.  Here a Client that fails to
    start is closed and its loop stopped at once, so nothing is left for ``__del__``.
    """
    class Client(base):
        def start(self, **kwargs):
            try:
                return super().start(**kwargs)
            except BaseException:
                _abandon(self)
                raise

    return Client


def _abandon(client):
    """Close a Client that failed to start and stop its event loop, without raising."""
    try:
        client.close(timeout=5)           # comms, rpc, default client, dask config
    except Exception:
        pass
    finally:
        client.status = "closed"          # Client.__del__ has nothing left to do
        try:
            client._loop_runner.stop(timeout=5)   # a no-op when close() already did it
        except Exception:
            pass


def _client(*args, **kwargs):
    """A ``distributed.Client`` that is safe to retry in one process (see
    :func:`_client_class`).  Clients that failed elsewhere in the process (a plain
    ``distributed.Client``) are garbage-collected first, here, where distributed holds
    no lock, rather than at a random moment inside this Client's start."""
    import gc

    import distributed

    gc.collect()
    return _client_class(distributed.Client)(*args, **kwargs)


def shutdown(scheduler_file: str | os.PathLike, *, timeout: float = 60.0) -> bool:
    """Shut down the scheduler of ``scheduler_file`` and its workers in order, as a batch
    job ends: once no task runs any more (at most ``timeout`` seconds, e.g. the last
    one of a fit stopped by SIGTERM), Dask's logging is silenced on the scheduler, the
    workers and their nannies (connections closing in the wrong order are not errors of
    the job), then the scheduler closes the workers and itself — every ``dask worker``
    task ends on its own, so the job step is not killed.  Returns False when there was
    no scheduler to reach (already gone)."""
    try:
        # the address read here: Client(scheduler_file=...) would wait for a missing file
        # for ever (a scheduler that never started)
        address = _read_scheduler_file(os.fspath(scheduler_file))
        with _client(address, timeout="20s") as client:
            deadline = time.monotonic() + timeout
            while any(client.processing().values()) and time.monotonic() < deadline:
                time.sleep(0.5)
            for run in (lambda f: client.run(f, -1, nanny=True), lambda f: client.run(f, -1),
                        lambda f: client.run_on_scheduler(f, -1)):
                run(silence_worker)
            client.shutdown()
    except (OSError, TimeoutError, ValueError):
        return False
    return True


@contextlib.contextmanager
def connect(config: str | os.PathLike | dict | None = None, *,
            scheduler_file: str | os.PathLike | None = None,
            scheduler_address: str | None = None, tls: dict | None = None,
            timeout: str = "30s", worker_timeout: float | None = None) -> Iterator[Any]:
    """A running ``distributed.Client`` for a configuration (path, dict or None).

    Exactly one of ``config``, ``scheduler_file`` and ``scheduler_address`` may be given;
    with none, a LocalCluster sized to the machine.  ``tls``: the ``tls_*`` keys (paths)
    for ``scheduler_address``.  Clusters started here are closed on exit, client first,
    with Dask's logging silenced while they shut down; existing schedulers are only
    disconnected from.  The configuration is checked before anything starts
    (:func:`check_config`), and the Client is yielded once the scheduler has a worker:
    ``worker_timeout`` seconds at most (default: dask config ``daskrnmf.worker-timeout``,
    else 600), then :class:`NoWorkersError`.

    Yields
    ------
    distributed.Client
    """
    given = [x is not None for x in (config, scheduler_file, scheduler_address)]
    if sum(given) > 1:
        raise ValueError("give at most one of a cluster configuration, a scheduler file and a "
                         "scheduler address.")
    where = "cluster configuration"
    if scheduler_file is not None:
        config = {"cluster": "scheduler-file", "scheduler_file": scheduler_file}
    elif scheduler_address is not None:
        config = {"cluster": "address", "address": scheduler_address, **(tls or {})}
    elif config is None:
        config = local_default()
    elif not isinstance(config, dict):
        where = f"cluster configuration {os.fspath(config)}"
        config = load_config(config)
    if tls and scheduler_address is None:
        raise ValueError("TLS certificates go with a scheduler address (tls://HOST:PORT).")
    wait = _worker_timeout(worker_timeout)
    kind = config.get("cluster")
    if kind not in KINDS:
        raise ValueError(f"'cluster' must be one of {list(KINDS)}; got {kind!r}.")
    check_config(config, where)
    if kind in ("scheduler-file", "address"):
        security = None
        if kind == "scheduler-file":
            path = config.get("scheduler_file")
            deadline = time.monotonic() + float(config.get("wait", 60))
            while path and not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.2)   # a batch script starts the scheduler just before the command
            if not path or not os.path.exists(path):
                raise ValueError(f"scheduler file {path} does not exist (is the scheduler "
                                 "running?).")
            address = _read_scheduler_file(path)
            what = f"the scheduler at {address} (scheduler file {path})"
        else:
            address = config.get("address")
            if not address:
                raise ValueError("an 'address' cluster needs the scheduler's address.")
            security = security_from(config)
            if security is None and str(address).startswith("tls://"):
                _tls_from_dask_config(address)
            what = f"the scheduler at {address}"
        with quiet_shutdown() as quiet, \
                _client(address, security=security, timeout=timeout) as client, \
                _working(client, quiet, kind, what, wait):
            yield client
        return
    jobs = int(config.get("jobs", 1))
    try:
        with _no_workers_timeout(wait):
            started = make_cluster(config)
    except (TypeError, ValueError) as exc:   # a value (or jobqueue key) the cluster refuses
        text = str(exc).strip().splitlines()
        raise ValueError(f"{where}: {text[0] if text else type(exc).__name__}") from exc
    scheduler_log = logging.getLogger("distributed.scheduler")   # the scheduler runs here
    with contextlib.ExitStack() as stack:
        scheduler_log.addFilter(NO_TIMED_OUT_TASKS)
        stack.callback(scheduler_log.removeFilter, NO_TIMED_OUT_TASKS)
        quiet = stack.enter_context(quiet_shutdown())
        cluster = stack.enter_context(started)
        if kind in ("slurm", "pbs"):
            cluster.scale(jobs=jobs)
        failures = getattr(cluster, "daskrnmf_submit_failures", [])

        def refused():
            if failures:
                raise ValueError(f"{where}: the batch system refused the workers' job: "
                                 f"{_refusal(failures[0])}")

        what = f"the {kind} cluster's scheduler at {cluster.scheduler_address}"
        waiting = what + (f" ({jobs} batch job(s) submitted with {_SUBMIT[kind]}: are they "
                          "still queued?)" if kind in _SUBMIT else "")
        # quiet(client) silences the workers too; then the client closes, then the cluster
        with _client(cluster, timeout=timeout) as client, \
                _working(client, quiet, kind, what, wait, waiting=waiting, check=refused,
                         ours=True):
            yield client


@contextlib.contextmanager
def _working(client, quiet, kind, what, wait, *, waiting=None, check=None, ours=False):
    """Yields ``client`` once its scheduler has a worker (:func:`_wait_for_workers`;
    ``waiting``, default ``what``, names the scheduler if none comes); a task failed for
    want of workers inside ends as :class:`NoWorkersError` naming ``what``.  On the way
    out ``quiet`` (of :func:`~daskrnmf._dasklog.quiet_shutdown`) silences Dask's logging,
    on the workers too when ``ours`` (a cluster started here, not a shared scheduler)."""
    try:
        _wait_for_workers(client, wait, waiting or what, check=check)
        try:
            yield client
        except Exception as exc:
            _raise_if_workers_lost(exc, what, kind)
            raise
    finally:
        quiet(client if ours else None)


@contextlib.contextmanager
def _no_workers_timeout(seconds):
    """A scheduler started inside fails the tasks it cannot run for want of any worker
    after ``seconds`` (the worker timeout), instead of holding them for ever: a fit
    whose workers are all gone (their batch jobs cancelled, failed or at their walltime;
    dask-jobqueue submits no new ones) then ends with :class:`NoWorkersError`, not a
    wait until the job's own walltime.  Dask config
    ``distributed.scheduler.no-workers-timeout``, when set, is left as it is."""
    import dask

    if dask.config.get("distributed.scheduler.no-workers-timeout", None) is not None:
        yield
        return
    with dask.config.set({"distributed.scheduler.no-workers-timeout": f"{seconds}s"}):
        yield



def _raise_if_workers_lost(exc, what, kind):
    """:class:`NoWorkersError` naming ``what`` (the scheduler) for distributed's
    NoWorkerError: the scheduler failed a task after it had no worker for the
    no-workers timeout."""
    from distributed.scheduler import NoWorkerError

    if isinstance(exc, NoWorkerError):
        jobs = (" (were its workers' batch jobs cancelled, failed or at their walltime? "
                f"see {_QUEUE[kind]})" if kind in _QUEUE else "")
        raise NoWorkersError(f"{what} lost all its workers and had none for "
                             f"{exc.timeout:g} s{jobs}; the fit stopped.") from exc


def _worker_timeout(value):
    """Seconds to wait for a first worker: ``value``, else dask config
    ``daskrnmf.worker-timeout`` (seconds or a time such as "10 minutes"), else 600."""
    import dask
    from dask.utils import parse_timedelta

    source = "worker_timeout"
    if value is None:
        value, source = (dask.config.get("daskrnmf.worker-timeout", WORKER_TIMEOUT),
                         "dask config 'daskrnmf.worker-timeout'")
    try:
        seconds = float(parse_timedelta(value, default="seconds"))
    except (TypeError, ValueError, KeyError):
        seconds = float("nan")
    if not seconds > 0:        # NaN too
        raise ValueError(f"{source} must be a positive number of seconds; got {value!r}.")
    return seconds


def _wait_for_workers(client, seconds, what, check=None):
    """Return once the scheduler has a running worker; after ``seconds``,
    :class:`NoWorkersError` naming ``what`` (the scheduler).  ``check()``, called about
    every second meanwhile, may raise to end the wait sooner (a refused batch job)."""
    from distributed.exceptions import WorkerStartTimeoutError

    deadline = time.monotonic() + seconds
    while True:
        step = max(min(1.0, deadline - time.monotonic()), 0.01)
        try:
            client.wait_for_workers(1, timeout=step)
            return
        except (WorkerStartTimeoutError, TimeoutError):
            pass
        if check is not None:
            check()
        if time.monotonic() >= deadline:
            raise NoWorkersError(
                f"{what} has no workers after {seconds:g} s; start workers for it, or wait "
                "longer with --worker-timeout SECONDS (dask config "
                "'daskrnmf.worker-timeout').")
