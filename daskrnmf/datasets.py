"""Data: the papers' synthetic sets, a large out-of-core Zarr generator, small real sets.

Every generator is seeded; nothing is downloaded.
"""

import os
from importlib import resources

import numpy as np


def make_outlier_blobs(n_per_cluster=100, n_outliers=3, *, outlier_distance=100.0,
                       random_state=0):
    """The paper's Figure 1 set: two Gaussians at (-6, 0) and (6, 0) plus far outliers.

    Parameters
    ----------
    n_per_cluster : int, default=100
        Points per Gaussian (unit covariance).
    n_outliers : int, default=3
        Outliers, placed near (0, ``outlier_distance``).
    outlier_distance : float, default=100
        Far enough that k-means (squared loss) spends a centre on the outliers, near
        enough that a robust loss keeps the two real clusters.
    random_state : int, default=0

    Returns
    -------
    X : ndarray (2 * n_per_cluster + n_outliers, 2)
    y : ndarray of int
        0 and 1 for the Gaussians, -1 for the outliers.
    """
    rng = np.random.default_rng(random_state)
    a = rng.normal(size=(n_per_cluster, 2)) + [-6.0, 0.0]
    b = rng.normal(size=(n_per_cluster, 2)) + [6.0, 0.0]
    out = rng.normal(scale=2.0, size=(n_outliers, 2)) + [0.0, outlier_distance]
    X = np.vstack([a, b, out])
    y = np.concatenate([np.zeros(n_per_cluster, int), np.ones(n_per_cluster, int),
                        -np.ones(n_outliers, int)])
    return X, y


def make_coclusters(n_samples=1000, n_features=120, n_row_clusters=8, n_column_clusters=6, *,
                    noise=1.0, outlier_fraction=0.05, outlier_high=100.0, block_low=0.0,
                    block_high=10.0, random_state=0):
    """A planted co-clustering (checkerboard) problem with gross outliers.

    Rows and columns are split into groups (sizes as equal as possible, then shuffled);
    entry (i, j) is ``S[row_i, col_j] + noise * N(0, 1)``, clipped at 0, with block
    values S uniform in ``[block_low, block_high]``.  A fraction ``outlier_fraction`` of
    the entries, chosen at random, are replaced by gross values uniform in
    ``[0, outlier_high]``.

    Parameters
    ----------
    n_samples, n_features : int
    n_row_clusters, n_column_clusters : int
    noise : float
        Standard deviation of the Gaussian noise on every entry.
    outlier_fraction : float in [0, 1)
    outlier_high : float
    block_low, block_high : float
    random_state : int

    Returns
    -------
    X : ndarray (n_samples, n_features), non-negative
    row_labels : ndarray of int (n_samples,)
    column_labels : ndarray of int (n_features,)
    S : ndarray (n_row_clusters, n_column_clusters), the planted block values
    """
    rng = np.random.default_rng(random_state)
    S = rng.uniform(block_low, block_high, size=(n_row_clusters, n_column_clusters))
    rows = rng.permutation(np.arange(n_samples) % n_row_clusters)
    cols = rng.permutation(np.arange(n_features) % n_column_clusters)
    X = S[rows][:, cols] + noise * rng.normal(size=(n_samples, n_features))
    bad = rng.random(X.shape) < outlier_fraction
    X[bad] = rng.uniform(0.0, outlier_high, size=int(bad.sum()))
    np.maximum(X, 0.0, out=X)
    return X, rows, cols, S


def make_ordered_segments(n_features=400, n_segments=8, segment_length=20, *, noise=0.0,
                          noise_mode="every-entry", random_state=0):
    """ORNMF's synthetic sequence (paper 002, Section V-C): segments of identical samples.

    A (n_features x n_segments) has entries uniform in [0, 1]; segment s is
    ``segment_length`` copies of ``A w_s`` with weights ``w_s`` uniform in [0, 1]; the
    samples (rows) are in segment order.  Noise: ``"every-entry"`` adds
    ``noise * N(0, 1)`` to every entry (the reading with which ERRATA found the 50 %
    level unclusterable); ``"fraction"`` adds unit N(0, 1) noise to a fraction ``noise``
    of the entries.  The result is rescaled to [0, 1] as in the paper.

    Returns
    -------
    X : ndarray (n_segments * segment_length, n_features) in [0, 1]
    y : ndarray of int, the segment of every sample
    """
    if noise_mode not in ("every-entry", "fraction"):
        raise ValueError(f"noise_mode must be 'every-entry' or 'fraction'; got {noise_mode!r}.")
    rng = np.random.default_rng(random_state)
    A = rng.uniform(size=(n_features, n_segments))
    weights = rng.uniform(size=(n_segments, n_segments))
    y = np.repeat(np.arange(n_segments), segment_length)
    X = (A @ weights.T).T[y]
    if noise > 0:
        if noise_mode == "every-entry":
            X = X + noise * rng.normal(size=X.shape)
        else:
            X = X + np.where(rng.random(X.shape) < noise, rng.normal(size=X.shape), 0.0)
    X = (X - X.min()) / max(X.max() - X.min(), 1e-300)
    return X, y


def make_margin_gaussians(n_per_class=100, n_features=50, *, n_noise_directions=5,
                          noise_scale=5.0, separation=3.0, offset=5.0, random_state=0):
    """Max-Margin Semi-NMF's toy set (paper 003, Section 4.1): two 50-d Gaussians.

    The classes differ along one direction of low variance (means ``separation`` apart,
    unit variance), while ``n_noise_directions`` other directions carry shared noise of
    standard deviation ``noise_scale``; all remaining directions have unit variance, and
    every sample is shifted by ``offset`` in every coordinate.  The directions are a fixed
    random rotation (the same for every ``random_state``, so a training and a test draw
    come from the same distribution).  A factorization driven by reconstruction alone
    (semi-NMF, PCA) spends its few bases on the noise directions, so a linear SVM on its
    features is near chance; a basis trained for the margin finds the separating
    direction (ERRATA: the paper's own toy is easier).

    Returns
    -------
    X : ndarray (2 * n_per_class, n_features)
    y : ndarray of int (0 / 1)
    """
    if n_noise_directions >= n_features:
        raise ValueError(f"n_noise_directions must be < n_features; got {n_noise_directions} "
                         f"and {n_features}.")
    Q, _ = np.linalg.qr(np.random.default_rng(1234).normal(size=(n_features, n_features)))
    rng = np.random.default_rng(random_state)
    y = np.repeat([0, 1], n_per_class)
    scales = np.ones(n_features)
    scales[:n_noise_directions] = noise_scale
    Z = rng.normal(size=(2 * n_per_class, n_features)) * scales
    Z[:, -1] += np.where(y == 1, separation / 2, -separation / 2)
    return Z @ Q.T + offset, y


def _blob_block(block_info, *, centers, seed, scale, outlier_fraction, corrupt_fraction,
                outlier_high, dtype, want):
    """Rows of one storage chunk: Gaussian clusters; outlier rows have a fraction of
    their entries replaced by gross values (they keep their true cluster label)."""
    r0, r1 = block_info[None]["array-location"][0]
    chunk_id = block_info[None]["chunk-location"][0]
    rng = np.random.default_rng([seed, chunk_id])
    n, (k, d) = r1 - r0, centers.shape
    labels = rng.integers(0, k, size=n)
    X = centers[labels] + rng.normal(scale=scale, size=(n, d))
    outlier = rng.random(n) < outlier_fraction
    n_bad = max(1, int(round(corrupt_fraction * d)))
    rows = np.flatnonzero(outlier)
    cols = np.argsort(rng.random((rows.size, d)), axis=1)[:, :n_bad]
    X[rows[:, None], cols] = rng.uniform(0.0, outlier_high, size=(rows.size, n_bad))
    np.maximum(X, 0.0, out=X)
    if want == "X":
        return X.astype(dtype)
    if want == "y":
        return labels.astype(np.int32)
    return outlier


def make_zarr_blobs(path, n_samples=1_000_000, n_features=64, n_clusters=10, *,
                    outlier_fraction=0.05, corrupt_fraction=0.25, chunk_rows=50_000,
                    cluster_std=1.0, dtype="float64", random_state=0, overwrite=False):
    """Write a large row-chunked clustering problem with gross outliers to a Zarr group.

    Non-negative Gaussian clusters (centres uniform in [2, 10] per feature, clipped at 0).
    A fraction ``outlier_fraction`` of the rows are gross outliers: ``corrupt_fraction``
    of their entries are replaced by values uniform in [0, 100] (sparse gross corruption,
    the robust-NMF setting); they keep their true cluster label.  Chunks are generated in
    parallel by the active Dask scheduler, each from ``(random_state, chunk index)``; the
    whole array is never in memory.

    Parameters
    ----------
    path : str or os.PathLike
        Zarr group to create, with arrays ``X`` (n_samples, n_features), ``y``
        (n_samples,) true clusters and ``outlier`` (n_samples,) bool.
    n_samples, n_features, n_clusters : int
    outlier_fraction : float in [0, 1)
    corrupt_fraction : float in (0, 1]
    chunk_rows : int
        Rows per stored chunk (all features in one chunk).
    cluster_std : float
    dtype : str
    random_state : int
    overwrite : bool
        An existing store is an error unless True.

    Returns
    -------
    str : the store path.
    """
    import dask.array as da
    import zarr

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it.")
    centers = np.random.default_rng(random_state).uniform(2.0, 10.0, size=(n_clusters, n_features))
    common = dict(centers=centers, seed=random_state, scale=cluster_std,
                  outlier_fraction=outlier_fraction, corrupt_fraction=corrupt_fraction,
                  outlier_high=100.0, dtype=dtype)
    shape2 = (n_samples, n_features)
    rows = da.core.normalize_chunks((chunk_rows, n_features), shape2)

    def part(want, dt):
        return da.map_blocks(lambda block_info=None: _blob_block(block_info, want=want, **common),
                             chunks=rows if want == "X" else rows[:1], dtype=dt,
                             meta=np.empty((0,) * (2 if want == "X" else 1), dt))

    root = zarr.open_group(path, mode="w")
    targets = [root.create_array("X", shape=shape2, chunks=(chunk_rows, n_features), dtype=dtype),
               root.create_array("y", shape=(n_samples,), chunks=(chunk_rows,), dtype=np.int32),
               root.create_array("outlier", shape=(n_samples,), chunks=(chunk_rows,), dtype=bool)]
    da.store([part("X", np.dtype(dtype)), part("y", np.int32), part("outlier", bool)], targets,
             lock=False)
    root.attrs.update({"generator": "daskrnmf.datasets.make_zarr_blobs",
                       "n_clusters": n_clusters, "outlier_fraction": outlier_fraction,
                       "corrupt_fraction": corrupt_fraction, "random_state": random_state,
                       "cluster_std": cluster_std})
    return path


def _load_npz(name):
    with resources.files("daskrnmf.data").joinpath(name).open("rb") as fh:
        data = np.load(fh)
        return data["X"].astype(np.float64), data["y"].astype(np.int64)


def load_orl():
    """ORL faces: X (400, 1024) float64 in [0, 255] (32x32, column-major), y in 1..40."""
    return _load_npz("orl_32x32.npz")


def load_yale():
    """Yale faces: X (165, 1024) float64 in [0, 255] (32x32, column-major), y in 1..15."""
    return _load_npz("yale_32x32.npz")


def load_digits():
    """scikit-learn's bundled 8x8 digits: X (1797, 64) float64 in [0, 16], y in 0..9."""
    from sklearn.datasets import load_digits as _load

    d = _load()
    return d.data.astype(np.float64), d.target.astype(np.int64)


def corrupt_images(X, rho, *, max_value=50.0, low=30.0, high=50.0, mode="add", random_state=0):
    """The ONMFO paper's outlier protocol (Zhao & Tan, Sec. 4.1).

    The images are scaled so that the largest grey level is ``max_value``; a fraction
    ``rho`` of the entries, drawn independently, get a value from U[low, high] added
    (``mode="add"``, the paper) or put in their place (``mode="replace"``); the result is
    clipped at ``max_value``.

    Parameters
    ----------
    X : ndarray (n_samples, n_features), non-negative
    rho : float in [0, 1]
        Outlier density.
    max_value, low, high : float
    mode : {"add", "replace"}
    random_state : int

    Returns
    -------
    clean : ndarray (n_samples, n_features)
        X scaled to a maximum of ``max_value`` (the reference for E_avg).
    corrupted : ndarray (n_samples, n_features)
    mask : ndarray of bool (n_samples, n_features)
        Where outliers were placed.
    """
    X = np.asarray(X, dtype=np.float64)
    if not 0 <= rho <= 1:
        raise ValueError(f"rho must be in [0, 1]; got {rho}.")
    if mode not in ("add", "replace"):
        raise ValueError(f"mode must be 'add' or 'replace'; got {mode!r}.")
    if X.size and X.min() < 0:
        raise ValueError("corrupt_images needs non-negative images.")
    top = X.max(initial=0.0)
    clean = X * (max_value / top) if top > 0 else X.copy()
    rng = np.random.default_rng(random_state)
    mask = rng.random(X.shape) < rho
    noise = rng.uniform(low, high, size=int(mask.sum()))
    corrupted = clean.copy()
    corrupted[mask] = noise + (corrupted[mask] if mode == "add" else 0.0)
    return clean, np.minimum(corrupted, max_value), mask
