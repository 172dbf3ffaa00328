"""RFNMF_L1 and RFNMF: robust hard-indicator NMF (Wang, Nie & Huang, IJCAI 2016).

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
refinement rounds that remain (usually zero or one).  Out of core, an L1 step given the
very centres the last step's pass was given (they did not move) is that pass's step and
makes none: the step that confirms convergence costs nothing.  And a refinement round
that collects every median's last values also certifies, when it can, that no row
would change cluster for any medians inside their windows (L1 distances to the
windows, with a margin for rounding): the fit has then converged in that round, its
labels are the final ones, the medians it finds their exact medians, and the next
step, which would have assigned the rows to them, makes no pass either (a first step
of two rounds, then two steps of none: 3 passes for 3 iterations where there were 4).
"""

import numpy as np

from .. import _validation as v
from .._blocks import RowBlocks
from ..kernels.kmedians import kmedians_fit
from ..kernels.median_select import rank_rows
from ._clustering import (CentroidFit, ClusterBase, objective_chunk, restart_column,
                          seed_sample_size)


class RFNMF(ClusterBase):
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
        Number of restarts; the one with the lowest objective is kept.  When X has no
        more rows than the seeding sample (see ``init``) they run together on X (one
        pass serves them all).  On a larger X (with ``init="k-medians++"``) they run to
        convergence in memory on the seeding sample, and only the best of them there is
        run on X: restarts then cost almost nothing over one (Bradley & Fayyad's
        refinement of initial points, ICML 1998).
    init : {"k-medians++", "random"} or ndarray (n_clusters, n_features), default="k-medians++"
        ``"random"`` is the paper's: a random indicator G, then one F step.
        ``"k-medians++"``: greedy k-means++-style seeding in the model's distance (D^2
        sampling, the best of ``4 (2 + log k)`` candidates per centre; L2 distances by
        one matrix product) with the distances clipped at their 90 % quantile, so that
        gross outliers are not taken as centres;
        run in memory on a uniform sample of X drawn in the fit's first pass (10 000
        rows, or 100 per cluster; all of X when smaller): no pass of its own (the user
        guide's page *In Python or a notebook*).
        An array gives the starting centres (then a single restart is run).
    max_iter : int, default=100
    tol : float, default=1e-4
        A restart stops when its objective falls by at most ``tol`` relative.
    median_tol : float, default=0.0
        L1 only.  0 computes exact medians (equal to :func:`numpy.median`); a positive
        value stops refining a median once its window is narrower than ``median_tol``
        times that feature's value range.
    missing : {"raise", "mask"}, default="raise"
        ``"mask"`` treats NaN entries of X as missing (``"raise"``: a ValueError):
        distances over each sample's observed features, rescaled by ``n_features /
        n_observed``; L1 medians and L2,1 weighted means of each feature over the members
        that observe it (a feature no member observes keeps the previous centre's
        value; one no sample observes is 0 in every centre); seeds from the first pass's
        sample with its missing entries set to the feature's sample median.  See
        :mod:`daskrnmf.kernels.missing`.
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every iteration
        (the centres, the median search's windows, the last pass's labels chunked like
        X), atomically; ``fit(X, resume=True)`` continues from it with exactly the
        uninterrupted result.  The library owns it (a marker file and its own
        subfolder; nothing else in it is touched); it must be visible to every worker
        (the user guide's page *Checkpoints and resuming a fit*).
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
    labels_ : ndarray (n_samples,)
        Nearest-centre labels of the training data for the final centres, computed in the
        fit's final pass: the model owns them (they do not depend on X staying where it
        was).  4 bytes a sample are the one per-sample result brought to the client.
    objective_ : float
        ``||X - G F||_1`` or ``||X - G F||_{2,1}`` at the final centres and labels.
    objective_history_ : ndarray (n_iter_,)
        Objective of the kept restart at each iteration (J(F_{t-1}, G_t)).
    n_iter_ : int
        Iterations of the kept restart.
    n_passes_ : int
        Passes over X the fit made (its cost model), initialisation included.
    median_rounds_ : list of int
        L1: passes per iteration spent on medians (the fused pass included); 0 for a step
        that repeated the last step's pass (its centres had not moved, or a certified
        round showed that no row would move) and made none.
    n_features_in_ : int
    feature_names_in_ : ndarray of str (n_features_in_,)
        Only when X had string column names (a DataFrame).

    See Also
    --------
    RFNMTF : co-clusters the features as well.
    sklearn.cluster.KMeans : the in-memory squared-error baseline (``loss="l2"`` here).

    References
    ----------
    D. Wang, F. Nie and H. Huang, "Fast Robust Non-Negative Matrix Factorization for
    Large-Scale Human Action Data Clustering", Proceedings of the 25th International
    Joint Conference on Artificial Intelligence (IJCAI), 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import RFNMF
    >>> X = np.vstack([np.zeros((20, 3)), np.full((20, 3), 5.0)])
    >>> model = RFNMF(n_clusters=2, loss="l1", random_state=0).fit(X)
    >>> np.bincount(model.labels_).tolist()
    [20, 20]
    """

    _fitted_attribute = "cluster_centers_"
    _supports_missing = True
    _parameter_constraints = {
        **ClusterBase._parameter_constraints,
        "n_clusters": [v.Interval(int, 1, None)],
        "loss": [v.Options(("l21", "l1", "l2"))],
        "missing": [v.MISSING],
        "checkpoint": [v.Location()],
        "init": [v.Options(("k-medians++", "random")),
                 v.ArrayLike("an array-like of shape (n_clusters, n_features)")],
    }

    def __init__(self, n_clusters=8, *, loss="l21", n_init=10, init="k-medians++", max_iter=100,
                 tol=1e-4, median_tol=0.0, missing="raise", checkpoint=None, random_state=None,
                 verbose=0, callback=None):
        self.n_clusters = n_clusters
        self.loss = loss
        self.n_init = n_init
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.median_tol = median_tol
        self.missing = missing
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    @property
    def _metric(self):
        return "l1" if self.loss == "l1" else "l2"

    def _prototypes(self):
        return self.cluster_centers_, self._metric

    @property
    def _squared_loss(self):
        return self.loss == "l2"

    def _sample_size(self, X):
        if isinstance(self.init, str) and self.init == "k-medians++":
            return seed_sample_size(X.shape[0], X.shape[1], self.n_clusters)
        return 0

    def _screen_restarts(self, fit, F0, stats):
        """The restarts of ``F0`` run to convergence on the in-memory seeding sample;
        returns the centres of the one with the lowest objective there, (1, k, d).

        L1 with nothing missing runs the compiled k-medians loop
        (:func:`~daskrnmf.kernels.kmedians.kmedians_fit`, the general fit's numbers bit for
        bit) on the sample's features sorted once: 10 restarts on 10 000 x 64 in 0.31
        against 0.70 s (a loaded machine), client time in which the workers wait."""
        S = fit.sample
        if fit.loss == "l1" and not fit.missing:
            S = np.ascontiguousarray(S, dtype=np.float64)
            F = kmedians_fit(S, rank_rows(np.ascontiguousarray(S.T)), F0, self.max_iter,
                             self.tol)[1]
            objective = objective_chunk(S, 0, F, fit.metric, False)
            return F[[int(np.argmin(objective))]]
        sample_blocks = RowBlocks(S, block_rows=S.shape[0])
        sfit = CentroidFit(sample_blocks, {"min": stats["min"], "max": stats["max"]}, k=fit.k,
                           R=F0.shape[0], metric=fit.metric, loss=fit.loss, seed=fit.seed,
                           median_tol=fit.median_tol, missing=fit.missing)
        sfit.unit_weights_next = fit.unit_weights_next
        F, _ = self._run(sfit.step, F0, n_restarts=F0.shape[0], quiet=True)
        objective = objective_chunk(S, 0, F, fit.metric, False, fit.loss == "l2")
        return F[[int(np.argmin(objective))]]

    def _fit_groups(self, blocks, stats, seed, n_groups=1):
        """The fit's centres for ``n_groups`` independent groups of ``n_init`` restarts
        (:func:`daskrnmf.choose_k` fits one group per seed in the same passes).

        On X larger than the seeding sample each group's restarts are screened there
        (:meth:`_screen_restarts`) and one per group runs on X.  Returns ``fit``, the
        centres ``F`` (n_groups * per, k, d), the driver's log and ``per``, the restarts
        per group that ran on X (restart ``g * per + i`` belongs to group g)."""
        n, d = blocks.shape
        k = self.n_clusters
        if k > n:
            raise ValueError(f"n_clusters={k} must be <= n_samples={n}.")
        per, init = self.n_init, self.init
        if not isinstance(init, str):       # an array-like of centres (list of lists too)
            init = v.as_init_array(init, f"The 'init' array of {self._name}", (k, d),
                                   "(n_clusters, n_features)")
            per = 1

        def centroid_fit(R):
            return CentroidFit(blocks, stats, k=k, R=R, metric=self._metric, loss=self.loss,
                               seed=seed, median_tol=self.median_tol, missing=self._allow_nan)

        fit = centroid_fit(per * n_groups)
        F0 = fit.init_centers(init)
        if per > 1 and fit.sample is not None and fit.sample.shape[0] < n:
            # X is larger than the seeding sample: the restarts are run to convergence
            # on the sample, in memory, and only the best of each group is run on X
            F0 = np.concatenate([self._screen_restarts(fit, F0[g * per:(g + 1) * per], stats)
                                 for g in range(n_groups)])
            seed_rows = fit.seed_rows
            fit, per = centroid_fit(n_groups), 1
            fit.seed_rows = seed_rows       # the sample still brackets the first medians
        fit.restarts_compared = per > 1     # else a restart per group, each kept as it is
        F, log = self._run(fit.step, F0, n_restarts=F0.shape[0], blocks=blocks, problem=fit)
        return fit, F, log, per

    def _fit_blocks(self, X, blocks, stats, seed, y):
        fit, F, log, _ = self._fit_groups(blocks, stats, seed)
        objective, labels = fit.final(F)
        best = int(np.argmin(objective))
        self._set_iterations(log, best)
        self.cluster_centers_ = F[best].copy()
        self.objective_ = float(objective[best])
        self.median_rounds_ = fit.median_rounds
        # the model owns its labels: computed in the final pass, never a graph over X
        self.labels_ = blocks.gather(labels, restart_column, best)
        self._warn_fewer_clusters(self.labels_, self.n_clusters)
