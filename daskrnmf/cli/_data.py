"""The commands about data stores: ``make-data`` (a generated problem), ``convert`` (a
user's array to a Zarr store for fitting) and ``info`` (what a store holds)."""

import json
import os
import shutil

import dask.array as da
import numpy as np
import psutil
import zarr

from .. import _files, _stores, datasets, io
from .._validation import _check_shape_dtype
from . import _locations
from ._output import temporary, write_store
from ._run import CommandError, Run, connect


def cmd_make_data(args, parser):
    if io.is_url(args.output):
        raise CommandError(f"make-data writes local stores; got {args.output}. Write it "
                           "locally and copy it (daskrnmf fit reads URLs).")
    _locations.check_output(args.output, args.overwrite)
    _sizes(args)
    run = Run()
    tmp = temporary(args.output, run)
    try:
        with connect(args):
            if args.generator == "blobs":
                # straight into the run's temporary name (removed again after the
                # cluster closes: no worker still writes into it), then renamed
                _stores.write_whole(
                    args.output, lambda tmp: datasets.write_blobs(
                        tmp, n_samples=args.n_samples, n_features=args.n_features,
                        n_clusters=args.n_clusters, outlier_fraction=args.outlier_fraction,
                        chunk_rows=args.chunk_rows, random_state=args.random_state),
                    "output", overwrite=args.overwrite, how="--overwrite", tmp=tmp)
            else:
                write_store(args.output, _small_problem(args),
                            {"generator": args.generator, "random_state": args.random_state},
                            args.overwrite, tmp=tmp)
    finally:
        run.cleanup()
    print(f"wrote {args.generator} to {args.output}")
    return 0


def _sizes(args):
    """Set ``args.n_samples`` / ``args.n_features`` for the generator, refusing what it
    cannot honour, and refuse sizes that cannot fit, before anything starts or is written:
    the store on the output's disk, and in memory a chunk (blobs, generated chunk by chunk
    on the workers) or the whole problem (the other generators, made in memory)."""
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
    where = _stores.nearest_existing(os.path.dirname(os.path.abspath(args.output)))
    free = shutil.disk_usage(where).free
    if total > free:
        raise CommandError(f"make-data {gen}: {n} x {d} float64 is {_bytes(total)}, more than "
                           f"the {_bytes(free)} free where {args.output} goes; choose a "
                           "smaller --n-samples or --n-features.")


def _bytes(n):
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000


def _small_problem(args):
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


def cmd_convert(args, parser):
    for path, what in ((args.input, "input"), (args.output, "output")):
        if io.is_url(path):
            raise CommandError(f"convert reads and writes local files; got the {what} {path}. "
                               "daskrnmf fit reads Zarr URLs as they are.")
    found = _files.split_file_path(args.input)
    if found is None and not os.path.exists(args.input):
        raise CommandError(f"input {args.input} does not exist.")
    _locations.check_output(args.output, args.overwrite,
                            _locations.protected((found[0] if found else args.input, "input")))
    node = io.open_input(args.input, args.component)      # the header only
    _check_shape_dtype(node, f"input {args.input}")
    rows, why = io.chunk_advice(node.shape, node.dtype, args.chunk_rows)
    n, d = node.shape
    itemsize = np.dtype(node.dtype).itemsize
    print(f"convert {args.input} ({n} x {d} {np.dtype(node.dtype)}, "
          f"{_bytes(n * d * itemsize)}): {rows} rows per chunk "
          f"({_bytes(rows * d * itemsize)}): {why}")
    attrs = {"converted_from": os.path.abspath(args.input), "component": args.component}
    run = Run()
    tmp = temporary(args.output, run)
    try:
        with connect(args):
            write_store(args.output, {"X": io.row_blocks(node, rows)}, attrs, args.overwrite,
                        n_rows=n, row_chunk=rows, tmp=tmp)
    finally:
        run.cleanup()
    print(f"wrote {args.output}/X; fit it with: daskrnmf fit MODEL {args.output} --component X")
    return 0


def cmd_info(args, parser):
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
