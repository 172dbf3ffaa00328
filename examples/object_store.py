"""Data in an object store and model files: fit from an fsspec URL, save the model there,
load it back (no pickle) and use it.

    python examples/object_store.py

Runs without a cloud account: the ``memory://`` file system stands in for ``s3://`` (an
in-process LocalCluster shares it).  For S3, the same calls take ``s3://bucket/...`` and
``storage_options={"key": ..., "secret": ...}`` (``pip install "daskrnmf[s3]"``); the
README's "Data in an object store" section shows the CLI form.
"""

import numpy as np


def main():
    import zarr
    from distributed import Client, LocalCluster

    import daskrnmf
    from daskrnmf import RFNMF
    from daskrnmf.metrics import clustering_accuracy

    rng = np.random.default_rng(0)
    centers = rng.uniform(2, 10, size=(4, 16))
    y = rng.integers(0, 4, 20_000)
    X = np.maximum(centers[y] + rng.normal(size=(20_000, 16)), 0).astype(np.float32)

    import uuid

    bucket = f"memory://example-{uuid.uuid4().hex[:8]}"   # a fresh "bucket" per run
    url = f"{bucket}/blobs.zarr"
    store = zarr.storage.FsspecStore.from_url(url, read_only=False)
    z = zarr.create_array(store, shape=X.shape, chunks=(2_500, 16), dtype="float32")
    z[:] = X                                          # 8 chunks in the "object store"

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        model = RFNMF(n_clusters=4, random_state=0).fit(url, storage_options={})
        print(f"fitted from {url}: ACC {clustering_accuracy(y, model.labels_):.3f}, "
              f"{model.n_passes_} passes over X")
        model.save(f"{bucket}/rfnmf-model")           # committed by a pointer written last
        again = daskrnmf.load(f"{bucket}/rfnmf-model")
        same = np.array_equal(again.predict(X[:1000]), model.predict(X[:1000]))
        print(f"loaded {type(again).__name__} from {bucket}/rfnmf-model: "
              f"same predictions {same}")


if __name__ == "__main__":
    main()
