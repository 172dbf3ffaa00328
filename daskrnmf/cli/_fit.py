"""``daskrnmf fit MODEL INPUT --output OUT``: any registered model, read from its
:class:`~daskrnmf.models.ModelSpec` (``needs_y``: ``--labels``; ``resumable``:
``--checkpoint DIR`` and ``--resume``, passed on as the estimator's ``checkpoint``
parameter and ``fit``'s ``resume`` and ``overwrite_checkpoint``; ``outputs``: what is
written) and from the estimator (its parameters, ``callback``, ``_outputs``).  Nothing
here names a model.
"""

import contextlib
import logging
import os
import sys
import time

import dask
import dask.array as da
import distributed
import numpy as np
import sklearn
import zarr

from .. import __version__, _stores, io
from .. import _validation as v
from ..models import get
from ..progress import ProgressBar
from . import _locations
from ._output import temporary, write_store
from ._params import CHECKPOINT
from ._run import Run, connect


def cmd_fit(args, parser):
    spec = get(args.model)
    params = {name: getattr(args, dest) for name, dest in args.model_params
              if hasattr(args, dest)}
    if args.resume and not args.checkpoint:
        args.model_parser.error(f"--resume continues a checkpointed {spec.name} fit: give "
                                "--checkpoint DIR.")
    if (args.tls_ca_file or args.tls_client_cert or args.tls_client_key) \
            and not args.scheduler_address:
        args.model_parser.error("--tls-* options go with --scheduler-address tls://HOST:PORT.")

    # everything that can be checked is checked before a cluster starts
    so = args.storage_options
    reads = _locations.protected((args.input, "input"),
                                 (getattr(args, "labels", None), "labels"))
    z = None
    if io.is_url(args.input):  # wrong credentials, a missing bucket: before anything is written
        z = _locations.open_input(args.input, args.component, storage_options=so)
    if args.checkpoint:        # (an empty one is the model's error)
        _locations.check_checkpoint(
            args.checkpoint, reads + _locations.protected((args.output, "output")),
            resume=args.resume, overwrite=args.overwrite, storage_options=so)
    _locations.check_output(args.output, args.overwrite, reads, so)
    scratch_root = args.scratch or dask.config.get("daskrnmf.scratch-directory", None) \
        or (None if io.is_url(args.output) else os.path.dirname(os.path.abspath(args.output)))
    if scratch_root is not None:   # a URL output and nothing set: the library's default
        _locations.check_scratch(scratch_root, reads)
    if z is None:
        z = _locations.open_input(args.input, args.component, storage_options=so, files=True)
    y = _locations.open_input(args.labels, what="labels", storage_options=so) \
        if spec.needs_y else None
    fit_kwargs = {} if so is None else {"storage_options": so}
    if args.checkpoint is not None:          # the resume protocol of resumable models
        params[CHECKPOINT] = args.checkpoint
        fit_kwargs.update(resume=args.resume,
                          overwrite_checkpoint=args.overwrite and not args.resume)
    model = spec.cls(**params)
    bar = None
    if "callback" in model.get_params():
        bar = ProgressBar(spec.name, log=args.progress)
        model.set_params(callback=bar)
    v.validate_params(model, model._parameter_constraints)
    X = io.check_array(z, estimator_name=spec.name)
    if isinstance(z, zarr.Array):
        row_chunk = int(z.chunks[0])        # the outputs are stored like the input's rows
    else:                                   # a .npy file or an HDF5 dataset: its blocks
        z, row_chunk = X, int(X.chunks[0][0])

    run = Run()
    scratch_config = {}
    if scratch_root is not None:
        os.makedirs(scratch_root, exist_ok=True)
        scratch_config["daskrnmf.scratch-directory"] = run.remove_later(
            _stores.make_scratch(scratch_root))
    tmp = temporary(args.output, run, so)
    try:
        with _progress_lines(args.progress), connect(args), dask.config.set(scratch_config):
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
            arrays = fit_outputs(model, z)
            tic = time.perf_counter()
            source = args.input if io.is_url(args.input) else os.path.abspath(args.input)
            attrs = fit_attrs(model, spec.name, source, args.component, arrays, fit_seconds)
            write_store(args.output, arrays, attrs, args.overwrite, n_rows=z.shape[0],
                        row_chunk=row_chunk, tmp=tmp, model=model, storage_options=so)
    finally:
        run.cleanup()
    print(f"{spec.name} fitted in {fit_seconds:.1f} s; wrote {', '.join(sorted(arrays))} "
          f"and the fitted model (daskrnmf.load) to {args.output} "
          f"({time.perf_counter() - tic:.1f} s)")
    return 0


@contextlib.contextmanager
def _progress_lines(enabled):
    """With ``--progress``, the model's log lines on stderr (Dask's own logging is quiet:
    :func:`._run.connect`)."""
    if not enabled:
        yield
        return
    logger = logging.getLogger("daskrnmf")
    handler, level = logging.StreamHandler(sys.stderr), logger.level
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# ---------------------------------------------------------------- what a fit writes
def fit_outputs(model, X):
    """The model's per-sample outputs for X (``model._outputs``, floats in X's float
    dtype) and its small fitted arrays (NumPy attributes ending in ``_``, except one
    that is an output under another name)."""
    dtype = np.dtype(X.dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        dtype = np.dtype(np.float64)
    arrays = {}
    for name, value in model._outputs(X).items():
        if np.dtype(value.dtype).kind == "f" and value.dtype != dtype:
            value = value.astype(dtype)
        arrays[name] = value
    # a fitted array that is an output under another name (a co-clustering's
    # row_labels_ is its labels_) is written once, under the output's name
    outputs = [getattr(model, name + "_", None) for name in arrays]
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_") and isinstance(value, np.ndarray) \
                and value.dtype.kind in "biuf" and key.rstrip("_") not in arrays \
                and not any(value is out for out in outputs):
            arrays[key.rstrip("_")] = value
    return arrays


def fit_attrs(model, name, source, component, arrays, fit_seconds):
    """The output store's metadata: the model, its plain parameters and scalar fitted
    values, where the input came from, the arrays written, the fit's time and the
    versions of the libraries that made it."""
    params = {k: val for k, val in model.get_params(deep=False).items()
              if val is None or isinstance(val, (bool, int, float, str))}
    scalars = {}
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_") \
                and isinstance(value, (bool, int, float, np.integer, np.floating)):
            scalars[key] = value.item() if isinstance(value, np.generic) else value
    versions = {"daskrnmf": __version__, "dask": dask.__version__,
                "distributed": distributed.__version__, "numpy": np.__version__,
                "zarr": zarr.__version__, "scikit-learn": sklearn.__version__,
                "python": sys.version.split()[0]}
    return {"model": name, "params": params, "input": source, "component": component,
            "outputs": sorted(arrays), "fit_seconds": fit_seconds, "scalars": scalars,
            "versions": versions}
