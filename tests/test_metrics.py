import itertools

import dask.array as da
import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix as sk_contingency

from daskrnmf.metrics import clustering_accuracy, contingency_matrix, normalized_mutual_info, purity


def _brute_accuracy(t, p):
    best = 0
    classes, clusters = np.unique(t), np.unique(p)
    for perm in itertools.permutations(classes, len(clusters)) if len(clusters) <= len(classes) else []:
        mapping = dict(zip(clusters, perm))
        best = max(best, np.mean([mapping[x] == y for x, y in zip(p, t)]))
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_references(seed):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 4, 300)
    p = np.where(rng.random(300) < 0.7, (t + 1) % 4, rng.integers(0, 4, 300)) * 10 + 3
    np.testing.assert_array_equal(contingency_matrix(t, p), sk_contingency(t, p))
    assert clustering_accuracy(t, p) == pytest.approx(_brute_accuracy(t, p))
    assert normalized_mutual_info(t, p) == pytest.approx(normalized_mutual_info_score(t, p))
    table = sk_contingency(t, p)
    assert purity(t, p) == pytest.approx(table.max(0).sum() / 300)
    td, pd_ = da.from_array(t, chunks=17), da.from_array(p, chunks=41)
    assert clustering_accuracy(td, pd_) == pytest.approx(clustering_accuracy(t, p))
    assert normalized_mutual_info(td, pd_) == pytest.approx(normalized_mutual_info(t, p))
    assert purity(td, pd_) == pytest.approx(purity(t, p))


def test_perfect_and_errors():
    t = np.array([0, 0, 1, 1, 2])
    assert clustering_accuracy(t, [5, 5, 7, 7, 9]) == 1.0
    assert normalized_mutual_info(t, [5, 5, 7, 7, 9]) == pytest.approx(1.0)
    assert normalized_mutual_info([0, 0], [1, 1]) == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        purity(t, [1, 2])
    with pytest.raises(ValueError, match="1-D"):
        purity(np.ones((2, 2)), np.ones((2, 2)))
