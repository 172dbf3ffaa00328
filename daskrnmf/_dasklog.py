"""Dask's own logging kept quiet: what a command prints is its own.

Dask's loggers raised to a level in this process (:func:`raise_log_levels`,
:func:`dask_log_level`), a failing task's "Compute Failed" block dropped in this process
and on the workers of a cluster started here (:func:`quiet_task_errors`), the scheduler's
record per task failed for want of workers dropped (one :class:`~daskrnmf.cluster.NoWorkersError`
reports the loss), and a cluster's shutdown silenced (:func:`quiet_shutdown`), where
connections closing in the wrong order are no errors of the work.  :mod:`daskrnmf.cluster`
uses these and gives the public ones under its name.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

DASK_LOGGERS = ("distributed", "tornado", "asyncio", "bokeh")
SILENT = logging.CRITICAL + 1

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


class _NoComputeFailed(logging.Filter):
    """Drops distributed's "Compute Failed" record (``distributed.worker``, ERROR: the
    failed task, its arguments and a traceback, logged by the worker that ran it).  The
    exception itself still reaches the client, which reports it."""

    def filter(self, record):
        return not (record.name == "distributed.worker"
                    and str(record.msg).startswith("Compute Failed"))


_NO_COMPUTE_FAILED = _NoComputeFailed()


class _QuietTaskErrorsPlugin:
    """Worker plugin: :class:`_NoComputeFailed` on the worker's ``distributed.worker``
    logger (registered with the scheduler, so also on workers started later, as after a
    lost worker)."""

    name = "daskrnmf-quiet-task-errors"

    def setup(self, worker):
        logging.getLogger("distributed.worker").addFilter(_NO_COMPUTE_FAILED)


@contextlib.contextmanager
def quiet_task_errors(client: Any = None) -> Iterator[None]:
    """No "Compute Failed" block from a task that raises, in this process and, for a
    ``client`` of a cluster started here (whose worker processes write to this process's
    stderr), on its workers: a command reports the exception in one line instead.
    Workers of a scheduler that others share are left alone."""
    log = logging.getLogger("distributed.worker")
    log.addFilter(_NO_COMPUTE_FAILED)
    try:
        if client is not None and getattr(client, "cluster", None) is not None:
            from distributed.diagnostics.plugin import WorkerPlugin

            plugin = type("QuietTaskErrors", (_QuietTaskErrorsPlugin, WorkerPlugin), {})()
            client.register_plugin(plugin, name=_QuietTaskErrorsPlugin.name)
        yield
    finally:
        log.removeFilter(_NO_COMPUTE_FAILED)


def silence_worker(client_pid: int) -> None:
    """On a worker process: no more Dask logging (its cluster is about to shut down).
    Workers in the client's own process are left alone (the client restores its levels
    after the shutdown)."""
    if os.getpid() != client_pid:
        raise_log_levels(SILENT)


@contextlib.contextmanager
def quiet_shutdown() -> Iterator[Any]:
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
                client.run(silence_worker, os.getpid(), on_error="ignore")
            except Exception:   # a worker already gone: nothing to silence there
                pass
        changed.extend(raise_log_levels(SILENT))

    try:
        yield quiet
    finally:
        restore_log_levels(changed)


class _NoTimedOutTasks(logging.Filter):
    """Drops the scheduler's ERROR record for every task it failed for want of workers
    (one per waiting task: hundreds in a large fit); the client reports the loss once,
    as :class:`~daskrnmf.cluster.NoWorkersError`."""

    def filter(self, record):
        return not (record.name == "distributed.scheduler"
                    and str(record.msg).startswith("Task %s marked as failed because it "
                                                   "timed out waiting"))


NO_TIMED_OUT_TASKS = _NoTimedOutTasks()
