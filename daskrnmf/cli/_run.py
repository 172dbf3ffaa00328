"""Where and how a command runs: its cluster (connected to, and ``daskrnmf shutdown``),
its signals, what it removes when it ends, and its one-line failures."""

import contextlib
import logging
import os
import select
import shutil
import signal
import sys

from .. import cluster

EXIT_FAILURE, EXIT_USAGE = 1, 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}   # 128 + signal number, as shells do


class CommandError(Exception):
    """A failure to report in one line with exit status 1."""


@contextlib.contextmanager
def connect(args):
    """The command's Client; Dask's own logging at WARNING unless ``--debug`` (the
    model's ``--progress`` lines are the log), silent while the cluster shuts down."""
    tls = {k: getattr(args, k, None) for k in ("tls_ca_file", "tls_client_cert",
                                               "tls_client_key")}
    debug = getattr(args, "debug", False)
    levels = contextlib.nullcontext() if debug else cluster.dask_log_level(logging.WARNING)
    with levels, cluster.connect(args.cluster, scheduler_file=args.scheduler_file,
                                 scheduler_address=args.scheduler_address,
                                 tls={k: v for k, v in tls.items() if v} or None,
                                 worker_timeout=getattr(args, "worker_timeout", None)) as client:
        # a task that raises: its exception is the command's one line, not also the
        # worker's "Compute Failed" block and traceback (kept with --debug)
        with contextlib.nullcontext() if debug else cluster.quiet_task_errors(client):
            yield client


class Run:
    """Paths a command removes when it ends, after the cluster has closed (so no worker
    still writes into them): partial outputs and the run's scratch directory."""

    def __init__(self):
        self.paths = []

    def remove_later(self, path, remove=None):
        """``remove``: how (default: ``shutil.rmtree``; e.g. an uncommitted URL prefix)."""
        self.paths.append((path, remove))
        return path

    def cleanup(self):
        for path, remove in self.paths:
            if remove is not None:
                remove()
            else:
                shutil.rmtree(path, ignore_errors=True)


def cmd_shutdown(args, parser):
    if not cluster.shutdown(args.scheduler_file, timeout=args.timeout):
        print(f"daskrnmf: no scheduler to shut down at {args.scheduler_file} (already "
              "closed)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- signals and pipes
class Signals:
    """SIGINT and SIGTERM as one interruption: the first one silences Dask's logging (no
    tracebacks from a cluster torn down mid-task) and raises KeyboardInterrupt in the
    main thread, so every ``finally`` runs (cluster closed, partial output and scratch
    removed); later ones are ignored while that cleanup runs."""

    def __init__(self):
        self.received = None
        self.previous = {}

    def __enter__(self):
        for signum in EXIT_SIGNAL:
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:          # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        if self.received is not None:
            return
        self.received = signum
        cluster.raise_log_levels(cluster.SILENT)
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        return False


def stdout_gone():
    """Whether stdout is a pipe whose reader has exited (``daskrnmf info X | head``); if
    so, stdout goes to devnull from now on, so that the interpreter's final flush does
    not report the broken pipe again (the handling Python's documentation of the signal
    module recommends, "Note on SIGPIPE": restoring SIGPIPE's default instead would kill
    a fit without its cleanup)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):    # no fd (captured), no poll (Windows)
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone
