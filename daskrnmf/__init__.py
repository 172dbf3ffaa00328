"""daskrnmf: robust non-negative matrix factorization and clustering, out of core on Dask.

Estimators follow scikit-learn's conventions; data may be a NumPy array, a Dask array
chunked along rows, a ``zarr.Array`` or a path to a Zarr array.
"""

from . import datasets, io, metrics
from .models.rfnmf import RFNMF

__all__ = ["RFNMF", "datasets", "io", "metrics"]
__version__ = "0.1.0"
