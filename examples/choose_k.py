"""Choosing k with daskrnmf.choose_k: a Zarr store with 6 planted clusters and 5 % gross
outlier rows, RFNMF (L1) fitted for k = 2 .. 10 with 5 seeds on a LocalCluster.

    python examples/choose_k.py [--out DIR]        (the figure needs "daskrnmf[plot]")

Prints the scores per k (objective, stability across seeds, simplified silhouette) and
the recommended k, and saves the figure as choose_k.png in --out.  The store goes to a
temporary directory, removed at the end.
"""

import argparse
import os
import tempfile
import warnings


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--n-samples", type=int, default=20_000)
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    from distributed import Client, LocalCluster

    from daskrnmf import RFNMF, choose_k
    from daskrnmf.datasets import make_zarr_blobs
    from daskrnmf.plotting import savefig

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster):
        store = make_zarr_blobs(os.path.join(tmp, "blobs.zarr"), n_samples=args.n_samples,
                                n_features=16, n_clusters=6, outlier_fraction=0.05,
                                chunk_rows=5_000, random_state=1)
        result = choose_k(RFNMF(loss="l1", n_init=3), store + "/X", range(2, 11), n_seeds=5,
                          random_state=0)
    print(result.to_markdown())
    print(f"recommended k = {result.k} (planted: 6)")
    path = savefig(result.plot(), os.path.join(args.out, "choose_k.png"))
    print(f"figure: {path}")
    return result


if __name__ == "__main__":
    main()
