"""daskrnmf: robust non-negative matrix factorization and clustering, out of core on Dask.

Estimators follow scikit-learn's conventions; data may be a NumPy array, a Dask array
chunked along rows, a ``zarr.Array`` or a path to a Zarr array.

Imports are lazy: a Dask worker that unpickles a kernel imports ``daskrnmf.kernels``
(NumPy and Numba) without scikit-learn, SciPy or Zarr, which keeps worker memory low.
"""

import importlib

from ._version import __version__
from .models import REGISTRY

_LAZY = {
    **{name: (spec.module, name) for name, spec in REGISTRY.items()},
    "REGISTRY": ("daskrnmf.models", "REGISTRY"),
    "load": ("daskrnmf._persist", "load"),
    "datasets": ("daskrnmf.datasets", None),
    "io": ("daskrnmf.io", None),
    "metrics": ("daskrnmf.metrics", None),
    "ProgressBar": ("daskrnmf.progress", "ProgressBar"),
    "cluster": ("daskrnmf.cluster", None),
    "plotting": ("daskrnmf.plotting", None),
    "choose_k": ("daskrnmf.selection", "choose_k"),
    "selection": ("daskrnmf.selection", None),
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'daskrnmf' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
