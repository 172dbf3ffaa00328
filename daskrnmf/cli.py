"""The ``daskrnmf`` command: batch jobs that fit, evaluate, make data and describe stores.

    daskrnmf fit MODEL INPUT --output OUT.zarr [--overwrite] [--PARAM VALUE ...]
    daskrnmf evaluate PRED TRUE [--json]
    daskrnmf make-data {blobs,coclusters,segments,faces} OUT.zarr [options]
    daskrnmf convert INPUT OUT.zarr [--component NAME] [--chunk-rows N] [--overwrite]
    daskrnmf info STORE
    daskrnmf --version

``daskrnmf fit`` has one subcommand per registered model (:data:`daskrnmf.models.REGISTRY`;
names are case-insensitive); ``daskrnmf fit MODEL --help`` lists that model's parameters,
with their defaults and help text, read from the estimator's signature and docstring.
The per-sample outputs written are the model's (``ModelSpec.outputs``), chunked like the
input's stored rows and in its float dtype, next to the model's small fitted arrays; the
fitted model itself goes to the store's ``model`` group, which ``daskrnmf.load(STORE)``
turns back into an estimator.

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
(``daskrnmf-state-*``) are removed and one line is printed; an ONMFO checkpoint is kept, so
``--resume`` continues.  Output stores are written under a temporary name and renamed into
place only when complete, so a killed job never leaves a result that looks whole; an
existing output is kept unless ``--overwrite``, which replaces only a store daskrnmf wrote
(``daskrnmf._stores``): never a directory or file of the user's.

Object stores: ``daskrnmf fit``'s input, ``--output`` and ``--checkpoint`` may be fsspec
URLs (``s3://bucket/data.zarr``), with ``--storage-options '{"key": ..., "secret": ...,
"client_kwargs": {"endpoint_url": ...}}'`` (a JSON object: the options of the URLs' file
system).  The workers read the input's and write the outputs' chunks.  An output URL is
written under a fresh prefix ``OUT/v-<id>/`` and committed by writing the pointer
``OUT/daskrnmf-commit.json`` last (one PUT; object stores have no rename): a killed job
leaves no readable half-result and the previous output intact (:mod:`daskrnmf.io`).
Wrong credentials or a missing bucket are reported, naming the URL, before a cluster
starts and before anything is written.
"""

import argparse
import contextlib
import difflib
import inspect
import json
import logging
import os
import re
import select
import shutil
import signal
import sys
import time

import numpy as np

from . import _stores

EXIT_FAILURE, EXIT_USAGE = 1, 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}   # 128 + signal number, as shells do


class CommandError(Exception):
    """A failure to report in one line with exit status 1."""


# ---------------------------------------------------------------- model parameters
def _clean(text):
    """Docstring text as plain help: no RST roles or literal markup, one line."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    return " ".join(text.split())


def parse_parameters_section(doc):
    """``name -> (type text, description)`` from a numpydoc "Parameters" section.

    A small parser of the block that starts with ``Parameters`` underlined by dashes and
    ends at the next underlined section: ``name : type`` lines at the section's
    indentation (``a, b : type`` names several), the indented lines below them the
    description.
    """
    lines = inspect.cleandoc(doc or "").splitlines()

    def underline(i):
        return i + 1 < len(lines) and lines[i + 1].strip() and set(lines[i + 1].strip()) == {"-"}

    def indent(line):
        return len(line) - len(line.lstrip())

    start = next((i for i, line in enumerate(lines)
                  if line.strip() == "Parameters" and underline(i)), None)
    if start is None:
        return {}
    base, out, current = indent(lines[start]), {}, []
    for i in range(start + 2, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        if indent(line) <= base and underline(i):
            break                                    # the next section
        if indent(line) <= base:
            names, _, kind = line.strip().partition(":")
            current = [n.strip() for n in names.split(",") if n.strip()]
            for n in current:
                out[n] = [kind.strip(), []]
        else:
            for n in current:
                out[n][1].append(line.strip())
    return {n: (_clean(kind), _clean(" ".join(desc))) for n, (kind, desc) in out.items()}


def parameter_docs(cls):
    """Parameter docs of ``cls`` and its daskrnmf bases (a subclass's own text wins)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if (klass.__module__ or "").startswith("daskrnmf"):
            docs.update(parse_parameters_section(klass.__dict__.get("__doc__")))
    return docs


_CLI_VALUES = (0, 1, 0.5, 1e-3, True, "text")


def _not_an_option(default, kind, constraints):
    """Callables (callbacks) and arrays are not given on a command line: a parameter whose
    constraints accept no number, flag or text, or whose default or documented type is a
    callable or an array."""
    if constraints and not any(hasattr(c, "values") or any(_accepts(c, x) for x in _CLI_VALUES)
                               for c in constraints):
        return True
    if callable(default) or isinstance(default, np.ndarray):
        return True
    low = kind.lower()
    if "callable" in low or "function" in low:
        return True
    if "array" in low and not re.search(r"\b(int|float|str|bool|string)\b|\{", low):
        return True
    return False


def _accepts(constraint, value):
    try:
        return bool(constraint.accepts(value))
    except Exception:
        return False


def _bool(text):
    low = text.strip().lower()
    if low in ("true", "yes", "on", "1"):
        return True
    if low in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _typed(kind_name, convert):
    def parse(text):
        if text.strip().lower() == "none":
            return None
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind_name}, got {text!r}") from None
    return parse


def _coerce(text):
    """A value of a parameter without a typed default: bool, None, int, float or text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def model_options(cls):
    """The command-line options of an estimator class, from its ``__init__`` signature and
    numpydoc "Parameters": a list of ``(name, default, type, metavar, help)``."""
    docs = parameter_docs(cls)
    table = getattr(cls, "_parameter_constraints", {})
    options = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind, text = docs.get(name, ("", ""))
        default = None if p.default is p.empty else p.default
        if _not_an_option(default, kind, table.get(name, ())):
            continue
        choices = re.match(r"\{([^}]*)\}", kind)
        if isinstance(default, bool):
            convert, metavar = _bool, "{true,false}"
        elif isinstance(default, int):
            convert, metavar = _typed("an integer", int), "INT"
        elif isinstance(default, float):
            convert, metavar = _typed("a number", float), "FLOAT"
        else:
            convert, metavar = _coerce, "VALUE"
        if choices:
            names = (c.strip().strip("\"'") for c in choices.group(1).split(","))
            metavar = "{" + ",".join(names) + "}"
        help_text = (text + " " if text else "") + f"(default: {default!r})"
        options.append((name, default, convert, metavar, help_text.replace("%", "%%")))
    return options


# ---------------------------------------------------------------- parsing
def _version():
    from . import __version__

    return __version__


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seed(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:                     # NumPy's generators take non-negative seeds only
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:              # NaN fails too
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):        # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _json_object(text):
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") \
            from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object ({{...}}), got {text!r}")
    return value


def _storage_options_option(p):
    p.add_argument("--storage-options", type=_json_object, metavar="JSON", default=None,
                   help="options of the fsspec file system of URL inputs, outputs and "
                        "checkpoints (s3://...), as a JSON object, e.g. '{\"key\": \"...\", "
                        "\"secret\": \"...\", \"client_kwargs\": {\"endpoint_url\": "
                        "\"http://host:9000\"}}'")


def _where(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cluster", help="cluster configuration (YAML, see cluster_configs/)")
    g.add_argument("--scheduler-file", help="scheduler file of a running Dask scheduler")
    g.add_argument("--scheduler-address", help="address of a running Dask scheduler "
                                               "(tcp://HOST:PORT or tls://HOST:PORT)")
    p.add_argument("--worker-timeout", type=_positive_seconds, metavar="SECONDS",
                   help="how long to wait for the scheduler's first worker before failing "
                        "(default: dask config 'daskrnmf.worker-timeout', else 600; raise it "
                        "for batch jobs of workers that may wait in a queue)")
    tls = p.add_argument_group("TLS (with --scheduler-address tls://...)")
    tls.add_argument("--tls-ca-file", help="certificate of the CA that signed the scheduler's")
    tls.add_argument("--tls-client-cert", help="this client's certificate")
    tls.add_argument("--tls-client-key", help="this client's private key")


def _add_model_parser(fit_sub, spec, with_options):
    """``daskrnmf fit NAME``: the run options and, when ``with_options``, the model's
    parameters (building them imports the model, so only the one asked for is built)."""
    p = fit_sub.add_parser(
        spec.name, help=spec.summary,
        description=f"{spec.name} ({spec.task}): {spec.summary}. Writes "
                    f"{', '.join(spec.outputs) or 'the fitted arrays'} (per sample, chunked "
                    "like the input's rows) and the model's fitted arrays to --output.")
    p.add_argument("input", help="Zarr array (path or URL, or store + --component)")
    p.add_argument("--component", help="array inside the input store (e.g. X)")
    p.add_argument("--output", required=True, help="Zarr store to write, a path or URL "
                                                    "(never the input's)")
    _storage_options_option(p)
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output" + (" and an earlier run's checkpoint"
                                                        if spec.resumable else ""))
    if spec.needs_y:
        p.add_argument("--labels", required=True, help="Zarr array of the class labels")
    if spec.resumable:
        p.add_argument("--resume", action="store_true",
                       help="continue from --checkpoint after a killed job")
    p.add_argument("--scratch", help="directory every worker can read and write, for the "
                                     "per-block state that lets a fit survive a lost worker "
                                     "(default: dask config 'daskrnmf.scratch-directory', "
                                     "else the output's directory); removed at the end")
    p.add_argument("--progress", action="store_true",
                   help="log one line per pass over X outside an iteration (from the first), "
                        "per iteration (per batch for streaming models) and a last one with "
                        "what the model stores, also when not on a terminal")
    _where(p)
    params = []
    if with_options:
        group = p.add_argument_group(f"parameters of {spec.name}")
        for name, default, convert, metavar, help_text in model_options(spec.cls):
            dest = "param:" + name
            group.add_argument("--" + name.replace("_", "-"), dest=dest, type=convert,
                               metavar=metavar, default=argparse.SUPPRESS, help=help_text)
            params.append((name, dest))
        known = {name: convert for name, _, convert, _, _ in model_options(spec.cls)}
        for old, new in getattr(spec.cls, "_renamed_params", {}).items():
            if new in known:      # old names keep working for one release, with a warning
                group.add_argument("--" + old.replace("_", "-"), dest="param:" + new,
                                   type=known[new], default=argparse.SUPPRESS,
                                   help=argparse.SUPPRESS, action=_renamed(old, new))
    p.set_defaults(model=spec.name, model_params=params, model_parser=p)
    return p


def _renamed(old, new):
    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"daskrnmf: warning: {option_string} was renamed "
                  f"--{new.replace('_', '-')}; the old name will be removed in a later "
                  "release.", file=sys.stderr)
            setattr(namespace, self.dest, values)
    return Renamed


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser (every subcommand's too) that takes an option in any letter case
    when only one option matches (``--alpha-r`` for ONMFO's ``--alpha-R``) and names the
    option meant when one is not recognised (``--n_clusters``: did you mean
    ``--n-clusters``?).  Python's argparse suggests only from 3.14 (``suggest_on_error``)."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(self._any_case(args), namespace)
        unknown = [a.partition("=")[0] for a in extras if a.startswith("--")]
        meant = [m for m in map(self._meant, unknown) if m]
        if meant:
            self.error(f"unrecognized arguments: {' '.join(extras)}; did you mean "
                       f"{' or '.join(dict.fromkeys(meant))}?")
        return namespace, extras

    def _options(self):
        return [o for o, action in self._option_string_actions.items()
                if o.startswith("--") and action.help is not argparse.SUPPRESS]

    def _any_case(self, args):
        lower = {}
        for option in self._option_string_actions:
            lower.setdefault(option.lower(), []).append(option)
        out = list(args)
        for i, arg in enumerate(args):
            if arg == "--":                  # the rest are positional arguments
                break
            name, eq, value = arg.partition("=")
            if name.startswith("--") and name not in self._option_string_actions \
                    and len(lower.get(name.lower(), ())) == 1:
                out[i] = lower[name.lower()][0] + eq + value
        return out

    def _meant(self, option):
        """The option closest to ``option`` (underscores as dashes, any case), or None."""
        def norm(o):
            return o.lower().replace("_", "-")
        options = {norm(o): o for o in self._options()}
        close = difflib.get_close_matches(norm(option), options, n=1, cutoff=0.8)
        return options[close[0]] if close else None


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless it has none (None) or its help says it already
    (no "(default: the model's) (default: None)")."""

    def _get_help_string(self, action):
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _parser(model=None):
    """The argument parser; ``model``: the registered model whose options to build."""
    from .models import REGISTRY

    parser = _Parser(
        prog="daskrnmf", description="Robust NMF and clustering out of core on Dask and Zarr.",
        epilog="Exit status: 0 done, 1 failed (one line on stderr), 2 wrong command line, "
               "130 interrupted (SIGINT), 143 terminated (SIGTERM). Model parameters are "
               "options named after them: 'daskrnmf fit RFNMF --help'.")
    parser.add_argument("--version", action="version", version=f"daskrnmf {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit a model to a Zarr array and write its results",
                         description="Fit a model to a Zarr array and write its results. "
                                     "'daskrnmf fit MODEL --help' lists the model's "
                                     "parameters; model names are case-insensitive.")
    fit_sub = fit.add_subparsers(dest="model", required=True, metavar="MODEL",
                                 title="models")
    for spec in REGISTRY.values():
        _add_model_parser(fit_sub, spec, with_options=spec.name == model)

    ev = sub.add_parser("evaluate", help="ACC, NMI and purity of labels against true ones",
                        description="Score predicted labels against true ones (two 1-D Zarr "
                                    "arrays of the same length): clustering accuracy (ACC, "
                                    "best one-to-one matching of the labels), normalized "
                                    "mutual information (NMI) and purity, as a Markdown "
                                    "table or --json.")
    ev.add_argument("pred", help="Zarr array of predicted labels (e.g. out.zarr/labels)")
    ev.add_argument("true", help="Zarr array of true labels")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _storage_options_option(ev)
    _where(ev)

    mk = sub.add_parser("make-data", help="write a generated problem to a Zarr store",
                        formatter_class=_DefaultsFormatter,
                        description="Write a generated clustering or factorization problem "
                                    "(X, the true labels y, and what the generator adds: "
                                    "outlier flags, column labels, clean images) to a new "
                                    "Zarr store, to try the models and 'daskrnmf evaluate'. "
                                    "blobs is generated chunk by chunk on the workers (any "
                                    "size); the others are small and made in memory.")
    mk.add_argument("generator", choices=("blobs", "coclusters", "segments", "faces"),
                    help="blobs: clusters with outliers, out of core; coclusters, segments "
                         "(ordered samples), faces (ORL faces with block outliers): small")
    mk.add_argument("output", help="Zarr store to write")
    # no argparse default: faces refuses them, segments has its own (see _make_data_sizes)
    mk.add_argument("--n-samples", type=_positive_int, default=argparse.SUPPRESS,
                    help="rows of X (default: 100000); segments: a multiple of 8 (8 "
                         "segments of equal length), default 160; faces: refused (ORL's 400 "
                         "images)")
    mk.add_argument("--n-features", type=_positive_int, default=argparse.SUPPRESS,
                    help="columns of X (default: 32); faces: refused (ORL's 32 x 32 pixels)")
    mk.add_argument("--n-clusters", type=_positive_int, default=5, help="blobs: clusters")
    mk.add_argument("--outlier-fraction", type=_fraction, default=0.05,
                    help="blobs: fraction of rows that are outliers, in [0, 1]")
    mk.add_argument("--rho", type=_fraction, default=0.1,
                    help="faces: outlier density, in [0, 1]")
    mk.add_argument("--chunk-rows", type=_positive_int, default=20_000,
                    help="rows per stored chunk")
    mk.add_argument("--random-state", type=_seed, default=0, help="seed")
    mk.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _where(mk)

    cv = sub.add_parser("convert", help="write a .npy file, an HDF5 dataset or a Zarr "
                                        "array to a Zarr store for fitting",
                        description="Write the array of INPUT (a .npy file, an HDF5 or "
                                    "NetCDF-4 dataset: FILE/DATASET or --component, or a Zarr "
                                    "array) to the Zarr store OUTPUT as its array X, chunk by "
                                    "chunk on the workers (no process holds the whole "
                                    "array); says the rows per chunk it chose and why. Fit "
                                    "it with 'daskrnmf fit MODEL OUTPUT --component X'.")
    cv.add_argument("input", help="a .npy file, an HDF5/NetCDF-4 file (with its dataset: "
                                  "FILE/DATASET or --component) or a Zarr array")
    cv.add_argument("output", help="Zarr store to write (e.g. data.zarr)")
    cv.add_argument("--component", help="the dataset of the HDF5 file, or the array of the "
                                        "Zarr group, to convert")
    cv.add_argument("--chunk-rows", type=_positive_int, default=None,
                    help="rows per stored chunk (default: chunks of about 32 MiB)")
    cv.add_argument("--overwrite", action="store_true", help="replace an existing output "
                                                             "that daskrnmf wrote")
    _where(cv)

    info = sub.add_parser("info", help="what is in a Zarr store",
                          description="List what a Zarr store holds: an array's shape, "
                                      "dtype and chunks, or a group's arrays, subgroups "
                                      "(a fitted model: 'a fitted MODEL (daskrnmf.load)') "
                                      "and attributes. Reads metadata only; starts no "
                                      "cluster.")
    info.add_argument("store", help="Zarr store or array (a local path)")

    sd = sub.add_parser("shutdown", help="shut a running scheduler and its workers down "
                                         "in order (the end of a batch job)",
                        description="Wait until no task runs (at most --timeout seconds), "
                                    "then shut the scheduler of SCHEDULER_FILE and its "
                                    "workers down in order, with Dask's logging silenced "
                                    "for the shutdown: the job scripts' last step "
                                    "(examples/slurm_job.sh, examples/pbs_job.sh).")
    sd.add_argument("--scheduler-file", required=True,
                    help="scheduler file of the running Dask scheduler")
    sd.add_argument("--timeout", type=_positive_seconds, default=60.0,
                    help="seconds to wait for running tasks to end")

    ck = sub.add_parser("choose-k", help="fit a clustering model over a range of k and "
                                         "recommend one (daskrnmf.choose_k)",
                        formatter_class=_DefaultsFormatter,
                        description="Fit RFNMF or RFNMTF for every k of --ks with --n-seeds "
                                    "seeds; print per k the objective, the stability across "
                                    "seeds (mean ARI) and a simplified silhouette, and the "
                                    "recommended k (see daskrnmf.choose_k for the rule).")
    ck.add_argument("model", metavar="MODEL", help="RFNMF or RFNMTF (case-insensitive)")
    ck.add_argument("input", help="Zarr array (path, or store path + --component)")
    ck.add_argument("--component", help="array inside the input store (e.g. X)")
    ck.add_argument("--ks", required=True, type=_k_range,
                    help="the k to try: a range 3-12, a list 3,5,8, or both (2-4,8)")
    ck.add_argument("--n-seeds", type=_positive_int, default=5, help="seeds per k")
    ck.add_argument("--max-samples", type=_positive_int, default=20_000,
                    help="the fits use a uniform sample of this many rows of a larger "
                         "input, which is read twice in all")
    ck.add_argument("--random-state", type=int, default=0, help="seed")
    ck.add_argument("--loss", choices=("l21", "l1", "l2"), help="RFNMF's loss "
                                                                "(default: the model's)")
    ck.add_argument("--n-init", type=_positive_int, help="restarts per seed "
                                                         "(default: the model's)")
    ck.add_argument("--n-column-clusters", type=_positive_int,
                    help="RFNMTF's column clusters (default: the model's)")
    ck.add_argument("--output", help="write the table (Markdown) to this file")
    ck.add_argument("--plot", help="save the figure (PNG) to this file")
    ck.add_argument("--overwrite", action="store_true", help="replace existing --output/--plot")
    _where(ck)
    return parser


def _k_range(text):
    """``3-12``, ``3,5,8`` or ``2-4,8`` -> a sorted list of ints."""
    out = set()
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            if sep and int(hi) < int(lo):
                raise ValueError(part)
            out.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a range like 3-12 or a list like 3,5,8; "
                                         f"got {text!r}") from None
    if len(out) < 2 or min(out) < 2:
        raise argparse.ArgumentTypeError(f"needs at least 2 distinct k, each >= 2; got {text!r}")
    return sorted(out)


def _normalise_model(argv):
    """``fit rfnmf`` -> ``fit RFNMF`` (model names are case-insensitive); the model's name."""
    from .models import REGISTRY

    positional = [i for i, a in enumerate(argv) if not a.startswith("-")]
    if len(positional) < 2 or argv[positional[0]] != "fit" or positional[1] != positional[0] + 1:
        return argv, None
    i = positional[1]
    for name in REGISTRY:
        if name.lower() == argv[i].lower():
            return argv[:i] + [name] + argv[i + 1:], name
    return argv, None


# ---------------------------------------------------------------- paths
# the rules are daskrnmf._stores' (shared with model.save and make_zarr_blobs)
_zarr_root = _stores.zarr_root
_url_key = _stores.url_key
_refuse_overlap = _stores.refuse_overlap
_check_writable = _stores.check_writable
_partial_name = _stores.partial_name


def _is_url(path):
    from .io import is_url

    return is_url(str(path))


def _check_output(path, overwrite, protected=(), storage_options=None):
    """Before any cluster starts: not the input (nor inside or around it), not inside any
    Zarr store, not existing (unless ``overwrite``, and then only a store daskrnmf
    wrote), its directory there and writable (a URL: a probe object written and
    deleted, so wrong credentials and a missing bucket fail now)."""
    _refuse_overlap(path, protected, "output")
    if _is_url(path):
        from . import io

        if io.location_exists(path, storage_options):
            if not overwrite:
                raise CommandError(f"output {path} exists; pass --overwrite to replace it.")
            io.check_replaceable(path, "output", storage_options=storage_options)
        io.check_writable(path, storage_options, "output")
        return
    _stores.check_target(path, "output", overwrite=overwrite, how="--overwrite")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CommandError(f"the directory of output {path} does not exist.")
    _check_writable(parent, "the directory of output")


# ---------------------------------------------------------------- output stores
def _versions():
    import dask
    import distributed
    import sklearn
    import zarr

    return {"daskrnmf": _version(), "dask": dask.__version__,
            "distributed": distributed.__version__, "numpy": np.__version__,
            "zarr": zarr.__version__, "scikit-learn": sklearn.__version__,
            "python": sys.version.split()[0]}


def write_store(path, arrays, attrs, overwrite, *, n_rows=None, row_chunk=None, tmp=None,
                model=None, storage_options=None):
    """Write a Zarr group atomically: under a temporary name, renamed when complete; at
    a URL (an object store, no rename), under a fresh prefix ``path/v-<id>`` (``tmp``,
    from :func:`daskrnmf.io.new_version`), committed by writing the pointer
    ``path/daskrnmf-commit.json`` last, in one PUT (the commit-marker rule of
    :mod:`daskrnmf.io`: readers follow the pointer only, so an interrupted write leaves
    no readable half-result and the previous one intact).

    ``arrays``: name -> NumPy array (small) or Dask array (written chunk by chunk on the
    workers).  Arrays with ``n_rows`` rows are stored in chunks of ``row_chunk`` rows (the
    input's stored chunking), the others in one chunk (Dask: their largest block) along
    the rows; every other axis whole.  ``attrs``: JSON-able metadata.  ``tmp``: the
    temporary name to use (a caller that must remove it after a cluster closes).
    ``model``: a fitted estimator saved in the ``model`` subgroup (``daskrnmf.load`` of
    the store, or of ``STORE/model``, gives it back).
    """
    import dask.array as da
    import zarr

    from . import io

    url = _is_url(path)
    if url:
        tmp = tmp or io.new_version(path)
    else:
        path = os.path.abspath(os.fspath(path))
        tmp = tmp or _partial_name(path)
    try:
        group = zarr.open_group(io.zarr_target(tmp, storage_options, read_only=False), mode="w")
        sources, targets = [], []
        for name, value in arrays.items():
            if isinstance(value, da.Array) and value.ndim == 0:
                value = value.compute()
            per_sample = bool(row_chunk) and np.ndim(value) > 0 and value.shape[0] == n_rows
            if isinstance(value, da.Array):
                rows = row_chunk if per_sample else max(max(value.chunks[0]), 1)
                value = value.rechunk((rows,) + tuple(max(s, 1) for s in value.shape[1:]))
                target = group.create_array(name, shape=value.shape, dtype=value.dtype,
                                            chunks=(rows,) + tuple(max(s, 1)
                                                                   for s in value.shape[1:]))
                sources.append(value)
                targets.append(target)
            else:
                value = np.asarray(value)
                chunks = tuple(max(s, 1) for s in value.shape) or None
                if per_sample:
                    chunks = (row_chunk,) + chunks[1:]
                group.create_array(name, shape=value.shape, dtype=value.dtype,
                                   chunks=chunks)[...] = value
        if sources:
            da.store(sources, targets, lock=False)
        if model is not None:
            from ._persist import write_group

            write_group(model, tmp.rstrip("/") + "/model", storage_options)
        group.attrs.update(json.loads(json.dumps(_stores.mark(attrs), default=_json_default)))
        if url:
            try:
                io.commit(path, tmp, storage_options, overwrite=overwrite)
            except FileExistsError:
                raise CommandError(f"output {path} exists; pass --overwrite to replace "
                                   "it.") from None
            return path
        _stores.check_target(path, "output", overwrite=overwrite,     # again: it may
                             how="--overwrite")                        # have changed since
        _stores.replace_with(tmp, path)
    finally:
        if url:
            io.discard(tmp, storage_options)     # kept when committed
        elif os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return repr(obj)


# ---------------------------------------------------------------- commands
def _open_input(path, component=None, what="input", storage_options=None, files=False):
    """The Zarr array at ``path``; with ``files``, also the reader of a ``.npy`` file or an
    HDF5 dataset (``FILE.h5/DATASET``), as :func:`daskrnmf.io.open_input` gives it."""
    from . import _files
    from .io import open_array, open_input

    found = None if _is_url(path) or not files else _files.split_file_path(path)
    if not _is_url(path) and found is None and not os.path.exists(path):
        raise CommandError(f"{what} {path} does not exist.")
    if files:
        return open_input(path, component, storage_options=storage_options)
    return open_array(path, component, storage_options=storage_options)


def _protected(args, *paths):
    """The local Zarr stores a command reads: ``(resolved root, role)`` pairs."""
    out = []
    for path, role in paths:
        if path and not _is_url(path):
            out.append((_zarr_root(path), role))
        elif path:                     # a URL: the store it names (and what is inside it)
            out.append((_url_key(path), role))
    return out


@contextlib.contextmanager
def _connect(args):
    """The command's Client; Dask's own logging at WARNING unless ``--debug`` (the
    model's ``--progress`` lines are the log), silent while the cluster shuts down."""
    from .cluster import connect, dask_log_level, quiet_task_errors

    tls = {k: getattr(args, k, None) for k in ("tls_ca_file", "tls_client_cert",
                                               "tls_client_key")}
    debug = getattr(args, "debug", False)
    levels = contextlib.nullcontext() if debug else dask_log_level(logging.WARNING)
    with levels, connect(args.cluster, scheduler_file=args.scheduler_file,
                         scheduler_address=args.scheduler_address,
                         tls={k: v for k, v in tls.items() if v} or None,
                         worker_timeout=getattr(args, "worker_timeout", None)) as client:
        # a task that raises: its exception is the command's one line, not also the
        # worker's "Compute Failed" block and traceback (kept with --debug)
        with contextlib.nullcontext() if debug else quiet_task_errors(client):
            yield client


class _Run:
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


def cmd_fit(args, parser):
    import dask
    import dask.array as da
    import zarr

    from . import _validation as v
    from . import io
    from .models import get

    spec = get(args.model)
    cls = spec.cls
    params = {name: getattr(args, dest) for name, dest in args.model_params
              if hasattr(args, dest)}
    resume = getattr(args, "resume", False)
    fit_signature = inspect.signature(cls.fit).parameters
    if resume and "checkpoint" in inspect.signature(cls.__init__).parameters \
            and not params.get("checkpoint"):
        args.model_parser.error(f"--resume continues a checkpointed {spec.name} fit: give "
                                "--checkpoint DIR.")
    if args.tls_ca_file or args.tls_client_cert or args.tls_client_key:
        if not args.scheduler_address:
            args.model_parser.error("--tls-* options go with --scheduler-address tls://HOST:PORT.")

    # everything that can be checked is checked before a cluster starts
    so = args.storage_options
    protected = _protected(args, (args.input, "input"), (getattr(args, "labels", None), "labels"))
    z = None
    if _is_url(args.input):   # wrong credentials, a missing bucket: before anything is written
        z = _open_input(args.input, args.component, storage_options=so)
    checkpoint = params.get("checkpoint")
    has_checkpoint = isinstance(checkpoint, (str, os.PathLike)) and os.fspath(checkpoint) != ""
    if has_checkpoint:          # not the input, nor in or around the output (either way)
        _refuse_overlap(checkpoint, protected + _protected(args, (args.output, "output")),
                        "checkpoint")
    _check_output(args.output, args.overwrite, protected, so)
    if has_checkpoint:
        if _is_url(checkpoint):
            from .io import check_writable

            check_writable(checkpoint, so, "checkpoint location")
        else:
            _check_writable(checkpoint, "checkpoint directory")
        from ._checkpoint import holds_run

        if not resume and not args.overwrite and holds_run(checkpoint, so):
            raise CommandError(f"checkpoint directory {checkpoint} holds an earlier run's "
                               "checkpoint; pass --resume to continue it or --overwrite to "
                               "replace it.")
    scratch_root = args.scratch or dask.config.get("daskrnmf.scratch-directory", None) \
        or (None if _is_url(args.output) else os.path.dirname(os.path.abspath(args.output)))
    if scratch_root is not None:   # a URL output and nothing set: the library's default
        _refuse_overlap(scratch_root, protected, "scratch directory", around=False)
        _check_writable(scratch_root, "scratch directory")
    if z is None:
        z = _open_input(args.input, args.component, storage_options=so, files=True)
    y = _open_input(args.labels, what="labels", storage_options=so) if spec.needs_y else None
    model = cls(**params)
    bar = None
    if "callback" in model.get_params():
        from .progress import ProgressBar

        bar = ProgressBar(spec.name, log=args.progress)
        model.set_params(callback=bar)
    v.validate_params(model, model._parameter_constraints)
    X = io.check_array(z, estimator_name=spec.name)
    if isinstance(z, zarr.Array):
        row_chunk = int(z.chunks[0])        # the outputs are stored like the input's rows
    else:                                   # a .npy file or an HDF5 dataset: its blocks
        z, row_chunk = X, int(X.chunks[0][0])
    logger, handler, level = logging.getLogger("daskrnmf"), None, None
    if args.progress:    # the model's lines only; Dask's logging is quiet (see _connect)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    fit_kwargs = {} if so is None else {"storage_options": so}
    if resume:
        fit_kwargs["resume"] = True
    elif args.overwrite and "overwrite_checkpoint" in fit_signature:
        fit_kwargs["overwrite_checkpoint"] = True    # replace an earlier run's checkpoint

    run = _Run()
    scratch_config = {}
    if scratch_root is not None:
        os.makedirs(scratch_root, exist_ok=True)
        scratch_config["daskrnmf.scratch-directory"] = run.remove_later(
            _stores.make_scratch(scratch_root))
    if _is_url(args.output):
        from . import io

        tmp = io.new_version(args.output)
        run.remove_later(tmp, lambda: io.discard(tmp, so))   # kept once committed
    else:
        tmp = run.remove_later(_partial_name(args.output))
    try:
        with _connect(args), dask.config.set(scratch_config):
            tic = time.perf_counter()
            try:
                if spec.needs_y:
                    model.fit(z, da.from_zarr(y), **fit_kwargs)
                else:
                    model.fit(z, **fit_kwargs)
            finally:
                if bar is not None:
                    bar.close()
                    model.set_params(callback=None)
            fit_seconds = time.perf_counter() - tic
            arrays = _fit_outputs(model, z)
            tic = time.perf_counter()
            attrs = {"model": spec.name, "params": _plain_params(model),
                     "input": args.input if _is_url(args.input) else os.path.abspath(args.input),
                     "component": args.component,
                     "outputs": sorted(arrays), "fit_seconds": fit_seconds,
                     "scalars": _scalars(model), "versions": _versions()}
            write_store(args.output, arrays, attrs, args.overwrite, n_rows=z.shape[0],
                        row_chunk=row_chunk, tmp=tmp, model=model, storage_options=so)
    finally:
        run.cleanup()
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(level)
    print(f"{spec.name} fitted in {fit_seconds:.1f} s; wrote {', '.join(sorted(arrays))} "
          f"and the fitted model (daskrnmf.load) to {args.output} "
          f"({time.perf_counter() - tic:.1f} s)")
    return 0


def _float_dtype(X):
    dt = np.dtype(X.dtype)
    return dt if dt in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float64)


def _fit_outputs(model, X):
    """The model's per-sample outputs for X (``model._outputs``, floats in X's float
    dtype) and its small fitted arrays (NumPy attributes ending in ``_``, except one
    that is an output under another name)."""
    dtype = _float_dtype(X)
    arrays = {}
    for name, value in model._outputs(X).items():
        if np.dtype(value.dtype).kind == "f" and value.dtype != dtype:
            value = value.astype(dtype)
        arrays[name] = value
    # a fitted array that is an output under another name (RFNMTF's row_labels_ is its
    # labels_) is written once, under the output's name
    outputs = [getattr(model, name + "_", None) for name in arrays]
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_") and isinstance(value, np.ndarray) \
                and value.dtype.kind in "biuf" and key.rstrip("_") not in arrays \
                and not any(value is out for out in outputs):
            arrays[key.rstrip("_")] = value
    return arrays


def _plain_params(model):
    return {k: v for k, v in model.get_params(deep=False).items()
            if v is None or isinstance(v, (bool, int, float, str))}


def _scalars(model):
    out = {}
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_"):
            if isinstance(value, (bool, int, float, np.integer, np.floating)):
                out[key] = value.item() if isinstance(value, np.generic) else value
    return out


def cmd_evaluate(args, parser):
    import dask.array as da

    from .metrics import clustering_accuracy, normalized_mutual_info, purity

    so = args.storage_options
    pred = da.from_zarr(_open_input(args.pred, what="predicted labels", storage_options=so))
    true = da.from_zarr(_open_input(args.true, what="true labels", storage_options=so))
    if pred.ndim != 1 or true.ndim != 1 or pred.shape != true.shape:
        raise CommandError(f"labels must be 1-D arrays of the same length; got {pred.shape} "
                           f"and {true.shape}.")
    if pred.shape[0] == 0:
        raise CommandError(f"the labels {args.pred} and {args.true} are empty (0 samples); "
                           "there is nothing to compare.")
    with _connect(args):
        scores = {"ACC": clustering_accuracy(true, pred), "NMI": normalized_mutual_info(true, pred),
                  "purity": purity(true, pred), "n_samples": int(pred.shape[0])}
    if args.json:
        print(json.dumps(scores))
    else:
        print("| metric | value |\n|---|---:|")
        for k in ("ACC", "NMI", "purity"):
            print(f"| {k} | {scores[k]:.4f} |")
    return 0


def _make_data_sizes(args):
    """Set ``args.n_samples`` / ``args.n_features`` for the generator, refusing what it
    cannot honour, and refuse sizes that cannot fit, before anything starts or is written:
    the store on the output's disk, and in memory a chunk (blobs, generated chunk by chunk
    on the workers) or the whole problem (the other generators, made in memory)."""
    import psutil

    given = {k: getattr(args, k) for k in ("n_samples", "n_features") if hasattr(args, k)}
    gen = args.generator
    if gen == "faces":
        if given:
            raise CommandError("make-data faces is the ORL set of 400 images of 32 x 32 pixels; "
                               f"--{'/--'.join(k.replace('_', '-') for k in given)} do not "
                               "apply (use blobs, coclusters or segments for other sizes).")
        args.n_samples, args.n_features = 400, 1024
        return
    args.n_features = given.get("n_features", 32)
    args.n_samples = given.get("n_samples", 160 if gen == "segments" else 100_000)
    if gen == "segments" and args.n_samples % 8:
        raise CommandError(f"make-data segments makes 8 segments of equal length: --n-samples "
                           f"must be a multiple of 8; got {args.n_samples}.")
    n, d = args.n_samples, args.n_features
    memory = psutil.virtual_memory().available
    # generating a block takes a few copies of it (noise, gross values, their order)
    rows = min(args.chunk_rows, n) if gen == "blobs" else n
    need = 4 * rows * d * 8
    if need > memory:
        raise CommandError(f"make-data {gen}: generating {rows} x {d} float64 at once needs "
                           f"about {_bytes(need)}, more than the {_bytes(memory)} of memory "
                           "available; choose a smaller "
                           f"{'--chunk-rows' if gen == 'blobs' else '--n-samples'} or "
                           "--n-features.")
    total = n * (8 * d + 8)                 # X in float64, y and outlier / column labels
    free = shutil.disk_usage(_stores.nearest_existing(os.path.dirname(os.path.abspath(args.output))))
    if total > free.free:
        raise CommandError(f"make-data {gen}: {n} x {d} float64 is {_bytes(total)}, more than "
                           f"the {_bytes(free.free)} free where {args.output} goes; choose a "
                           "smaller --n-samples or --n-features.")


def _bytes(n):
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000


def cmd_make_data(args, parser):
    from . import datasets

    if _is_url(args.output):
        raise CommandError(f"make-data writes local stores; got {args.output}. Write it "
                           "locally and copy it (daskrnmf fit reads URLs).")
    _check_output(args.output, args.overwrite)
    _make_data_sizes(args)
    run = _Run()
    tmp = run.remove_later(_partial_name(args.output))
    try:
        with _connect(args):
            if args.generator == "blobs":
                # straight into the run's temporary name (removed after the cluster
                # closes: no worker still writes into it), then checked again and renamed
                datasets.write_blobs(tmp, n_samples=args.n_samples, n_features=args.n_features,
                                     n_clusters=args.n_clusters,
                                     outlier_fraction=args.outlier_fraction,
                                     chunk_rows=args.chunk_rows, random_state=args.random_state)
                _stores.check_target(args.output, "output", overwrite=args.overwrite,
                                     how="--overwrite")
                _stores.replace_with(tmp, args.output)
            else:
                arrays = _small_problem(args)
                write_store(args.output, arrays, {"generator": args.generator,
                                                  "random_state": args.random_state},
                            args.overwrite, tmp=tmp)
    finally:
        run.cleanup()
    print(f"wrote {args.generator} to {args.output}")
    return 0


def cmd_convert(args, parser):
    from . import _files, io
    from ._validation import _check_shape_dtype

    for path, what in ((args.input, "input"), (args.output, "output")):
        if _is_url(path):
            raise CommandError(f"convert reads and writes local files; got the {what} {path}. "
                               "daskrnmf fit reads Zarr URLs as they are.")
    found = _files.split_file_path(args.input)
    if found is None and not os.path.exists(args.input):
        raise CommandError(f"input {args.input} does not exist.")
    _check_output(args.output, args.overwrite,
                  _protected(args, (found[0] if found else args.input, "input")))
    node = io.open_input(args.input, args.component)      # the header only
    _check_shape_dtype(node, f"input {args.input}")
    rows, why = io.chunk_advice(node.shape, node.dtype, args.chunk_rows)
    n, d = node.shape
    itemsize = np.dtype(node.dtype).itemsize
    print(f"convert {args.input} ({n} x {d} {np.dtype(node.dtype)}, "
          f"{_bytes(n * d * itemsize)}): {rows} rows per chunk "
          f"({_bytes(rows * d * itemsize)}): {why}")
    attrs = {"converted_from": os.path.abspath(args.input), "component": args.component}
    run = _Run()
    tmp = run.remove_later(_partial_name(args.output))
    try:
        with _connect(args):
            write_store(args.output, {"X": io.row_blocks(node, rows)}, attrs, args.overwrite,
                        n_rows=n, row_chunk=rows, tmp=tmp)
    finally:
        run.cleanup()
    print(f"wrote {args.output}/X; fit it with: daskrnmf fit MODEL {args.output} --component X")
    return 0


def _small_problem(args):
    import dask.array as da

    from . import datasets

    if args.generator == "coclusters":
        X, y, cols = datasets.make_coclusters(args.n_samples, args.n_features,
                                              random_state=args.random_state)[:3]
        out = {"X": X, "y": y, "column_labels": cols}
    elif args.generator == "segments":
        X, y = datasets.make_ordered_segments(n_features=args.n_features,
                                              segment_length=args.n_samples // 8,
                                              random_state=args.random_state)
        out = {"X": X, "y": y}
    else:
        faces, y = datasets.load_orl()
        clean, X, mask = datasets.corrupt_images(faces, args.rho, random_state=args.random_state)
        out = {"X": X, "y": y, "clean": clean, "outlier": mask}
    rows = args.chunk_rows
    return {k: da.from_array(np.asarray(v), chunks=(rows,) + np.shape(v)[1:])
            if np.ndim(v) and np.shape(v)[0] == out["X"].shape[0] else np.asarray(v)
            for k, v in out.items()}


def cmd_info(args, parser):
    import zarr

    if not os.path.exists(args.store):
        raise CommandError(f"store {args.store} does not exist.")
    try:
        node = zarr.open(store=args.store, mode="r")
    except Exception as exc:
        raise CommandError(f"{args.store} is not a Zarr store ({type(exc).__name__}).") from None
    if isinstance(node, zarr.Array):
        print(f"array {args.store}: shape {node.shape}, dtype {node.dtype}, chunks {node.chunks}")
        return 0
    print(f"group {args.store}")
    for name, arr in sorted(node.arrays()):
        print(f"  {name}: shape {arr.shape}, dtype {arr.dtype}, chunks {arr.chunks}")
    for name, group in sorted(node.groups()):
        saved = dict(group.attrs).get("format") == "daskrnmf-model"
        print(f"  {name}/: " + (f"a fitted {group.attrs.get('model')} (daskrnmf.load)"
                                if saved else "group"))
    attrs = dict(node.attrs)
    for key in sorted(attrs):
        text = json.dumps(attrs[key])
        print(f"  @{key}: {text if len(text) < 200 else text[:197] + '...'}")
    return 0


def cmd_choose_k(args, parser):
    from .models import get
    from .selection import K_PARAMETER, _check_arguments, choose_k

    spec = get(args.model)
    if spec.name not in K_PARAMETER:
        raise CommandError(f"choose-k supports {', '.join(K_PARAMETER)}; got {spec.name}.")
    params = {}
    if args.loss is not None:
        if spec.name != "RFNMF":
            raise CommandError("--loss is a parameter of RFNMF.")
        params["loss"] = args.loss
    if args.n_init is not None:
        params["n_init"] = args.n_init
    if args.n_column_clusters is not None:
        if spec.name != "RFNMTF":
            raise CommandError("--n-column-clusters is a parameter of RFNMTF.")
        params["n_column_clusters"] = args.n_column_clusters
    protected = _protected(args, (args.input, "input"))
    if args.output and args.plot and _stores.real(args.output) == _stores.real(args.plot):
        raise CommandError(f"--output and --plot are the same file ({args.output}); give two.")
    for path, what in ((args.output, "--output"), (args.plot, "--plot")):
        if path:
            _check_file_target(path, what, args.overwrite, protected)
    z = _open_input(args.input, args.component)
    estimator = spec.cls(**params)
    _check_arguments(estimator, z, args.ks, n_seeds=args.n_seeds,    # before a cluster starts
                     random_state=args.random_state, max_samples=args.max_samples)
    with _connect(args):
        tic = time.perf_counter()
        result = choose_k(estimator, z, args.ks, n_seeds=args.n_seeds,
                          random_state=args.random_state, max_samples=args.max_samples)
        seconds = time.perf_counter() - tic
    table = result.to_markdown()
    print(table)
    print(f"recommended k = {result.k} ({spec.name}, {args.n_seeds} seeds, {seconds:.1f} s, "
          f"{result.n_passes} passes over the input)")
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(f"# choose-k: {spec.name} on {args.input}\n\n{table}\n\n"
                     f"Recommended k = {result.k}.\n")
    if args.plot:
        from .plotting import _pyplot, savefig

        fig = result.plot()
        savefig(fig, args.plot, title=f"choose-k {spec.name}")
        _pyplot().close(fig)
    return 0


def _check_file_target(path, what, overwrite, protected):
    """A file a command writes at its end (choose-k's table and figure), checked before
    the work: not the input, not a directory, not existing unless ``overwrite``, its
    directory there and writable, and for a figure a format matplotlib writes."""
    _refuse_overlap(path, protected, what)
    if os.path.isdir(path):
        raise CommandError(f"{what} {path} is a directory; give a file name.")
    if os.path.lexists(path) and not overwrite:
        raise CommandError(f"{what} {path} exists; pass --overwrite to replace it.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CommandError(f"the directory of {what} {path} does not exist.")
    _check_writable(parent, f"the directory of {what}")
    if what == "--plot":
        from matplotlib.figure import Figure

        kinds = Figure().canvas.get_supported_filetypes()
        ext = os.path.splitext(path)[1].lower().lstrip(".")
        if ext not in kinds:
            found = f"matplotlib cannot write '.{ext}' files" if ext else "no file extension"
            raise CommandError(f"{what} {path}: {found}; end the name with one of "
                               f".{', .'.join(sorted(kinds))}.")


def cmd_shutdown(args, parser):
    from .cluster import shutdown

    if not shutdown(args.scheduler_file, timeout=args.timeout):
        print(f"daskrnmf: no scheduler to shut down at {args.scheduler_file} (already "
              "closed)", file=sys.stderr)
    return 0


COMMANDS = {"fit": cmd_fit, "evaluate": cmd_evaluate, "make-data": cmd_make_data, "info": cmd_info,
            "choose-k": cmd_choose_k, "convert": cmd_convert, "shutdown": cmd_shutdown}


# ---------------------------------------------------------------- signals
class _Signals:
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
        _quiet_dask()
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        return False


def _stdout_gone():
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


def _quiet_dask():
    from .cluster import SILENT, raise_log_levels

    raise_log_levels(SILENT)


def main(argv=None):
    """Entry point of the ``daskrnmf`` console script; returns the exit status."""
    import warnings

    from .cluster import NoWorkersError

    argv = list(sys.argv[1:] if argv is None else argv)
    argv, model = _normalise_model(argv)
    parser = _parser(model)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:            # --help, --version (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    shown = warnings.showwarning
    if not args.debug:   # warnings in batch logs: one line each, like errors
        warnings.showwarning = lambda message, category, *rest, **kw: print(
            f"daskrnmf: warning: {message}", file=sys.stderr)
    with _Signals() as signals:
        try:
            return COMMANDS[args.command](args, parser)
        except SystemExit as exc:        # parser.error inside a command
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        except KeyboardInterrupt:
            signum = signals.received or signal.SIGINT
            name = signal.Signals(signum).name
            print(f"daskrnmf: {'terminated' if signum == signal.SIGTERM else 'interrupted'} "
                  f"({name}); partial output and scratch removed", file=sys.stderr)
            return EXIT_SIGNAL[signum]
        except Exception as exc:
            if isinstance(exc, BrokenPipeError) and _stdout_gone():
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
