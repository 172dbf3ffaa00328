"""The main job on an embedded default: a LocalCluster, data in Zarr, fits, a result table.

    python examples/quickstart.py [--n-samples 200000] [--workdir DIR]

Writes a synthetic clustering problem with 5 % gross outliers to a Zarr store (chunk by
chunk, on the cluster), fits RFNMF with the L2,1 and the L1 loss out of core, fits
scikit-learn's KMeans on the same data for comparison, and prints ACC / NMI / time.
"""

import argparse
import contextlib
import os
import tempfile
import time

import dask.array as da


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=200_000)
    parser.add_argument("--n-features", type=int, default=32)
    parser.add_argument("--n-clusters", type=int, default=6)
    parser.add_argument("--workdir", default=None,
                        help="where the Zarr store goes and stays (default: a temporary "
                             "directory, removed at the end)")
    args = parser.parse_args(argv)

    # a temporary directory unless --workdir: removed at the end, on an error and on
    # Ctrl-C (after the cluster has closed, so no worker still writes into it)
    with contextlib.ExitStack() as cleanup:
        workdir = args.workdir or cleanup.enter_context(
            tempfile.TemporaryDirectory(prefix="daskrnmf-quickstart-"))
        rows = run(args, workdir)

    print()
    print(f"{args.n_samples} x {args.n_features}, {args.n_clusters} clusters, 5 % of rows grossly "
          "corrupted (ACC / NMI on all rows, against the true clusters)")
    print(f"| {'model':<32} | {'time s':>7} | {'iter':>4} | {'passes':>6} | {'ACC':>6} | {'NMI':>6} |")
    print(f"|{'-' * 34}|{'-' * 9}|{'-' * 6}|{'-' * 8}|{'-' * 8}|{'-' * 8}|")
    for name, t, it, passes, acc, nmi in rows:
        print(f"| {name:<32} | {t:7.2f} | {it:4d} | {passes if passes is not None else '-':>6} | "
              f"{acc:6.3f} | {nmi:6.3f} |")


def run(args, workdir):
    """Write the data to ``workdir`` and fit: the result table's rows."""
    from distributed import Client, LocalCluster
    from sklearn.cluster import KMeans

    from daskrnmf import RFNMF
    from daskrnmf.datasets import make_zarr_blobs
    from daskrnmf.metrics import clustering_accuracy, normalized_mutual_info

    store = os.path.join(workdir, "quickstart.zarr")
    # ":0": the dashboard on a free port.  dashboard_address=None drops the dashboard
    # but not the scheduler's HTTP server, which then takes port 8787 and warns "Port
    # 8787 is already in use" when another Dask cluster has it
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        print(f"cluster: {len(client.scheduler_info()['workers'])} workers, dashboard "
              f"{client.dashboard_link}; data: {store}")
        make_zarr_blobs(store, n_samples=args.n_samples, n_features=args.n_features,
                        n_clusters=args.n_clusters, outlier_fraction=0.05, chunk_rows=20_000,
                        random_state=0, overwrite=True)
        y = da.from_zarr(store, component="y")  # true clusters, outlier rows included
        rows = []
        for loss in ("l21", "l1"):
            tic = time.perf_counter()
            model = RFNMF(args.n_clusters, loss=loss, n_init=4, random_state=0).fit(store + "/X")
            labels = model.labels_  # NumPy, computed in the fit's last pass
            rows.append((f"RFNMF loss={loss}", time.perf_counter() - tic, model.n_iter_, model.n_passes_,
                         clustering_accuracy(y, labels), normalized_mutual_info(y, labels)))
        X = da.from_zarr(store, component="X").compute()  # the in-memory peer needs it all
        tic = time.perf_counter()
        km = KMeans(args.n_clusters, n_init=4, random_state=0).fit(X)
        yy = y.compute()
        rows.append(("scikit-learn KMeans (in memory)", time.perf_counter() - tic, km.n_iter_, None,
                     clustering_accuracy(yy, km.labels_), normalized_mutual_info(yy, km.labels_)))
    return rows


if __name__ == "__main__":
    main()
