"""Where a fit runs: a cluster configuration (YAML or dict) turned into a running Client.

One key, ``cluster``, names the kind; the other keys go to its constructor:

``local``
    :class:`distributed.LocalCluster` (``n_workers``, ``threads_per_worker``,
    ``memory_limit``, ...).  With no configuration at all, :func:`connect` starts one
    sized to the machine: one single-threaded worker per core, the memory shared evenly.
``slurm`` / ``pbs``
    ``dask_jobqueue.SLURMCluster`` / ``PBSCluster`` (the ``[hpc]`` extra): ``cores``,
    ``memory``, ``walltime``, ``queue``, ``account``, ``job_extra_directives``, ...; plus
    ``jobs`` (how many batch jobs of workers to submit, default 1).
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
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

KINDS = ("local", "slurm", "pbs", "scheduler-file", "address")
_TLS_KEYS = ("tls_ca_file", "tls_client_cert", "tls_client_key")
DASK_LOGGERS = ("distributed", "tornado", "asyncio", "bokeh")
SILENT = logging.CRITICAL + 1


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
    return Security(tls_ca_file=config["tls_ca_file"], tls_client_cert=config["tls_client_cert"],
                    tls_client_key=config["tls_client_key"], require_encryption=True)


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
        return cls(**config)
    raise ValueError(f"make_cluster builds 'local', 'slurm' or 'pbs' clusters; got {kind!r}.")


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


def raise_log_levels(level: int) -> list:
    """Raise Dask's loggers (``distributed``, ``tornado``, ``asyncio``, ``bokeh`` and
    every logger below them that exists) to at least ``level`` in this process.

    Returns the ``(logger, old level)`` pairs changed, for :func:`restore_log_levels`.
    """
    names = set(DASK_LOGGERS) | {name for name in list(logging.Logger.manager.loggerDict)
                                 if name.split(".")[0] in DASK_LOGGERS}
    changed = []
    for name in sorted(names):
        log = logging.getLogger(name)
        if log.level < level:
            changed.append((log, log.level))
            log.setLevel(level)
    return changed


def restore_log_levels(changed: list) -> None:
    """Undo :func:`raise_log_levels`."""
    for log, level in reversed(changed):
        log.setLevel(level)


@contextlib.contextmanager
def dask_log_level(level: int = logging.WARNING) -> Iterator[None]:
    """Dask's own log records below ``level`` dropped in this process while inside (the
    CLI runs at WARNING unless ``--debug``: no scheduler chatter, no dashboard hints).
    Imports distributed first, whose logging configuration would reset the levels."""
    import distributed  # noqa: F401

    changed = raise_log_levels(level)
    try:
        yield
    finally:
        restore_log_levels(changed)


def _silence_worker(client_pid: int) -> None:
    """On a worker process: no more Dask logging (its cluster is about to shut down).
    Workers in the client's own process are left alone (the client restores its levels
    after the shutdown)."""
    if os.getpid() != client_pid:
        raise_log_levels(SILENT)


@contextlib.contextmanager
def _quiet_shutdown() -> Iterator[Any]:
    """Yields ``quiet(client)``: called as a cluster's work ends, it silences Dask's
    logging on the cluster's worker processes and in this process until the context
    exits, after the client and the cluster have closed.  Connections that close in the
    wrong order while a cluster shuts down (a worker's heartbeat to a scheduler that
    is gone) are then not printed as CommClosedError tracebacks."""
    changed = []

    def quiet(client=None):
        """``client``: of a cluster started here, whose workers are silenced too (those of
        a cluster that others share are not touched)."""
        if client is not None:
            try:
                client.run(_silence_worker, os.getpid(), on_error="ignore")
            except Exception:   # a worker already gone: nothing to silence there
                pass
        changed.extend(raise_log_levels(SILENT))

    try:
        yield quiet
    finally:
        restore_log_levels(changed)


@contextlib.contextmanager
def connect(config: str | os.PathLike | dict | None = None, *,
            scheduler_file: str | os.PathLike | None = None,
            scheduler_address: str | None = None, tls: dict | None = None,
            timeout: str = "30s") -> Iterator[Any]:
    """A running ``distributed.Client`` for a configuration (path, dict or None).

    Exactly one of ``config``, ``scheduler_file`` and ``scheduler_address`` may be given;
    with none, a LocalCluster sized to the machine.  ``tls``: the ``tls_*`` keys (paths)
    for ``scheduler_address``.  Clusters started here are closed on exit, client first,
    with Dask's logging silenced while they shut down; existing schedulers are only
    disconnected from.

    Yields
    ------
    distributed.Client
    """
    given = [x is not None for x in (config, scheduler_file, scheduler_address)]
    if sum(given) > 1:
        raise ValueError("give at most one of a cluster configuration, a scheduler file and a "
                         "scheduler address.")
    if scheduler_file is not None:
        config = {"cluster": "scheduler-file", "scheduler_file": scheduler_file}
    elif scheduler_address is not None:
        config = {"cluster": "address", "address": scheduler_address, **(tls or {})}
    elif config is None:
        config = local_default()
    elif not isinstance(config, dict):
        config = load_config(config)
    if tls and scheduler_address is None:
        raise ValueError("TLS certificates go with a scheduler address (tls://HOST:PORT).")
    kind = config.get("cluster")
    if kind not in KINDS:
        raise ValueError(f"'cluster' must be one of {list(KINDS)}; got {kind!r}.")
    if kind == "scheduler-file":
        path = config.get("scheduler_file")
        deadline = time.monotonic() + float(config.get("wait", 60))
        while path and not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.2)   # a batch script starts the scheduler just before the command
        if not path or not os.path.exists(path):
            raise ValueError(f"scheduler file {path} does not exist (is the scheduler running?).")
        with _quiet_shutdown() as quiet, _client(scheduler_file=path, timeout=timeout) as client:
            try:
                yield client
            finally:
                quiet()
        return
    if kind == "address":
        if not config.get("address"):
            raise ValueError("an 'address' cluster needs the scheduler's address.")
        security = security_from(config)
        if security is None and str(config["address"]).startswith("tls://"):
            _tls_from_dask_config(config["address"])
        with _quiet_shutdown() as quiet, \
                _client(config["address"], security=security, timeout=timeout) as client:
            try:
                yield client
            finally:
                quiet()
        return
    jobs = int(config.get("jobs", 1))
    with _quiet_shutdown() as quiet, make_cluster(config) as cluster:
        if kind in ("slurm", "pbs"):
            cluster.scale(jobs=jobs)
        with _client(cluster, timeout=timeout) as client:
            try:
                yield client
            finally:
                quiet(client)     # then the client closes, then the cluster
