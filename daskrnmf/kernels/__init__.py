"""Per-chunk kernels: plain NumPy / Numba functions, one row block in, small arrays out.

Nothing in this package imports dask; graph building lives in :mod:`daskrnmf._blocks`
and :mod:`daskrnmf.reductions`.
"""
