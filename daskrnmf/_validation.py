"""Parameter constraints with one error format, and input checks.

Parameter errors read like scikit-learn's::

    The 'max_iter' parameter of RFNMF must be an int in the range [1, inf). Got -3 instead.
"""

import contextlib
import contextvars
import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

from ._files import FileRows, as_dask as _file_blocks, rows_of
from ._reader import BLOCK_BYTES, native_dtype as _native_rule
from .kernels.missing import MASK_HINT  # noqa: F401  (the NaN error's hint, re-exported)

ACCEPTED_INPUT = ("a NumPy array, a dask array, a zarr.Array, an np.memmap, an h5py.Dataset, "
                  "or the path of a Zarr array (or URL), of a .npy file or of an HDF5 "
                  "dataset ('data.h5/X'), or a pair (path, component) for an array inside a "
                  "Zarr group or an HDF5 file")


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``int`` or ``float``) in a range; ``None`` is unbounded."""

    kind: type
    left: float = None
    right: float = None
    closed: str = "both"  # "both", "left", "right", "neither"

    def accepts(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and not isinstance(value, numbers.Integral):
            return False
        if _too_large(value, self.kind):
            return False
        if not isinstance(value, numbers.Integral) and math.isnan(value):
            return False
        return self.in_range(value)

    def in_range(self, value):
        """``left <= value <= right`` (strict where the interval is open)."""
        lo_ok = (self.left is None or value > self.left
                 or (value == self.left and self.closed in ("both", "left")))
        hi_ok = (self.right is None or value < self.right
                 or (value == self.right and self.closed in ("both", "right")))
        return lo_ok and hi_ok

    def describe(self):
        lb = "[" if self.closed in ("both", "left") and self.left is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.right is not None else ")"
        left = "-inf" if self.left is None else self.left
        right = "inf" if self.right is None else self.right
        noun = "an int" if self.kind is int else "a float"
        return f"{noun} in the range {lb}{left}, {right}{rb}"


#: Integer parameters go into NumPy and Numba as int64: larger ones would overflow there
#: (or raise deep inside), so the constraint check refuses them.
INT_LIMIT = 2**63


def _too_large(value, kind):
    """An integer beyond int64 (for an int parameter) or beyond float64 (for a float one:
    ``tol=10**400`` has no float value)."""
    if not isinstance(value, numbers.Integral):
        return False
    if kind is int:
        return not -INT_LIMIT <= int(value) < INT_LIMIT
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _shown(value):
    """``repr(value)`` for the message, an integer of hundreds of digits abbreviated."""
    text = repr(value)
    if isinstance(value, numbers.Integral) and len(text) > 40:
        digits = len(str(abs(int(value))))
        return f"{text[:12]}...{text[-4:]} (an integer of {digits} digits)"
    return text


@dataclass(frozen=True)
class Options:
    """One of a fixed set of strings."""

    values: tuple

    def accepts(self, value):
        return isinstance(value, str) and value in self.values

    def describe(self):
        return "a str among {" + ", ".join(repr(v) for v in self.values) + "}"


@dataclass(frozen=True)
class Kind:
    """Instances of given types (``description`` names them in the message)."""

    types: tuple
    description: str

    def accepts(self, value):
        return isinstance(value, self.types) and not (isinstance(value, bool) and bool not in self.types)

    def describe(self):
        return self.description


@dataclass(frozen=True)
class ArrayLike:
    """An array-like as scikit-learn's constraint ``"array-like"`` takes it: an array, a
    list (of lists), anything with ``__len__``, ``shape`` or ``__array__``, but no str.
    Its values are checked where its shape is known (:func:`as_init_array`)."""

    description: str

    def accepts(self, value):
        if isinstance(value, (str, bytes, dict)):
            return False
        return hasattr(value, "__len__") or hasattr(value, "shape") or hasattr(value, "__array__")

    def describe(self):
        return self.description


def as_init_array(value, what, shape, shape_name):
    """A user's initial array (an array-like: list of lists, array) as float64, or a
    clear error: ``what`` names it (``"The 'init' array of RFNMF"``), ``shape`` is the
    one required (None: checked by the caller), ``shape_name`` says it in words
    (``"(n_clusters, n_features)"``).

    Refused as scikit-learn's ``check_array`` refuses them: complex values (a
    ValueError; casting would drop the imaginary parts with only a ComplexWarning),
    strings and objects that are not numbers (a TypeError), ragged lists; then NaN/inf
    and a wrong shape (a ValueError)."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as exc:    # ragged nested lists
        raise ValueError(f"{what} must be real numbers of shape {shape_name} = {shape}; "
                         f"got {type(value).__name__} that is no array ({exc}).") from None
    if a.dtype.kind == "O":
        if any(isinstance(x, complex) for x in a.ravel()):
            a = a.astype(complex)
        else:
            try:
                a = a.astype(np.float64)     # numbers held as objects, as check_array does
            except (TypeError, ValueError):
                raise TypeError(f"{what} must be real numbers; got dtype object holding "
                                f"{type(a.flat[0]).__name__} values.") from None
    if a.dtype.kind == "c":
        raise ValueError(f"{what} must be real numbers; got complex values (dtype "
                         f"{a.dtype}). Pass its real part (numpy.real) if that is meant.")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be real numbers; got dtype {a.dtype}. Convert it, "
                        "e.g. init.astype('float64').")
    a = a.astype(np.float64)
    if shape is None:       # the caller checks shape and values with its own message
        return a
    if a.shape != tuple(shape) or not np.all(np.isfinite(a)):
        raise ValueError(f"{what} must be finite with shape {shape_name} = {tuple(shape)}; "
                         f"got shape {a.shape}" + ("" if a.shape != tuple(shape) else
                                                   " with NaN or infinite values") + ".")
    return a


@dataclass(frozen=True)
class RandomState:
    """scikit-learn's ``random_state`` policy: None, a seed in [0, 2**32 - 1], a
    ``numpy.random.RandomState`` or a ``numpy.random.Generator``."""

    def accepts(self, value):
        if value is None or isinstance(value, (np.random.RandomState, np.random.Generator)):
            return True
        return Interval(int, 0, 2**32 - 1).accepts(value)

    def describe(self):
        return ("an int in the range [0, 4294967295], an instance of 'numpy.random.RandomState', "
                "an instance of 'numpy.random.Generator' or None")


RANDOM_STATE = RandomState()


@dataclass(frozen=True)
class Location:
    """A non-empty path (str or os.PathLike) or fsspec URL, or None: ``''`` would write
    into the current directory."""

    def accepts(self, value):
        if value is None:
            return True
        if not isinstance(value, (str, os.PathLike)):
            return False
        text = os.fspath(value)
        return isinstance(text, str) and text.strip() != "" and "\0" not in text

    def describe(self):
        return "a non-empty path (str or os.PathLike) or None"

# ---------------------------------------------------------------- missing values
#: The constraint of the ``missing`` parameter that models accepting missing values add to
#: their ``_parameter_constraints`` (and set ``_supports_missing = True``):
#:
#: * ``"raise"`` (every model's default): NaN in X is a ValueError, as for a model
#:   without the parameter; nothing changes silently.
#: * ``"mask"``: NaN entries are *missing*: each model's loss, updates and statistics
#:   run over the observed entries only (a mask ``~isnan(x)`` made per row block on the
#:   worker that holds it, never stored for all of X); ``inf`` is still an error.  The
#:   estimator's ``allow_nan`` tag is then True.  See :mod:`daskrnmf.kernels.missing`
#:   for what every model does with the mask.
MISSING = Options(("mask", "raise"))


@dataclass(frozen=True)
class CallableOrNone:
    """A callable, or None."""

    def accepts(self, value):
        return value is None or callable(value)

    def describe(self):
        return "a callable or None"


def validate_params(estimator, constraints):
    """Check ``estimator.get_params()`` against ``constraints`` (name -> list of constraints)."""
    params = estimator.get_params(deep=False)
    name = type(estimator).__name__
    for key, options in constraints.items():
        value = params[key]
        if not any(c.accepts(value) for c in options):
            described = [c.describe() for c in options]
            what = described[0] if len(described) == 1 else (", ".join(described[:-1]) + " or " + described[-1])
            big = [c.kind for c in options if isinstance(c, Interval)
                   and _too_large(value, c.kind) and c.in_range(value)]
            if big:     # in the range, but beyond what int64/float64 hold
                what += (" that fits in 64 bits (below 2**63)" if big[0] is int
                         else " that a float64 holds (below 1.8e308)")
            raise ValueError(f"The {key!r} parameter of {name} must be {what}. Got "
                             f"{_shown(value)} instead.")


def seed_from(random_state):
    """A 63-bit integer seed from ``random_state`` (None: fresh entropy).

    The estimator's ``random_state`` attribute is never replaced; a Generator or
    RandomState passed by the user advances by one draw, as in scikit-learn.
    """
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(2, dtype=np.uint32).view(np.uint64)[0] >> 1)
    if isinstance(random_state, numbers.Integral):
        return int(random_state)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    return int(random_state.randint(0, 2**31 - 1))


def is_path(X):
    """A local path or an fsspec URL (``s3://…``): of a Zarr array, a ``.npy`` file or an
    HDF5 dataset (``data.h5/X``)."""
    return isinstance(X, (str, os.PathLike))


def is_path_pair(X):
    """``(path, component)``: an array inside a Zarr group or an HDF5 file.  (A tuple of
    two strings is no array-like of numbers, so nothing else is taken for one.)"""
    return (isinstance(X, tuple) and len(X) == 2 and is_path(X[0])
            and isinstance(X[1], str))


def with_component(X, component, owner):
    """X with ``component`` (the ``component=`` of a fit): ``(X, component)`` for a path;
    None leaves X as it is; anything else is an error saying why."""
    if component is None:
        return X
    if not isinstance(component, str) or not component.strip("/"):
        raise ValueError(f"The 'component' parameter of {owner} must be a non-empty str (the "
                         f"name of an array inside a Zarr group or an HDF5 file) or None. Got "
                         f"{component!r} instead.")
    if is_path_pair(X):
        raise ValueError(f"X passed to {owner} is already a pair (path, component) "
                         f"{X!r}; pass component={component!r} or the pair, not both.")
    if not is_path(X):
        raise ValueError(f"component={component!r} names an array inside a Zarr group or an "
                         f"HDF5 file: X passed to {owner} must then be that store's or file's "
                         f"path; got an object of type {type(X).__module__}."
                         f"{type(X).__qualname__}.")
    return (X, component)


# the storage_options of the fit (or fit_transform, partial_fit) being run: every URL it
# opens (X, ONMFO's checkpoint) uses them; see BaseModel.fit
_STORAGE_OPTIONS = contextvars.ContextVar("daskrnmf_storage_options", default=None)


def current_storage_options():
    """The ``storage_options`` given to the running fit (None outside one)."""
    return _STORAGE_OPTIONS.get()


@contextlib.contextmanager
def using_storage_options(options):
    """Make ``options`` the running fit's ``storage_options`` (None: keep the outer)."""
    if options is None:
        yield
        return
    if not isinstance(options, dict):
        raise TypeError("storage_options must be a dict of options of the URL's fsspec "
                        f"file system; got {type(options).__name__}.")
    token = _STORAGE_OPTIONS.set(options)
    try:
        yield
    finally:
        _STORAGE_OPTIONS.reset(token)


def check_array(X, *, estimator_name, input_name="X", storage_options=None, allow_nan=False):
    """Validate X and return it as a NumPy array or a row-chunked Dask array.

    Accepted: a NumPy array, a Dask array chunked along rows only, a ``zarr.Array`` or a
    path/fsspec URL of a Zarr array (opened read-only; a URL with ``storage_options``,
    by default the running fit's, and read by the workers in parallel); the path of a
    ``.npy`` file or of an HDF5/NetCDF-4 dataset (``data.h5/X``), a pair ``(path,
    component)``, an ``np.memmap`` or an ``h5py.Dataset`` (read by the workers in row
    blocks, see :mod:`daskrnmf._files`).  Checks
    dimensionality, emptiness and dtype; for NumPy input also finiteness (Dask input is
    checked for NaN/inf during the first pass over it, see :func:`check_finite_count`).
    ``allow_nan``: NaN entries are missing values (``missing="mask"``), only inf is refused.
    """
    import dask.array as da
    import zarr

    from .io import open_input

    where = f"{input_name} passed to {estimator_name}"
    if is_path(X) or is_path_pair(X):
        if storage_options is None:
            storage_options = current_storage_options()
        path, component = X if isinstance(X, tuple) else (X, None)
        X = open_input(path, component, storage_options=storage_options)
    else:       # a memmap or an h5py Dataset: read by the workers from its file
        X = rows_of(X) or X
    if isinstance(X, FileRows):
        X = _file_to_dask(X, where)
    if isinstance(X, zarr.Array):
        X = _zarr_to_dask(X, where)
    if isinstance(X, np.ndarray):
        _check_shape_dtype(X, where)
        X = native_dtype(X)
        n_nan, n_inf = count_nonfinite(X)
        check_missing_count(n_nan, n_inf, where, allow_nan=allow_nan)
        return X
    if isinstance(X, da.Array):
        _check_shape_dtype(X, where)
        X = native_dtype(X)
        if any(np.isnan(c) for c in X.chunks[0]) or any(np.isnan(c) for c in X.chunks[1]):
            raise ValueError(f"{where} has unknown chunk sizes; call X.compute_chunk_sizes() "
                             "before fitting.")
        if len(X.chunks[1]) != 1:
            raise ValueError(f"{where} is chunked along its columns {X.chunks[1][:4]}...; daskrnmf "
                             "needs every sample's features in one chunk. Use "
                             f"X.rechunk({{1: {X.shape[1]}}}).")
        return X
    raise TypeError(f"{where} must be {ACCEPTED_INPUT}; got an object of type "
                    f"{type(X).__module__}.{type(X).__qualname__}.")


def native_dtype(X):
    """X (NumPy or Dask, lazily) in a dtype the compiled kernels take: float16 as float64
    (what scikit-learn's ``check_array`` gives NumPy input, and what integers become),
    a non-native byte order (``'>f8'``) as the native one.  Numba has no float16 and
    compiles for native byte order only; other dtypes are returned unchanged."""
    dt = _native_rule(X.dtype)          # the one rule, shared with the reader
    return X if dt == X.dtype else X.astype(dt)


def count_nonfinite(X):
    """``(number of NaN, number of +-inf)`` in a NumPy array (0, 0 for integers)."""
    X = np.asarray(X)
    if X.dtype.kind not in "fc":
        return 0, 0
    bad = X.size - int(np.count_nonzero(np.isfinite(X)))
    if not bad:
        return 0, 0
    n_nan = int(np.count_nonzero(np.isnan(X)))
    return n_nan, bad - n_nan


def _check_shape_dtype(X, where):
    if X.ndim != 2:
        hint = " Reshape a single feature with X.reshape(-1, 1)." if X.ndim == 1 else ""
        raise ValueError(f"{where} must be 2-D (n_samples, n_features); got {X.ndim}-D array "
                         f"of shape {X.shape}.{hint}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{where} is empty: shape {X.shape}; at least one sample and one "
                         "feature are required.")
    kind = np.dtype(X.dtype).kind
    if kind not in "iuf":
        raise TypeError(f"{where} must have a real numeric dtype (integer or float); got "
                        f"dtype {X.dtype}. Convert it, e.g. X.astype('float64').")


def check_finite_count(n_bad, where, hint=""):
    """Raise if ``n_bad`` (NaN or infinite values found) is non-zero (``hint`` is appended
    to the message, e.g. :data:`MASK_HINT`)."""
    if n_bad:
        raise ValueError(f"{where} contains {n_bad} NaN or infinite value(s); remove or impute "
                         f"them before fitting.{hint}")




def check_missing_count(n_nan, n_inf, where, *, allow_nan, hint=""):
    """The finiteness check of X with the ``missing`` policy: with ``allow_nan`` (``missing=
    "mask"``) NaN entries are missing values and only infinite ones are an error;
    otherwise both are (:func:`check_finite_count`)."""
    if not allow_nan:
        check_finite_count(n_nan + n_inf, where, hint)
    elif n_inf:
        raise ValueError(f"{where} contains {n_inf} infinite value(s); with missing='mask' NaN "
                         "entries are missing values, but infinite values are not allowed. "
                         "Replace them (e.g. by NaN) before fitting.")




def _zarr_to_dask(z, where):
    """A Zarr array as a Dask array of whole rows: blocks of whole stored chunks, about
    :data:`BLOCK_BYTES` (less if dask's ``array.chunk-size`` is smaller), and small enough
    for the workers' memory limit (see :func:`daskrnmf._blocks.worker_block_budget`; the
    kernels hold a float64 copy of a block).  When even one stored chunk is too large for
    that, blocks split stored chunks (each block then decompresses its whole stored chunk:
    the time of several decodes per pass, and one decoded stored chunk transiently in a
    task)."""
    from ._reader import as_dask

    if z.ndim != 2:
        _check_shape_dtype(z, where)
    rows = _block_rows(z.shape, z.dtype, z.chunks[0], where)
    # read by daskrnmf's reader (whole chunks decoded into reused buffers; zarr itself
    # for layouts it does not read)
    return as_dask(z, rows)


def _block_rows(shape, dtype, stored, where):
    """Rows per block of an array of ``shape`` stored in chunks of ``stored`` rows (1 for
    a file without chunks): :data:`BLOCK_BYTES` of whole stored chunks, fewer when the
    workers' memory limit asks for it (see :func:`_zarr_to_dask`)."""
    import dask

    from ._blocks import check_block_fits, check_stored_chunk_fits, worker_block_budget

    limit = min(BLOCK_BYTES, dask.utils.parse_bytes(dask.config.get("array.chunk-size")))
    row_bytes = max(1, shape[1] * np.dtype(dtype).itemsize)
    stored = max(1, int(stored))
    rows = max(stored, (limit // row_bytes) // stored * stored)
    budget = worker_block_budget()
    if budget is not None and budget <= 0:
        check_block_fits(None, where)      # the limit cannot hold a worker's baseline
    if budget is not None and budget > 0:
        check_stored_chunk_fits(stored * row_bytes, budget, where)
        fit = budget // max(1, shape[1] * 8)        # rows whose float64 copy fits
        if rows > fit:
            rows = fit // stored * stored if fit >= stored else max(1, fit)
    return min(rows, max(1, shape[0]))


def _file_to_dask(src, where):
    """A user's file (:class:`daskrnmf._files.FileRows`) as a Dask array of whole rows,
    blocks sized as a Zarr array's (an HDF5 dataset's chunks taken as stored chunks: a
    read decodes every chunk it touches)."""
    _check_shape_dtype(src, where)
    stored = getattr(src, "chunk_rows", None) or 1
    return _file_blocks(src, _block_rows(src.shape, src.dtype, stored, where))
