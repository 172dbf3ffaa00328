"""daskrnmf: robust non-negative matrix factorization and clustering, out of core on Dask.

Estimators follow scikit-learn's conventions; data may be a NumPy array, a Dask array
chunked along rows, a ``zarr.Array`` or a path to a Zarr array.

Imports are lazy: a Dask worker that unpickles a kernel imports ``daskrnmf.kernels``
(NumPy and Numba) without scikit-learn, SciPy or Zarr, which keeps worker memory low.
"""

import importlib

from ._version import __version__ as __version__
from .models import REGISTRY

_LAZY = {
    **{name: (spec.module, name) for name, spec in REGISTRY.items()},
    "REGISTRY": ("daskrnmf.models", "REGISTRY"),
    "datasets": ("daskrnmf.datasets", None),
    "io": ("daskrnmf.io", None),
    "metrics": ("daskrnmf.metrics", None),
    "ProgressBar": ("daskrnmf.progress", "ProgressBar"),
    "cluster": ("daskrnmf.cluster", None),
    "plotting": ("daskrnmf.plotting", None),
    "choose_k": ("daskrnmf.selection", "choose_k"),
    "selection": ("daskrnmf.selection", None),
}

__all__ = list(_LAZY) + ["load"]


def load(path, *, storage_options=None):
    """Load a model saved by :meth:`~daskrnmf._base.BaseModel.save`, or the model in a
    ``daskrnmf fit`` output store.

    The file names its model; the class is the registry's (:data:`REGISTRY`), never
    code from the file (the format: :mod:`daskrnmf._persist`).

    Parameters
    ----------
    path : str or os.PathLike
        A saved model's directory or fsspec URL (``s3://bucket/model.zarr``), or a CLI
        output store, whose ``model`` subgroup holds the fitted model.  On an object
        store, only the version the location's commit pointer names is read.
    storage_options : dict, optional
        Options of the URL's fsspec file system (credentials, endpoint, ...).

    Returns
    -------
    model : estimator
        The fitted estimator, with the saved parameters (``callback=None``) and fitted
        attributes: ``predict``, ``transform``, ``decompose`` give what they gave before
        saving.

    Raises
    ------
    ValueError
        If ``path`` holds no saved model, a newer format, an unknown model, or a
        parameter or attribute the model does not have.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import daskrnmf
    >>> from daskrnmf import RFNMF
    >>> X = np.random.default_rng(0).random((40, 3))
    >>> model = RFNMF(n_clusters=2, random_state=0).fit(X)
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = model.save(os.path.join(tmp.name, "rfnmf.zarr"))
    >>> again = daskrnmf.load(path)
    >>> bool((again.predict(X) == model.predict(X)).all())
    True
    >>> tmp.cleanup()
    """
    from . import _persist  # the format's module, imported when a model is loaded

    return _persist.load(path, REGISTRY, storage_options=storage_options)


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
