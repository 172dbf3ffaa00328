"""Helpers every per-block kernel and combine function uses (NumPy only, no dask)."""

import os
import threading

import numpy as np


def as_float_block(block):
    """A C-contiguous float64 view/copy of one row block (kernels work in float64)."""
    return np.ascontiguousarray(block, dtype=np.float64)


def as_kernel_block(block):
    """A C-contiguous float32 or float64 block for the compiled kernels that read X's
    values only to compare them or to add them into float64 (distances, counts,
    collections, sums): float32 stays float32 — the kernels widen each value exactly, so
    results equal those of a float64 copy — and other dtypes become float64."""
    block = np.asarray(block)
    return np.ascontiguousarray(block, dtype=np.float32 if block.dtype == np.float32
                                else np.float64)


def work_dtype(x, magnitude=None):
    """The dtype the solvers compute in: float32 input stays float32 (half the bytes and
    twice the GEMM speed) unless its values are large enough for squares to overflow
    (``magnitude``: the largest |x|, when the caller knows it; else a pass over x)."""
    x = np.asarray(x)
    if x.dtype == np.float32 and (not x.size or (
            float(np.abs(x).max()) if magnitude is None else magnitude) < 1e15):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def one_type_per_argument(dispatcher):
    """A Numba dispatcher that compiled callers call with their arguments' plain types:
    a constant argument (``_select(a, 0, k)``, ``_nnls_row(..., True, ...)``) compiles no
    specialisation of its own beside the variable's (Numba types constants as literals
    and compiles each literal apart: repeated compile time, the same machine code).
    Compilation stays lazy, unlike an explicit signature.  Calls from Python are
    unchanged (they never type literals)."""
    from numba.core import types

    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args),
                     {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


_ROW_POOL = None

#: per thread and name, arrays a kernel's caller reuses from one call to the next
#: (:func:`thread_scratch`): (thread, name) -> (shape key, arrays)
_THREAD_SCRATCH = {}
#: most bytes kept for a thread and name; larger arrays are made at each call
THREAD_SCRATCH_BYTES = 2 ** 25


def thread_scratch(name, shape_key, make):
    """The arrays ``make()`` returns (a tuple of arrays, or None entries), made once for
    this thread and ``name`` and handed out again while ``shape_key`` is the same.

    For buffers a caller fills and reads within one call (nothing it returns refers to
    them) and then needs again, of the same shapes, at the next: ONMFO's solve of a
    batch (:func:`daskrnmf.models._outliers._solve_buffers`).  Arrays of a few hundred
    KiB made anew at every call are new pages every time on a Dask worker, whose
    ``MALLOC_TRIM_THRESHOLD_`` (distributed sets it) gives them back to the system at
    each ``free``: the page faults cost a batch's solve 7-10 %.  Each thread has its
    own (threads never share them); :func:`release_thread_scratch` drops them all
    (:func:`daskrnmf._reader.release`, at the end of a fit).  Arrays of more than
    :data:`THREAD_SCRATCH_BYTES` in all are not kept."""
    key = (threading.get_ident(), name)
    held = _THREAD_SCRATCH.get(key)
    if held is not None and held[0] == shape_key:
        return held[1]
    value = make()
    if sum(a.nbytes for a in value if a is not None) <= THREAD_SCRATCH_BYTES:
        _THREAD_SCRATCH[key] = (shape_key, value)
    else:
        _THREAD_SCRATCH.pop(key, None)
    return value


def release_thread_scratch():
    """Drop every thread's :func:`thread_scratch` arrays."""
    _THREAD_SCRATCH.clear()


def available_cpus():
    """The cores this process may run on (its affinity: a batch job's allocation, not the
    node's count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # no affinity on this platform
        return os.cpu_count() or 1


def split_rows(fn, n, threads):
    """``fn(a, b)`` over the row ranges of ``threads`` equal parts of ``range(n)``, each in
    its own thread (one: in the calling thread).  ``fn`` must write rows a..b only and
    release the GIL (a nogil kernel) for the threads to run at once."""
    global _ROW_POOL
    threads = max(1, min(int(threads), n))
    if threads == 1:
        fn(0, n)
        return
    if _ROW_POOL is None or _ROW_POOL[0] != os.getpid():
        # one pool per process, for the in-memory fits' kernels (made again in a forked
        # child, where the parent's threads do not run)
        from concurrent.futures import ThreadPoolExecutor

        _ROW_POOL = (os.getpid(), ThreadPoolExecutor(available_cpus(),
                                                     thread_name_prefix="daskrnmf-rows"))
    bounds = [n * t // threads for t in range(threads + 1)]
    futures = [_ROW_POOL[1].submit(fn, bounds[t], bounds[t + 1]) for t in range(threads)]
    for f in futures:
        f.result()


def sum_arrays(arrays, dtype=None):
    """Sum a list of equally shaped arrays, left to right (in ``dtype`` if given)."""
    out = arrays[0].astype(dtype if dtype is not None else arrays[0].dtype, copy=True)
    for a in arrays[1:]:
        out += a
    return out


def sum_dicts(parts):
    """Key-wise sum of a list of dicts of arrays/numbers (a tree node's combine)."""
    return {key: sum_arrays([np.asarray(p[key]) for p in parts]) for key in parts[0]}


# Above this magnitude the products the models form (squared distances, W H, Gram
# matrices, their sums over samples) overflow float64.
MAX_ABS = 1e60


def check_values(x, where, *, non_negative, rows="", allow_nan=False, hint=""):
    """The value checks of in-memory input, on one block (run on the worker holding it):
    finite, non-negative where the model needs it, below :data:`MAX_ABS`.  ``rows`` names
    the block's rows in the messages (e.g. ``" in rows 0..99"``).  ``allow_nan``
    (``missing="mask"``): NaN entries are missing values, not an error (inf still is);
    the other checks apply to the observed entries.  ``hint`` ends the NaN message.
    Returns the largest magnitude of the (observed) values, 0.0 for none."""
    if not x.size:
        return 0.0
    if not allow_nan and x.dtype.kind == "f":
        # min and max see NaN (it propagates) and +-inf: two vectorised passes, no mask;
        # the bad values are counted only for the message
        low, top = float(x.min()), float(x.max())
        bad = 0 if np.isfinite(low) and np.isfinite(top) else (
            x.size - int(np.count_nonzero(np.isfinite(x))))
        n_nan = 0
    else:
        bad = x.size - int(np.count_nonzero(np.isfinite(x)))
        n_nan = int(np.count_nonzero(np.isnan(x))) if bad and allow_nan else 0
    name = "H" if where.startswith("H ") else "X"    # H: inverse_transform's codes
    if bad - n_nan:
        if allow_nan:
            raise ValueError(f"Input {name} contains infinity: {where} has {bad - n_nan} infinite "
                             f"value(s){rows}; with missing='mask' NaN entries are missing "
                             "values, but infinite values are not allowed.")
        raise ValueError(f"Input {name} contains NaN or infinity: {where} has {bad} NaN or infinite "
                         f"value(s){rows}; remove or impute them before fitting.{hint}")
    if n_nan == x.size:
        return 0.0
    if n_nan:       # fmin/fmax skip NaN, without a copy of the block
        low, top = float(np.fmin.reduce(x, axis=None)), float(np.fmax.reduce(x, axis=None))
    elif allow_nan or x.dtype.kind != "f":
        low, top = float(x.min()), float(x.max())
    if non_negative and low < 0:
        raise ValueError(f"Negative values in data passed to {where} (min {low:g}{rows}); the "
                         "model factorizes non-negative data only.")
    if max(abs(low), abs(top)) > MAX_ABS:
        raise ValueError(f"{where} has values up to {max(abs(low), abs(top)):.3g} in magnitude"
                         f"{rows}; above {MAX_ABS:g} the products the models form overflow "
                         f"float64. Rescale {name} (e.g. {name} / {name}.max()).")
    return max(abs(low), abs(top))


def checked_apply(block, fn, check, dtype, *args, **kwargs):
    """``fn(block, *args, **kwargs)`` after :func:`check_values` (``check`` = ``(where,
    non_negative)`` or ``(where, non_negative, allow_nan)``), as ``dtype``:
    predict/transform on one Dask block."""
    where, non_negative = check[:2]
    allow_nan = bool(check[2]) if len(check) > 2 else False
    x = np.asarray(block)
    check_values(x, where, non_negative=non_negative, allow_nan=allow_nan)
    return np.asarray(fn(x, *args, **kwargs)).astype(dtype, copy=False)
