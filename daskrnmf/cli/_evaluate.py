"""The commands that score: ``evaluate`` (predicted labels against true ones) and
``choose-k`` (a clustering model over a range of k, :func:`daskrnmf.choose_k`)."""

import json
import time

import dask.array as da

from .. import _stores
from ..metrics import clustering_accuracy, normalized_mutual_info, purity
from ..models import get
from ..selection import K_PARAMETER, _check_arguments, choose_k
from . import _locations
from ._parser import CHOOSE_K_PARAMETERS
from ._run import CommandError, connect


def cmd_evaluate(args, parser):
    so = args.storage_options
    pred = da.from_zarr(_locations.open_input(args.pred, what="predicted labels",
                                              storage_options=so))
    true = da.from_zarr(_locations.open_input(args.true, what="true labels",
                                              storage_options=so))
    if pred.ndim != 1 or true.ndim != 1 or pred.shape != true.shape:
        raise CommandError(f"labels must be 1-D arrays of the same length; got {pred.shape} "
                           f"and {true.shape}.")
    if pred.shape[0] == 0:
        raise CommandError(f"the labels {args.pred} and {args.true} are empty (0 samples); "
                           "there is nothing to compare.")
    with connect(args):
        scores = {"ACC": clustering_accuracy(true, pred), "NMI": normalized_mutual_info(true, pred),
                  "purity": purity(true, pred), "n_samples": int(pred.shape[0])}
    if args.json:
        print(json.dumps(scores))
    else:
        print("| metric | value |\n|---|---:|")
        for k in ("ACC", "NMI", "purity"):
            print(f"| {k} | {scores[k]:.4f} |")
    return 0


def cmd_choose_k(args, parser):
    spec = get(args.model)
    if spec.name not in K_PARAMETER:
        raise CommandError(f"choose-k supports {', '.join(K_PARAMETER)}; got {spec.name}.")
    estimator = spec.cls()
    params = {name: getattr(args, name) for name in CHOOSE_K_PARAMETERS
              if getattr(args, name) is not None}
    for name in params:
        if name not in estimator.get_params():
            raise CommandError(f"--{name.replace('_', '-')} is not a parameter of {spec.name}.")
    estimator.set_params(**params)
    reads = _locations.protected((args.input, "input"))
    if args.output and args.plot and _stores.real(args.output) == _stores.real(args.plot):
        raise CommandError(f"--output and --plot are the same file ({args.output}); give two.")
    for path, what in ((args.output, "--output"), (args.plot, "--plot")):
        if path:
            _locations.check_file(path, what, args.overwrite, reads)
    z = _locations.open_input(args.input, args.component)
    _check_arguments(estimator, z, args.ks, n_seeds=args.n_seeds,    # before a cluster starts
                     random_state=args.random_state, max_samples=args.max_samples)
    with connect(args):
        tic = time.perf_counter()
        result = choose_k(estimator, z, args.ks, n_seeds=args.n_seeds,
                          random_state=args.random_state, max_samples=args.max_samples)
        seconds = time.perf_counter() - tic
    table = result.to_markdown()
    print(table)
    print(f"recommended k = {result.k} ({spec.name}, {args.n_seeds} seeds, {seconds:.1f} s, "
          f"{result.n_passes} passes over the input)")
    if args.output:
        text = (f"# choose-k: {spec.name} on {args.input}\n\n{table}\n\n"
                f"Recommended k = {result.k}.\n")
        _stores.write_file_whole(args.output, lambda tmp: _write_text(tmp, text))
    if args.plot:
        from ..plotting import _pyplot, savefig        # matplotlib only for a --plot

        fig = result.plot()
        _stores.write_file_whole(args.plot, lambda tmp: savefig(
            fig, tmp, title=f"choose-k {spec.name}"))
        _pyplot().close(fig)
    return 0


def _write_text(path, text):
    with open(path, "w") as fh:
        fh.write(text)
