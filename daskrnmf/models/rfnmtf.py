"""RFNMTF: robust tri-factorization co-clustering of rows and columns (Wang, Nie & Huang,
IJCAI 2016, eq. 7).

Samples are rows here (the paper has them as columns).  With a row indicator F
(n_samples x n_row_clusters), a column indicator G (n_features x n_column_clusters) and
block values S >= 0 (n_row_clusters x n_column_clusters), the model is

    min_{F in Ind, G in Ind, S >= 0} || X - F S G^T ||_1
        = sum_{i, j} | X[i, j] - S[r_i, c_j] |

where ``r_i`` is sample i's row cluster and ``c_j`` feature j's column cluster.  Each
step solves one block of variables exactly, so the objective never increases:

* row step (eq. 21/22, transposed): ``r_i = argmin_k sum_j |X[i, j] - S[k, c_j]|`` — the
  L1-nearest row prototype ``S[k, c]``; a ``map_blocks``-style kernel per row chunk;
* column step: ``c_j = argmin_l sum_i |X[i, j] - S[r_i, l]|`` — every chunk contributes
  an (n_features x n_column_clusters) partial cost, tree-reduced, then an argmin;
* S step (eq. 20): ``S[k, l]`` = median of all entries of block (k, l) — the core's
  tree-reduced median search, with an entry per (restart, row cluster, column cluster).

One iteration is one fused pass (row step, column costs with the new row labels, and —
when the column labels did not change in the previous iteration — the first round of the
S step, speculatively for the old column labels) plus the S step's remaining rounds.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _validation as v
from .._blocks import RowBlocks
from .._driver import run_quiet
from .._median_search import (MedianSearch, block_bracket, keep_windows, median_refine_chunk,
                              warm_windows)
from ..kernels import rng
from ..kernels.assign import nearest
from ..kernels.blocks import as_kernel_block, available_cpus
from ..kernels.cocluster import argmin_ties_low, cluster_medians_sorted, prototypes, sorted_rows
from ..kernels.median_rounds import merge_median_round
from ..kernels.median_select import (RANKED_MAX_ROWS, SortedValues, block_medians,
                                     group_medians, group_order,
                                     rank_rows)
from ..kernels.sums import merge_worst_fit
from ..reductions import SAMPLE_SEED, SAMPLE_STREAM, feature_stats, sample_rows
from ._clustering import (ClusterBase, kmedians_labels, objective_chunk, objective_combine,
                          restart_column)
from ._cocluster import (CoclusterSpec, cocluster_assign_chunk, cocluster_assign_combine,
                         random_median_chunk, reseed_empty_columns, reseed_empty_rows,
                         worst_chunk, zero_empty_columns)

_SAMPLE_VALUES = 2**24  # cap on init_size * n_features (128 MiB of float64 on the client)
SORTED_MAX_VALUES = 2**21   # samples up to this many values are sorted once (32 MiB)
# a candidate's co-fit on the initialisation's sample: iterations, stopping tolerance
CANDIDATE_MAX_ITER, CANDIDATE_TOL = 20, 1e-4


class RFNMTF(ClusterBase):
    """Robust fast NMTF: L1 co-clustering of samples and features, out of core.

    Parameters
    ----------
    n_row_clusters : int, default=8
        Clusters of the samples (rows of X).
    n_column_clusters : int, default=8
        Clusters of the features (columns of X).  More than ``n_features`` leaves the
        extra ones empty (each feature can have one of its own) with a
        ConvergenceWarning, as fewer distinct rows than ``n_row_clusters`` do.
    n_init : int, default=10
        Restarts, evaluated together (one pass over X serves them all); the restart with
        the lowest objective is kept.  With ``init="k-medians++"`` the restarts are
        candidates co-clustering the initialisation's row sample, and only the best of
        them there is run on X (as RFNMF screens its restarts on its seeding sample):
        ``n_init`` candidates, then up to three more per restart (as many as a budget of
        in-memory work allows) when no two of the first reached the same lowest sample
        objective.  Candidates that start from the same co-clustering (up to the names of
        the clusters) are co-fitted once and share its objective.
    init : {"k-medians++", "random"} or tuple (S, column_labels), default="k-medians++"
        ``"k-medians++"``: a uniform sample of ``init_size`` rows (drawn in the first
        pass, with the value checks; it depends on X alone) is gathered;
        its columns are clustered with RFNMF_L1 (k-medians++ seeding, in memory), then
        its rows, each described by its medians over the column clusters (robust to
        gross entries), and S starts as the sample's block medians.  X itself is never
        transposed or gathered.  ``"random"``: the paper's random indicators for rows
        and columns, then an exact S step over X.  A tuple gives the starting block
        values (n_row_clusters, n_column_clusters) and column labels (n_features,); the
        first step is then a row step (a single restart is run).
    init_size : int, optional
        Rows sampled by ``"k-medians++"``; default ``max(2000, 20 * n_row_clusters)``,
        at most ``n_samples`` and at most 2**24 / n_features.
    max_iter : int, default=100
    tol : float, default=1e-4
        A restart stops when its objective falls by at most ``tol`` relative.
    median_tol : float, default=0.0
        0 computes S exactly (block medians equal to :func:`numpy.median`); a positive
        value stops refining a median once its window is narrower than ``median_tol``
        times the block's value range.
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every iteration
        (S, the column labels and the median search's windows: a few numbers per
        co-cluster and per feature, nothing per sample), atomically; ``fit(X,
        resume=True)`` continues from it with exactly the uninterrupted result.  The
        library owns it (a marker file and its own subfolder; nothing else in it is
        touched); it must be visible to every worker (the user guide's page *Checkpoints and resuming a fit*).
    random_state : None, int, numpy RandomState or Generator, default=None
        Results depend on it alone, not on the chunking or the number of workers.
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, optional
        ``callback(info) -> bool`` after each iteration; True stops the fit.

    Attributes
    ----------
    row_labels_ : ndarray (n_samples,)
        Row cluster of every sample for the final S and column labels, computed in the
        fit's final pass (the model owns them; 4 bytes a sample).
    column_labels_ : ndarray (n_features,)
        Column cluster of every feature.
    block_medians_ : ndarray (n_row_clusters, n_column_clusters)
        S.  Row prototypes are ``block_medians_[:, column_labels_]``.
    objective_ : float
        ``||X - F S G^T||_1`` at the final S, column labels and row labels.
    objective_history_ : ndarray (n_iter_,)
        Objective of the kept restart after each iteration's row and column steps (with
        the S of the iteration before).
    n_iter_ : int
    n_passes_ : int
        Passes over X the fit made, initialisation included.
    median_rounds_ : list of int
        Passes per iteration spent on the S step (a speculative round in the fused pass
        counted when it was used); 0 for X in memory, whose block medians are selected
        from the fused pass's labels (:func:`daskrnmf.kernels.median_select.block_medians`).
    labels_ : ndarray (n_samples,)
        ``row_labels_`` (scikit-learn's name for a clusterer's labels).
    n_features_in_ : int
    feature_names_in_ : ndarray of str (n_features_in_,)
        Only when X had string column names (a DataFrame).

    References
    ----------
    D. Wang, F. Nie and H. Huang, "Fast Robust Non-Negative Matrix Factorization for
    Large-Scale Human Action Data Clustering", Proceedings of the 25th International
    Joint Conference on Artificial Intelligence (IJCAI), 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import RFNMTF
    >>> X = np.kron(np.array([[1.0, 9.0], [9.0, 1.0]]), np.ones((20, 3)))
    >>> model = RFNMTF(n_row_clusters=2, n_column_clusters=2, random_state=0).fit(X)
    >>> model.block_medians_.shape
    (2, 2)

    Notes
    -----
    scikit-learn's biclustering estimators also expose ``rows_`` and ``columns_``
    indicator matrices; ``rows_`` has n_samples columns, which an out-of-core estimator
    does not build.  ``get_indices``/``get_submatrix`` are not offered for the same reason.
    """

    _fitted_attribute = "block_medians_"
    _parameter_constraints = {
        **ClusterBase._parameter_constraints,
        "n_row_clusters": [v.Interval(int, 1, None)],
        "n_column_clusters": [v.Interval(int, 1, None)],
        "init": [v.Options(("k-medians++", "random")),
                 v.Kind((tuple,), "a tuple (block values (n_row_clusters, n_column_clusters), "
                                  "column labels (n_features,))")],
        "init_size": [v.Interval(int, 1, None), v.Kind((type(None),), "None")],
        "checkpoint": [v.Location()],
    }

    def __init__(self, n_row_clusters=8, n_column_clusters=8, *, n_init=10, init="k-medians++",
                 init_size=None, max_iter=100, tol=1e-4, median_tol=0.0, checkpoint=None,
                 random_state=None, verbose=0, callback=None):
        self.n_row_clusters = n_row_clusters
        self.n_column_clusters = n_column_clusters
        self.n_init = n_init
        self.init = init
        self.init_size = init_size
        self.max_iter = max_iter
        self.tol = tol
        self.median_tol = median_tol
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    def _prototypes(self):
        return self.row_prototypes_, "l1"

    def _sample_size(self, X):
        # the "k-medians++" initialisation's row sample is drawn in the first pass
        if isinstance(self.init, str) and self.init == "k-medians++":
            return init_sample_size(X.shape[0], X.shape[1], self.n_row_clusters,
                                    self.init_size)
        return 0

    def _fit_blocks(self, X, blocks, stats, seed, y):
        n, d = X.shape
        K, L = self.n_row_clusters, self.n_column_clusters
        if K > n:
            raise ValueError(f"n_row_clusters={K} must be <= n_samples={n}.")
        # L > d is allowed (as NMF's n_components > n_features): every feature can have a
        # column cluster of its own, the others stay empty, and the fit warns as for
        # fewer distinct columns than clusters (_warn_fewer_clusters)
        n_init, init = self.n_init, self.init
        if isinstance(init, tuple):
            init = _check_init_tuple(init, K, L, d, self._name)
            n_init = 1
        fit = _CoFit(blocks, stats, K=K, L=L, R=n_init, seed=seed, median_tol=self.median_tol)
        state = fit.init_state(init, self.init_size)
        # the restarts that run on X: the sample's best candidate (k-medians++), else all
        fit.R = state["S"].shape[0]
        state, log = self._run(fit.step, state, n_restarts=fit.R, blocks=blocks,
                               problem=fit)
        objective, labels = fit.final(state)
        best = int(np.argmin(objective))
        self._set_iterations(log, best)
        self.block_medians_ = state["S"][best].copy()
        self.column_labels_ = state["columns"][best].astype(np.int64)
        self.objective_ = float(objective[best])
        self.median_rounds_ = fit.median_rounds
        # the model owns its labels: computed in the final pass, never a graph over X
        self.row_labels_ = blocks.gather(labels, restart_column, best)
        self._warn_fewer_clusters(self.row_labels_, K, "row clusters", "n_row_clusters",
                                  "Possibly due to duplicate rows in X.")
        self._warn_fewer_clusters(self.column_labels_, L, "column clusters",
                                  "n_column_clusters",
                                  "Possibly due to duplicate columns in X." if L <= d else
                                  f"X has {d} features: at most {d} column clusters can be "
                                  "non-empty.")

    @property
    def labels_(self):
        """``row_labels_``: the row clusters, scikit-learn's clusterer attribute."""
        return self.row_labels_

    @property
    def row_prototypes_(self):
        """``block_medians_[:, column_labels_]``, shape (n_row_clusters, n_features)."""
        return self.block_medians_[:, self.column_labels_]


def _check_init_tuple(init, K, L, d, name):
    msg = (f"The 'init' tuple of {name} must be (block values of shape (n_row_clusters, "
           f"n_column_clusters) = {(K, L)}, finite; column labels of shape (n_features,) = "
           f"({d},) with values in [0, {L}))")
    if len(init) != 2:
        raise ValueError(msg + f"; got a tuple of length {len(init)}.")
    # real numbers (lists too; complex, strings and objects refused), then the shape
    S = v.as_init_array(init[0], f"The 'init' tuple of {name}: its block values", None,
                        "(n_row_clusters, n_column_clusters)")
    c = np.asarray(init[1])
    if S.shape != (K, L) or not np.all(np.isfinite(S)):
        raise ValueError(msg + f"; got block values of shape {S.shape}.")
    if c.shape != (d,) or c.dtype.kind not in "iu" or (d and (c.min() < 0 or c.max() >= L)):
        raise ValueError(msg + f"; got column labels of shape {c.shape}, dtype {c.dtype}.")
    return S.astype(np.float64), c.astype(np.int64)


class _CoFit:
    """State and passes of one RFNMTF fit; the state is ``{"S": (R, K, L), "columns": (R, d)}``."""

    kept_on_x = 1   # candidates of the "k-medians++" initialisation run on X, the best
    merge_starts = True     # candidates that start alike are co-fitted once (_candidates)

    # what a checkpoint holds besides S and the column labels (daskrnmf._resume): what a
    # step leaves for the next, the median search's warm windows, which restarts
    # speculate, and the S-step rounds so far.  Not saved: the initialisation (the
    # sample, its candidates, the sort on a thread of its own), done again
    # deterministically; X in memory, every restart's last row labels (_rows, n_samples
    # x R): without them the first resumed step selects its block medians again instead
    # of keeping S, and the medians are exact, so S is the same to the bit
    checkpoint_attributes = ("warm", "speculate", "median_rounds")

    def __init__(self, blocks, stats, *, K, L, R, seed, median_tol):
        self.blocks, self.K, self.L, self.R = blocks, K, L, R
        self.seed, self.median_tol = seed, median_tol
        self.lo, self.hi = stats["min"], stats["max"]
        self.d = self.lo.shape[0]
        self.warm = None          # previous S step's final windows (R, K, L)
        self.sample = None        # the initialisation's row sample: brackets the first S step
        self.first_sample = stats.get("sample")     # ... drawn in the first pass
        self.speculate = None     # per restart: column labels unchanged last iteration
        self.median_rounds = []
        self._rows = None         # X in memory: every restart's last row labels (n, R)
        self.sweep = None         # X in memory: its values sorted (SortedValues), if made

    # -- initialisation
    def init_state(self, init, init_size):
        if isinstance(init, tuple):
            S, c = init
            return {"S": S[None].copy(), "columns": c[None].copy()}
        if init == "random":
            return self._init_random()
        return self._init_sample(init_size)

    def _init_random(self):
        idx = np.arange(self.d, dtype=np.uint64)
        columns = np.empty((self.R, self.d), dtype=np.int64)
        for r in range(self.R):
            # a random balanced partition: every column cluster starts non-empty
            order = np.argsort(rng.uniform(self.seed, rng.stream_id(4, r), idx), kind="stable")
            columns[r, order] = np.arange(self.d) % self.L
        S = self._s_step(None, columns, np.ones(self.R, dtype=bool))
        return {"S": S, "columns": columns}

    def _init_sample(self, init_size):
        size = init_sample_size(self.blocks.shape[0], self.d, self.K, init_size)
        sample = self.first_sample
        if sample is None or sample.shape[0] != size:     # not drawn in the first pass
            sample, _ = sample_rows(self.blocks, size, SAMPLE_SEED, SAMPLE_STREAM)
        self.sample = sample
        m = sample.shape[0]
        # candidates per restart, as many as a fixed budget of in-memory work allows
        n_cand = self.R * int(np.clip(2**27 // (m * self.d * (self.K + self.L) * self.R), 1, 4))
        St = np.ascontiguousarray(sample, dtype=np.float64)   # a sample row per "feature"
        # every median below is over a group of the sample's columns within one sample
        # row: with few columns, each row is sorted once and the medians are read off
        # it in one sweep (the same numbers; 1000 x 120: the profiles 4.8x faster than
        # by selection), by the k-medians loop's kernel (one compilation for both, and
        # the block medians below)
        ranked = rank_rows(St) if self.d <= RANKED_MAX_ROWS else None
        # ... and each sample row's columns in the order of their values
        rows_sorted = sorted_rows(ranked) if ranked is not None else None
        # the candidates' block medians have no good guesses (a median of the rows'
        # medians missed 91 % of the blocks of 1000 x 120): a small sample's values are
        # sorted once and each candidate's medians read off them in one sweep (the same
        # numbers; 1000 x 120: 0.4 against 1.25 ms a candidate), the sort (4 ms) on a
        # thread of its own beside the candidates' row fits
        Xs = as_kernel_block(sample)
        swept = (_Background(SortedValues, Xs) if sample.size <= SORTED_MAX_VALUES
                 else None)
        # the candidates come in two rounds: one per restart, then the rest of the budget
        # only when no two of them reached the same lowest sample objective (_agreed)
        state, objective = self._candidates(St, ranked, rows_sorted, Xs, swept, 0, self.R)
        if n_cand > self.R and not _agreed(objective):
            more, obj2 = self._candidates(St, ranked, rows_sorted, Xs, swept, self.R,
                                          n_cand - self.R)
            state = {key: np.concatenate([state[key], more[key]]) for key in state}
            objective = np.concatenate([objective, obj2])
        # the best candidate runs on X, as RFNMF screens its restarts: they have run to
        # convergence on the sample, and each restart on X costs a share of every pass
        # (on 200 000 x 200 ten ran the S step's rounds at three times the cost of a
        # read); on a sample that is all of X the best there is the best on X
        keep = np.sort(np.argsort(objective, kind="stable")[:self.kept_on_x])
        if swept is not None and self.blocks.array is not None and m == self.blocks.shape[0]:
            # the sample is all of X in memory, in X's order (sample_rows): the S steps on
            # X read their block medians off its values sorted once, as the candidates'
            # (the same numbers; _block_medians is then not compiled for a first fit)
            self.sweep = swept.get()
        return {"S": state["S"][keep], "columns": state["columns"][keep]}

    def _candidates(self, St, ranked, rows_sorted, Xs, swept, first, count):
        """Candidates ``first .. first + count - 1`` co-clustering the sample: columns by
        RFNMF_L1, rows on their per-column-cluster medians, S the sample's block medians,
        then co-fitted on the sample (in memory, the same code as on X).  Returns their
        state and sample objectives."""
        m = St.shape[0]
        col_seed = int(rng.stream_id(6, self.seed % 2**62) >> 1)
        columns = kmedians_labels(St.T, self.L, count, col_seed, ranked=ranked,
                                  first=first).T.astype(np.int64)
        # candidates whose column clusters are the same up to their names (planted 1000 x
        # 120: the ten come to 1-4 clusterings) share the rows' profiles (the same
        # columns, named otherwise), and their row fits run as the restarts of one fit
        col_names = [_named_in_order(columns[t], self.L) for t in range(count)]
        col_first = (_first_of_each([key for key, _ in col_names]) if self.merge_starts
                     else np.arange(count))
        profiles = [None] * count

        def profile_of(t):
            # rows are clustered on their per-column-cluster medians (m x L): the medians
            # over a column cluster's features are robust to gross entries (by selection:
            # the column clusters are groups of sample columns, the rows the "features")
            profile = np.full((self.L, m), np.nan)
            if ranked is not None:
                # read off the sorted rows, as the column fits' medians (the same numbers)
                profile = cluster_medians_sorted(rows_sorted, columns[t], profile).T
            else:
                order, ends = group_order(columns[t], self.L)
                profile = group_medians(St, order, ends, profile).T
            # (an empty column cluster, e.g. on constant data, gives a zero column: it does
            # not separate rows, and the S step below leaves its blocks to the reseeding)
            profiles[t] = np.ascontiguousarray(np.where(np.isnan(profile), 0.0, profile))

        def profile_for(t):
            s = col_first[t]
            if s == t:
                return profiles[t]
            # the first's profile columns, in t's names of the column clusters
            seen = col_names[t][1]
            used = seen >= 0
            profile = np.zeros_like(profiles[s])
            profile[:, used] = profiles[s][:, columns[s][seen[used]]]
            return profile

        rows = np.empty((count, m), dtype=np.int64)
        # the row fits are mostly Python (two in threads ran slower than one after the
        # other): they run in this thread, while another sorts the sample's values; each
        # candidate's restart is seeded from its own seed
        _on_cores(profile_of, np.unique(col_first))
        if swept is not None:
            swept.start()
        for s in np.unique(col_first):
            share = np.flatnonzero(col_first == s)
            seeds = [int(rng.stream_id(7, first + t, self.seed % 2**62) >> 1) for t in share]
            # with the columns sorted, the profiles' rows are too: the row fits then
            # take their medians as the column fits do (the same numbers), and a first
            # fit compiles one median kernel of the k-medians loop, not two
            rows[share] = kmedians_labels(
                profiles[s], self.K, share.size, None, seeds=seeds,
                ranked=None if ranked is None else rank_rows(profiles[s].T)).T
        # candidates whose row and column clusters are both the same up to their names
        # start from the same co-clustering, and their co-fits would be one co-fit but for
        # the names (and which of two equally near prototypes a tied row takes): only the
        # first is co-fitted, the others take its state and objective (planted 1000 x
        # 120: 1-4 of the ten are left)
        start = (_first_of_each([_named_in_order(rows[t], self.K)[0] + col_names[t][0]
                                 for t in range(count)]) if self.merge_starts
                 else np.arange(count))
        fitted = np.unique(start)
        S = np.full((fitted.size, self.K, self.L), np.nan)
        sweep = swept.get() if swept is not None else None

        def block_values(i):
            t = fitted[i]
            if sweep is not None:
                S[i] = sweep.block_medians(rows[t], columns[t], self.K, self.L)
                return
            # guesses: the medians of the row clusters' profiles (median of row medians)
            rorder, rends = group_order(rows[t], self.K)
            guess = group_medians(np.ascontiguousarray(profile_for(t).T), rorder, rends,
                                  np.full((self.K, self.L), np.nan))
            S[i] = block_medians(Xs, rows[t], columns[t], self.K, self.L, guess)

        _on_cores(block_values, range(fitted.size))
        columns_fitted = columns[fitted]
        S = zero_empty_columns(S, columns_fitted, self.L)
        blocks = RowBlocks(St)
        sub = _CoFit(blocks, feature_stats(blocks), K=self.K, L=self.L, R=fitted.size,
                     seed=self.seed, median_tol=0.0)
        sub.sweep = sweep
        state, _ = run_quiet(sub.step, {"S": S, "columns": columns_fitted},
                             n_restarts=fitted.size, max_iter=CANDIDATE_MAX_ITER,
                             tol=CANDIDATE_TOL)
        objective, _ = sub.final(state)
        which = np.searchsorted(fitted, start)
        return {key: value[which] for key, value in state.items()}, objective[which]

    # -- one iteration
    def step(self, state, active):
        S, C = state["S"][active], state["columns"][active]
        # X in memory: the exact block medians are selected from the pass's labels
        # (block_medians, counted around the last S): no median search, no further pass
        in_memory = self.blocks.array is not None
        spec_round = (not in_memory and self.speculate is not None
                      and bool(self.speculate[active].all()))
        search = plan = None
        if spec_round:
            # the pass counts every block's values: the warm collections skip the
            # histograms of the full range (a miss continues on its side next round)
            search = self._median_search(C, active, counts_given=True)
            plan = search.first_plan()
        P = prototypes(S, C)
        res, labels = self.blocks.map_reduce(
            cocluster_assign_chunk, cocluster_assign_combine,
            args=(P, S, C, CoclusterSpec(K=self.K, plan=plan, worst=not in_memory)),
            keep_state=True, name="row step + column costs")
        newC = argmin_ties_low(res["costs"])
        objective = np.take_along_axis(res["costs"], newC[:, :, None], axis=2)[:, :, 0].sum(axis=1)
        newC = reseed_empty_columns(newC, res["costs"], self.L)
        if in_memory:
            labels = np.concatenate(labels)
            X = as_kernel_block(self.blocks.array)
            rs = np.flatnonzero(active)
            first = self._rows is None
            if first:
                self._rows = np.full((labels.shape[0], self.R), -1, dtype=labels.dtype)
            newS = np.empty_like(S)
            # the first S step of a fit started on a sample: the sample, labelled by the
            # same row step, brackets the block medians (as out of core), where S, the
            # sample's medians, missed nearly every block of X (10000 x 400: 30 against
            # 66 ms, the brackets included)
            bracket = None
            if first and self.sample is not None and self.sample.shape[0] < X.shape[0]:
                lo, hi = block_bracket(self.sample, nearest(self.sample, P, "l1")[0], newC,
                                       self.K, self.L)
                bracket = (lo.reshape(-1, self.K, self.L), hi.reshape(-1, self.K, self.L))
            for t, r in enumerate(rs):
                # rows and columns where they were, no row cluster empty (so S was not
                # re-seeded): S is these blocks' medians already (every restart's last
                # iteration)
                if (np.array_equal(newC[t], C[t]) and res["counts"][t].all()
                        and np.array_equal(labels[:, t], self._rows[:, r])):
                    newS[t] = S[t]
                elif self.sweep is not None:    # X's values sorted once (the same numbers)
                    newS[t] = self.sweep.block_medians(labels[:, t], newC[t], self.K, self.L)
                elif bracket is not None:
                    newS[t] = block_medians(X, labels[:, t], newC[t], self.K, self.L,
                                            window=(bracket[0][t], bracket[1][t]))
                else:
                    newS[t] = block_medians(X, labels[:, t], newC[t], self.K, self.L, S[t])
            self._rows[:, rs] = labels
            self.median_rounds.append(0)
        else:
            unchanged = np.all(newC == C, axis=1)
            if self.speculate is None:
                self.speculate = np.zeros(self.R, dtype=bool)
            self.speculate[active] = unchanged
            speculative = spec_round and unchanged.all()
            # the first S step: the sample, labelled by the same row step (a row's label
            # depends on that row only), brackets the block medians
            sample_labels = (nearest(self.sample, P, "l1")[0] if self.warm is None
                             and self.sample is not None and not speculative else None)
            newS = self._s_step(labels, newC, active, res["counts"],
                                (search, plan, res.get("median")) if speculative else None,
                                sample_labels)
        del labels
        worst = res["worst"]
        if worst is None and not res["counts"].all():     # X in memory, a cluster empty
            worst = self.blocks.map_reduce(worst_chunk, merge_worst_fit, args=(P, self.K),
                                           name="worst-fit rows")
        newS = zero_empty_columns(reseed_empty_rows(newS, res["counts"], worst, newC),
                                   newC, self.L)
        state = {"S": state["S"].copy(), "columns": state["columns"].copy()}
        state["S"][active], state["columns"][active] = newS, newC
        return state, objective

    def _s_step(self, labels, C, active, counts=None, speculative=None, sample_labels=None):
        """S = block medians for row labels ``labels`` (per-block state; None: the random
        initial labels) and column labels ``C`` of the active restarts; ``sample_labels``
        (m, Ra): the row labels of the initialisation's sample under the same row step,
        whose blocks bracket the medians (with ``counts``, the pass's cluster sizes)."""
        Ra = C.shape[0]
        ncols = np.stack([np.bincount(C[r], minlength=self.L) for r in range(Ra)])
        n_values = None if counts is None else (counts[:, :, None] * ncols[:, None, :]).ravel()
        if speculative is not None:
            search, plan, part = speculative
            search.update(plan, part, n_values=n_values)
        else:
            bracket = None
            if sample_labels is not None and counts is not None:
                bracket = block_bracket(self.sample, sample_labels, C, self.K, self.L)
            search = self._median_search(C, active, bracket)
        search.finish(lambda plan: self._median_pass(labels, C, plan, Ra), n_values)
        self.median_rounds.append(search.rounds)
        self.warm = keep_windows(self.warm, search, active, (self.K, self.L))
        return search.value.reshape(Ra, self.K, self.L)

    def _median_pass(self, labels, C, plan, Ra):
        if labels is None:
            return self.blocks.map_reduce(random_median_chunk, merge_median_round,
                                          args=(self.K, plan, C, self.seed, Ra),
                                          name="S step (random rows)")
        return self.blocks.map_reduce(median_refine_chunk, merge_median_round,
                                      args=(self.K, plan, C), state=labels, name="S step")

    def _median_search(self, C, active, bracket=None, counts_given=False):
        """A search over the entries (restart, row cluster, column cluster), bounded by the
        range of the features in each column cluster; ``bracket``: see
        :func:`block_bracket` (the caller then gives the entries' sizes with the first
        round)."""
        Ra = C.shape[0]
        lo = np.full((Ra, self.L), np.inf)
        hi = np.full((Ra, self.L), -np.inf)
        for r in range(Ra):
            np.minimum.at(lo[r], C[r], self.lo)
            np.maximum.at(hi[r], C[r], self.hi)
        empty = lo > hi
        lo[empty], hi[empty] = 0.0, 0.0
        lo = np.repeat(lo[:, None, :], self.K, axis=1).ravel()
        hi = np.repeat(hi[:, None, :], self.K, axis=1).ravel()
        return MedianSearch(lo, hi, tol=self.median_tol, warm=warm_windows(self.warm, active),
                            n_total=self.blocks.shape[0] * self.d * Ra,
                            counts_given=counts_given or bracket is not None,
                            trust_warm=counts_given, bracket=bracket)

    # -- the end
    def final(self, state):
        """Objective of every restart at its final S and column labels, with the row
        step applied, and the per-block labels of every restart (1 pass)."""
        P = prototypes(state["S"], state["columns"])
        return self.blocks.map_reduce(objective_chunk, objective_combine, args=(P, "l1", True),
                                      keep_state=True, name="final row step")


class _Background:
    """``make(*args)`` on a thread of its own from ``start()``; ``get()`` waits for it
    (starting it first if need be)."""

    def __init__(self, make, *args):
        self.make, self.args, self.value, self.thread = make, args, None, None
        self.error = None

    def _run(self):
        try:
            self.value = self.make(*self.args)
        except BaseException as exc:    # raised again by get(), in the caller's thread
            self.error = exc

    def start(self):
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="daskrnmf-sort",
                                           daemon=True)
            self.thread.start()

    def get(self):
        self.start()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


def _named_in_order(labels, n_names):
    """A key (bytes) equal for two labelings that differ only in the names of their
    clusters (the labels renamed in order of first appearance), and each name's first
    position in ``labels`` (-1: unused), shape (n_names,)."""
    names, at = np.unique(labels, return_index=True)
    first = np.full(n_names, -1, dtype=np.int64)
    first[names] = at
    renamed = np.empty(n_names, dtype=np.int32)
    renamed[names[np.argsort(at)]] = np.arange(names.size, dtype=np.int32)
    return renamed[labels].tobytes(), first


def _first_of_each(keys):
    """For each key, the position of its first occurrence, as an int64 array."""
    seen = {}
    return np.array([seen.setdefault(key, t) for t, key in enumerate(keys)], dtype=np.int64)


def _on_cores(fn, items):
    """``fn(item)`` for every item, on a thread per core (the callers' compiled kernels
    release the interpreter's lock; each writes only its own outputs)."""
    items = list(items)
    threads = min(available_cpus(), len(items))
    if threads > 1:
        with ThreadPoolExecutor(threads, thread_name_prefix="daskrnmf-candidates") as pool:
            list(pool.map(fn, items))
    else:
        for item in items:
            fn(item)


def _agreed(objective, rtol=1e-12):
    """Whether at least two candidates reached the lowest sample objective (to ``rtol``
    relative): the same co-clustering, found from two independent starts.

    RFNMTF's initialisation draws its further candidates only when this fails.  Measured
    on planted 8 x 6 co-clusters of 1000 x 120 (noise 1, 4, 6, 8; 0, 5, 10 % gross
    entries; 6 seeds each): at noise 1 (the benchmark's) 3-10 of the first ten candidates
    reached the lowest objective and the further thirty found none lower; at noise 6-8
    the first ten agreed on 2 of 36 sets, and the further thirty lowered the objective by
    up to 0.4 % (mean column ARI of a setting down to 0.87 from the first ten, 0.96 from
    all forty).
    """
    return int(np.count_nonzero(objective <= objective.min() * (1 + rtol))) >= 2


def init_sample_size(n_samples, n_features, n_row_clusters, init_size=None):
    """Rows of the "k-medians++" initialisation's sample: ``init_size``, by default
    ``max(2000, 20 * n_row_clusters)``, at most ``n_samples`` and ``2**24 /
    n_features`` (and at least ``n_row_clusters``)."""
    size = init_size or max(2000, 20 * n_row_clusters)
    return int(max(n_row_clusters, min(size, n_samples, _SAMPLE_VALUES // max(n_features, 1))))
