"""The command line, built from the registry: one ``daskrnmf fit MODEL`` per
:data:`daskrnmf.models.REGISTRY` entry, with what its :class:`~daskrnmf.models.ModelSpec`
says (``--labels`` for ``needs_y``, ``--checkpoint DIR`` and ``--resume`` for
``resumable``) and the model's parameters (:mod:`._params`); the other commands' options;
argument types that refuse a wrong value as a usage error (exit 2).

Building it imports no model but the one named on the command line (its options), so
``daskrnmf --help`` and ``daskrnmf info`` stay quick.
"""

import argparse
import difflib
import json
import sys

from .. import __version__
from ..models import REGISTRY
from ..selection import K_PARAMETER
from ._params import CHECKPOINT, model_options


# ---------------------------------------------------------------- argument types
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


# ---------------------------------------------------------------- the parser
class _Parser(argparse.ArgumentParser):
    """An ArgumentParser (every subcommand's too) that takes an option in any letter case
    when only one option matches (``--alpha-r`` for ``--alpha-R``) and names the option
    meant when one is not recognised (``--n_clusters``: did you mean ``--n-clusters``?).
    Python's argparse suggests only from 3.14 (``suggest_on_error``)."""

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


def normalise_model(argv):
    """``fit rfnmf`` -> ``fit RFNMF`` (model names are case-insensitive); the model's name."""
    positional = [i for i, a in enumerate(argv) if not a.startswith("-")]
    if len(positional) < 2 or argv[positional[0]] != "fit" or positional[1] != positional[0] + 1:
        return argv, None
    i = positional[1]
    for name in REGISTRY:
        if name.lower() == argv[i].lower():
            return argv[:i] + [name] + argv[i + 1:], name
    return argv, None


def build(model=None):
    """The argument parser; ``model``: the registered model whose options to build."""
    parser = _Parser(
        prog="daskrnmf", description="Robust NMF and clustering out of core on Dask and Zarr.",
        epilog="Exit status: 0 done, 1 failed (one line on stderr), 2 wrong command line, "
               "130 interrupted (SIGINT), 143 terminated (SIGTERM). Model parameters are "
               "options named after them: 'daskrnmf fit MODEL --help'.")
    parser.add_argument("--version", action="version", version=f"daskrnmf {__version__}")
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
    _add_evaluate(sub)
    _add_make_data(sub)
    _add_convert(sub)
    _add_info(sub)
    _add_shutdown(sub)
    _add_choose_k(sub)
    return parser


# ---------------------------------------------------------------- options many commands share
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


# ---------------------------------------------------------------- fit MODEL
def _add_model_parser(fit_sub, spec, with_options):
    """``daskrnmf fit NAME``: the run options, those the registry gives the model, and,
    when ``with_options``, the model's parameters (building them imports the model, so
    only the one asked for is built)."""
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
                   help="replace an existing output" + (" and, without --resume, an earlier "
                                                        "run's checkpoint"
                                                        if spec.resumable else ""))
    if spec.needs_y:
        p.add_argument("--labels", required=True, help="Zarr array of the class labels")
    if spec.resumable:
        p.add_argument("--" + CHECKPOINT, dest=CHECKPOINT, metavar="DIR",
                       help="directory (or URL) the fit keeps its state in as it goes: "
                            "written atomically, fingerprinted against the input and the "
                            "parameters, kept when the job is killed or reaches its time "
                            "limit; only daskrnmf's own files in it are ever replaced")
        p.add_argument("--resume", action="store_true",
                       help="continue the fit kept in --checkpoint (a killed job's, with the "
                            "same input and parameters): it ends as the uninterrupted fit")
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
        options = model_options(spec.cls)
        for name, default, convert, metavar, help_text in options:
            dest = "param:" + name
            group.add_argument("--" + name.replace("_", "-"), dest=dest, type=convert,
                               metavar=metavar, default=argparse.SUPPRESS, help=help_text)
            params.append((name, dest))
        known = {name: convert for name, _, convert, _, _ in options}
        for old, new in getattr(spec.cls, "_renamed_params", {}).items():
            if new in known:      # old names keep working for one release, with a warning
                group.add_argument("--" + old.replace("_", "-"), dest="param:" + new,
                                   type=known[new], default=argparse.SUPPRESS,
                                   help=argparse.SUPPRESS, action=_renamed(old, new))
    p.set_defaults(model=spec.name, model_params=params, model_parser=p)
    if not spec.resumable:           # the same namespace for every model
        p.set_defaults(**{CHECKPOINT: None, "resume": False})
    return p


def _renamed(old, new):
    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"daskrnmf: warning: {option_string} was renamed "
                  f"--{new.replace('_', '-')}; the old name will be removed in a later "
                  "release.", file=sys.stderr)
            setattr(namespace, self.dest, values)
    return Renamed


# ---------------------------------------------------------------- the other commands
def _add_evaluate(sub):
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


def _add_make_data(sub):
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
    # no argparse default: faces refuses them, segments has its own (see _data.sizes)
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


def _add_convert(sub):
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


def _add_info(sub):
    info = sub.add_parser("info", help="what is in a Zarr store",
                          description="List what a Zarr store holds: an array's shape, "
                                      "dtype and chunks, or a group's arrays, subgroups "
                                      "(a fitted model: 'a fitted MODEL (daskrnmf.load)') "
                                      "and attributes. Reads metadata only; starts no "
                                      "cluster.")
    info.add_argument("store", help="Zarr store or array (a local path)")


def _add_shutdown(sub):
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


#: choose-k's options that set a parameter of the model, where the model has it
CHOOSE_K_PARAMETERS = ("loss", "n_init", "n_column_clusters")


def _add_choose_k(sub):
    models = " or ".join(K_PARAMETER)
    ck = sub.add_parser("choose-k", help="fit a clustering model over a range of k and "
                                         "recommend one (daskrnmf.choose_k)",
                        formatter_class=_DefaultsFormatter,
                        description=f"Fit {models} for every k of --ks with --n-seeds "
                                    "seeds; print per k the objective, the stability across "
                                    "seeds (mean ARI) and a simplified silhouette, and the "
                                    "recommended k (see daskrnmf.choose_k for the rule).")
    ck.add_argument("model", metavar="MODEL", help=f"{models} (case-insensitive)")
    ck.add_argument("input", help="Zarr array (path, or store path + --component)")
    ck.add_argument("--component", help="array inside the input store (e.g. X)")
    ck.add_argument("--ks", required=True, type=_k_range,
                    help="the k to try: a range 3-12, a list 3,5,8, or both (2-4,8)")
    ck.add_argument("--n-seeds", type=_positive_int, default=5, help="seeds per k")
    ck.add_argument("--max-samples", type=_positive_int, default=20_000,
                    help="the fits use a uniform sample of this many rows of a larger "
                         "input, which is read twice in all")
    ck.add_argument("--random-state", type=int, default=0, help="seed")
    ck.add_argument("--loss", help="the model's loss, for a model that has one (default: "
                                   "the model's)")
    ck.add_argument("--n-init", type=_positive_int, help="restarts per seed "
                                                         "(default: the model's)")
    ck.add_argument("--n-column-clusters", type=_positive_int,
                    help="column clusters, for a co-clustering model (default: the model's)")
    ck.add_argument("--output", help="write the table (Markdown) to this file")
    ck.add_argument("--plot", help="save the figure (PNG) to this file")
    ck.add_argument("--overwrite", action="store_true", help="replace existing --output/--plot")
    _where(ck)
