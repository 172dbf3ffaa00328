"""Tree reductions over row blocks, built on :mod:`daskrnmf.kernels`.

Each reduction is a ``*_chunk`` function (one block -> small dict), a ``*_combine``
function (list of dicts -> dict, associative) and, where needed, an aggregation,
run by :meth:`daskrnmf._blocks.RowBlocks.map_reduce` as a pairwise tree.

* :func:`feature_stats` — per-feature min / max and the NaN/inf count (the input check).
* :func:`assign_chunk` / :func:`assign_combine` — the fused pass of the hard-indicator
  models: nearest-centre assignment with the current centres, objective, cluster sizes,
  worst-fit samples, and the new centres' statistics (reweighted sums for L2,1, the
  first median round for L1).
* :class:`MedianSearch` — exact (or ``median_tol``-approximate) per-entry medians from
  mergeable histograms and value collections, refined round by round.
"""

import functools
from collections import Counter
from dataclasses import dataclass

import dask
import numpy as np

from ._blocks import RowBlocks, tree_reduce
from ._stores import digest as sha256_of
from ._validation import check_missing_count
from .kernels import rng
from .kernels.assign import nearest
from .kernels.blocks import as_kernel_block, sum_arrays
from .kernels.median_rounds import median_round, merge_median_round, select_collected
from .kernels.sums import cluster_sums, finite_stats, merge_worst_fit, worst_fit

# The first pass's row sample (seeding): a fixed key, so that it depends on X alone.
SAMPLE_SEED, SAMPLE_STREAM = 0x5EED5, 7

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


# ---------------------------------------------------------------- feature statistics
def feature_stats_chunk(block, start, sample_size=0, threshold=1.0):
    """One block's min, max, non-finite count, row count and sum of finite values (one
    compiled pass, :func:`~daskrnmf.kernels.sums.finite_stats`), with its candidate
    sample rows (keys below ``threshold``, see :func:`sample_rows_chunk`)."""
    x = np.asarray(block)
    lo, hi, nonfinite, total = finite_stats(x)
    out = {"min": lo, "max": hi, "nonfinite": nonfinite, "n": x.shape[0], "sum": total}
    if sample_size:
        out["sample"] = sample_rows_chunk(x, start, SAMPLE_SEED, SAMPLE_STREAM, sample_size,
                                          threshold)
    return out


def feature_stats_combine(parts, sample_size=0):
    out = {"min": np.minimum.reduce([p["min"] for p in parts]),
           "max": np.maximum.reduce([p["max"] for p in parts]),
           "nonfinite": sum(p["nonfinite"] for p in parts),
           "n": sum(p["n"] for p in parts), "sum": sum(p["sum"] for p in parts)}
    if sample_size:
        out["sample"] = sample_rows_combine([p["sample"] for p in parts], sample_size)
    return out


def missing_stats_chunk(block, start, sample_size=0, threshold=1.0):
    """:func:`feature_stats_chunk` with the NaN entries counted apart from the infinite
    ones: ``nan`` (int) and ``observed`` (d,) — each feature's number of non-NaN entries
    (``missing="mask"``'s first pass, see :mod:`daskrnmf.kernels.missing`)."""
    out = feature_stats_chunk(block, start, sample_size, threshold)
    x = np.asarray(block)
    if x.dtype.kind == "f" and out["nonfinite"]:
        miss = np.isnan(x)
        out["nan"] = int(miss.sum())
        out["observed"] = x.shape[0] - miss.sum(axis=0).astype(np.int64)
    else:
        out["nan"] = 0
        out["observed"] = np.full(x.shape[1], x.shape[0], dtype=np.int64)
    return out


def missing_stats_combine(parts, sample_size=0):
    out = feature_stats_combine(parts, sample_size)
    out["nan"] = sum(p["nan"] for p in parts)
    out["observed"] = np.sum([p["observed"] for p in parts], axis=0)
    return out


def _order_sample(stats):
    if "sample" in stats:
        res = stats["sample"]
        order = np.argsort(res["idx"])
        stats["sample"] = res["rows"][order]
    return stats


def sample_threshold(size, n):
    """The key below which a block offers its rows to a uniform sample of ``size`` of ``n``
    rows (:func:`sample_rows_chunk`).

    The ``size``-th smallest of ``n`` uniform keys is about ``size / n``: keys below
    ``(size + 8 sqrt(size) + 16) / n`` number ``size`` or more but for a chance below
    1e-15 (8 standard deviations), so a block sends a few more than its share of the
    sample instead of ``size`` rows.  Where they fall short the sample is drawn again
    in a second pass with no threshold (:func:`feature_stats`, :func:`sample_rows`).
    """
    if size >= n:
        return 1.0
    return float(min(1.0, (size + 8.0 * np.sqrt(size) + 16.0) / n))


def feature_stats(blocks, sample_size=0, missing=False, digest=False):
    """Per-feature minimum and maximum of the finite values, their sum, the number of rows
    and the NaN/inf count (1 pass).

    ``sample_size > 0`` draws, in the same pass, a uniform sample of that many rows
    (all rows when X has fewer) as ``stats["sample"]`` (sample_size, n_features) float64,
    ordered by row index: the rows with the smallest keys ``uniform(SAMPLE_SEED, i)``, so
    the sample depends on X alone, not on its chunking (:func:`sample_rows_chunk`).
    Rows holding NaN/inf may be drawn; the caller checks ``nonfinite`` first.

    ``missing`` (``missing="mask"``): NaN counted apart, ``stats["nan"]``, and each
    feature's observed count, ``stats["observed"]`` (:func:`missing_stats_chunk`).
    ``digest``: also the SHA-256 of every block, in row order, ``stats["sha256"]``
    (computed where the block is read; a checkpointed fit's fingerprint of X).
    """
    chunk, combine = ((missing_stats_chunk, missing_stats_combine) if missing
                      else (feature_stats_chunk, feature_stats_combine))
    size = int(min(sample_size, blocks.shape[0]))
    combine = functools.partial(combine, sample_size=size)
    if digest:
        chunk = functools.partial(_digested, chunk)
        combine = functools.partial(_digests_combined, combine)
    stats = blocks.map_reduce(chunk, combine,
                              args=(size, sample_threshold(size, blocks.shape[0])),
                              name="feature stats" + (" (missing='mask')" if missing else "")
                              + (" + row sample" if size else ""))
    if size and stats["sample"]["idx"].shape[0] < size:     # below the threshold: < 1e-15
        rows, idx = sample_rows(blocks, size, SAMPLE_SEED, SAMPLE_STREAM, threshold=1.0)
        stats["sample"] = {"rows": rows, "idx": idx}
    return _order_sample(stats)


def _digested(chunk, block, start, *args):
    out = chunk(block, start, *args)
    out["sha256"] = [sha256_of(np.asarray(block))]
    return out


def _digests_combined(combine, parts):
    out = combine(parts)
    out["sha256"] = [h for p in parts for h in p["sha256"]]     # consecutive blocks
    return out


def checked_blocks(X, where, sample_size=0, allow_nan=False, hint="", on_pass=None,
                   digest=False):
    """Row blocks of a validated X and its feature stats (with a row sample of
    ``sample_size`` rows, see :func:`feature_stats`); NaN/inf in X is a ValueError naming
    ``where`` (the first pass of every fit) — with ``allow_nan`` (``missing="mask"``) only
    inf is, and the stats count each feature's observed entries.  ``hint`` ends the NaN
    error's message; ``on_pass`` reports every pass over X, this first one included
    (:class:`~daskrnmf._blocks.RowBlocks`)."""
    blocks = RowBlocks(X, on_pass=on_pass)
    stats = feature_stats(blocks, sample_size, missing=allow_nan, digest=digest)
    n_nan = stats.get("nan", 0)
    check_missing_count(n_nan, stats["nonfinite"] - n_nan, where, allow_nan=allow_nan,
                        hint=hint)
    return blocks, stats


# ---------------------------------------------------------------- the fused pass
def random_labels(seed, n_restarts, start, n_rows, n_clusters, first_restart=0):
    """Random indicator G (the paper's init): label of row i in restart r from (seed, r, i)."""
    idx = np.arange(start, start + n_rows, dtype=np.uint64)
    out = np.empty((n_rows, n_restarts), dtype=np.int32)
    for r in range(n_restarts):
        out[:, r] = rng.integers(seed, rng.stream_id(1, first_restart + r), idx, n_clusters)
    return out


@dataclass(frozen=True)
class AssignSpec:
    """What every block of the fused assignment pass needs besides the centres.

    ``metric`` ("l1"/"l2"), ``n_clusters``, ``eps`` (residual floor of the L2,1 weights),
    ``n_worst`` (worst-fit rows kept to re-seed empty clusters), ``seed``/``restarts``
    (random labels), ``stats`` ("sums", "median" or "counts": labels and sizes only),
    ``weights`` ("l21" or "ones"),
    ``squared`` (k-means objective), ``median_plan`` (L1: the first median round),
    ``missing`` (``missing="mask"``: NaN entries are missing; the statistics then count
    each (cluster, feature)'s observed entries: ``wsum_f`` and ``observed``),
    ``worst_rows`` (False: the worst-fit indices without their rows, for X in memory),
    ``threads`` (the assignment's threads: X in memory, in-process).
    """

    metric: str
    n_clusters: int
    eps: float
    n_worst: int
    seed: int
    restarts: int
    stats: str
    weights: str
    squared: bool = False
    median_plan: dict = None
    missing: bool = False
    worst_rows: bool = True
    threads: int = 1


def assign_chunk(block, start, centers, spec):
    """One block of the fused pass.

    Parameters
    ----------
    block : ndarray (n_rows, n_features)
    start : int
        Global index of the block's first row.
    centers : ndarray (n_restarts, n_clusters, n_features) or None
        Current centres; None assigns random labels (``spec.seed``) instead.
    spec : AssignSpec

    Returns
    -------
    (partial, labels) : the partial summary and the block's labels (n_rows, n_restarts).
    """
    x = as_kernel_block(block)         # float32 stays: the kernels widen exactly
    k = spec.n_clusters
    if centers is None:
        labels = random_labels(spec.seed, spec.restarts, start, x.shape[0], k)
        residual = np.zeros(labels.shape)
    else:
        labels, residual = nearest(x, centers, spec.metric, spec.threads)
    part = {"objective": (residual ** 2 if spec.squared else residual).sum(axis=0),
            "worst": worst_fit(residual, start, x, spec.n_worst, spec.worst_rows)}
    nan = np.isnan(x) if spec.missing else None
    if nan is not None and not nan.any():
        nan = None                      # a complete block: the plain statistics
    if spec.stats == "sums":
        weights = (np.ones_like(residual) if spec.weights == "ones"
                   else 1.0 / np.maximum(residual, spec.eps))
        xs = x if nan is None else np.where(nan, 0.0, x)
        part["sums"], part["wsum"], part["counts"] = cluster_sums(xs, labels, weights, k)
        if spec.missing:                # the weights of each feature's observed entries
            part["wsum_f"] = (np.repeat(part["wsum"][:, :, None], x.shape[1], axis=2)
                              if nan is None else
                              cluster_sums((~nan).astype(np.float64), labels, weights, k)[0])
    else:
        part["counts"] = _label_counts(labels, k)
        if spec.stats == "median":
            part["median"] = median_round(x, labels, k, spec.median_plan)
        if spec.missing:                # observed values per (restart, cluster, feature)
            part["observed"] = (np.repeat(part["counts"][:, :, None], x.shape[1], axis=2)
                                if nan is None else
                                cluster_sums((~nan).astype(np.float64), labels,
                                             np.ones(labels.shape), k)[0].astype(np.int64))
    return part, labels


def _label_counts(labels, k):
    R = labels.shape[1]
    return np.stack([np.bincount(labels[:, r], minlength=k) for r in range(R)]).astype(np.int64)


def assign_combine(parts):
    out = {"objective": sum_arrays([p["objective"] for p in parts]),
           "worst": merge_worst_fit([p["worst"] for p in parts]),
           "counts": sum_arrays([p["counts"] for p in parts])}
    for key in ("wsum_f", "observed"):
        if key in parts[0]:
            out[key] = sum_arrays([p[key] for p in parts])
    if "sums" in parts[0]:
        out["sums"] = sum_arrays([p["sums"] for p in parts])
        out["wsum"] = sum_arrays([p["wsum"] for p in parts])
    elif "median" in parts[0]:
        out["median"] = merge_median_round([p["median"] for p in parts])
    return out


def median_refine_chunk(block, start, labels, n_clusters, plan, columns=None):
    """A later median round on one block, with the labels kept from the fused pass
    (``columns``: column groups for block medians, see :func:`median_round`)."""
    return median_round(as_kernel_block(block), labels, n_clusters, plan, columns)


# ---------------------------------------------------------------- medians
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
    m_all, d = S.shape
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


# ---------------------------------------------------------------- row sample
def sample_rows_chunk(block, start, seed, stream, size, threshold=1.0):
    """The block's candidates for a uniform sample of ``size`` rows: its rows with keys
    ``uniform(seed, stream, i)`` below ``threshold`` (:func:`sample_threshold`), at most
    the ``size`` smallest, as float64.

    Merged by :func:`sample_rows_combine`, the root holds the ``size`` rows with the
    smallest keys of all of X: a uniform sample without replacement that depends on the
    seed alone, not on the chunking.
    """
    x = np.asarray(block)
    idx = np.arange(start, start + x.shape[0], dtype=np.int64)
    keys = rng.uniform(seed, stream, idx.astype(np.uint64))
    cand = np.flatnonzero(keys < threshold) if threshold < 1.0 else idx - start
    take = cand[np.lexsort((idx[cand], keys[cand]))[:size]]
    return {"key": keys[take], "idx": idx[take],
            "rows": np.ascontiguousarray(x[take], dtype=np.float64)}


def sample_rows_combine(parts, size):
    key = np.concatenate([p["key"] for p in parts])
    idx = np.concatenate([p["idx"] for p in parts])
    rows = np.concatenate([p["rows"] for p in parts])
    take = np.lexsort((idx, key))[:size]
    return {"key": key[take], "idx": idx[take], "rows": rows[take]}


def sample_rows(blocks, size, seed, stream, threshold=None):
    """A uniform sample of ``size`` rows of X (1 pass), ordered by row index.

    Blocks send only their rows with keys below ``threshold`` (default
    :func:`sample_threshold`); in the rare case that too few keys fall below it, a second
    pass draws the sample with none.

    Returns
    -------
    rows : ndarray (size, n_features), idx : ndarray (size,) of global row indices
    """
    size = min(size, blocks.shape[0])
    if threshold is None:
        threshold = sample_threshold(size, blocks.shape[0])
    res = blocks.map_reduce(sample_rows_chunk, functools.partial(sample_rows_combine, size=size),
                            args=(seed, stream, size, threshold),
                            name="row sample")
    if res["idx"].shape[0] < size:      # fewer keys below the threshold (< 1e-15): again
        return sample_rows(blocks, size, seed, stream, threshold=1.0)
    order = np.argsort(res["idx"])
    return res["rows"][order], res["idx"][order]


# ---------------------------------------------------------------- label counts
def label_counts_chunk(y):
    """``{label: count}`` of one block of labels: NumPy's unique for numbers and strings,
    a Counter for an object block (labels of mixed types cannot be sorted)."""
    y = np.asarray(y).ravel()
    if y.dtype == object:
        return dict(Counter(y.tolist()))
    values, counts = np.unique(y, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def label_counts_combine(parts):
    out = {}
    for part in parts:
        for label, n in part.items():
            out[label] = out.get(label, 0) + n
    return out


def label_counts(y):
    """``{label: count}`` of a 1-D Dask array of labels of any dtype, tree-reduced over
    its blocks (one pass over y; nothing of its length gathered)."""
    parts = [dask.delayed(label_counts_chunk, pure=True)(b) for b in y.to_delayed().ravel()]
    return dask.compute(tree_reduce(parts, label_counts_combine, 8, wrap=dask.delayed))[0]
