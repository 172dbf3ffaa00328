"""RFNMF_L1 and RFNMF: robust hard-indicator NMF (Wang, Nie, Huang; paper 000).

Samples are rows here (the paper has them as columns), so with F the centres
(n_clusters x n_features) and G the indicator (n_samples x n_clusters) the models are

    RFNMF_L1 (eq. 5):  min_{F, G in Ind} || X - G F ||_1
    RFNMF    (eq. 6):  min_{F, G in Ind} || X - G F ||_{2,1} = sum_i || x_i - f_{g_i} ||_2

G step (eq. 15 / 19): every sample goes to its nearest centre (L1 / L2 distance).
F step, L1 (Lemma 1, eq. 14): f_kj = median of feature j over the members of cluster k.
F step, L2,1 (eq. 16-18): f_k = sum_i d_i x_i / sum_i d_i over members, with
d_i = 1 / (2 ||x_i - f_{g_i}||) from the centres before the step (a residual floor
guards d_i when a sample sits on its centre; after k-medians++ seeding, whose centres
are data points, the first F step uses d_i = 1 so the seeds do not pin the centres).  G^T D G is diagonal for an indicator G,
so eq. (18) needs no inverse.

One iteration = one fused pass over X (assign with the current centres and accumulate
the new centres' statistics; all ``n_init`` restarts at once) plus, for L1, the median
refinement rounds that remain (usually zero or one).
"""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning

from .. import _validation as v
from .._blocks import RowBlocks
from .._driver import iterate, warn_if_not_converged
from ..kernels.assign import distances, nearest
from ..kernels.blocks import sum_arrays
from ..kernels.median import merge_median_round
from ..reductions import (MedianSearch, assign_chunk, assign_combine, checked_blocks, feature_stats,
                          median_refine_chunk, seeding_choice, seeding_chunk, seeding_combine)


class RFNMF(ClusterMixin, TransformerMixin, BaseEstimator):
    """Robust and fast NMF clustering with an L1 or L2,1 loss, out of core.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters (columns of the indicator G).
    loss : {"l21", "l1", "l2"}, default="l21"
        ``"l21"``: RFNMF, eq. (6), centres are reweighted means.  ``"l1"``: RFNMF_L1,
        eq. (5), centres are per-cluster, per-feature medians.  ``"l2"``: the squared
        Frobenius loss ||X - G F||_F^2, i.e. k-means (Lloyd's updates; the baseline the
        papers compare with and the clustering ORNMF applies to its codes).
    n_init : int, default=10
        Number of restarts, evaluated together (one pass over X serves them all); the
        restart with the lowest objective is kept.
    init : {"k-medians++", "random"} or ndarray (n_clusters, n_features), default="k-medians++"
        ``"random"`` is the paper's: a random indicator G, then one F step.
        ``"k-medians++"`` picks centres by D^1 sampling (``n_clusters`` passes over X).
        An array gives the starting centres (then a single restart is run).
    max_iter : int, default=100
    tol : float, default=1e-4
        A restart stops when its objective falls by at most ``tol`` relative.
    median_tol : float, default=0.0
        L1 only.  0 computes exact medians (equal to :func:`numpy.median`); a positive
        value stops refining a median once its window is narrower than ``median_tol``
        times that feature's value range.
    random_state : None, int, numpy RandomState or Generator, default=None
        Results depend on it alone, not on the chunking or the number of workers.
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, optional
        ``callback(info) -> bool`` after each iteration; True stops the fit.

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
        F (transposed to rows).
    labels_ : ndarray (n_samples,) or dask.array.Array
        Nearest-centre labels of the training data for the final centres: NumPy for
        NumPy input, a lazy Dask array chunked like X's rows for Dask/Zarr input.
    objective_ : float
        ``||X - G F||_1`` or ``||X - G F||_{2,1}`` at the final centres and labels.
    objective_history_ : ndarray (n_iter_,)
        Objective of the kept restart at each iteration (J(F_{t-1}, G_t)).
    n_iter_ : int
    n_passes_ : int
        Passes over X the fit made (its cost model), initialisation included.
    median_rounds_ : list of int
        L1: passes per iteration spent on medians (the fused pass included).
    n_features_in_ : int
    """

    _parameter_constraints = {
        "n_clusters": [v.Interval(int, 1, None)],
        "loss": [v.Options(("l21", "l1", "l2"))],
        "n_init": [v.Interval(int, 1, None)],
        "init": [v.Options(("k-medians++", "random")), v.Kind((np.ndarray,), "an array of shape (n_clusters, n_features)")],
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
        "median_tol": [v.Interval(float, 0, 1)],
        "random_state": [v.RANDOM_STATE],
        "verbose": [v.Interval(int, 0, None)],
        "callback": [v.CallableOrNone()],
    }

    def __init__(self, n_clusters=8, *, loss="l21", n_init=10, init="k-medians++", max_iter=100,
                 tol=1e-4, median_tol=0.0, random_state=None, verbose=0, callback=None):
        self.n_clusters = n_clusters
        self.loss = loss
        self.n_init = n_init
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.median_tol = median_tol
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    @property
    def _metric(self):
        return "l1" if self.loss == "l1" else "l2"

    def fit(self, X, y=None):
        """Cluster X.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
            NumPy array, Dask array chunked along rows, ``zarr.Array`` or Zarr path.
        y : ignored

        Returns
        -------
        self
        """
        v.validate_params(self, self._parameter_constraints)
        name = type(self).__name__
        X = v.check_array(X, estimator_name=name)
        n, d = X.shape
        k = self.n_clusters
        if k > n:
            raise ValueError(f"n_clusters={k} must be <= n_samples={n}.")
        n_init = self.n_init
        if isinstance(self.init, np.ndarray):
            if self.init.shape != (k, d) or not np.all(np.isfinite(self.init)):
                raise ValueError(f"The 'init' array of {name} must be finite with shape "
                                 f"(n_clusters, n_features) = {(k, d)}; got shape {self.init.shape}.")
            n_init = 1
        seed = v.seed_from(self.random_state)
        blocks, stats = checked_blocks(X, f"X passed to {name}")
        fit = _Fit(blocks, stats, k=k, R=n_init, metric=self._metric, loss=self.loss,
                   seed=seed, median_tol=self.median_tol)
        F = fit.init_centers(self.init)
        F, log = iterate(fit.step, F, n_restarts=n_init, max_iter=self.max_iter, tol=self.tol,
                         callback=self.callback, verbose=self.verbose, name=name,
                         passes=lambda: blocks.n_passes)
        objective, labels = fit.final(F)
        best = int(np.argmin(objective))
        if not log.stopped_by_callback:
            warn_if_not_converged(name, log.converged[best], self.max_iter)

        self.cluster_centers_ = F[best].copy()
        self.objective_ = float(objective[best])
        self.objective_history_ = log.restart_history(best)
        self.n_iter_ = int(log.n_iter[best])
        self.n_passes_ = blocks.n_passes
        self.median_rounds_ = fit.median_rounds
        self.n_features_in_ = d
        self.labels_ = labels[:, best] if labels is not None else self.predict(X)
        return self

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def predict(self, X):
        """Index of the nearest centre (L1 or L2), shape (n_samples,); lazy for Dask input."""
        return self._apply(X, predict_block, drop_features=True, dtype=np.int32)

    def transform(self, X):
        """Distances to the centres (L1 or L2), shape (n_samples, n_clusters)."""
        return self._apply(X, transform_block, drop_features=False, dtype=np.float64)

    def _apply(self, X, fn, drop_features, dtype):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "cluster_centers_")
        return apply_centers(X, self.cluster_centers_, self._metric, fn, drop_features, dtype,
                             type(self).__name__, self.n_features_in_)


def apply_centers(X, centers, metric, fn, drop_features, dtype, name, n_features_in):
    """``fn(block, centers, metric)`` on every row block of X: NumPy in, NumPy out; Dask
    (or Zarr) in, a lazy Dask array chunked like X's rows out (one column per centre, or
    none with ``drop_features``).  The graph carries only the centres, never an estimator."""
    X = v.check_array(X, estimator_name=name)
    if X.shape[1] != n_features_in:
        raise ValueError(f"X has {X.shape[1]} features, but {name} was fitted "
                         f"with {n_features_in}.")
    kw = {"centers": centers, "metric": metric}
    if isinstance(X, np.ndarray):
        return np.concatenate([fn(X[s:s + 65536], **kw) for s in range(0, X.shape[0], 65536)])
    if drop_features:
        return X.map_blocks(fn, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype), **kw)
    return X.map_blocks(fn, chunks=(X.chunks[0], (centers.shape[0],)), dtype=dtype,
                        meta=np.empty((0, 0), dtype), **kw)


def predict_block(block, centers, metric):
    return nearest(block, centers[None], metric)[0][:, 0]


def transform_block(block, centers, metric):
    return distances(block, centers, metric)


class _Fit:
    """The state and passes of one RFNMF fit (all restarts stacked)."""

    def __init__(self, blocks, stats, *, k, R, metric, loss, seed, median_tol):
        self.blocks, self.k, self.R = blocks, k, R
        self.metric, self.loss, self.seed, self.median_tol = metric, loss, seed, median_tol
        self.lo, self.hi = stats["min"], stats["max"]
        self.d = self.lo.shape[0]
        self.eps = 1e-10 * max(float(np.max(self.hi - self.lo)), 1e-300)
        self.warm = None  # previous iteration's final median windows, per restart
        self.median_rounds = []
        # k-medians++ seeds are data points: their own residual is 0 and the L2,1 weight
        # 1/||x - f|| would pin every centre to its seed, so the first F step after
        # seeding uses unit weights (a plain mean); the reweighting starts from there.
        self.unit_weights_next = False

    # -- initialisation
    def init_centers(self, init):
        if isinstance(init, np.ndarray):
            return np.asarray(init, dtype=np.float64)[None].copy()
        if init == "random":
            F, _ = self._f_step(None, np.ones(self.R, dtype=bool))
            return F
        self.unit_weights_next = True
        return self._seed_kmedians_pp()

    def _seed_kmedians_pp(self):
        spec = {"restarts": self.R, "metric": self.metric, "seed": self.seed}
        F = np.empty((self.R, self.k, self.d))
        mindist, newest = None, None
        for t in range(self.k):
            spec = dict(spec, step=t)
            state = mindist if mindist is not None else [None] * self.blocks.n_blocks
            res, mindist = self.blocks.map_reduce(seeding_chunk, seeding_combine, args=(newest, spec),
                                                  state=state, keep_state=True, name="k-medians++")
            F[:, t] = newest = seeding_choice(res)
        return F

    # -- one iteration
    def step(self, F, active):
        newF, objective = self._f_step(F[active], active)
        F = F.copy()
        F[active] = newF
        return F, objective

    def _f_step(self, Fa, active):
        """Fused pass (+ median rounds): new centres of the active restarts, J(F_old, G_new)."""
        Ra = int(active.sum())
        spec = {"metric": self.metric, "n_clusters": self.k, "eps": self.eps, "n_worst": self.k,
                "seed": self.seed, "restarts": Ra,
                "stats": "median" if self.loss == "l1" else "sums",
                "weights": "ones" if Fa is None or self.unit_weights_next or self.loss == "l2"
                else "l21", "squared": self.loss == "l2"}
        self.unit_weights_next = False
        if self.loss == "l1":
            search = self._median_search(Ra, active)
            plan = spec["median_plan"] = search.first_plan()
            res, labels = self.blocks.map_reduce(assign_chunk, assign_combine, args=(Fa, spec),
                                                 keep_state=True, name="assign + median round 1")
            search.update(plan, res["median"], n_values=np.repeat(res["counts"].ravel(), self.d))
            rounds = 1
            while (plan := search.next_plan()) is not None:
                part = self.blocks.map_reduce(median_refine_chunk, merge_median_round, args=(self.k, plan),
                                              state=labels, name="median round")
                search.update(plan, part)
                rounds += 1
            del labels
            self.median_rounds.append(rounds)
            newF = search.value.reshape(Ra, self.k, self.d)
            self._keep_warm(search, active)
        else:
            res = self.blocks.map_reduce(_assign_sums_chunk, assign_combine, args=(Fa, spec),
                                         name="assign + reweighted sums")
            with np.errstate(invalid="ignore", divide="ignore"):
                newF = res["sums"] / res["wsum"][:, :, None]
        newF = _reseed_empty(newF, res["counts"], res["worst"])
        return newF, res["objective"]

    def _median_search(self, Ra, active):
        lo = np.tile(self.lo, Ra * self.k)
        hi = np.tile(self.hi, Ra * self.k)
        warm = None
        if self.warm is not None:
            warm = tuple(w[active].ravel() for w in self.warm)
        n_total = self.blocks.shape[0] * self.d * Ra
        return MedianSearch(lo, hi, tol=self.median_tol, warm=warm, n_total=n_total)

    def _keep_warm(self, search, active):
        if self.warm is None:
            shape = (self.R, self.k, self.d)
            self.warm = (np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, dtype=np.int64))
        for w, new in zip(self.warm, search.final_window):
            w[active] = new.reshape(-1, self.k, self.d)

    # -- the end
    def final(self, F):
        """Objective of every restart at its final centres (1 pass); labels for NumPy input."""
        keep = not self.blocks.is_dask
        out = self.blocks.map_reduce(objective_chunk, objective_combine,
                                     args=(F, self.metric, keep, self.loss == "l2"),
                                     keep_state=keep, name="final assignment")
        if keep:
            objective, labels = out
            return objective, np.concatenate(labels)
        return out, None


def kmedians_labels(X, k, n_restarts, seed, max_iter=30):
    """In-memory RFNMF_L1 from greedy k-medians++ seeds, ``n_restarts`` independent restarts.

    A helper for initialisations that cluster a small in-memory sample (never X itself).

    Returns
    -------
    labels : ndarray of int32 (n_samples, n_restarts), one clustering per restart.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    F0 = np.stack([greedy_kmedians_pp(X, k, np.random.default_rng([seed, r]))
                   for r in range(n_restarts)])
    blocks = RowBlocks(X)
    fit = _Fit(blocks, feature_stats(blocks), k=k, R=n_restarts, metric="l1", loss="l1",
               seed=seed, median_tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        F, _ = iterate(fit.step, F0, n_restarts=n_restarts, max_iter=max_iter, tol=1e-4)
    return nearest(X, F, "l1")[0]


def greedy_kmedians_pp(X, k, gen, n_trials=None):
    """Greedy k-medians++ seeds of an in-memory array (D^1 sampling with local trials).

    As scikit-learn's greedy k-means++ (``2 + log k`` candidates per centre, the one that
    lowers the total L1 distance most is kept), with D^1 instead of D^2 weights.

    Returns
    -------
    centers : ndarray (k, n_features), rows of X.
    """
    n = X.shape[0]
    n_trials = n_trials or 2 + int(np.log(k))
    first = int(gen.integers(n))
    centers = [X[first]]
    mind = distances(X, X[first][None], "l1")[:, 0]
    for _ in range(1, k):
        total = mind.sum()
        p = mind / total if total > 0 else None
        cand = gen.choice(n, size=n_trials, p=p)
        trial = np.minimum(mind[:, None], distances(X, X[cand], "l1"))
        best = int(np.argmin(trial.sum(axis=0)))
        centers.append(X[cand[best]])
        mind = trial[:, best]
    return np.stack(centers)


def _assign_sums_chunk(block, start, centers, spec):
    return assign_chunk(block, start, centers, spec)[0]


def objective_chunk(block, start, F, metric, keep_labels, squared=False):
    labels, dist = nearest(block, F, metric)
    if squared:
        dist = dist ** 2
    if keep_labels:
        return dist.sum(axis=0), labels
    return dist.sum(axis=0)


def objective_combine(parts):
    return sum_arrays(parts)


def _reseed_empty(F, counts, worst):
    """Empty clusters take the worst-fit samples as centres (worst first; ties: lowest index)."""
    F = F.copy()
    for r in range(F.shape[0]):
        empty = np.flatnonzero(counts[r] == 0)
        for slot, c in enumerate(empty):
            F[r, c] = worst["rows"][r, slot]
    return F
