"""The ``daskrnmf`` command: batch jobs that fit, evaluate, make data and describe stores.

    daskrnmf fit MODEL INPUT --output OUT.zarr [--overwrite] [--PARAM VALUE ...]
    daskrnmf evaluate PRED TRUE [--json]
    daskrnmf make-data {blobs,coclusters,segments,faces} OUT.zarr [options]
    daskrnmf info STORE

Where a command runs: ``--cluster CONFIG.yaml``, ``--scheduler-file FILE`` or
``--scheduler-address ADDR``; with none, a LocalCluster sized to the machine.

Exit status: 0 done; 1 the input, the parameters or the run failed (one line on stderr,
no traceback; ``--debug`` shows it); 2 the command line itself is wrong.  Output stores are
written under a temporary name and renamed into place only when complete, so a killed job
never leaves a result that looks whole; an existing output is kept unless ``--overwrite``.
"""

import argparse
import json
import os
import shutil
import sys
import time
import uuid

import numpy as np

MODELS = ("RFNMF", "RFNMTF", "NMF", "RNMF", "ORNMF", "SemiNMF", "MNMF", "ONMFO", "RobustNMF")


class CommandError(Exception):
    """A failure to report in one line with exit status 1."""


# ---------------------------------------------------------------- parsing
def _parser():
    parser = argparse.ArgumentParser(
        prog="daskrnmf", description="Robust NMF and clustering out of core on Dask and Zarr.",
        epilog="Model parameters are given as options named after them, e.g. "
               "'daskrnmf fit RFNMF data.zarr/X --n-clusters 10 --loss l1'.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    def where(p):
        g = p.add_mutually_exclusive_group()
        g.add_argument("--cluster", help="cluster configuration (YAML, see cluster_configs/)")
        g.add_argument("--scheduler-file", help="scheduler file of a running Dask scheduler")
        g.add_argument("--scheduler-address", help="address of a running Dask scheduler")

    fit = sub.add_parser("fit", help="fit a model to a Zarr array and write its results")
    fit.add_argument("model", help="one of " + ", ".join(MODELS))
    fit.add_argument("input", help="Zarr array (path, or store path + --component)")
    fit.add_argument("--component", help="array inside the input store (e.g. X)")
    fit.add_argument("--output", required=True, help="Zarr store to write")
    fit.add_argument("--overwrite", action="store_true", help="replace an existing output")
    fit.add_argument("--labels", help="Zarr array of class labels (MNMF)")
    fit.add_argument("--scratch", help="directory every worker can read and write, for the "
                                       "per-block state that lets a fit survive a lost worker "
                                       "(default: dask config 'daskrnmf.scratch-directory', "
                                       "else the output's directory)")
    fit.add_argument("--resume", action="store_true",
                     help="ONMFO: continue from --checkpoint after a killed job")
    fit.add_argument("--progress", action="store_true",
                     help="log one line per iteration (per batch for ONMFO), also when not on "
                          "a terminal")
    where(fit)

    ev = sub.add_parser("evaluate", help="ACC, NMI and purity of labels against true ones")
    ev.add_argument("pred", help="Zarr array of predicted labels (e.g. out.zarr/labels)")
    ev.add_argument("true", help="Zarr array of true labels")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    where(ev)

    mk = sub.add_parser("make-data", help="write a generated problem to a Zarr store")
    mk.add_argument("generator", choices=("blobs", "coclusters", "segments", "faces"))
    mk.add_argument("output")
    mk.add_argument("--n-samples", type=int, default=100_000)
    mk.add_argument("--n-features", type=int, default=32)
    mk.add_argument("--n-clusters", type=int, default=5)
    mk.add_argument("--outlier-fraction", type=float, default=0.05)
    mk.add_argument("--rho", type=float, default=0.1, help="faces: outlier density")
    mk.add_argument("--chunk-rows", type=int, default=20_000)
    mk.add_argument("--random-state", type=int, default=0)
    mk.add_argument("--overwrite", action="store_true")
    where(mk)

    info = sub.add_parser("info", help="what is in a Zarr store")
    info.add_argument("store")
    return parser


def _coerce(text):
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


def model_params(cls, extra):
    """``--name value`` pairs (``--name=value`` too) checked against ``cls``'s parameters."""
    names = set(cls().get_params(deep=False)) - {"callback"}
    params, i = {}, 0
    while i < len(extra):
        tok = extra[i]
        if not tok.startswith("--"):
            raise CommandError(f"unexpected argument {tok!r}; model parameters are options "
                               f"like --n-components 8.")
        key, _, value = tok[2:].partition("=")
        if not _:
            if i + 1 >= len(extra):
                raise CommandError(f"option {tok} needs a value.")
            value, i = extra[i + 1], i + 1
        name = key.replace("-", "_")
        if name not in names:
            raise CommandError(f"unknown parameter {tok} for {cls.__name__}; its parameters are "
                               + ", ".join("--" + n.replace("_", "-") for n in sorted(names)) + ".")
        params[name] = _coerce(value)
        i += 1
    return params


# ---------------------------------------------------------------- output stores
def _versions():
    import dask
    import distributed
    import sklearn
    import zarr

    from . import __version__

    return {"daskrnmf": __version__, "dask": dask.__version__,
            "distributed": distributed.__version__, "numpy": np.__version__,
            "zarr": zarr.__version__, "scikit-learn": sklearn.__version__,
            "python": sys.version.split()[0]}


def _check_output(path, overwrite):
    if os.path.exists(path) and not overwrite:
        raise CommandError(f"output {path} exists; pass --overwrite to replace it.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CommandError(f"the directory of output {path} does not exist.")


def write_store(path, arrays, attrs, overwrite):
    """Write a Zarr group atomically: under a temporary name, renamed when complete.

    ``arrays``: name -> NumPy array (small) or Dask array (written chunk by chunk on the
    workers, chunked like it).  ``attrs``: JSON-able metadata.
    """
    import dask.array as da
    import zarr

    path = os.path.abspath(os.fspath(path))
    tmp = f"{path}.partial-{uuid.uuid4().hex[:8]}"
    try:
        group = zarr.open_group(tmp, mode="w")
        sources, targets = [], []
        for name, value in arrays.items():
            if isinstance(value, da.Array):
                chunks = tuple(max(c) if c else 1 for c in value.chunks)
                if value.ndim == 2:
                    value = value.rechunk({1: value.shape[1]})
                    chunks = (max(value.chunks[0]), value.shape[1])
                value = value.rechunk({0: chunks[0]})  # regular chunks, as Zarr needs
                target = group.create_array(name, shape=value.shape, chunks=chunks,
                                            dtype=value.dtype)
                sources.append(value)
                targets.append(target)
            else:
                value = np.asarray(value)
                group.create_array(name, shape=value.shape, dtype=value.dtype,
                                   chunks=value.shape or None)[...] = value
        if sources:
            da.store(sources, targets, lock=False)
        group.attrs.update(json.loads(json.dumps(attrs, default=_json_default)))
        if os.path.exists(path):
            trash = f"{path}.old-{uuid.uuid4().hex[:8]}"
            os.rename(path, trash)
            os.rename(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, path)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return repr(obj)


# ---------------------------------------------------------------- commands
def _open_input(path, component=None, what="input"):
    from .io import open_array

    if not os.path.exists(path):
        raise CommandError(f"{what} {path} does not exist.")
    return open_array(path, component)


def cmd_fit(args, extra):
    import dask
    import dask.array as da

    import daskrnmf

    from . import _validation as v

    names = {m.lower(): m for m in MODELS}
    if args.model.lower() not in names:
        raise CommandError(f"unknown model {args.model!r}; choose one of {', '.join(MODELS)}.")
    cls = getattr(daskrnmf, names[args.model.lower()])
    params = model_params(cls, extra)
    if args.resume and "checkpoint" not in params:
        raise CommandError("--resume continues a checkpointed ONMFO fit: give --checkpoint "
                           "DIR with the model ONMFO.")
    _check_output(args.output, args.overwrite)
    z = _open_input(args.input, args.component)
    model = cls(**params)
    # a redrawn line on a terminal; one log line per iteration / batch with --progress
    bar = None
    if "callback" in model.get_params():
        from .progress import ProgressBar

        bar = ProgressBar(cls.__name__, log=args.progress)
        model.set_params(callback=bar)
    if args.progress:
        import logging

        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # parameters and the array's shape and dtype are checked before a cluster is started
    v.validate_params(model, model._parameter_constraints)
    v.check_array(z, estimator_name=cls.__name__)
    scratch = args.scratch or dask.config.get("daskrnmf.scratch-directory", None) \
        or os.path.dirname(os.path.abspath(args.output))
    with _where(args), dask.config.set({"daskrnmf.scratch-directory": scratch}):
        tic = time.perf_counter()
        if cls.__name__ == "MNMF":
            if not args.labels:
                raise CommandError("MNMF is a classifier: give its class labels with --labels.")
            y = da.from_zarr(_open_input(args.labels, what="labels"))
            model.fit(z, y)
        elif args.resume:
            model.fit(z, resume=True)
        else:
            model.fit(z)
        fit_seconds = time.perf_counter() - tic
        if bar is not None:
            bar.close()
            model.set_params(callback=None)
        arrays = _results(model, z)
        tic = time.perf_counter()
        attrs = {"model": cls.__name__, "params": _plain_params(model), "input": os.path.abspath(args.input),
                 "component": args.component, "fit_seconds": fit_seconds,
                 "scalars": _scalars(model), "versions": _versions()}
        write_store(args.output, arrays, attrs, args.overwrite)
    print(f"{cls.__name__} fitted in {fit_seconds:.1f} s; wrote {', '.join(sorted(arrays))} "
          f"to {args.output} ({time.perf_counter() - tic:.1f} s)")
    return 0


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


def _results(model, z):
    """The arrays a fit leaves: per-sample results chunked like X, the model's small ones."""
    import dask.array as da

    n = z.shape[0]
    arrays = {}
    for key, value in vars(model).items():
        if not key.endswith("_") or key.startswith("_"):
            continue
        if isinstance(value, da.Array) or (isinstance(value, np.ndarray) and value.ndim
                                           and value.shape[0] == n and value.size > 1):
            arrays[key.rstrip("_")] = value if isinstance(value, da.Array) else da.from_array(value)
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            arrays[key.rstrip("_")] = value
    if hasattr(model, "decompose"):
        H, R = model.decompose(z)
        arrays["H"], arrays["R"] = H, R
    elif hasattr(model, "components_") and hasattr(model, "transform") and "labels" not in arrays:
        arrays["H"] = model.transform(z)
    if type(model).__name__ == "MNMF":
        arrays["predictions"] = model.predict(z)
    return arrays


class _where:
    """Context manager: connect to where the command runs."""

    def __init__(self, args):
        self.args = args
        self.ctx = None

    def __enter__(self):
        from .cluster import connect

        self.ctx = connect(self.args.cluster, scheduler_file=self.args.scheduler_file,
                           scheduler_address=self.args.scheduler_address)
        return self.ctx.__enter__()

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc)


def cmd_evaluate(args, extra):
    import dask.array as da

    from .metrics import clustering_accuracy, normalized_mutual_info, purity

    pred = da.from_zarr(_open_input(args.pred, what="predicted labels"))
    true = da.from_zarr(_open_input(args.true, what="true labels"))
    if pred.ndim != 1 or true.ndim != 1 or pred.shape != true.shape:
        raise CommandError(f"labels must be 1-D arrays of the same length; got {pred.shape} "
                           f"and {true.shape}.")
    with _where(args):
        scores = {"ACC": clustering_accuracy(true, pred), "NMI": normalized_mutual_info(true, pred),
                  "purity": purity(true, pred), "n_samples": int(pred.shape[0])}
    if args.json:
        print(json.dumps(scores))
    else:
        print("| metric | value |\n|---|---:|")
        for k in ("ACC", "NMI", "purity"):
            print(f"| {k} | {scores[k]:.4f} |")
    return 0


def cmd_make_data(args, extra):
    from . import datasets

    _check_output(args.output, args.overwrite)
    with _where(args):
        if args.generator == "blobs":
            tmp = f"{os.path.abspath(args.output)}.partial-{uuid.uuid4().hex[:8]}"
            try:
                datasets.make_zarr_blobs(tmp, n_samples=args.n_samples, n_features=args.n_features,
                                         n_clusters=args.n_clusters,
                                         outlier_fraction=args.outlier_fraction,
                                         chunk_rows=args.chunk_rows, random_state=args.random_state)
                if os.path.exists(args.output):
                    shutil.rmtree(args.output)
                os.rename(tmp, args.output)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            arrays = _small_problem(args)
            write_store(args.output, arrays, {"generator": args.generator,
                                              "random_state": args.random_state}, args.overwrite)
    print(f"wrote {args.generator} to {args.output}")
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


def cmd_info(args, extra):
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
    attrs = dict(node.attrs)
    for key in sorted(attrs):
        text = json.dumps(attrs[key])
        print(f"  @{key}: {text if len(text) < 200 else text[:197] + '...'}")
    return 0


COMMANDS = {"fit": cmd_fit, "evaluate": cmd_evaluate, "make-data": cmd_make_data, "info": cmd_info}


def main(argv=None):
    """Entry point of the ``daskrnmf`` console script; returns the exit status."""
    import warnings

    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "fit":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    shown = warnings.showwarning
    if not args.debug:   # warnings in batch logs: one line each, like errors
        warnings.showwarning = lambda message, category, *rest, **kw: print(
            f"daskrnmf: warning: {message}", file=sys.stderr)
    try:
        return COMMANDS[args.command](args, extra)
    except KeyboardInterrupt:
        print("daskrnmf: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not isinstance(exc, (CommandError, ValueError, TypeError, FileNotFoundError,
                                FileExistsError)):
            message = f"{type(exc).__name__}: {message}"
        print(f"daskrnmf: error: {message}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
