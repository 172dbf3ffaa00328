"""What the hard-indicator models share: the centroid problem of RFNMF (L1 medians,
L2,1 reweighted means, L2 means) with its passes, robust greedy k-medians++ seeds, the final
assignment, and the per-block predict/transform kernels.

RFNMF runs :class:`CentroidFit` on X; RFNMTF runs it in memory on a small sample of X
(its initialisation) and shares the assignment and objective kernels.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning

from .. import _validation as v
from .._base import BaseModel, float_tags
from .._blocks import RowBlocks
from .._driver import run_quiet, user_stacklevel
from .._median_search import (MedianSearch, certified_objective, certified_plan, keep_windows,
                              median_refine_chunk, sample_bracket, warm_windows)
from .._typing import Array, Data
from ..kernels.assign import (distances, nearest, pairwise_distances, seed_potentials,
                              seed_potentials_gram, seed_potentials_pairwise, seed_update,
                              seed_update_gram)
from ..kernels.blocks import as_kernel_block, available_cpus, sum_arrays
from ..kernels.kmedians import kmedians_fit, seed_draw
from ..kernels.median_rounds import merge_median_round
from ..kernels.median_select import group_medians, group_medians_ranked, group_order
from ..reductions import (SAMPLE_SEED, SAMPLE_STREAM, AssignSpec, assign_chunk, assign_combine,
                          feature_stats, sample_rows)

# Seeding runs in memory on a uniform row sample drawn in the first pass: at least
# SEED_SAMPLE_ROWS rows (and 100 per cluster), at most SEED_SAMPLE_BYTES as float64.
SEED_SAMPLE_ROWS = 10_000
SEED_SAMPLE_BYTES = 2**26
# D^p sampling weights and the greedy potential are clipped at this quantile of the
# current distances, so that gross outliers weigh no more than the far inliers.
SEED_CLIP_QUANTILE = 0.9


def seed_sample_size(n_samples, n_features, n_clusters):
    """Rows of the seeding sample (see :data:`SEED_SAMPLE_ROWS`)."""
    m = max(SEED_SAMPLE_ROWS, 100 * n_clusters)
    m = min(m, max(SEED_SAMPLE_BYTES // (8 * max(n_features, 1)), 20 * n_clusters))
    return int(min(m, n_samples))


class ClusterBase(ClusterMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseModel):
    """predict / transform / outputs of a model whose clusters have prototypes.

    A subclass sets ``_fitted_attribute`` and implements ``_prototypes()`` ->
    ``(centres (n_clusters, n_features), metric)``.
    """

    _parameter_constraints = {
        **BaseModel._parameter_constraints,
        "n_init": [v.Interval(int, 1, None)],
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
        "median_tol": [v.Interval(float, 0, 1)],
    }

    @property
    def _n_features_out(self):
        return self._prototypes()[0].shape[0]

    def predict(self, X: Data) -> Array:
        """Index of the nearest prototype (L1 or L2) for every sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,), or a lazy Dask array chunked like X's rows
        """
        X = self._checked_input(X, "predict")
        centers, metric = self._prototypes()
        return self._map_rows(X, predict_block, None, np.int32, centers, metric)

    def transform(self, X: Data) -> Array:
        """Distances of every sample to the prototypes (L1 or L2).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters), in X's float dtype; lazy
            and chunked like X's rows for Dask input
        """
        X = self._checked_input(X, "transform")
        centers, metric = self._prototypes()
        return self._map_rows(X, transform_block, centers.shape[0], self._output_dtype(X),
                              centers, metric)

    def score(self, X: Data, y: None = None) -> float:
        """Opposite of the model's objective for X under the fitted prototypes.

        Every sample goes to its nearest prototype (as :meth:`predict`), and the score is
        minus the sum of its losses there: ``-sum_i ||x_i - f_{g_i}||_2`` (RFNMF,
        ``loss="l21"``), ``-sum_i ||x_i - f_{g_i}||_1`` (RFNMF, ``loss="l1"``; RFNMTF,
        whose prototypes are ``block_medians_[:, column_labels_]``, i.e. ``-||X - F S
        G^T||_1`` after the row step) or ``-sum_i ||x_i - f_{g_i}||_2^2`` (``loss="l2"``:
        scikit-learn's ``KMeans.score``, ``-inertia``).  On the training data it equals
        ``-objective_``.  Larger is better, so :class:`~sklearn.model_selection.GridSearchCV`
        and :func:`~sklearn.model_selection.cross_val_score` use it when given no
        ``scoring``.  With ``missing="mask"`` a sample's distance is over its observed
        features, rescaled by ``n_features / n_observed``, as in the fit.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)
            Checked as :meth:`predict` checks it; Dask/Zarr X is scored in one pass on
            the workers (each block checked as it is read), and only the sum comes back.
        y : None
            Ignored (scikit-learn's signature).

        Returns
        -------
        score : float
        """
        X = self._checked_input(X, "score")
        centers, metric = self._prototypes()
        losses = self._map_rows(X, score_block, None, np.float64, centers, metric,
                                self._squared_loss)
        total = losses.sum()
        return -float(total if isinstance(losses, np.ndarray) else total.compute())

    # the objective sums squared distances (RFNMF's loss="l2", k-means)
    _squared_loss = False

    def _warn_fewer_clusters(self, labels, n_clusters, what="clusters", parameter="n_clusters",
                             reason="Possibly due to duplicate points in X."):
        """scikit-learn's ConvergenceWarning (KMeans') when the fit's ``labels`` use fewer
        than ``n_clusters`` distinct clusters (X has fewer distinct points than that, or
        the restarts could not separate them): the fitted model has empty clusters."""
        found = int(np.unique(labels).size)
        if found < n_clusters:
            warnings.warn(f"Number of distinct {what} ({found}) found smaller than "
                          f"{parameter} ({n_clusters}). {reason}", ConvergenceWarning,
                          stacklevel=user_stacklevel())

    def _outputs(self, X):
        return {"labels": self.predict(X)}

    def __sklearn_tags__(self):
        return float_tags(super().__sklearn_tags__())


def restart_column(labels, r):
    """One restart's labels of a block (run on the worker that holds them)."""
    return np.ascontiguousarray(labels[:, r])


def predict_block(block, centers, metric):
    """Nearest-centre labels of one block's rows."""
    return nearest(block, centers[None], metric)[0][:, 0]


def score_block(block, centers, metric, squared):
    """Each row's loss at its nearest centre (:meth:`ClusterBase.score`): the distance,
    squared for a squared loss."""
    dist = nearest(block, centers[None], metric)[1][:, 0]
    return dist * dist if squared else dist


def transform_block(block, centers, metric):
    """Distances of one block's rows to the centres (n_rows, n_centres)."""
    return distances(block, centers, metric)


class CentroidFit:
    """The state and passes of one RFNMF fit (all restarts stacked)."""

    # what a checkpoint holds besides the centres (daskrnmf._resume): the median
    # search's warm windows, the weights rule of the next step, the last pass's labels
    # (per block) and, in memory, every restart's last labels and medians
    checkpoint_attributes = ("warm", "warm_hit", "unit_weights_next", "_last_pass",
                             "_medians", "median_rounds")

    def __init__(self, blocks, stats, *, k, R, metric, loss, seed, median_tol, missing=False,
                 ranked=None):
        self.blocks, self.k, self.R = blocks, k, R
        self.missing = missing
        self.metric, self.loss, self.seed, self.median_tol = metric, loss, seed, median_tol
        # a feature no sample observes (missing="mask"; its range is (inf, -inf)) cannot
        # inform the clustering: its range is taken as [0, 0], so its centre value is 0
        # in every cluster (seeds, fills) and it does not change which centre is nearest
        unseen = ~(stats["min"] <= stats["max"])
        self.lo = np.where(unseen, 0.0, stats["min"])
        self.hi = np.where(unseen, 0.0, stats["max"])
        self.sample = stats.get("sample")
        self.d = self.lo.shape[0]
        # residual floor of the L2,1 weights 1 / ||x - f||: relative to the data's scale
        # (its range, else its magnitude, else 1 for all-zero data), never so small that
        # the weight overflows (constant or near-subnormal data gave inf/NaN centres)
        scale = max(float(np.max(self.hi - self.lo)), float(np.max(np.abs(self.hi))),
                    float(np.max(np.abs(self.lo))))
        self.eps = max(1e-10 * scale, 1e-280) if scale > 0 else 1.0
        self.warm = None  # previous iteration's final median windows, per restart
        # ... and whether they all held the medians last time (None: no warm round yet;
        # the first warm round after seeded centres trusts its windows, a round after a
        # miss does not, nor the first after random labels)
        self.warm_hit = None
        self.seed_rows = None  # the seeding sample (k-medians++), for the first medians
        # L1 out of core: (centres, objective, labels, new centres) of the last step
        self._last_pass = None
        # in memory (L1): every restart's last labels and medians (cluster_medians keeps
        # the medians of clusters whose members did not change), and which are set
        self._medians = None
        self._Xt = None        # in memory (L1): X transposed, for the selections
        self._ranked = ranked  # ... or its rows sorted once (kernels.median_select.rank_rows)
        self.median_rounds = []
        # L1 out of core: whether the fit compares its restarts by the steps' objectives
        # (the lowest kept).  A certified round's objective is the assignment's to
        # rounding only, so restarts that reach one partition (numbered otherwise) could
        # tie differently: with restarts compared, no round certifies (RFNMF's restarts
        # screened on the sample run alone on X, and choose_k's seeds are not compared)
        self.restarts_compared = True
        # k-medians++ seeds are data points: their own residual is 0 and the L2,1 weight
        # 1/||x - f|| would pin every centre to its seed, so the first F step after
        # seeding uses unit weights (a plain mean); the reweighting starts from there.
        self.unit_weights_next = False

    # -- initialisation
    def init_centers(self, init):
        if isinstance(init, np.ndarray):
            return np.asarray(init, dtype=np.float64)[None].copy()
        if init == "random":
            # the first medians are those of random labels, far from the next ones: the
            # first warm round histograms too (trusted once a warm round held them all)
            self.warm_hit = False
            F, _ = self._f_step(None, np.ones(self.R, dtype=bool))
            return F
        self.unit_weights_next = True
        S = self.sample
        if S is None:       # not drawn in the first pass: one pass for it
            size = seed_sample_size(self.blocks.shape[0], self.d, self.k)
            S, _ = sample_rows(self.blocks, size, SAMPLE_SEED, SAMPLE_STREAM)
        S = np.ascontiguousarray(impute_missing(S, self.lo, self.hi), dtype=np.float64)
        # the sample brackets the first step's medians, unless values are missing (their
        # imputed entries are not X's)
        self.seed_rows = None if self.missing else S

        D = (pairwise_distances(S, self.metric)
             if pairwise_worth(S.shape[0], self.R, self.k, seed_trials(self.k)) else None)

        def seed(r):
            return robust_kmedians_pp(S, self.k, np.random.default_rng([self.seed, r]),
                                      self.metric, power=2, pairwise=D)

        # the restarts' seeds are independent (a generator each): with the L1 distance
        # loop (it releases the GIL) one thread per core, the same seeds as one after the
        # other; the L2 matrix products (BLAS threads of their own) and the lookups in D
        # (small steps, held by the GIL) ran slower in threads (digits l21: 39 against
        # 22 ms, Yale: 16 against 8 ms)
        n_threads = (_n_threads(self.R, S.size) if self.metric == "l1" and D is None
                     else 1)
        if n_threads < 2:
            return np.stack([seed(r) for r in range(self.R)])
        with ThreadPoolExecutor(n_threads, thread_name_prefix="daskrnmf-seed") as pool:
            return np.stack(list(pool.map(seed, range(self.R))))

    # -- one iteration
    def step(self, F, active):
        newF, objective = self._f_step(F[active], active)
        F = F.copy()
        F[active] = newF
        return F, objective

    def _f_step(self, Fa, active):
        """Fused pass (+ median rounds): new centres of the active restarts, J(F_old, G_new)."""
        Ra = int(active.sum())
        spec = AssignSpec(metric=self.metric, n_clusters=self.k, eps=self.eps, n_worst=self.k,
                          seed=self.seed, restarts=Ra,
                          stats="median" if self.loss == "l1" else "sums",
                          weights="ones" if Fa is None or self.unit_weights_next
                          or self.loss == "l2" else "l21", squared=self.loss == "l2",
                          missing=self.missing,
                          # X in memory: empty clusters take their rows from it
                          worst_rows=self.blocks.array is None,
                          threads=1 if self.blocks.array is None else available_cpus())
        self.unit_weights_next = False
        if self.loss == "l1" and self.blocks.array is not None:
            # in memory: exact medians by selection from the pass's labels (one pass)
            res, labels = self.blocks.map_reduce(assign_chunk, assign_combine,
                                                 args=(Fa, replace(spec, stats="counts")),
                                                 keep_state=True, name="assign + medians")
            labels = np.concatenate(labels)
            cols = np.flatnonzero(active)
            previous = None
            if self._medians is not None and self._medians[2][cols].all():
                previous = (self._medians[0][:, cols], self._medians[1][cols])
            if self._Xt is None:        # X a feature per row, once for the fit
                self._Xt = np.ascontiguousarray(
                    np.asarray(self.blocks.array, dtype=np.float64).T)
            # the first step's guesses: the centres it was given (seeds are rows of X)
            newF = cluster_medians(self.blocks.array, labels, self.k, previous, Xt=self._Xt,
                                   guess=Fa if previous is None else None, ranked=self._ranked)
            if self._medians is None:
                self._medians = (np.zeros((labels.shape[0], self.R), dtype=labels.dtype),
                                 np.zeros((self.R, self.k, self.d)),
                                 np.zeros(self.R, dtype=bool))
            self._medians[0][:, cols] = labels
            self._medians[1][cols] = newF
            self._medians[2][cols] = True
            self.median_rounds.append(1)
        elif self.loss == "l1" and self._repeats_last_pass(Fa, active):
            # the last step's pass was given these very centres (they did not move): its
            # labels, objective and exact medians are this step's, so no pass is made
            # (the step that confirms convergence, one pass a fit)
            self.median_rounds.append(0)
            return self._last_pass[3].copy(), self._last_pass[1].copy()
        elif self.loss == "l1":
            search = self._median_search(Ra, active, Fa)
            plan = search.first_plan()
            spec = replace(spec, median_plan=plan)
            res, labels = self.blocks.map_reduce(assign_chunk, assign_combine, args=(Fa, spec),
                                                 keep_state=True, name="assign + median round 1")
            n_values = (res["observed"].ravel() if "observed" in res
                        else np.repeat(res["counts"].ravel(), self.d))
            search.update(plan, res["median"], n_values=n_values)
            keeps = Fa is not None and not self.missing and active.all()
            # (the fused pass's warm collections, when they hold every median, could
            # certify too; tried, their windows, sized to share the collection budget,
            # were too wide: it held in 1 of 96 small fits and in none on overlapping
            # clusters (400 000 x 32), where it cost 1-2 % of the fit)
            certify = (keeps and self.median_tol == 0 and (res["counts"] > 0).all()
                       and (self.R == 1 or not self.restarts_compared))
            certified = None

            def refine(plan):
                return self.blocks.map_reduce(
                    median_refine_chunk, merge_median_round, args=(self.k, plan),
                    state=labels, name="median round" + (" + certificate" if "certify"
                                                         in plan else ""))

            plan = search.next_plan()
            while plan is not None:     # the rounds that remain (MedianSearch.finish's)
                if certify:
                    # a round that collects every median left also certifies, if it
                    # can, that no row would change cluster at any medians inside
                    # their windows: then the fit has converged there, without
                    # another assignment pass
                    plan = certified_plan(search, plan, Ra, self.k)
                res_round = refine(plan)
                search.update(plan, res_round)
                certified = (certified_objective(search, plan, res_round, Ra)
                             if "certify" in plan else None)
                plan = search.next_plan()
            res_round = None
            # the pass's labels and objective stay until the next step: if the centres
            # it was given turn out to be the final ones, they are the final assignment
            # (and the medians it gave are the next step's, see _repeats_last_pass).
            # Certified, the labels are those of the medians found: the pass that
            # assigns the rows to them is the one the next step need not make
            self._last_pass = (None if not keeps
                               else (Fa.copy(), res["objective"], labels) if certified is None
                               else (search.value.reshape(Ra, self.k, self.d).copy(),
                                     certified, labels))
            del labels
            self.median_rounds.append(search.rounds)
            newF = search.value.reshape(Ra, self.k, self.d)
            self._keep_warm(search, active)
        else:
            res = self.blocks.map_reduce(_assign_sums_chunk, assign_combine, args=(Fa, spec),
                                         name="assign + reweighted sums")
            with np.errstate(invalid="ignore", divide="ignore"):
                newF = res["sums"]      # the pass's own array: divided in place
                if not newF.flags.writeable:        # (a buffer deserialised read-only)
                    newF = newF.copy()
                newF /= res["wsum_f"] if "wsum_f" in res else res["wsum"][:, :, None]
        newF = reseed_empty(newF, res["counts"], res["worst"], self.blocks.array)
        if self.missing and np.isnan(newF).any():
            # a feature no member observes (or a re-seeding row's missing entries):
            # the previous centre's value, else the middle of the feature's range
            mid = 0.5 * (self.lo + self.hi)
            fill = (np.broadcast_to(mid, newF.shape) if Fa is None
                    else np.where(np.isnan(Fa), mid, Fa))
            newF = np.where(np.isnan(newF), fill, newF)
        if self.loss == "l1" and self._last_pass is not None and len(self._last_pass) == 3:
            self._last_pass += (newF.copy(),)       # the step's centres, for the next
        return newF, res["objective"]

    def _repeats_last_pass(self, Fa, active):
        """Whether the last step's pass (L1, out of core) was given exactly the centres
        ``Fa`` of every restart: its step is then this one (the same labels, the same
        exact medians; with ``median_tol > 0`` a search may end elsewhere in a window)."""
        last = self._last_pass
        return (last is not None and len(last) == 4 and self.median_tol == 0
                and Fa is not None and active.all() and last[0].shape == Fa.shape
                and np.array_equal(last[0], Fa))

    def _median_search(self, Ra, active, Fa=None):
        lo = np.tile(self.lo, Ra * self.k)
        hi = np.tile(self.hi, Ra * self.k)
        warm, bracket = warm_windows(self.warm, active), None
        if warm is None and Fa is not None and self.seed_rows is not None:
            # the first step: the seeding sample, labelled by the same centres, brackets
            # the medians (a histogram of the bracket, then a collection: two rounds)
            labels = nearest(self.seed_rows, Fa, self.metric)[0]
            parts = [sample_bracket(self.seed_rows, labels[:, r], self.k) for r in range(Ra)]
            bracket = (np.concatenate([p[0] for p in parts]),
                       np.concatenate([p[1] for p in parts]))
        n_total = self.blocks.shape[0] * self.d * Ra
        # the fused pass counts every entry's values (n_values with its first round);
        # the warm collections skip their histograms unless the last warm round missed
        # (a miss continues on its side in one more pass; the histograms cost about a
        # quarter of every pass: on the 1M x 64 benchmark the second iteration's pass
        # went from 0.89 to 0.70 s)
        return MedianSearch(lo, hi, tol=self.median_tol, warm=warm, n_total=n_total,
                            counts_given=True, trust_warm=self.warm_hit is not False,
                            bracket=bracket)

    def _keep_warm(self, search, active):
        self.warm = keep_windows(self.warm, search, active, (self.k, self.d))
        if search.warm_hit is not None:
            self.warm_hit = bool(search.warm_hit)

    # -- the end
    def final(self, F):
        """Objective of every restart at its final centres and the per-block labels of
        every restart (1 pass; the labels stay with the blocks until gathered).

        Out of core, L1: when the last step's pass was given exactly these centres (its
        labels did not change, so neither did the medians), that pass's labels and
        objective are the final assignment, and no pass is made."""
        last, self._last_pass = self._last_pass, None
        if last is not None and last[0].shape == F.shape and np.array_equal(last[0], F):
            return last[1], last[2]
        return self.blocks.map_reduce(objective_chunk, objective_combine,
                                      args=(F, self.metric, True, self.loss == "l2",
                                            not self.missing),
                                      keep_state=True, name="final assignment")


# kmedians_labels' limits: iterations, and the stopping tolerance (relative decrease)
KMEDIANS_MAX_ITER, KMEDIANS_TOL = 30, 1e-4


def kmedians_labels(X, k, n_restarts, seed, max_iter=KMEDIANS_MAX_ITER, ranked=None, compiled=True, first=0,
                    seeds=None):
    """In-memory RFNMF_L1 from robust greedy k-medians++ seeds, ``n_restarts`` independent restarts.

    A helper for initialisations that cluster a small in-memory sample (never X itself).
    Its callers run many candidates, so each seeds with scikit-learn's ``2 + log k``
    candidates per centre rather than RFNMF's ``4 (2 + log k)`` (RFNMTF's planted
    benchmark: the same accuracy, the initialisation ~1.7x faster).  ``ranked``:
    :func:`~daskrnmf.kernels.median_select.rank_rows` of X transposed, when the caller has it
    (the medians are then read off each feature's sorted values, else selected; the
    same labels).  ``first``: the restarts are ``first .. first + n_restarts - 1`` (each
    seeded from ``(seed, restart)``), for a caller that adds restarts in rounds.
    ``seeds``: instead, restart r is seeded from ``(seeds[r], 0)`` (the seeds of as many
    one-restart calls, run as one fit).

    Each iteration is a few calls (:func:`~daskrnmf.kernels.kmedians.kmedians_fit`,
    the same numbers as the general fit, whose Python between the kernels cost RFNMTF's
    1000 x 120 benchmark 0.10 s for its 40 row fits) when X has no NaN and is one block
    of the general fit; ``compiled=False`` runs the general fit
    (:class:`CentroidFit` under :func:`~daskrnmf._driver.run_quiet`), the reference the
    tests hold the compiled one to.

    Returns
    -------
    labels : ndarray of int32 (n_samples, n_restarts), one clustering per restart.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n_trials = 2 + int(np.log(k))
    D = (pairwise_distances(X, "l1") if pairwise_worth(X.shape[0], n_restarts, k, n_trials)
         else None)
    keys = ([[s, 0] for s in seeds] if seeds is not None
            else [[seed, r] for r in range(first, first + n_restarts)])
    F0 = np.stack([robust_kmedians_pp(X, k, np.random.default_rng(key), n_trials=n_trials,
                                      pairwise=D) for key in keys])
    blocks = RowBlocks(X)
    if compiled and len(blocks.sizes) == 1 and not np.isnan(X.min()):
        # one block: the general fit's objective is NumPy's sum over all the rows, which
        # the compiled loop reproduces
        return kmedians_fit(X, ranked, F0, max_iter, KMEDIANS_TOL)[0]
    fit = CentroidFit(blocks, feature_stats(blocks), k=k, R=n_restarts, metric="l1", loss="l1",
                      seed=seed, median_tol=0.0, ranked=ranked)
    F, _ = run_quiet(fit.step, F0, n_restarts=n_restarts, max_iter=max_iter, tol=KMEDIANS_TOL)
    return nearest(X, F, "l1")[0]


def seed_trials(k):
    """Candidates per centre of RFNMF's robust greedy seeding: ``4 (2 + log k)``."""
    return 4 * (2 + int(np.log(k)))


PAIRWISE_MAX = 2**22    # entries (32 MiB) of a seeding sample's distance matrix


def pairwise_worth(n, n_restarts, k, n_trials):
    """Whether seeding ``n_restarts`` restarts on ``n`` in-memory rows should first compute
    all n^2 distances: when the restarts would evaluate more candidates than there are
    rows (each candidate costs n distances either way) and the matrix is small — the
    face sets (n = 165 and 400, 2400 and 8000 candidates), not digits (n = 1797, 1600)."""
    return n <= n_restarts * k * n_trials and n * n <= PAIRWISE_MAX


def robust_kmedians_pp(X, k, gen, metric="l1", *, power=2, n_trials=None,
                       clip_quantile=SEED_CLIP_QUANTILE, pairwise=None):
    """Greedy k-medians++ seeds of an in-memory array, resistant to gross outliers.

    As scikit-learn's greedy k-means++ (candidates per centre drawn with probability
    proportional to ``D^power``, ``D`` the distance to the nearest centre so far; the
    candidate that lowers the potential ``sum D^power`` most is kept), with changes that
    keep a few far-away rows from being taken as centres and clusters from being missed:

    * the weights and the potential use ``min(D, tau)``, ``tau`` the ``clip_quantile``
      quantile of the current ``D``: the farthest rows (where gross outliers sit) weigh no
      more than the far inliers, and a candidate is judged by how many rows it brings
      closer, not by how far the one it covers was;
    * ``4 (2 + log k)`` candidates per centre instead of ``2 + log k`` (a candidate costs
      one distance pass over X, which is in memory): measured on planted
      clusters with 5 % gross outliers, the true clusters were found by 97-100 % of
      single restarts, 40-60 % with ``2 + log k`` candidates;
    * the first centre too is the best of the candidates (uniform draws) by the
      potential, instead of one uniform draw.

    Parameters
    ----------
    X : ndarray (n, n_features)
        In memory (RFNMF passes the first pass's row sample).
    k : int
    gen : numpy.random.Generator
    metric : {"l1", "l2"}
        The model's distance ("l2": one matrix product per step).  L2 seeds for the L1
        model were measured worse under entry-wise gross corruption (planted
        co-clusters with 5-20 % gross entries: single-restart accuracy 0.6-0.85 against
        0.8-1.0 with L1 seeds), so each model seeds in its own distance.
    power : {1, 2}
        Exponent of the sampling weights and the potential: 2 (k-means++) unless given;
        the L1 model uses it too (it found the true clusters more often than D^1).

    pairwise : ndarray (n, n), optional
        All the distances between X's rows (:func:`pairwise_distances`, in ``metric``),
        for callers that seed many restarts on a sample smaller than their candidates
        (:func:`pairwise_worth`): a candidate's potential is then n lookups instead of a
        distance pass over X.

    Returns
    -------
    centers : ndarray (k, n_features), rows of X.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    n_trials = n_trials or seed_trials(k)
    if pairwise is not None:
        def potentials(cand, mind, tau):
            return seed_potentials_pairwise(pairwise, cand, np.minimum(mind, tau), power), None

        def update(best, mind, D, t):
            np.minimum(mind, pairwise[best], out=mind)
    elif metric == "l2":    # candidates' distances by one matrix product (X is fixed)
        xx = np.einsum("ij,ij->i", X, X)

        def potentials(cand, mind, tau):
            G = X @ X[cand].T
            return seed_potentials_gram(G, xx, xx[cand], np.minimum(mind, tau), power), \
                (G, xx[cand])

        def update(best, mind, D, t):
            seed_update_gram(D[0], xx, D[1], t, mind)
    else:
        def potentials(cand, mind, tau):
            return seed_potentials(X, cand, mind, tau, metric, power), None

        def update(best, mind, D, t):
            seed_update(X, best, mind, metric)

    cand = gen.choice(n, size=min(n_trials, n), replace=False)
    mind = np.full(n, np.inf)
    pot, D = potentials(cand, mind, np.inf)
    t = int(np.argmin(pot))
    chosen = [int(cand[t])]
    update(chosen[0], mind, D, t)
    for _ in range(1, k):
        # weights min(mind, tau) ** power, tau the clip_quantile quantile of mind;
        # where tau <= 0 (most rows sit on a centre) the others alike; the candidates
        # gen.choice(n, n_trials, p=w / w.sum()) would draw (compiled, the same rows)
        tau, cand = seed_draw(mind, clip_quantile, power, gen, n_trials)
        pot, D = potentials(cand, mind, tau if tau > 0 else np.inf)
        t = int(np.argmin(pot))
        chosen.append(int(cand[t]))
        update(chosen[-1], mind, D, t)
    return X[chosen].copy()


def impute_missing(S, lo, hi):
    """The seeding sample with its NaN (missing) entries replaced by the median of the
    feature's observed sample values (the middle of its range where none is): seeds are
    rows of it, and centres must be complete."""
    nan = np.isnan(S)
    if not nan.any():
        return S
    S = S.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # an all-NaN feature
        med = np.nanmedian(S, axis=0)
    med = np.where(np.isnan(med), 0.5 * (lo + hi), med)
    S[nan] = np.broadcast_to(med, S.shape)[nan]
    return S


THREADS_MIN_VALUES = 2**20    # restarts share the cores only above this much work


def _n_threads(n_restarts, n_values):
    """Threads for per-restart work on in-memory data (``n_values`` each): one per core,
    at most one per restart, and one when the work is so small that starting threads
    costs more than it saves."""
    if n_values * n_restarts < THREADS_MIN_VALUES:
        return 1
    return min(n_restarts, available_cpus())


def cluster_medians(X, labels, k, previous=None, Xt=None, guess=None, ranked=None):
    """Exact per-cluster, per-feature medians of an in-memory X (selection, as
    :func:`numpy.median`: the mean of the two middle values), for stacked restarts.

    Parameters
    ----------
    X : ndarray (n, n_features)
    labels : ndarray of int (n, n_restarts)
    k : int
    previous : (labels, medians), optional
        An earlier call's labels (n, n_restarts) and result: a cluster whose members are
        the same keeps its medians (near convergence most clusters), the others are
        selected again.
    Xt : ndarray (n_features, n) float64, optional
        X transposed, C-contiguous (a caller that selects every iteration makes it once).
    guess : ndarray (n_restarts, k, n_features), optional
        Without ``previous``: guesses of the medians (the centres the labels came from),
        which only speed the selection up.
    ranked : tuple, optional
        :func:`~daskrnmf.kernels.median_select.rank_rows` of ``Xt``: the medians are read off
        the members' ranks (:func:`~daskrnmf.kernels.median_select.group_medians_ranked`, the
        same numbers); guesses are then not needed.

    Returns
    -------
    medians : ndarray (n_restarts, k, n_features) float64, NaN for an empty cluster (and,
        with NaN entries in X, for a feature no member observes)
    """
    n, d = X.shape
    R = labels.shape[1]
    out = np.full((R, k, d), np.nan)
    if Xt is None:
        Xt = np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)   # a feature per row
    # X by rows too: the guessed medians are counted by rows
    Xr = as_kernel_block(X) if ranked is None else None

    def one(r):
        lab = np.ascontiguousarray(labels[:, r], dtype=np.int64)
        todo = np.ones(k, dtype=bool)
        if previous is not None:
            old = previous[0][:, r]
            moved = lab != old
            todo[:] = False
            todo[lab[moved]] = True
            todo[old[moved]] = True
            out[r, ~todo] = previous[1][r, ~todo]
            if not todo.any():
                return
            lab = np.where(todo[lab], lab, k)        # unchanged clusters: not selected
        order, ends = group_order(lab, k + 1)
        ends = ends[:k]
        part = np.full((k, d), np.nan)
        pivots = (previous[1][r] if previous is not None
                  else None if guess is None else guess[r])
        if ranked is not None:
            group_medians_ranked(ranked, order, ends, part)
        else:
            group_medians(Xt, order, ends, part, pivots, X=Xr)
        out[r, todo] = part[todo]

    # restarts are independent and the selection kernel releases the GIL: one thread
    # per core (each writes only its own restart's medians)
    n_threads = _n_threads(R, X.size)
    if n_threads < 2:
        for r in range(R):
            one(r)
    else:
        with ThreadPoolExecutor(n_threads, thread_name_prefix="daskrnmf-medians") as pool:
            list(pool.map(one, range(R)))
    return out


def _assign_sums_chunk(block, start, centers, spec):
    return assign_chunk(block, start, centers, spec)[0]


def objective_chunk(block, start, F, metric, keep_labels, squared=False, finite=False):
    labels, dist = nearest(block, F, metric, finite=finite)
    if squared:
        dist = dist ** 2
    if keep_labels:
        return dist.sum(axis=0), labels
    return dist.sum(axis=0)


def objective_combine(parts):
    return sum_arrays(parts)


def reseed_empty(F, counts, worst, X=None):
    """Empty clusters take the worst-fit samples as centres (worst first; ties: lowest
    index); F itself when no cluster is empty, else a copy.  ``X``: X in memory, where
    the summary has no rows (``worst_rows=False``)."""
    if np.all(counts):
        return F
    F = F.copy()
    for r in range(F.shape[0]):
        empty = np.flatnonzero(counts[r] == 0)
        for slot, c in enumerate(empty):
            F[r, c] = (worst["rows"][r, slot] if worst["rows"] is not None
                       else X[worst["idx"][r, slot]])
    return F
