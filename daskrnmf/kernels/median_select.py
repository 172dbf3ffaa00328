"""Exact medians in memory by selection: of groups of rows (RFNMF's clusters, every
feature at once), of blocks (RFNMTF's row cluster x column cluster) and of one buffer.

:func:`group_order` sorts rows by group once (a counting sort); :func:`group_medians`
and :func:`block_medians` then select each group's middle ranks, counted first around
a guess (the last iteration's medians) so that near convergence almost nothing is
selected; :func:`rank_rows` / :func:`group_medians_ranked` read them off features
sorted once instead, and :class:`SortedValues` the blocks' off X sorted once.
:func:`_select` (Hoare's quickselect) is the selection every one of them, and the
mergeable rounds of :mod:`daskrnmf.kernels.median_rounds`, end in.  The median of m
values is :func:`numpy.median`'s.
"""

import warnings

import numpy as np
from numba import njit

from .blocks import one_type_per_argument

@njit(cache=True, nogil=True, fastmath=False)
def _group_order(labels, n_groups, order, ends, fill):
    # fill: (n_groups,) int64 scratch (np.empty's overload compiled for no kernel here)
    for i in range(labels.shape[0]):
        ends[labels[i]] += 1
    for g in range(1, n_groups):
        ends[g] += ends[g - 1]
    for g in range(n_groups):
        fill[g] = ends[g - 1] if g else 0
    for i in range(labels.shape[0]):
        order[fill[labels[i]]] = i
        fill[labels[i]] += 1


#: Group medians of at most this many values (and the group order of at most this many
#: rows) are NumPy's: a first fit on small data compiles no selection kernel (RFNMF L1's
#: first fit with an empty cache spent 1.2 of its 2.0 s of compile on them, on 300 x 12
#: data whose medians NumPy takes in well under a millisecond an iteration)
SMALL_VALUES = 2**16


def group_order(labels, n_groups):
    """The rows sorted by group, stably (``np.argsort(labels, kind="stable")``) and the
    cumulative group sizes, by one counting sort (NumPy's stable sort for at most
    :data:`SMALL_VALUES` rows: the same order).

    Parameters
    ----------
    labels : ndarray of int (n,), in [0, n_groups)
    n_groups : int

    Returns
    -------
    order : ndarray of int64 (n,)
    ends : ndarray of int64 (n_groups,)
    """
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if labels.shape[0] <= SMALL_VALUES:
        sizes = np.bincount(labels, minlength=n_groups)[:n_groups]
        return (np.argsort(labels, kind="stable").astype(np.int64, copy=False),
                np.cumsum(sizes).astype(np.int64))
    order = np.empty(labels.shape[0], dtype=np.int64)
    ends = np.zeros(n_groups, dtype=np.int64)
    _group_order(labels, n_groups, order, ends, np.empty(n_groups, dtype=np.int64))
    return order, ends


def group_medians(Xt, order, ends, out, pivots=None, X=None):
    """Exact medians of groups of rows, in memory, by selection.

    Parameters
    ----------
    Xt : ndarray (n_features, n) float64, C-contiguous: X transposed
    order : ndarray of int (n,), the rows sorted by group
    ends : ndarray of int (n_groups,), cumulative group sizes
    out : ndarray (n_groups, n_features), filled where a group has observed values
    pivots : ndarray (n_groups, n_features), optional
        A guess of every median (the previous iteration's; NaN: none).
    X : ndarray (n, n_features) float32 or float64, C-contiguous, optional
        X itself (the same values as Xt), whose rows the guesses are counted by, every
        feature at once (default: Xt transposed, a copy, when guesses are given).

    NaN values are missing (``missing="mask"``): each median is over the observed ones.
    The median of m values is :func:`numpy.median`'s: the middle value, or the mean of
    the two middle values (``(a + b) / 2``) when m is even.

    With a guess, one branch-free pass counts the values below, at and above it and
    keeps the nearest value on either side; the middle ranks are then the guess or one
    of those two (near convergence, nearly all of them), and only a rank further away
    is selected, among the values on its side.  The result does not depend on the
    guess.  Measured on digits-size data with the exact medians as guesses: 0.09 ms a
    call, 1.35 ms without a guess and 0.37 ms with the three-way split it replaced.
    At most :data:`SMALL_VALUES` values: NumPy's medians (:func:`_group_medians_numpy`,
    the same numbers), nothing compiled.
    """
    if Xt.size <= SMALL_VALUES:
        return _group_medians_numpy(Xt, order, ends, out)
    if pivots is None:
        pivots = np.full(out.shape, np.nan)
    if X is None:       # the guesses are counted by rows of X
        X = (np.empty((0, Xt.shape[0])) if np.isnan(pivots).all()
             else np.ascontiguousarray(Xt.T))
    ends = np.asarray(ends, dtype=np.int64)
    m_max = max(int(np.diff(ends, prepend=0).max(initial=0)), 1)
    d = Xt.shape[0]             # the kernel's scratch: see _group_medians
    _group_medians(Xt, np.asarray(order, dtype=np.int64), ends, out,
                   np.ascontiguousarray(pivots, dtype=np.float64), X, np.empty(m_max),
                   np.empty(m_max), np.empty((3, d), dtype=np.int64), np.empty(d), np.empty(d))
    return out


def _group_medians_numpy(Xt, order, ends, out):
    """:func:`group_medians` by :func:`numpy.median` (:func:`numpy.nanmedian` for a
    group with NaN values; a feature a group does not observe keeps ``out``)."""
    a = 0
    for g, e in enumerate(np.asarray(ends, dtype=np.int64)):
        if e > a:
            values = Xt[:, order[a:e]]
            missing = np.isnan(values)
            if not missing.any():
                out[g] = np.median(values, axis=1)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN features
                    medians = np.nanmedian(values, axis=1)
                seen = ~missing.all(axis=1)
                out[g, seen] = medians[seen]
        a = e
    return out


# groups of at least this many values select a missed median on the guess's side (after
# gathering it); smaller ones select among all their values (measured: 20-value groups
# 2.2 against 3.0 ms, 180-value groups 1.0 against 1.5 ms)
SIDE_SELECT_MIN = 64


@njit(cache=True, nogil=True, fastmath=False)
def _pivot_counts(X, order, a, m, p, lt, eq, gt, below, above):
    """Counts of a group's values below / at / above p, feature by feature, and the
    largest below and smallest above, a row of X at a time (vectorised over the
    features; NaN is none of the three)."""
    d = X.shape[1]
    for j in range(d):
        lt[j], eq[j], gt[j] = 0, 0, 0
        below[j], above[j] = -np.inf, np.inf
    for t in range(m):
        x = X[order[a + t]]
        for j in range(d):
            v = np.float64(x[j])
            q = p[j]
            lt[j] += v < q
            eq[j] += v == q
            gt[j] += v > q
            b = below[j]
            below[j] = v if (v < q and v > b) else b
            c = above[j]
            above[j] = v if (v > q and v < c) else c


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _near_rank(lt, eq, p, below, above, r):
    """Rank r from the counts around p when it is p or a neighbour of it: (value, True);
    else (0, False)."""
    if r == lt - 1:
        return below, True
    if lt <= r and r < lt + eq:
        return p, True
    if r == lt + eq:
        return above, True
    return 0.0, False


@njit(cache=True, nogil=True, fastmath=False)
def _block_medians(X, rorder, rends, corder, cends, pivots, out):
    K, L = rends.shape[0], cends.shape[0]
    d = corder.shape[0]
    m_max = 0
    for k in range(K):
        nk = rends[k] - (rends[k - 1] if k else 0)
        for l in range(L):
            m_max = max(m_max, nk * (cends[l] - (cends[l - 1] if l else 0)))
    buf = np.empty(max(m_max, 1))
    part = np.empty(max(m_max, 1))
    n_lt = np.zeros(L, dtype=np.int64)
    n_eq = np.zeros(L, dtype=np.int64)
    nb = np.empty(L)
    na = np.empty(L)
    # the guesses are counted per feature, a row at a time: the row's features gathered
    # in column-cluster order, each compared with its block's guess in one vectorised
    # loop (3x faster than a loop per column cluster, whose groups are short), then
    # summed per column cluster
    row = np.empty(d)
    pk = np.empty(d)
    lt = np.empty(d, dtype=np.int64)
    eq = np.empty(d, dtype=np.int64)
    below = np.empty(d)
    above = np.empty(d)
    for k in range(K):
        r0 = rends[k - 1] if k else 0
        nk = rends[k] - r0
        if nk == 0:
            continue
        for l in range(L):
            for jj in range(cends[l - 1] if l else 0, cends[l]):
                pk[jj] = pivots[k, l]
        for jj in range(d):
            lt[jj], eq[jj] = 0, 0
            below[jj], above[jj] = -np.inf, np.inf
        for t in range(nk):
            x = X[rorder[r0 + t]]
            for jj in range(d):
                row[jj] = x[corder[jj]]
            for jj in range(d):
                v = row[jj]
                p = pk[jj]
                lt[jj] += v < p
                eq[jj] += v == p
                b = below[jj]
                below[jj] = v if (v < p and v > b) else b
                a = above[jj]
                above[jj] = v if (v > p and v < a) else a
        for l in range(L):
            n_lt[l], n_eq[l] = 0, 0
            nb[l], na[l] = -np.inf, np.inf
            for jj in range(cends[l - 1] if l else 0, cends[l]):
                n_lt[l] += lt[jj]
                n_eq[l] += eq[jj]
                nb[l] = max(nb[l], below[jj])
                na[l] = min(na[l], above[jj])
        for l in range(L):
            c0 = cends[l - 1] if l else 0
            nl = cends[l] - c0
            m = nk * nl
            if m == 0:
                continue
            h = (m - 1) // 2
            p = pivots[k, l]
            L_, E = n_lt[l], n_eq[l]
            lo, ok = 0.0, False
            hi, ok2 = 0.0, m % 2 == 1
            if not np.isnan(p):
                lo, ok = _near_rank(L_, E, p, nb[l], na[l], h)
                if m % 2 == 0:
                    hi, ok2 = _near_rank(L_, E, p, nb[l], na[l], h + 1)
            if ok and ok2:
                out[k, l] = lo if m % 2 else (lo + hi) / 2.0
                continue
            w = 0                       # the block's values
            for t in range(nk):
                x = X[rorder[r0 + t]]
                for jj in range(c0, cends[l]):
                    buf[w] = x[corder[jj]]
                    w += 1
            if np.isnan(p):
                out[k, l] = _buf_median(buf, m)
                continue
            G = m - L_ - E
            if not ok:
                lo = _side_rank(buf, m, part, L_, E, G, p, h)
            if not ok2:
                hi = _side_rank(buf, m, part, L_, E, G, p, h + 1)
            out[k, l] = lo if m % 2 else (lo + hi) / 2.0


def block_medians(X, rows, cols, K, L, pivots=None, window=None):
    """Exact median of every block (row cluster k, column cluster l) of an in-memory X,
    as ``np.median(X[rows == k][:, cols == l])`` (NaN for an empty block).

    Parameters
    ----------
    X : ndarray (n, d) float32 or float64, C-contiguous, without NaN
    rows : ndarray of int (n,), in [0, K)
    cols : ndarray of int (d,), in [0, L)
    pivots : ndarray (K, L), optional
        Guesses (the last medians; NaN: none): counted around in one pass, and the middle
        ranks selected only when they are not the guess or a neighbour of it (as
        :func:`group_medians`).  The result does not depend on them.
    window : tuple (lo, hi) of ndarray (K, L), optional
        Instead, windows that likely hold the medians
        (:func:`~daskrnmf._median_search.block_bracket`, from a row sample): one pass
        counts each block's values below its window and gathers the ones inside, and the
        middle ranks are selected among those; a block whose window missed (or is NaN)
        is selected among all its values.  The first S step of a fit started on a
        sample, whose medians as guesses missed nearly every block (10000 x 400: 25
        against 66 ms).  The result does not depend on them.

    Returns
    -------
    ndarray (K, L) float64
    """
    rorder, rends = group_order(rows, K)
    corder, cends = group_order(cols, L)
    out = np.full((K, L), np.nan)
    if window is not None:
        lo = np.where(np.isnan(window[0]), -np.inf, np.asarray(window[0], dtype=np.float64))
        hi = np.where(np.isnan(window[1]), np.inf, np.asarray(window[1], dtype=np.float64))
        nk_max = int(np.diff(rends, prepend=0).max(initial=0))
        _block_medians_bracketed(X, rorder, rends, corder, cends, lo, hi, out,
                                 np.empty(X.shape[1]), np.empty(max(nk_max * X.shape[1], 1)),
                                 np.zeros((3, L), dtype=np.int64))
        return out
    piv = (np.full((K, L), np.nan) if pivots is None
           else np.ascontiguousarray(pivots, dtype=np.float64))
    _block_medians(X, rorder, rends, corder, cends, piv, out)
    return out


@njit(cache=True, nogil=True, fastmath=False)
def _block_medians_bracketed(X, rorder, rends, corder, cends, lo, hi, out, row, buf, counts):
    # scratch from the caller (np.empty's, np.zeros' and max()'s overloads were compiled
    # for this kernel alone in RFNMTF's first fit): row (d,); buf (the largest row
    # cluster's size * d,), a row cluster's in-window values, a segment of nk * n_l per
    # column cluster; counts (3, L) int64 zeros: below, inside, base
    K, L = rends.shape[0], cends.shape[0]
    d = corder.shape[0]
    below, inside, base = counts[0], counts[1], counts[2]
    for k in range(K):
        r0 = rends[k - 1] if k else 0
        nk = rends[k] - r0
        if nk == 0:
            continue
        for l in range(L):
            base[l] = nk * (cends[l - 1] if l else 0)
            below[l], inside[l] = 0, 0
        for t in range(nk):
            # the row's values in column-cluster order, then per column cluster a count
            # below the window (one vectorised loop) and the values inside gathered
            x = X[rorder[r0 + t]]
            for jj in range(d):
                row[jj] = x[corder[jj]]
            for l in range(L):
                a, e = (cends[l - 1] if l else 0), cends[l]
                wl, wh = lo[k, l], hi[k, l]
                n_below = 0
                for jj in range(a, e):
                    n_below += row[jj] < wl
                below[l] += n_below
                w = base[l] + inside[l]
                for jj in range(a, e):          # without a branch: written, then kept
                    v = row[jj]                 # only if inside
                    buf[w] = v
                    w += (v >= wl) & (v <= wh)
                inside[l] = w - base[l]
        for l in range(L):
            c0 = cends[l - 1] if l else 0
            m = nk * (cends[l] - c0)
            if m == 0:
                continue
            h = (m - 1) // 2
            top = h + 1 if m % 2 == 0 else h        # the highest middle rank
            b, c = below[l], inside[l]
            seg = buf[base[l]:base[l] + m]
            if b <= h and top < b + c:              # the window holds the middle ranks
                v = _select(seg, c, h - b)
                if m % 2 == 0:
                    u = seg[h - b + 1]              # the next order statistic
                    for q in range(h - b + 2, c):
                        if seg[q] < u:
                            u = seg[q]
                    v = (v + u) / 2.0
                out[k, l] = v
                continue
            w = 0                                   # missed: all the block's values
            for t in range(nk):
                x = X[rorder[r0 + t]]
                for jj in range(c0, cends[l]):
                    seg[w] = x[corder[jj]]
                    w += 1
            out[k, l] = _buf_median(seg, m)


@njit(cache=True, nogil=True, fastmath=False)
def _sweep_medians(prow, pcol, values, rows, cols, L, seg, wanted, lo, hi, seen, out):
    """Medians read off sorted values, the middle ones as they are met.  ``values`` (N,)
    are sorted within each segment of ``seg`` positions; position ``p`` holds a value of
    row ``prow[p]``, which belongs to entry ``rows[prow[p]] * L + cols[pcol[p]]`` or,
    ``pcol`` empty, ``rows[prow[p]] * L + s`` in segment ``s``.  Entry ``b``'s values are
    all in one segment, and ``out[b]`` becomes their median (NumPy's: the middle one, or
    the mean ``(a + b) / 2`` of the two middle ones), its ``lo[b]``-th and ``hi[b]``-th
    met (:func:`middle_ranks`; -1: not wanted, ``out[b]`` left as it is); ``wanted``
    such entries in each segment, whose sweep stops once they are all met.  ``seen``
    (like lo) int64 zeros, scratch.  One kernel for the blocks of X sorted once
    (:class:`SortedValues`: one segment, row and column clusters) and the clusters of
    each feature sorted once (the k-medians loop: a segment a feature): one compilation
    serves both."""
    N = values.shape[0]
    if wanted == 0 or seg == 0:
        return
    per_segment = pcol.shape[0] == 0
    a = 0
    while a < N:
        left = wanted
        p, e = a, a + seg
        s = a // seg
        # (while loops, one test of both ranks first: 1000 x 120, 0.109 ms a blocking,
        # against 0.136 with a for loop and a break, 0.104 for the blocks' own kernel)
        while p < e and left:
            b = rows[prow[p]] * L + (s if per_segment else cols[pcol[p]])
            t = seen[b]
            seen[b] = t + 1
            if t == lo[b] or t == hi[b]:
                if t == lo[b]:
                    out[b] = values[p]
                if t == hi[b]:
                    if t != lo[b]:
                        out[b] = (out[b] + values[p]) / 2.0
                    left -= 1
            p += 1
        a = e


def middle_ranks(size, want=None):
    """The ranks of the middle values of entries of ``size`` values for
    :func:`_sweep_medians`: ``lo = (m - 1) // 2`` and ``hi``, ``lo`` or (``m`` even)
    ``lo + 1``; both -1 where ``want`` is False (an empty entry's never matter: no
    value is met)."""
    size = np.asarray(size, dtype=np.int64)
    lo, hi = (size - 1) >> 1, size >> 1
    if want is not None:
        lo[~want] = -1
        hi[~want] = -1
    return lo, hi


class SortedValues:
    """All the values of a small in-memory X sorted once, for the medians of many
    blockings of it (:meth:`block_medians`): RFNMTF's initialisation takes the block
    medians of its sample for 40 candidate co-clusterings, with no good guesses.

    Parameters
    ----------
    X : ndarray (n, d) float32 or float64, without NaN
    """

    def __init__(self, X):
        X = np.ascontiguousarray(X)
        flat = np.argsort(X, axis=None)
        # each position's row, column and value: NumPy (a compiled loop was faster by
        # 1.4 ms on 1000 x 120, once a fit, and cost the first fit 0.08 s to compile)
        prow, pcol = np.divmod(flat, max(X.shape[1], 1))
        self.prow, self.pcol = prow.astype(np.int32), pcol.astype(np.int32)
        self.values = X.ravel()[flat].astype(np.float64)

    def block_medians(self, rows, cols, K, L):
        """:func:`block_medians` (the same numbers) by one sweep over the sorted values:
        a block's middle values are its ``h``-th and ``(h + 1)``-th met."""
        out = np.full(K * L, np.nan)
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        cols = np.ascontiguousarray(cols, dtype=np.int64)
        size = np.outer(np.bincount(rows, minlength=K), np.bincount(cols, minlength=L)).ravel()
        lo, hi = middle_ranks(size)
        _sweep_medians(self.prow, self.pcol, self.values, rows, cols, L, self.values.shape[0],
                       np.count_nonzero(size), lo, hi, np.zeros(K * L, dtype=np.int64), out)
        return out.reshape(K, L)


@njit(cache=True, nogil=True, fastmath=False)
def _side_rank(buf, m, part, lt, eq, gt, p, r):
    """The r-th smallest observed value of buf[:m] when it lies beyond p's neighbours
    (:func:`_near_rank` missed), given the counts below / at / above p: a selection
    among the values on its side (gathered into ``part``)."""
    w = 0
    if r < lt:
        for t in range(m):
            v = buf[t]
            part[w] = v
            w += v < p
        return _select(part, lt, r)
    for t in range(m):
        v = buf[t]
        part[w] = v
        w += v > p
    return _select(part, gt, r - lt - eq)


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _buf_median(buf, m):
    """numpy.median of buf[:m] (m > 0) by selection (buf is reordered): the middle value,
    or the mean of the two middle ones."""
    h = (m - 1) // 2
    lo = _select(buf, m, h)
    if m % 2:
        return lo
    hi = buf[h + 1]                     # the next order statistic: min of the upper part
    for t in range(h + 2, m):
        if buf[t] < hi:
            hi = buf[t]
    return (lo + hi) / 2.0


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _gathered_median(row, order, a, m, buf):
    """The median of the observed (non-NaN) values ``row[order[a:a + m]]`` and their
    number (the median is undefined when it is 0)."""
    mo = 0
    for t in range(m):
        v = row[order[a + t]]
        if not np.isnan(v):
            buf[mo] = v
            mo += 1
    return (_buf_median(buf, mo) if mo else 0.0), mo


@njit(cache=True, nogil=True, fastmath=False)
def _group_medians(Xt, order, ends, out, pivots, X, buf, part, counts, nb, na):
    # buf, part: (largest group,) scratch; counts (3, d) int64, nb, na (d,): the counts
    # and neighbours of the guesses, by rows (_pivot_counts sets them before they are
    # read).  Allocated by the caller: np.empty's and np.zeros' overloads were compiled
    # for no other kernel of RFNMF L1's fit.
    d = Xt.shape[0]
    G = ends.shape[0]
    n_lt, n_eq, n_gt = counts[0], counts[1], counts[2]
    for g in range(G):
        a = ends[g - 1] if g else 0
        m = ends[g] - a
        if m == 0:
            continue
        counted = False
        for j in range(d):
            if not np.isnan(pivots[g, j]):
                counted = True
        if counted:
            _pivot_counts(X, order, a, m, pivots[g], n_lt, n_eq, n_gt, nb, na)
        for j in range(d):
            p = pivots[g, j]
            if counted and not np.isnan(p):
                L, E = n_lt[j], n_eq[j]
                mo = L + E + n_gt[j]
                if mo == 0:
                    continue
                h = (mo - 1) // 2
                lo, ok = _near_rank(L, E, p, nb[j], na[j], h)
                hi, ok2 = lo, True
                if mo % 2 == 0:
                    hi, ok2 = _near_rank(L, E, p, nb[j], na[j], h + 1)
                if ok and ok2:
                    out[g, j] = lo if mo % 2 else (lo + hi) / 2.0
                    continue
                if m >= SIDE_SELECT_MIN:        # the median moved past a neighbour:
                    row = Xt[j]                 # select on the side that holds it
                    for t in range(m):
                        buf[t] = row[order[a + t]]
                    if not ok:
                        lo = _side_rank(buf, m, part, L, E, n_gt[j], p, h)
                    if not ok2:
                        hi = _side_rank(buf, m, part, L, E, n_gt[j], p, h + 1)
                    out[g, j] = lo if mo % 2 else (lo + hi) / 2.0
                    continue
            # no guess, or a small group whose guess missed (there the selection among
            # all the values costs less than the side's): select
            v, mo = _gathered_median(Xt[j], order, a, m, buf)
            if mo:
                out[g, j] = v


def rank_rows(Xt):
    """Every row of ``Xt`` sorted once, for :func:`group_medians_ranked`.

    Parameters
    ----------
    Xt : ndarray (n_features, n) float64: X transposed (a feature per row)

    Returns
    -------
    ranked : tuple ``(ranks, values, n_obs, order)``: ``ranks`` int32 (n_features, n),
        the position of each of X's rows in its feature's order (NaN last); ``values``
        (n_features, n), each feature's values in that order; ``n_obs`` int64
        (n_features,), its non-NaN values; ``order`` int32 (n_features, n), the rows in
        that order (the inverse of ``ranks``, for the sweeps of
        :func:`~daskrnmf.kernels.kmedians.feature_sweep`).
    """
    Xt = np.ascontiguousarray(Xt, dtype=np.float64)
    d, n = Xt.shape
    # NumPy's sort (NaN last), 5x faster than Numba's on 1000 rows of 120; tied values
    # may come in any order, which no median read off them depends on
    idx = np.argsort(Xt, axis=1)
    # the scatter and gathers in NumPy too (a compiled loop cost the first fit 0.09 s of
    # compilation for one call a fit)
    ranks = np.empty((d, n), dtype=np.int32)
    ranks[np.arange(d)[:, None], idx] = np.arange(n, dtype=np.int32)
    values = np.take_along_axis(Xt, idx, axis=1)
    n_obs = (n - np.count_nonzero(np.isnan(Xt), axis=1)).astype(np.int64)
    return ranks, values, n_obs, idx.astype(np.int32)


_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return int((x * _H01) >> np.uint64(56))


@njit(cache=True, nogil=True, fastmath=False, inline="always")
def _nth_bit(bits, c):
    """Position of the c-th (from 0) set bit of the bit array ``bits`` (it exists)."""
    w = 0
    while True:
        pc = _popcount(bits[w])
        if c < pc:
            break
        c -= pc
        w += 1
    x = bits[w]
    for _ in range(c):
        x &= x - np.uint64(1)
    return w * 64 + _popcount((x & (~x + np.uint64(1))) - np.uint64(1))


@njit(cache=True, nogil=True, fastmath=False)
def _group_medians_ranked(ranks, values, n_obs, order, ends, out):
    d, n = ranks.shape
    bits = np.zeros((n + 63) // 64, dtype=np.uint64)
    one = np.uint64(1)
    for g in range(ends.shape[0]):
        a = ends[g - 1] if g else 0
        m = ends[g] - a
        if m == 0:
            continue
        for j in range(d):
            rj = ranks[j]
            no = n_obs[j]
            mo = 0
            for t in range(m):
                q = rj[order[a + t]]
                if q < no:
                    bits[q >> 6] |= one << np.uint64(q & 63)
                    mo += 1
            if mo == 0:
                continue
            # the middle order statistics of the group's values: the h-th (and, mo
            # even, the next) of its members' ranks
            h = (mo - 1) // 2
            lo = values[j, _nth_bit(bits, h)]
            out[g, j] = lo if mo % 2 else (lo + values[j, _nth_bit(bits, h + 1)]) / 2.0
            bits[:] = 0


def group_medians_ranked(ranked, order, ends, out):
    """:func:`group_medians` (the same numbers) from rows sorted once by
    :func:`rank_rows`: a group's median is read off its members' ranks (set in a bit
    array, then counted to the middle by population counts) instead of selected among
    its values.  For many groupings of few rows (``n`` <= :data:`RANKED_MAX_ROWS`): the
    general k-medians fit of a sample's columns given their ranks
    (``kmedians_labels(..., compiled=False)``, the compiled loop's reference).

    Parameters
    ----------
    ranked : tuple, :func:`rank_rows` of X transposed
    order, ends : as :func:`group_medians`
    out : ndarray (n_groups, n_features), filled where a group has observed values
    """
    ranks, values, n_obs = ranked[:3]
    _group_medians_ranked(ranks, values, n_obs, np.ascontiguousarray(order, dtype=np.int64),
                          np.ascontiguousarray(ends, dtype=np.int64), out)
    return out


RANKED_MAX_ROWS = 1024      # above, the bit array's words cost more than a selection


SORT_MAX_VALUES = 2**13     # collections up to this many values: NumPy's sort (0.7 ms)


def collected_ranks_sorted(keys, vals, n_entries, entries, rank_lo, rank_hi):
    """:func:`~daskrnmf.kernels.median_rounds.select_collected` (the same numbers) by
    NumPy's sort of the values by entry, then by value, for a small collection
    (:data:`SORT_MAX_VALUES`): there it costs well under a millisecond a round, where
    the compiled selection cost a first fit on a cluster 0.4-0.5 s of compilation (with
    ``_select``) on the client.

    Parameters
    ----------
    keys : ndarray of int (m,), each value's entry, in [0, n_entries)
    vals : ndarray (m,) float64, without NaN
    n_entries : int
    entries : ndarray of int (t,)
    rank_lo, rank_hi : ndarray of int (t,), 0-based ranks within each entry's values

    Returns
    -------
    ndarray (t,) float64: ``(v[rank_lo] + v[rank_hi]) / 2`` of each entry's sorted values
    """
    v = np.asarray(vals, dtype=np.float64)[np.lexsort((vals, keys))]
    start = np.zeros(n_entries + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n_entries), out=start[1:])
    base = start[np.asarray(entries, dtype=np.int64)]
    return 0.5 * (v[base + np.asarray(rank_lo, dtype=np.int64)]
                  + v[base + np.asarray(rank_hi, dtype=np.int64)])


@one_type_per_argument
@njit(cache=True, nogil=True, fastmath=False)
def _select(a, m, kth):
    """Hoare's quickselect on a[:m]: a[kth] becomes the kth smallest, the values below
    it in a[:kth] and the values above it in a[kth + 1:m]; returns a[kth]."""
    lo, hi = 0, m - 1
    while hi > lo:
        mid = (lo + hi) // 2            # median of three as the pivot
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            break
    return a[kth]
