"""The ``daskrnmf`` command: batch jobs that fit, evaluate, make data and describe stores.

    daskrnmf fit MODEL INPUT --output OUT.zarr [--overwrite] [--PARAM VALUE ...]
                 [--checkpoint DIR [--resume]]
    daskrnmf evaluate PRED TRUE [--json]
    daskrnmf make-data {blobs,coclusters,segments,faces} OUT.zarr [options]
    daskrnmf convert INPUT OUT.zarr [--component NAME] [--chunk-rows N] [--overwrite]
    daskrnmf info STORE
    daskrnmf choose-k MODEL INPUT --ks 2-12 [options]
    daskrnmf shutdown --scheduler-file FILE
    daskrnmf --version

``daskrnmf fit`` has one subcommand per registered model (:data:`daskrnmf.models.REGISTRY`;
names are case-insensitive); ``daskrnmf fit MODEL --help`` lists that model's parameters,
with their defaults and help text, read from the estimator's signature and docstring.
The per-sample outputs written are the model's (``ModelSpec.outputs``), chunked like the
input's stored rows and in its float dtype, next to the model's small fitted arrays; the
fitted model itself goes to the store's ``model`` group, which ``daskrnmf.load(STORE)``
turns back into an estimator.  A model whose ``ModelSpec.resumable`` is true takes
``--checkpoint DIR`` (its ``checkpoint`` parameter) and ``--resume`` (``fit(X,
resume=True)``): a job killed or stopped at its time limit is continued by the next one
and ends as the uninterrupted fit would.

Where a command runs: ``--cluster CONFIG.yaml``, ``--scheduler-file FILE`` or
``--scheduler-address ADDR`` (with ``--tls-ca-file``, ``--tls-client-cert`` and
``--tls-client-key`` for a ``tls://`` scheduler); with none, a LocalCluster sized to the
machine.  Every output, checkpoint and scratch location is checked (writable, not inside
or around the input) before a cluster is started: daskrnmf never writes its input.  A
command waits ``--worker-timeout SECONDS`` at most (dask config
``daskrnmf.worker-timeout``, default 600) for the scheduler's first worker, then fails
naming the scheduler (:mod:`daskrnmf.cluster`).

Exit status: 0 done; 1 the input, the parameters or the run failed (one line on stderr, no
traceback; ``--debug`` shows it); 2 the command line itself is wrong; 130 interrupted
(SIGINT, Ctrl-C); 143 terminated (SIGTERM, what SLURM and PBS send at the time limit).
When interrupted or terminated, the partial output and the run's scratch directory
(``daskrnmf-state-*``) are removed and one line is printed; a resumable model's
``--checkpoint`` is kept, so ``--resume`` continues.  Output stores are written under a
temporary name and renamed into place only when complete, so a killed job never leaves a
result that looks whole; an existing output is kept unless ``--overwrite``, which replaces
only a store daskrnmf wrote (``daskrnmf._stores``): never a directory or file of the
user's.

Object stores: ``daskrnmf fit``'s input, ``--output`` and ``--checkpoint`` may be fsspec
URLs (``s3://bucket/data.zarr``), with ``--storage-options '{"key": ..., "secret": ...,
"client_kwargs": {"endpoint_url": ...}}'`` (a JSON object: the options of the URLs' file
system).  The workers read the input's and write the outputs' chunks.  An output URL is
written under a fresh prefix ``OUT/v-<id>/`` and committed by writing the pointer
``OUT/daskrnmf-commit.json`` last (one PUT; object stores have no rename): a killed job
leaves no readable half-result and the previous output intact (:mod:`daskrnmf.io`).
Wrong credentials or a missing bucket are reported, naming the URL, before a cluster
starts and before anything is written.

The package: :mod:`._parser` builds the command line from the registry (a model's
parameters by :mod:`._params`), each command is a function of its own module
(:data:`COMMANDS`; the module is imported only when its command runs, so ``daskrnmf
--help`` imports neither Dask nor a model), :mod:`._locations` checks every location
before a cluster starts, :mod:`._output` writes the output store, :mod:`._run` holds the
cluster connection, the signals and the cleanup.
"""

import importlib
import signal
import sys
import warnings

from ..cluster import NoWorkersError
from . import _parser
from ._run import EXIT_FAILURE, EXIT_SIGNAL, EXIT_USAGE, CommandError, Signals, stdout_gone

#: each command's function, as ``(module, name)`` in this package
COMMANDS = {"fit": ("._fit", "cmd_fit"), "evaluate": ("._evaluate", "cmd_evaluate"),
            "make-data": ("._data", "cmd_make_data"), "info": ("._data", "cmd_info"),
            "choose-k": ("._evaluate", "cmd_choose_k"), "convert": ("._data", "cmd_convert"),
            "shutdown": ("._run", "cmd_shutdown")}

__all__ = ["main", "write_store", "COMMANDS"]


def main(argv=None):
    """Entry point of the ``daskrnmf`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, model = _parser.normalise_model(argv)
    parser = _parser.build(model)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:            # --help, --version (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    shown = warnings.showwarning
    if not args.debug:   # warnings in batch logs: one line each, like errors
        warnings.showwarning = lambda message, category, *rest, **kw: print(
            f"daskrnmf: warning: {message}", file=sys.stderr)
    with Signals() as signals:
        try:
            module, name = COMMANDS[args.command]
            command = getattr(importlib.import_module(module, __name__), name)
            return command(args, parser)
        except SystemExit as exc:        # parser.error inside a command
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        except KeyboardInterrupt as exc:
            signum = signals.received or signal.SIGINT
            _drop_interrupted(exc)
            print(f"daskrnmf: {'terminated' if signum == signal.SIGTERM else 'interrupted'} "
                  f"({signal.Signals(signum).name}); partial output and scratch removed",
                  file=sys.stderr)
            return EXIT_SIGNAL[signum]
        except Exception as exc:
            if isinstance(exc, BrokenPipeError) and stdout_gone():
                return 0         # 'daskrnmf info X | head': the reader has what it wanted
            if args.debug:
                raise
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not isinstance(exc, (CommandError, ValueError, TypeError, FileNotFoundError,
                                    FileExistsError, NoWorkersError)):
                message = f"{type(exc).__name__}: {message}"
            print(f"daskrnmf: error: {message}", file=sys.stderr)
            return EXIT_FAILURE
        finally:
            warnings.showwarning = shown


def _drop_interrupted(exc):
    """Free what the interrupted work left (the frames of ``exc``'s traceback and their
    garbage), so that it goes before the command's last line, and silence what an
    interruption leaves by its nature: a coroutine of an asynchronous library (zarr's
    store calls) made and never awaited because the signal came in between.  Its
    RuntimeWarning had been printed after "terminated (SIGTERM)" (the job log's last
    line), when the exception was cleared at the end of the handler."""
    import gc
    import traceback

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited",
                                category=RuntimeWarning)
        traceback.clear_frames(exc.__traceback__)
        gc.collect()


def __getattr__(name):
    """``write_store`` (:func:`._output.write_store`), imported on first use: it needs
    Dask and Zarr, which ``daskrnmf --help`` does without."""
    if name == "write_store":
        from ._output import write_store

        return write_store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
