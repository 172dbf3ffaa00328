"""Missing values: fill the holes of face images with NMF and RobustNMF (``missing="mask"``).

    python examples/missing_values.py [--frac 0.1] [--k 16]

10 % of the pixels of the bundled ORL faces are set to NaN.  With ``missing="mask"``
the models fit the observed pixels only; ``transform`` solves each face's codes from its
observed pixels and ``inverse_transform`` returns ``H W``, which fills the holes.  The
same fit runs out of core on a Dask array with NaN chunks (nothing else changes).
"""

import argparse
import warnings

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frac", type=float, default=0.1)
    parser.add_argument("--k", type=int, default=16)
    args = parser.parse_args(argv)

    import dask.array as da

    from daskrnmf import NMF, RobustNMF
    from daskrnmf.datasets import load_orl

    warnings.simplefilter("ignore")
    X, _ = load_orl()
    X = X * (50.0 / X.max())                        # grey levels in [0, 50]
    miss = np.random.default_rng(0).random(X.shape) < args.frac
    Xn = np.where(miss, np.nan, X)                  # NaN marks a missing pixel

    for model in (NMF(args.k, missing="mask", random_state=0),
                  RobustNMF(args.k, missing="mask", random_state=0)):
        model.fit(Xn)
        filled = model.inverse_transform(model.transform(Xn))   # H W: holes filled
        e_miss = np.mean((X - filled)[miss] ** 2)
        e_obs = np.mean((X - filled)[~miss] ** 2)
        print(f"{type(model).__name__:>9}: MSE on missing pixels {e_miss:.2f}, on observed "
              f"pixels {e_obs:.2f} (ratio {e_miss / e_obs:.2f})")

    # the default, missing="raise", refuses NaN with a clear message
    try:
        NMF(args.k).fit(Xn)
    except ValueError as exc:
        print("missing='raise':", str(exc)[:90], "...")

    # out of core: a Dask array (or a Zarr store) holding NaN, chunked along rows
    model = NMF(args.k, missing="mask", random_state=0).fit(da.from_array(Xn, chunks=(100, -1)))
    H = model.transform(da.from_array(Xn, chunks=(100, -1)))      # lazy, chunked like X
    print("Dask input: H", H.shape, "in", H.numblocks[0], "chunks")


if __name__ == "__main__":
    main()
