"""Parameter constraints with one error format, and the checks and messages of the input.

Parameter errors read like scikit-learn's::

    The 'max_iter' parameter of RFNMF must be an int in the range [1, inf). Got -3 instead.

The input's own checks say what is wrong with X and how to mend it (its shape and dtype,
NaN and infinite values, ``missing="mask"``'s hint); turning what the user passed (an
array, a path, a file) into the array a fit reads is :func:`daskrnmf.io.check_array`'s.
This module imports nothing of the package: everything else may use it.
"""

import contextlib
import contextvars
import math
import numbers
import os
from dataclasses import dataclass

import numpy as np


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

#: What the NaN error of a model that accepts ``missing="mask"`` adds to its message.
MASK_HINT = " To treat NaN entries as missing values, pass missing='mask'."


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
