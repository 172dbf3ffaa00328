"""RFNMF_L1 on a small in-memory array, an iteration in a few NumPy steps.

RFNMTF's initialisation clusters its sample many times over (the sample's columns once
per candidate, then each candidate's row profiles); each of those fits is a few
iterations on a few thousand values, where the general fit (:class:`CentroidFit` with
:func:`~daskrnmf._driver.iterate`) spends most of its time in Python between the
kernels.  :func:`kmedians_fit` runs an iteration of all its restarts as the distance
kernel's call, NumPy's bookkeeping over all of them at once (which clusters changed,
sizes, stopping) and a median kernel's call per restart, and gives the same numbers:
the same distance kernel, the medians read off sorted values (the same values as the
selection), the same re-seeding of empty clusters, the same objective (NumPy's sum of
the same residuals) and the same stopping rule.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .assign import nearest
from .blocks import available_cpus
from .median_select import _buf_median, _group_order, _sweep_medians, middle_ranks

def seed_draw(mind, q, power, gen, n_trials):
    """One step of greedy k-medians++ (:func:`~daskrnmf.models._clustering.robust_kmedians_pp`):
    the clip ``tau`` (the ``q`` quantile of the distances ``mind``, as :func:`numpy.quantile`)
    and ``n_trials`` candidates drawn with probability ``min(mind, tau) ** power`` (where
    ``tau <= 0``: uniformly among the rows off the centres), the same rows as
    ``gen.choice(n, n_trials, p=w / w.sum())`` (its cumulative sums and uniform draws,
    computed the same way), uniformly when all weights are 0.

    Returns
    -------
    tau : float
    cand : ndarray of int64 (n_trials,)
    """
    mind = np.ascontiguousarray(mind, dtype=np.float64)
    n = mind.shape[0]
    # the clip is NumPy's own quantile: a compiled one (a selection) cost the first fit
    # its compilation, and a call here is one O(n) pass either way.  The weights, their
    # sum and cumulative sums are NumPy's too (a compiled loop gave the same numbers,
    # summed in NumPy's pairwise order, and cost the first fit a second of
    # compilation for a few O(n) passes): the same operations in the same order
    tau = float(np.quantile(mind, q))
    if tau <= 0:
        w = (mind > 0).astype(np.float64)
    else:
        w = np.minimum(mind, tau)
        if int(power) == 2:
            np.multiply(w, w, out=w)
    total = float(w.sum())
    if total > 0:
        cdf = np.cumsum(np.divide(w, total, out=w), out=w)
        np.divide(cdf, cdf[-1], out=cdf)
        cand = np.searchsorted(cdf, gen.random(n_trials), side="right").astype(np.int64)
    else:
        cand = gen.choice(n, size=n_trials)
    return tau, cand


def feature_sweep(ranked):
    """The positions of :func:`~daskrnmf.kernels.median_select.rank_rows`' sorted
    features (each feature a segment of n positions; its ``order``) for
    :func:`~daskrnmf.kernels.median_select._sweep_medians`: ``(prow, pcol, cols, values,
    n)``, position ``p``'s row, ``pcol`` and ``cols`` empty (position ``p``'s entry is
    then ``label * d + feature``, its segment), the values in that order (flat) and
    ``n``.  Made once for the medians of many clusterings."""
    values, order = ranked[1], ranked[3]
    n = order.shape[1]
    return (np.ascontiguousarray(order, dtype=np.int32).ravel(), np.empty(0, dtype=np.int32),
            np.empty(0, dtype=np.int64), np.ascontiguousarray(values, dtype=np.float64).ravel(),
            n)


def _cluster_medians_sorted(sweep, labels, lo, hi, wanted, seen, out):
    """Per cluster and feature, the median of the members' values (NumPy's: the middle
    one, or the mean ``(a + b) / 2`` of the two middle ones), by one sweep over each
    feature's values in order (``sweep``, :func:`feature_sweep`): a cluster's middle
    values are its members' ``h``-th and ``(h + 1)``-th met.  ``labels`` int64 (n,);
    ``lo``, ``hi`` int64 (k * d,): the clusters'
    :func:`~daskrnmf.kernels.median_select.middle_ranks` repeated for every feature
    (-1: a cluster not asked for, left as it is in ``out``, as an empty one);
    ``wanted``: the non-empty clusters asked for; ``seen`` int64 (k * d,) zeros,
    scratch; ``out`` (k, d) C-contiguous."""
    prow, pcol, cols, values, n = sweep
    _sweep_medians(prow, pcol, values, labels, cols, out.shape[1], n, wanted, lo, hi, seen,
                   out.reshape(-1))


@njit(cache=True, nogil=True, fastmath=False)
def _cluster_medians_selected(X, labels, counts, out, order, buf, todo):
    """:func:`_cluster_medians_sorted` by selection among each cluster's values (for
    few restarts, where sorting every feature first costs more than the selections)."""
    n, d = X.shape
    k = counts.shape[0]
    ends = np.zeros(k, dtype=np.int64)
    _group_order(labels, k, order, ends, np.empty(k, dtype=np.int64))
    for c in range(k):
        a = ends[c - 1] if c else 0
        m = ends[c] - a
        if m == 0 or not todo[c]:
            continue
        for j in range(d):
            for t in range(m):
                buf[t] = X[order[a + t], j]
            out[c, j] = _buf_median(buf, m)


def _update(sweep, X, F, rs, labels, objective, prev, tol, history, newly, last, moved,
            empty, scratch, pool):
    """The rest of an iteration of the restarts ``rs``, from their assignment
    (``labels`` (n, len(rs)), column ``t`` restart ``rs[t]``, whose objective is
    ``objective[t]``): F[r] becomes the medians of its clusters, read off the features
    sorted once (``sweep``, :func:`_cluster_medians_sorted`) or, ``sweep`` None, selected
    (:func:`_cluster_medians_selected`), one compiled call per restart (on ``pool``'s
    threads, part ``i`` of the restarts with ``scratch[i]``, when given);
    ``history[r]`` the objective of the assignment, ``newly[r]`` whether it converged.
    ``last`` (n, R): each restart's previous labels (-1: none), updated; a cluster whose
    members are the same keeps its centre, which is their medians (the last iteration of
    a fit selects nothing); ``moved[r]``: whether F[r] changed (a cluster's members did,
    or one was empty); ``empty[r]``: whether a cluster was empty (its centre is left,
    for :func:`_reseed_empty`).  The bookkeeping is NumPy over all the restarts at once:
    compiled with the medians, it cost the first fit 0.5 s of compilation."""
    T, k = rs.shape[0], F.shape[1]
    lab = np.ascontiguousarray(labels.T, dtype=np.int64)        # (T, n), a row a restart
    old = last[:, rs].T
    # restart t's cluster c is t * k + c in the flat (T * k,) arrays
    off = k * np.arange(T, dtype=np.int64)[:, None]
    flat = lab + off
    moves = old != lab
    # the clusters a member left or joined (every one for a restart's first labels)
    todo = np.zeros(T * k, dtype=np.bool_)
    todo[flat[moves]] = True
    if (old < 0).any():
        todo.reshape(T, k)[(old < 0).any(axis=1)] = True
        moves &= old >= 0
    todo[(old + off)[moves]] = True
    todo = todo.reshape(T, k)
    last[:, rs] = labels
    history[rs] = objective
    counts = np.bincount(flat.ravel(), minlength=T * k).reshape(T, k)
    if sweep is not None:       # every restart's clusters repeated for every feature
        d = F.shape[2]
        lo, hi = (np.repeat(r, d, axis=1) for r in middle_ranks(counts, todo))
        wanted = np.count_nonzero(todo & (counts > 0), axis=1)
        seen = np.zeros((T, k * d), dtype=np.int64)

    def medians(i, ts):
        a, b = scratch[i]
        for t in ts:
            if sweep is not None:
                _cluster_medians_sorted(sweep, lab[t], lo[t], hi[t], wanted[t], seen[t],
                                        F[rs[t]])
            else:
                _cluster_medians_selected(X, lab[t], counts[t], F[rs[t]], a, b, todo[t])

    if pool is None or T < 2:
        medians(0, range(T))
    else:
        parts = np.array_split(np.arange(T), min(len(scratch), T))
        list(pool.map(medians, range(len(parts)), parts))
    empty[rs] = (counts == 0).any(axis=1)
    moved[rs] = empty[rs] | todo.any(axis=1)
    p = prev[rs]
    newly[rs] = np.isfinite(p) & (p - objective <= tol * np.abs(p))
    prev[rs] = objective


def _update_scratch(n, sorted_):
    """:func:`_update`'s scratch for one thread (made once a fit): the selection's
    ``order`` (n,) int64 and ``buf`` (max(n, 1),) (the sweep's is made each iteration)."""
    if sorted_:
        return None, None
    return np.empty(n, dtype=np.int64), np.empty(max(n, 1))


def _reseed_empty(X, F, labels, dist):
    """Empty clusters of one restart (centres ``F`` (k, d), in place; ``labels``,
    ``dist`` its assignment) take the worst-fit rows, worst first (reseed_empty): the
    slot-th empty cluster the slot-th largest distance (ties: the lowest index), the
    last row past the min(k, n) worst.  Rare, so NumPy (compiled, it cost the first fit
    0.12 s)."""
    k, n = F.shape[0], X.shape[0]
    worst = np.argsort(-dist, kind="stable")[:min(k, n)]
    for slot, c in enumerate(np.flatnonzero(np.bincount(labels, minlength=k) == 0)):
        F[c] = X[worst[slot] if slot < worst.shape[0] else n - 1]


THREADS_MIN_WORK = 2**22    # n * d * k * R: below, the restarts' medians run in one thread


def kmedians_fit(X, ranked, F0, max_iter, tol):
    """RFNMF_L1 (k-medians) of an in-memory ``X`` from stacked initial centres, every
    restart to convergence, an iteration in one compiled call for the distances and one
    per restart for the medians (the restarts shared among the cores when there is
    enough work).

    The iterations of the general in-memory fit (``CentroidFit`` with ``loss="l1"``
    under :func:`~daskrnmf._driver.iterate`, one block of rows) with the same numbers:
    each restart assigns every row to its nearest centre (L1, ties to the lowest index),
    takes the per-cluster, per-feature medians (:func:`numpy.median`'s) as its new
    centres, gives an empty cluster the worst-fit row (the ``slot``-th empty cluster the
    ``slot``-th worst, ties to the lowest index), and stops after the iteration whose
    objective ``J = sum_i ||x_i - f_{g_i}||_1`` (at the centres it assigned to) fell by
    at most ``tol * |J_prev|``; its centres are then that iteration's medians.

    Parameters
    ----------
    X : ndarray (n, d) float64, C-contiguous, without NaN
    ranked : tuple or None
        :func:`~daskrnmf.kernels.median_select.rank_rows` of ``X.T``: the medians are read off
        each feature's sorted values (many restarts: RFNMTF's 40 column clusterings);
        None: selected among each cluster's values (few restarts).
    F0 : ndarray (R, k, d), initial centres
    max_iter : int
    tol : float

    Returns
    -------
    labels : ndarray of int32 (n, R), each row's nearest final centre
    F : ndarray (R, k, d), the final centres
    history : ndarray (n_iter, R), the objective of every iteration (NaN once stopped)
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    F = np.array(F0, dtype=np.float64, order="C")
    R = F.shape[0]
    # medians by one sweep of each feature's sorted values, or (None) by selection
    sweep = None if ranked is None else feature_sweep(ranked)
    history = np.full((max_iter, R), np.nan)
    threads = min(R, available_cpus()) if X.size * F.shape[1] * R >= THREADS_MIN_WORK else 1
    pool = (ThreadPoolExecutor(threads, thread_name_prefix="daskrnmf-kmedians")
            if threads > 1 else None)
    # the distances come from the general fit's own kernel (nearest, called from Python:
    # a compiled caller of its vectorised loop summed differently once Numba loaded it
    # from its cache); the rest of each iteration is NumPy over the active restarts and
    # a median kernel's call per restart, in place (on the threads, each its own part)
    active = np.ones(R, dtype=bool)
    newly = np.zeros(R, dtype=bool)
    prev = np.full(R, np.inf)
    last = np.full((X.shape[0], R), -1, dtype=np.int64)
    moved = np.ones(R, dtype=bool)
    empty = np.zeros(R, dtype=bool)
    scratch = [_update_scratch(X.shape[0], sweep is not None) for _ in range(threads)]
    n_iter = 0
    try:
        for it in range(max_iter):
            rs = np.flatnonzero(active)
            if not rs.size:
                break
            n_iter = it + 1
            labels, dist = nearest(X, F[rs], "l1", threads)
            # the objectives: the general fit's residual.sum(axis=0), the same residuals
            J = dist.sum(axis=0)
            _update(sweep, X, F, rs, labels, J, prev, float(tol), history[it], newly, last,
                    moved, empty, scratch, pool)
            if empty.any():         # rare: flags cleared once re-seeded
                for t in np.flatnonzero(empty[rs]):
                    _reseed_empty(X, F[rs[t]], labels[:, t], dist[:, t])
                    empty[rs[t]] = False
            active[rs[newly[rs]]] = False
    finally:
        if pool is not None:
            pool.shutdown()
    # a restart whose last iteration moved no centre has its final labels already
    labels = last.astype(np.int32)
    rs = np.flatnonzero(moved)
    if rs.size:
        labels[:, rs] = nearest(X, F[rs], "l1", threads)[0]
    return labels, F, history[:n_iter]
