import numpy as np
import pytest
import zarr

from daskrnmf import datasets


def test_outlier_blobs():
    X, y = datasets.make_outlier_blobs(random_state=1)
    assert X.shape == (203, 2) and (y == -1).sum() == 3
    np.testing.assert_allclose(X[y == 0].mean(0), [-6, 0], atol=0.4)
    np.testing.assert_allclose(X[y == 1].mean(0), [6, 0], atol=0.4)
    assert np.all(X[y == -1, 1] > 80)


def test_zarr_blobs_written_chunkwise_and_seeded(tmp_path):
    p = datasets.make_zarr_blobs(tmp_path / "a.zarr", n_samples=1000, n_features=6, n_clusters=3,
                                 outlier_fraction=0.1, chunk_rows=128, random_state=3)
    q = datasets.make_zarr_blobs(tmp_path / "b.zarr", n_samples=1000, n_features=6, n_clusters=3,
                                 outlier_fraction=0.1, chunk_rows=128, random_state=3)
    X, y = zarr.open_array(p + "/X", mode="r"), zarr.open_array(p + "/y", mode="r")
    assert X.shape == (1000, 6) and X.chunks == (128, 6) and y.shape == (1000,)
    np.testing.assert_array_equal(X[:], zarr.open_array(q + "/X", mode="r")[:])
    out = zarr.open_array(p + "/outlier", mode="r")[:]
    assert 0.05 < out.mean() < 0.15 and X[:].min() >= 0
    assert set(np.unique(y[:])) == {0, 1, 2}
    # an outlier row has a quarter of its entries replaced by gross values
    assert (X[:][out] > 20).sum(axis=1).mean() > 0.6 * 0.25 * 6
    assert (X[:][~out] > 20).sum() == 0
    with pytest.raises(FileExistsError):
        datasets.make_zarr_blobs(p, n_samples=10)


def test_loaders():
    for loader, shape, n_classes in [(datasets.load_orl, (400, 1024), 40),
                                     (datasets.load_yale, (165, 1024), 15),
                                     (datasets.load_digits, (1797, 64), 10)]:
        X, y = loader()
        assert X.shape == shape and X.dtype == np.float64
        assert len(np.unique(y)) == n_classes
