"""The median search: exact (or ``median_tol``-approximate) medians of many sets of
values held across X's row blocks, from mergeable summaries refined round by round.

RFNMF's L1 centres (an entry per restart, cluster and feature) and RFNMTF's S step (an
entry per restart, row cluster and column cluster) are such medians.  A round is one
pass over X: every block summarises each unresolved entry's values inside its window
(:func:`~daskrnmf.kernels.median_rounds.median_round`: a histogram, or the values
themselves when few are left), the summaries merge up a tree, and
:class:`MedianSearch` narrows the windows from the merged counts.  The first round may
ride in a model's fused assignment pass; :meth:`MedianSearch.finish` runs the rest.

What makes the rounds few is written here once for both models:

* warm windows — each entry's last window, kept per restart between fit iterations
  (:func:`keep_windows`, :func:`warm_windows`) and widened to share the collection
  budget around the last median (:func:`_widened`);
* brackets — windows that hold a median with high probability, from the first pass's
  uniform row sample labelled as X is (:func:`sample_bracket` for RFNMF,
  :func:`block_bracket` for RFNMTF).

A round that collects every unresolved median (RFNMF) may also certify that no row
would change cluster for any medians inside their windows (:func:`certified_plan`,
:func:`certified_objective`): the fit has then converged in that round.

The budgets per partial result are dask config values (``daskrnmf.median-histogram-
cells``, ``daskrnmf.median-collect-values``).  NumPy on the client; the per-block round
is :func:`median_refine_chunk` (with the labels a fused pass kept on the workers).
"""

import dask
import numpy as np

from .kernels.blocks import as_kernel_block
from .kernels.median_rounds import median_round, select_collected

# Memory of the median summaries per partial result (and so per tree node), by default;
# dask config "daskrnmf.median-histogram-cells" and "daskrnmf.median-collect-values"
# set them (read by the client as it plans a round): more collected values resolve more
# medians per round, so fewer passes over X, for more memory per task.
HIST_CELLS = 2**18       # histogram cells: 1 MiB per block (int32), 2 MiB merged
COLLECT_VALUES = 2**20   # collected (key, value) pairs planned per round: 12 MiB (hard cap 2x)
MAX_ROUNDS = 24          # hard cap; float64 needs at most ~8 rounds of 256 bins


def _budget(key, default):
    """A positive integer from dask config ``key``, else ``default``."""
    value = dask.config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"dask config {key!r} must be a positive integer. Got {value!r} "
                         "instead.")
    return int(value)


def _hist_cells():
    return _budget("daskrnmf.median-histogram-cells", HIST_CELLS)


def _collect_values():
    return _budget("daskrnmf.median-collect-values", COLLECT_VALUES)


class MedianSearch:
    """Per-entry medians from mergeable summaries, refined round by round.

    An entry is a set of values whose median is wanted (for RFNMF: one (restart,
    cluster, feature) triple).  Round by round, each unresolved entry either

    * histograms its current window (``n_bins`` bins) — the bins holding the two middle
      order statistics become the next window, clipped to the min/max seen inside; or
    * collects its values inside the window when few remain (within a global budget),
      which gives the exact median: the mean of the two middle order statistics, as
      :func:`numpy.median` defines it.

    A window whose values are all equal resolves at once (ties).  With ``tol > 0`` an
    entry whose window is narrower than ``tol * span`` resolves to the window's midpoint.

    A round is planned (:meth:`first_plan`, :meth:`next_plan`), run over X by the caller
    (:func:`median_refine_chunk` per block, or inside a fused pass), and folded in
    (:meth:`update`); :meth:`finish` runs the rounds that remain.

    Parameters
    ----------
    lo, hi : ndarray (E,)
        A window known to hold all values of every entry.
    tol : float
        Relative tolerance (0: exact).
    warm : tuple of ndarray, optional
        ``(lo, hi, count[, median])`` windows from the previous fit iteration
        (:attr:`final_window`), widened to share the collection budget around the
        previous median (:func:`_widened`); entries whose median falls inside resolve in
        the first round.
    n_total : int
        Total number of values across entries (all collected at once if small).
    counts_given : bool
        The caller passes ``n_values`` with the first round (RFNMF's fused pass counts
        every entry's values): the first round's histograms need not cover the full
        range, so they can skip a trusted warm collection and start from ``bracket``.
    trust_warm : bool
        With ``counts_given``: the warm windows held every median last time, so an entry
        collecting in its warm window skips the histogram of its full range in the first
        round (the bin updates are most of a round's arithmetic); one that misses
        continues on the side of its window where the median went.  Otherwise every
        entry is histogrammed too, which refines the misses in the same round.
    bracket : tuple of ndarray, optional
        With ``counts_given`` and no warm windows: ``(lo, hi)`` per entry, a window that
        holds its median with high probability (NaN: none), histogrammed in the first
        round instead of the full range (RFNMF: order statistics of the seeding sample
        around its median, see :func:`sample_bracket`).  A median outside continues on
        the side it is on.

    Attributes
    ----------
    warm_hit : bool or None
        After the first round of a warm search: whether every warm collection held its
        median (None before, or without warm windows).
    """

    def __init__(self, lo, hi, *, tol=0.0, warm=None, n_total=None, counts_given=False,
                 trust_warm=False, bracket=None):
        self.E = lo.shape[0]
        self.span = np.maximum(hi - lo, 0.0)
        self.full_lo, self.full_hi = lo.astype(np.float64), hi.astype(np.float64)
        self.tol = tol
        self.lo, self.hi = self.full_lo.copy(), self.full_hi.copy()
        self.count = np.full(self.E, np.iinfo(np.int64).max // 4, dtype=np.int64)
        self.value = np.full(self.E, np.nan)
        self.resolved = np.zeros(self.E, dtype=bool)
        self.n_values = None
        self.rounds = 0
        self.n_approximate = 0
        self._warm = warm
        self._counts_given = counts_given
        self._trust_warm = trust_warm and counts_given
        self._bracket = bracket if counts_given and warm is None else None
        self.warm_hit = None
        self._collect_all = n_total is not None and n_total <= _collect_values()
        self._histogram_next = np.zeros(self.E, dtype=bool)   # dropped collections
        self._final = (np.full(self.E, np.nan), np.full(self.E, np.nan),
                       np.zeros(self.E, dtype=np.int64))

    @property
    def final_window(self):
        """``(lo, hi, count, median)`` per entry: the window where its median was found
        and the values it held (the ``warm`` of the next fit iteration)."""
        return (*self._final, self.value)

    # -- planning
    def first_plan(self):
        """The plan of the first round, made before the entries' sizes are known."""
        active = np.ones(self.E, dtype=bool)
        if self._collect_all:
            return self._plan(np.zeros(self.E, dtype=bool), active, self.full_lo, self.full_hi,
                              coll_lo=np.full(self.E, -np.inf), coll_hi=np.full(self.E, np.inf))
        coll = np.zeros(self.E, dtype=bool)
        clo, chi = np.zeros(self.E), np.zeros(self.E)
        if self._warm is not None:
            wlo, whi, wcount = _widened(*self._warm)
            ok = np.isfinite(wlo) & np.isfinite(whi)
            coll = ok & _greedy_budget(np.where(ok, wcount, np.iinfo(np.int64).max // 4), ok)
            clo, chi = np.where(coll, wlo, 0.0), np.where(coll, whi, 0.0)
        # the warm windows were planned from the previous iteration's counts, which the
        # current labels may exceed many times over: a hard bound on what any partial
        # result holds (twice the budget); an entry over it is only counted, and its
        # median refined in the next round.  With the warm windows trusted, a collected
        # entry is not histogrammed too (the bin updates are most of a round's
        # arithmetic): one that misses continues on the side its median went.
        hist = active & ~coll if self._trust_warm else active
        hlo, hhi = self.full_lo, self.full_hi
        if self._bracket is not None:
            blo, bhi = self._bracket
            use = ~(blo > bhi)          # NaN or -inf / inf: that side's full range
            hlo = np.where(use & np.isfinite(blo), np.maximum(blo, self.full_lo), self.full_lo)
            hhi = np.where(use & np.isfinite(bhi), np.minimum(bhi, self.full_hi), self.full_hi)
        return self._plan(hist, coll, hlo, hhi, clo, chi, max_collect=2 * _collect_values())

    def next_plan(self):
        """The plan of the next round, or None when every entry is resolved."""
        todo = ~self.resolved
        if not todo.any():
            return None
        if self.rounds >= MAX_ROUNDS:  # cannot happen for float data; a guard all the same
            self._resolve(todo, 0.5 * (self.lo[todo] + self.hi[todo]), approx=True)
            return None
        # an entry whose collection went over the hard cap is histogrammed next (its count
        # can be far off, and ties at float resolution need the histogram to resolve)
        can = todo & ~self._histogram_next
        coll = can & _greedy_budget(self.count, can)
        self._histogram_next[:] = False
        hist = todo & ~coll
        # counts from this iteration's histograms: collections stay within the budget
        # (plus the windows' rounding margins, which ties at float resolution need)
        return self._plan(hist, coll, self.lo, self.hi, self.lo, self.hi, max_collect=None)

    def _plan(self, hist, coll, hlo, hhi, coll_lo, coll_hi, max_collect=None):
        slot = np.full(self.E, -1, dtype=np.int64)
        n_hist = int(hist.sum())
        slot[hist] = np.arange(n_hist)
        n_bins = int(np.clip(_floor_pow2(_hist_cells() // max(1, n_hist)), 8, 4096))
        return {"hist_slot": slot, "hlo": np.where(hist, hlo, 0.0), "hhi": np.where(hist, hhi, 0.0),
                "n_bins": n_bins, "n_hist": n_hist, "coll": coll.copy(),
                "clo": np.where(coll, coll_lo, 0.0), "chi": np.where(coll, coll_hi, 0.0),
                "max_collect": max_collect}

    # -- running
    def finish(self, refine, n_values=None):
        """Run the search to its end: ``refine(plan)`` makes one round's pass over X and
        returns its merged result.  A search whose first round a fused pass made (its
        :meth:`first_plan` result given to :meth:`update`) continues from there; one
        with no round yet starts with :meth:`first_plan` (``n_values``: as in
        :meth:`update`).  Returns :attr:`value`, every entry's median.
        """
        plan = self.first_plan() if self.rounds == 0 else self.next_plan()
        first = self.rounds == 0
        while plan is not None:
            self.update(plan, refine(plan), n_values=n_values if first else None)
            first = False
            plan = self.next_plan()
        return self.value

    # -- updating
    def update(self, plan, res, n_values=None):
        """Fold one round's merged result in.

        ``n_values`` (E,) — how many values each entry has, 0 making its median NaN — may
        be given with the first round; otherwise it is read off that round, which covers
        every entry's full range.
        """
        if self.n_values is None:
            if n_values is None:  # the first round covers the full range of every entry
                if self._collect_all:
                    n_values = res["cbelow"] + res["cin"]
                else:
                    n_values = res["hbelow"] + res["hist"][plan["hist_slot"]].sum(axis=1)
            self.n_values = np.asarray(n_values, dtype=np.int64)
            self.resolved |= self.n_values == 0
        self.rounds += 1
        n = self.n_values
        t_lo, t_hi = (n - 1) // 2, n // 2
        done_by_collect = np.zeros(self.E, dtype=bool)

        coll = plan["coll"] & ~self.resolved
        if coll.any():
            ent = np.flatnonzero(coll)
            m = res["cin"][ent]
            below = res["cbelow"][ent]
            inside = (below <= t_lo[ent]) & (t_hi[ent] < below + m)
            if self.rounds == 1 and self._warm is not None:
                self.warm_hit = bool(inside.all() and not res["dropped"][ent].any())
            # over the collection budget: only counted; the median is inside the window,
            # which the next round refines (histogram or a smaller collection)
            over = ent[inside & res["dropped"][ent]]
            self.lo[over], self.hi[over] = plan["clo"][over], plan["chi"][over]
            self.count[over] = res["cin"][over]
            self._histogram_next[over] = True
            ok = inside & ~res["dropped"][ent]
            good = ent[ok]
            if good.size:
                self._resolve(good, select_collected(res["keys"], res["vals"], self.E, good,
                                                     t_lo[good] - below[ok], t_hi[good] - below[ok]))
                keep = good[~np.isfinite(self._final[0][good])]
                self._final[0][keep] = plan["clo"][keep]
                self._final[1][keep] = plan["chi"][keep]
                self._final[2][keep] = np.bincount(res["keys"], minlength=self.E)[keep]
                done_by_collect[good] = True
            # A collection that missed (a warm window the median left), if the entry was
            # not histogrammed in the same round: the side of the window the middle
            # order statistics are on (values below clo were counted, values inside too)
            side = ~inside & (plan["hist_slot"][ent] < 0)
            nohist, below_s, m_s = ent[side], below[side], m[side]
            tl, th = t_lo[nohist], t_hi[nohist]
            cl, ch = plan["clo"][nohist], plan["chi"][nohist]
            self.lo[nohist] = np.where(tl >= below_s + m_s, ch,
                                       np.where(below_s <= tl, cl, self.full_lo[nohist]))
            self.hi[nohist] = np.where(th < below_s, cl,
                                       np.where(th < below_s + m_s, ch, self.full_hi[nohist]))
            self.count[nohist] = np.iinfo(np.int64).max // 4

        hist = (plan["hist_slot"] >= 0) & ~self.resolved
        if hist.any():
            self._refine(np.flatnonzero(hist), plan, res, t_lo, t_hi)

    def _refine(self, ent, plan, res, t_lo, t_hi):
        B = plan["n_bins"]
        h = res["hist"][plan["hist_slot"][ent]]
        below = res["hbelow"][ent]
        cum = np.cumsum(h, axis=1)
        inside = cum[:, -1]
        rel_lo, rel_hi = t_lo[ent] - below, t_hi[ent] - below
        ok = (rel_lo >= 0) & (rel_hi < inside)
        # Outside the window: a bracket that missed (the median is on one side: values
        # below the window were counted, those inside too), or a rounding slip at an edge
        bad = ent[~ok]
        hlo_b, hhi_b = plan["hlo"][bad], plan["hhi"][bad]
        rlo, rhi, ins = rel_lo[~ok], rel_hi[~ok], inside[~ok]
        self.lo[bad] = np.where(rlo >= ins, hhi_b, np.where(rlo >= 0, hlo_b, self.full_lo[bad]))
        self.hi[bad] = np.where(rhi < 0, hlo_b, np.where(rhi < ins, hhi_b, self.full_hi[bad]))
        self.count[bad] = np.iinfo(np.int64).max // 4
        ent, h, cum = ent[ok], h[ok], cum[ok]
        rel_lo, rel_hi = rel_lo[ok], rel_hi[ok]
        if not ent.size:
            return
        rows = np.arange(ent.size)
        b_lo = (cum <= rel_lo[:, None]).sum(axis=1)
        b_hi = (cum <= rel_hi[:, None]).sum(axis=1)
        hlo, hhi = plan["hlo"][ent], plan["hhi"][ent]
        w = (hhi - hlo) / B
        margin = w * 1e-6 + 8 * np.finfo(np.float64).eps * np.maximum(np.abs(hlo), np.abs(hhi))
        lo = np.maximum(hlo + b_lo * w - margin, res["hmin"][ent])
        hi = np.minimum(hlo + (b_hi + 1) * w + margin, res["hmax"][ent])
        cum0 = np.concatenate([np.zeros((ent.size, 1), dtype=cum.dtype), cum], axis=1)
        self.count[ent] = cum0[rows, b_hi + 1] - cum0[rows, b_lo]
        self._record_warm(ent, cum0, b_lo, b_hi, hlo, w, margin, B)
        self.lo[ent], self.hi[ent] = lo, hi
        equal = lo >= hi  # every value in the window is the same number
        self._resolve(ent[equal], lo[equal])
        if self.tol > 0:
            narrow = ~equal & ((hi - lo) <= self.tol * self.span[ent])
            self._resolve(ent[narrow], 0.5 * (lo[narrow] + hi[narrow]), approx=True)

    def _record_warm(self, ent, cum0, b_lo, b_hi, hlo, w, margin, B):
        """Remember, for the next fit iteration, the widest run of bins around the median
        whose values fit in an even share of the collection budget (first histogram only)."""
        new = ~np.isfinite(self._final[0][ent])
        if not new.any():
            return
        ent, cum0, b_lo, b_hi, hlo, w, margin = (a[new] for a in (ent, cum0, b_lo, b_hi, hlo, w, margin))
        cap = max(1, _collect_values() // (2 * self.E))
        q = np.arange(B)[None, :]
        left, right = np.maximum(b_lo[:, None] - q, 0), np.minimum(b_hi[:, None] + 1 + q, B)
        counts = np.take_along_axis(cum0, right, 1) - np.take_along_axis(cum0, left, 1)
        fits = counts <= cap
        best = fits.sum(axis=1) - 1  # counts grow with q, so the fitting q form a prefix
        ok = best >= 0
        rows = np.arange(ent.size)[ok]
        qb = best[ok]
        self._final[0][ent[ok]] = hlo[ok] + left[rows, qb] * w[ok] - margin[ok]
        self._final[1][ent[ok]] = hlo[ok] + right[rows, qb] * w[ok] + margin[ok]
        self._final[2][ent[ok]] = counts[rows, qb]

    def _resolve(self, ent, values, approx=False):
        ent = np.asarray(ent)
        self.value[ent] = values
        self.resolved[ent] = True
        if approx:
            self.n_approximate += int(ent.size)


def warm_windows(warm, active):
    """The ``warm`` argument of the active restarts' next search: ``warm`` (per restart,
    as :func:`keep_windows` keeps it) flattened over their entries, None before any."""
    return None if warm is None else tuple(w[active].ravel() for w in warm)


def keep_windows(warm, search, active, shape):
    """``warm`` (None at first: made here) with the active restarts' entries set to
    ``search``'s :attr:`~MedianSearch.final_window`; ``shape`` is one restart's entries
    (``(n_clusters, n_features)`` for RFNMF, ``(K, L)`` for RFNMTF's blocks).  Returns
    the tuple (lo, hi, count, median), each (n_restarts, *shape), a model's
    checkpointed state."""
    if warm is None:
        full = (active.shape[0], *shape)
        warm = (np.full(full, np.nan), np.full(full, np.nan),
                np.zeros(full, dtype=np.int64), np.full(full, np.nan))
    for w, new in zip(warm, search.final_window):
        w[active] = new.reshape(-1, *shape)
    return warm


BRACKET_Z = 4.0      # sample_bracket: normal quantile of its rank interval (~6e-5 miss)
BRACKET_MIN = 30     # ... and the fewest sample members a cluster needs for one


def sample_bracket(S, labels, n_clusters, z=BRACKET_Z, min_count=BRACKET_MIN):
    """Windows that hold each (cluster, feature) median of X with high probability, from
    a uniform row sample ``S`` (m, d) of X labelled as X will be (``labels``).

    Of the m_c sample members of a cluster, the number below the population median is
    Binomial(m_c, 1/2): the order statistics ``z sqrt(m_c) / 2`` ranks either side of
    the sample median bracket it but with probability ~``2 Phi(-z)``.  Returns ``(lo,
    hi)`` of shape (n_clusters * d,): NaN where a cluster has fewer than ``min_count``
    members, -inf / inf where the rank interval leaves the sample (that side's full
    range)."""
    d = S.shape[1]
    lo = np.full((n_clusters, d), np.nan)
    hi = np.full((n_clusters, d), np.nan)
    for c in range(n_clusters):
        V = S[labels == c]
        m = V.shape[0]
        if m < min_count:
            continue
        V = np.sort(V, axis=0)
        half = 0.5 * z * np.sqrt(m)
        a, b = int(np.floor((m - 1) / 2 - half)), int(np.ceil(m / 2 + half))
        lo[c] = V[a] if a >= 0 else -np.inf
        hi[c] = V[b] if b < m else np.inf
    return lo.ravel(), hi.ravel()


def block_bracket(sample, labels, C, K, L, z=BRACKET_Z, min_count=BRACKET_MIN):
    """Windows that hold each (restart, row cluster, column cluster) block median of X with
    high probability, from a uniform row sample labelled as X is (``labels`` (m, R)) and
    the column labels ``C`` (R, d).

    A block's sample values come in rows that may move together, so the bracket counts
    rows, not values: with m_c sample rows in the cluster, the quantiles ``1/2 -+ z /
    (2 sqrt(m_c))`` of the block's sample values (the rank interval of
    :func:`sample_bracket` for m_c values, wider than one for all
    of them).  NaN where a cluster has fewer than ``min_count`` sample rows, -inf / inf
    where the interval leaves the sample.  A median outside continues on its side
    (:class:`MedianSearch`).

    Returns ``(lo, hi)`` of shape (R * K * L,).
    """
    R = C.shape[0]
    lo = np.full((R, K, L), np.nan)
    hi = np.full((R, K, L), np.nan)
    for r in range(R):
        groups = [np.flatnonzero(C[r] == l) for l in range(L)]
        for k in range(K):
            rows = sample[labels[:, r] == k]
            m = rows.shape[0]
            if m < min_count:
                continue
            half = 0.5 * z / np.sqrt(m)
            for l, g in enumerate(groups):
                if not g.size:
                    continue
                V = rows[:, g].ravel()
                N = V.size
                a = int(np.floor((0.5 - half) * (N - 1)))
                b = int(np.ceil((0.5 + half) * (N - 1)))
                kth = [i for i in (a, b) if 0 <= i < N]
                V = np.partition(V, kth) if kth else V
                lo[r, k, l] = V[a] if a >= 0 else -np.inf
                hi[r, k, l] = V[b] if b < N else np.inf
    return lo.ravel(), hi.ravel()


def _widened(lo, hi, count, median=None):
    """The previous iteration's final windows, resized to share the collection budget.

    A median moves when members change cluster; a window that held only the values next
    to it (a last histogram bin) then misses, and one miss (or one window left out of
    the budget) costs every entry another pass.  Each usable window is resized, at the
    density of values it held, to hold about ``COLLECT_VALUES / E`` values centred on
    the previous median: a median that moves by fewer ranks than half of that stays
    inside, and together the windows fit the budget.  Returns the windows and their
    expected counts."""
    if median is None:
        median = 0.5 * (lo + hi)
    ok = (np.isfinite(lo) & np.isfinite(hi) & np.isfinite(median) & (hi > lo)
          & (count > 0))
    n_ok = int(ok.sum())
    if not n_ok:
        return lo, hi, count
    target = max(_collect_values() // n_ok, 1)
    density = np.where(ok, count / np.where(ok, hi - lo, 1.0), 1.0)
    half = 0.5 * target / density
    return (np.where(ok, median - half, lo), np.where(ok, median + half, hi),
            np.where(ok, target, count))


def _greedy_budget(count, candidates):
    """Entries (cheapest first) whose collections fit in :data:`COLLECT_VALUES` together."""
    take = np.zeros(count.shape[0], dtype=bool)
    idx = np.flatnonzero(candidates)
    if not idx.size:
        return take
    order = idx[np.argsort(count[idx], kind="stable")]
    budget = _collect_values()
    total = np.cumsum(np.minimum(count[order], budget + 1))
    take[order[total <= budget]] = True
    return take


def _floor_pow2(x):
    return 1 << (max(1, int(x)).bit_length() - 1)


def median_refine_chunk(block, start, labels, n_clusters, plan, columns=None):
    """A later median round on one block, with the labels kept from the fused pass
    (``columns``: column groups for block medians, see :func:`median_round`)."""
    return median_round(as_kernel_block(block), labels, n_clusters, plan, columns)


def certified_plan(search, plan, n_restarts, n_clusters):
    """``plan`` (a round of ``search``, RFNMF's per-feature entries) with a certificate
    (:func:`~daskrnmf.kernels.median_rounds.certify_round`): whether any row could change
    cluster for *any* medians inside the windows the round collects in.  Only a round
    that collects every unresolved entry (no histogram) has one: the medians are then
    known to lie in ``[clo, chi]`` (a resolved entry's: its value), and if no row can
    change cluster, the labels the round was run with are those of the medians it
    finds, and the medians of those labels (the fit has converged).  ``plan`` itself,
    unchanged, where there is no such certificate (None: no round)."""
    if plan is None or plan["n_hist"] or not (plan["coll"] | search.resolved).all():
        return plan
    lo = np.where(search.resolved, search.value, plan["clo"])
    hi = np.where(search.resolved, search.value, plan["chi"])
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo <= hi).all()):
        return plan        # an empty entry (NaN median): the fit re-seeds a cluster
    d = lo.shape[0] // (n_restarts * n_clusters)
    mid = 0.5 * (lo + hi)
    # the margin covers the rounding of float64 sums of d terms (relative (d + 1) u
    # each, u = eps / 2) of the certificate's distances and the assignment's, and of
    # the radii H (each term rounded, then summed), with a factor 2 to spare
    rho = 4.0 * (d + 2) * np.finfo(np.float64).eps
    H = np.maximum(hi - mid, mid - lo).reshape(-1, d).sum(axis=1) * (1.0 + rho)
    return {**plan, "certify": {"lo": lo, "hi": hi, "mid": mid, "H": H, "rho": rho}}


def certified_objective(search, plan, res, n_restarts):
    """After a round planned by :func:`certified_plan` (``res`` its merged result,
    folded into ``search``): the L1 objective of every restart at the medians found,
    ``sum_i ||x_i - m_{g_i}||_1`` over the labels the round was run with, when its
    certificate holds (no row can change cluster) and every median was found exactly
    inside its window; None otherwise (the fit then goes on as without it).

    A value v of an entry adds ``|v - m|``: below its window ``[lo, hi]``, ``(lo - v) +
    (m - lo)``; above, ``(v - hi) + (hi - m)``; inside (collected, or equal to a resolved
    entry's median) ``|v - m|``.  The rows' distances to their windows (the first terms,
    summed over the rows as the assignment sums its distances), the counts times the
    second terms, and the values inside: the assignment's number, to rounding."""
    cert = res.get("certify")
    if cert is None or cert["uncertain"] or not search.resolved.all() or search.n_approximate:
        return None
    c = plan["certify"]
    m = search.value
    if not (np.isfinite(m).all() and ((m >= c["lo"]) & (m <= c["hi"])).all()):
        return None
    keys = res["keys"]
    inside = np.bincount(keys, weights=np.abs(res["vals"] - m[keys]), minlength=m.shape[0])
    share = cert["nb"] * (m - c["lo"]) + cert["na"] * (c["hi"] - m) + inside
    return cert["outside"] + share.reshape(n_restarts, -1).sum(axis=1)
