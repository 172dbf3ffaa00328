"""The fit protocol every registered model keeps, written once and run over the registry.

- Chunking: a fit of Dask or Zarr blocks is the fit of the same data in memory, whatever
  the row chunks (blocks are how the data is stored, not what it is): at the defaults for
  every model, and at each model's own settings (losses, initialisations, fixed batches,
  chunked labels).
- Monotone objective: where the theory says an iteration cannot raise the objective, the
  recorded history never rises (to rounding), on data with heavy-tailed noise.
- float32: float32 in, float32 parameters and outputs, float64 in, float64 out; the same
  seed gives the same bits.

Worker loss is the same protocol with a worker process killed mid-fit: it needs a cluster
of processes of its own (tests/test_worker_loss.py, one case per registered model).
Assertions that belong to one model (pass counts, classifier outputs, outliers) stay in
that model's test file.
"""

import functools
import warnings
from dataclasses import dataclass, field

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

from daskrnmf import REGISTRY
from daskrnmf.datasets import make_coclusters, make_margin_gaussians, make_ordered_segments

from .reference import planted_missing, planted_outliers


@dataclass(frozen=True)
class Case:
    """One model at one setting, with the data it is fitted to.

    ``data(seed)`` gives ``(X, y)``; ``rtol``/``atol`` hold float attributes (and
    ``history_rtol`` the objective's history, when it is held closer), ``exact`` names the
    float attributes that must be the same bits (integer ones always are).
    """

    name: str
    kwargs: dict
    data: object
    chunks: tuple = (7, 40)
    rtol: float = 1e-7
    atol: float = 1e-10
    history_rtol: float = None
    exact: tuple = ()
    fit_transform: bool = False
    transform: bool = False
    label: str = ""
    marks: tuple = field(default=())

    def estimator(self, **extra):
        return REGISTRY[self.name].cls(**{**self.kwargs, **extra})

    def param(self):
        return pytest.param(self, id=f"{self.name}-{self.label}" if self.label else self.name,
                            marks=self.marks)


# ---------------------------------------------------------------- data (small, cached)
@functools.cache
def _two_groups(seed=None):
    rng = np.random.default_rng(1)
    X = rng.random((40, 6)) * 0.2
    X[:20, :3] += 1.0           # two groups of samples, two groups of features
    X[20:, 3:] += 1.0
    return X, np.arange(40) % 2


@functools.cache
def _blobs(seed=None):
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=2.0, random_state=3)
    if seed is not None:        # heavy-tailed noise: the robust losses' reason to exist
        X = X + np.random.default_rng(seed).standard_cauchy(size=X.shape)
    return X, None


@functools.cache
def _coclusters(seed=None):
    X, _, _, _ = make_coclusters(300, 40, 4, 3, noise=2.0, outlier_fraction=0.05, random_state=1)
    if seed is not None:
        X = np.abs(X + np.random.default_rng(seed).standard_cauchy(size=X.shape))
    return X, None


@functools.cache
def _segments(seed=None):
    if seed is None:
        X, _ = make_ordered_segments(n_features=30, n_segments=4, segment_length=10,
                                     noise=0.1, random_state=0)
    else:
        X, _ = make_ordered_segments(n_features=40, n_segments=5, segment_length=12,
                                     noise=0.5, noise_mode="fraction", random_state=seed)
    return X, None


@functools.cache
def _margin(seed=None):
    if seed is None:
        return make_margin_gaussians(30, 10, n_noise_directions=3, random_state=0)
    return make_margin_gaussians(60, 30, random_state=seed)


@functools.cache
def _missing(seed=None):
    return planted_missing()[1] * 3.0, None       # 15 % NaN


@functools.cache
def _outliers(seed=None):
    X = planted_outliers()[0]
    return (X, None) if seed is None else (X[:120], None)


def _defaults(name):
    """The model's size only (n_clusters, n_components, ...): everything else at its default."""
    return {"RFNMF": dict(n_clusters=2),
            "RFNMTF": dict(n_row_clusters=2, n_column_clusters=2)}.get(name, dict(n_components=2))


# ---------------------------------------------------------------- chunking
CHUNKING = [
    # every model at its defaults
    *[Case(name, dict(_defaults(name), random_state=0), _two_groups, label="defaults")
      for name in REGISTRY],
    # each model's own settings
    *[Case("RFNMF", dict(n_clusters=4, loss=loss, n_init=3, random_state=7), _blobs,
           chunks=(600, 100, 33), rtol=1e-12, atol=1e-12, label=loss) for loss in ("l1", "l21")],
    *[Case("RFNMTF", dict(n_row_clusters=4, n_column_clusters=3, n_init=3, init=init,
                          random_state=5), _coclusters,
           chunks=(300, 64, 17), rtol=1e-12, atol=0, exact=("block_medians_",), label=init)
      for init in ("k-medians++", "random")],
    *[Case(name, dict(n_components=4, init=init, max_iter=40, tol=0.0, random_state=3, **kw),
           _segments, chunks=(40, 7, 3), history_rtol=1e-9, fit_transform=True, label=init)
      for name, kw in (("ORNMF", dict(alpha=0.3)), ("RNMF", {}), ("NMF", {}))
      for init in ("nndsvda", "random")],
    # labels chunked too, unlike X
    Case("MNMF", dict(n_components=2, C=1.0, reconstruction_weight=0.1, semi_max_iter=20,
                      max_iter=3, tol=0, inner_tol=1e-6, random_state=2), _margin,
         chunks=(13,), rtol=0, atol=1e-6, label="chunked-y"),
    Case("ONMFO", dict(n_components=4, batch_size=32, max_inner_iter=60, random_state=1),
         _outliers, chunks=(7, 64, 300), rtol=1e-9, atol=1e-12, history_rtol=1e-10,
         label="batch_size"),
    Case("RobustNMF", dict(n_components=4, random_state=0, max_iter=60), _outliers,
         chunks=(41,), rtol=1e-9, atol=1e-12, fit_transform=True, label="cd"),
    # missing values masked ("mu" codes stop on the piece's summed objective unless
    # inner_tol=0: chunk-dependent)
    *[Case(name, dict(n_components=3, random_state=0, missing="mask", tol=0, **kw), _missing,
           chunks=(11,), transform=True, label=f"masked{label}")
      for name, kw, label in (("NMF", dict(max_iter=30), ""), ("ORNMF", dict(max_iter=30), ""),
                              ("RobustNMF", dict(max_iter=15, solver="cd"), "-cd"),
                              ("RobustNMF", dict(max_iter=15, solver="mu", inner_tol=0), "-mu"),
                              ("ONMFO", dict(max_iter=3, batch_size=40), ""))],
]


def _fit(case, X, y, **extra):
    model = case.estimator(**extra)
    y = y if REGISTRY[case.name].needs_y else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # ConvergenceWarning
        out = model.fit_transform(X, y) if case.fit_transform else model.fit(X, y)
    return model, (out if case.fit_transform else None)


def _fitted(model):
    """Every public fitted array, and the iteration count (the pass counts differ by design:
    data in memory is read once, not once per iteration)."""
    out = {key: value for key, value in vars(model).items()
           if key.endswith("_") and not key.startswith("_") and isinstance(value, np.ndarray)}
    if isinstance(getattr(model, "n_iter_", None), (int, np.integer)):
        out["n_iter_"] = model.n_iter_
    return out


def _assert_same(case, got, want, where):
    assert set(got) == set(want), where
    for key, value in want.items():
        value, other = np.asarray(value), np.asarray(got[key])
        if key == "objective_history_" and case.history_rtol is not None:
            np.testing.assert_allclose(other, value, rtol=case.history_rtol,
                                       err_msg=f"{key}, {where}")
        elif value.dtype.kind == "f" and key not in case.exact:
            np.testing.assert_allclose(other, value, rtol=case.rtol, atol=case.atol,
                                       err_msg=f"{key}, {where}")
        else:
            np.testing.assert_array_equal(other, value, err_msg=f"{key}, {where}")


def test_every_registered_model_is_chunked_at_its_defaults():
    assert {c.name for c in CHUNKING if c.label == "defaults"} == set(REGISTRY)


@pytest.mark.parametrize("case", [c.param() for c in CHUNKING])
def test_same_fit_for_any_chunking(case):
    X, y = case.data()
    ref, H = _fit(case, X, y)
    want = _fitted(ref)
    assert want, "no fitted attribute to compare"
    for rows in case.chunks:
        Xd = da.from_array(X, chunks=(rows, X.shape[1]))
        yd = None if y is None else da.from_array(y, chunks=7)     # unlike X's
        model, Hd = _fit(case, Xd, yd)
        _assert_same(case, _fitted(model), want, f"chunks of {rows} rows")
        if case.fit_transform:            # Dask in, Dask out, chunked like X
            assert isinstance(Hd, da.Array) and Hd.chunks[0] == Xd.chunks[0]
            np.testing.assert_allclose(Hd.compute(), np.asarray(H), rtol=case.rtol,
                                       atol=case.atol, err_msg=f"codes, chunks of {rows} rows")
        if case.transform:
            Hd = model.transform(Xd)
            assert isinstance(Hd, da.Array) and Hd.chunks[0] == Xd.chunks[0]
            np.testing.assert_allclose(Hd.compute(), ref.transform(X), rtol=1e-6, atol=1e-8,
                                       err_msg=f"transform, chunks of {rows} rows")


# ---------------------------------------------------------------- monotone objective
# ONMFO: an online fit records the objective of the batches it has seen, each step a
# descent on its own batch only: no monotone history is promised (on planted_outliers,
# tol=0, seeds 0-3, its history rises by up to 5e-4 relative).
NOT_MONOTONE = {"ONMFO": "online: each step decreases its own batch's objective only"}

MONOTONE = [
    *[Case("RFNMF", dict(n_clusters=4, loss=loss, n_init=1, init="random", max_iter=50,
                         tol=0.0), _blobs, rtol=1e-9, label=loss) for loss in ("l1", "l21")],
    *[Case("RFNMTF", dict(n_row_clusters=4, n_column_clusters=3, n_init=1, init=init,
                          max_iter=40, tol=0.0), _coclusters, rtol=1e-12, label=init)
      for init in ("random", "k-medians++")],
    *[Case(name, dict(n_components=5, init="random", max_iter=150, tol=0.0, **kw), _segments,
           rtol=1e-10) for name, kw in (("ORNMF", dict(alpha=0.5)), ("RNMF", {}), ("NMF", {}))],
    Case("SemiNMF", dict(n_components=3, max_iter=25, tol=0), _margin, rtol=1e-9),
    # at the defaults (C = 100, theta = 10^4): the scale-invariant steps of MNMF's docstring
    Case("MNMF", dict(n_components=2, tol=0, max_iter=12), _margin, rtol=1e-9),
    *[Case("RobustNMF", dict(n_components=4, solver=solver, max_iter=30, tol=0), _outliers,
           rtol=1e-12, label=solver) for solver in ("cd", "mu")],
]
SEEDS = {"RFNMF": (0, 1, 2), "RFNMTF": (0, 1, 2, 3), "ORNMF": (0, 1, 2, 3), "RNMF": (0, 1, 2, 3),
         "NMF": (0, 1, 2, 3), "MNMF": (0, 1, 2)}


def test_every_registered_model_has_a_monotone_case_or_a_reason():
    assert {c.name for c in MONOTONE} | set(NOT_MONOTONE) == set(REGISTRY)
    assert not {c.name for c in MONOTONE} & set(NOT_MONOTONE)


@pytest.mark.parametrize("case, seed", [pytest.param(c, seed, id=f"{c.param().id}-{seed}")
                                        for c in MONOTONE for seed in SEEDS.get(c.name, (0, 1))])
def test_objective_never_increases(case, seed):
    X, y = case.data(seed)
    model, _ = _fit(case, X, y, random_state=seed)
    history = model.objective_history_
    # a classifier of several classes keeps one history per binary problem
    for h in history if isinstance(history, list) else [history]:
        h = np.asarray(h)
        assert h.size >= 2, h
        assert np.all(np.diff(h) <= case.rtol * np.abs(h[:-1])), h
        if isinstance(getattr(model, "objective_", None), float):
            assert model.objective_ <= h[-1] * (1 + 1e-12)


# ---------------------------------------------------------------- float32
@pytest.mark.parametrize("name", list(REGISTRY))
def test_float32_preserved_and_reproducible(name):
    """float32 in: float32 parameters, codes and outputs, NumPy or Dask; float64 in, float64
    out; the same seed, the same bits."""
    X = np.random.default_rng(0).random((40, 6)).astype(np.float32)
    y = (np.arange(40) % 2) if REGISTRY[name].needs_y else None
    est = REGISTRY[name].cls(**_defaults(name), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y)
        b = clone(est).fit(X, y)
    parameters = [key for key in ("components_", "cluster_centers_", "block_medians_", "coef_",
                                  "intercept_") if hasattr(a, key)]
    assert parameters
    for key in parameters:
        assert getattr(a, key).dtype == np.float32, key
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    Xd = da.from_array(X, chunks=(15, -1))
    if hasattr(a, "transform"):
        assert np.asarray(a.transform(X)).dtype == np.float32
        assert a.transform(Xd).compute().dtype == np.float32
        assert np.asarray(a.transform(X.astype(np.float64))).dtype == np.float64
    for key, out in a._outputs(Xd).items():        # what the CLI writes
        assert out.chunks[0] == Xd.chunks[0], key
        if out.dtype.kind == "f":
            assert out.dtype == np.float32, key
