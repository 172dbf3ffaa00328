"""One refinement round of the per-(restart, cluster, feature) median search.

An *entry* is one (restart r, cluster c, column group g) triple, flattened as
``e = (r * n_clusters + c) * n_groups + g``; it owns the values ``X[i, j]`` of the rows
whose label in restart ``r`` is ``c`` and of the features ``j`` in group ``g``
(``columns[r, j] == g``).  RFNMF's groups are the single features (``g = j``); RFNMTF's
are its column clusters, so an entry is a (row cluster, column cluster) block.  Per round each entry may ask for

* a histogram: the count of its values below ``hlo[e]``, the counts in ``n_bins``
  equal bins over ``[hlo[e], hhi[e]]`` and the min / max of the values inside, and/or
* a collection: the count of its values below ``clo[e]`` and the values themselves
  inside ``[clo[e], chi[e]]`` (used when few values remain, giving the exact median).

All outputs are sums, minima, maxima or concatenations, so they merge in any order.
"""

import numpy as np
from numba import njit

from .assign import _l1
from .blocks import sum_arrays
from .median_select import SORT_MAX_VALUES, _select, collected_ranks_sorted


@njit(cache=True, nogil=True, fastmath=False)
def _median_round_features(X, labels, n_clusters, hist_slot, hlo, hhi, hw, n_bins, clo, chi,
                           hbelow, hist, hmin, hmax, cbelow, cin):
    """Counts, histograms and extremes of one round for per-feature entries ``e = (r *
    n_clusters + c) * d + j`` (RFNMF's; RFNMTF's column groups are mapped onto them by
    :func:`median_round`): a row's entries are a contiguous run and the counts are taken
    without branches (a per-value branch mispredicts on most values); only a value
    inside a histogram window branches, to its bin.  Where an entry asks for no
    histogram / collection its window is (-inf, -inf], so nothing counts there; NaN
    compares false.  ``hw``: each entry's bin width ``(hhi - hlo) / n_bins``, computed
    once.  Tested against a plain loop over (row, restart, feature)."""
    n, d = X.shape
    R = labels.shape[1]
    idx = np.empty(d, dtype=np.int64)      # the features inside their windows, per row
    for i in range(n):
        x = X[i]
        for r in range(R):
            base = (r * n_clusters + labels[i, r]) * d
            # slices of the row's entries: the counting loop vectorises
            hb = hbelow[base:base + d]
            cb = cbelow[base:base + d]
            ci = cin[base:base + d]
            hl = hlo[base:base + d]
            hh = hhi[base:base + d]
            hwd = hw[base:base + d]
            cl = clo[base:base + d]
            ch = chi[base:base + d]
            inside_any = False
            for j in range(d):
                v = x[j]
                hb[j] += v < hl[j]
                cb[j] += v < cl[j]
                ci[j] += (v >= cl[j]) & (v <= ch[j])
                inside_any |= (v >= hl[j]) & (v <= hh[j])
            if not inside_any:
                continue
            # the bin update is written out, not shared through a helper: any call in
            # this kernel (inlined or not) measured 3.4x slower.  No branch per value
            # either (a value inside its window is a coin flip for the predictor): the
            # features of the values inside are compacted first, branch-free, and only
            # they update their bins (clamped; a one-point window, w = 0, puts its
            # values in bin 0) and extremes.  On the first-step bracket histograms of
            # 100 000 x 64 float32 blocks (an eighth of the values inside) 2.4x faster
            # than a branch per value.
            q = 0
            for j in range(d):
                v = x[j]
                idx[q] = j
                q += (v >= hl[j]) & (v <= hh[j])
            for t in range(q):
                j = idx[t]
                v = x[j]
                e = base + j
                w = hwd[j]
                b = int((v - hl[j]) / w) if w > 0 else 0
                if b >= n_bins:
                    b = n_bins - 1
                elif b < 0:
                    b = 0
                hist[hist_slot[e], b] += 1
                if v < hmin[e]:
                    hmin[e] = v
                if v > hmax[e]:
                    hmax[e] = v


@njit(cache=True, nogil=True, fastmath=False)
def _median_hist_features(X, labels, n_clusters, hist_slot, hlo, hhi, hw, n_bins, hbelow, hist,
                          hmin, hmax):
    """:func:`_median_round_features` for a round in which no entry collects (the first
    step's bracket histograms of RFNMF L1 and RFNMTF): one loop per row counts the
    values below their histogram windows and lists, branch-free, the features of those
    inside; only they update their bins and extremes (as there).  1.4-1.6x faster on a
    100 000 x 64 float32 block's bracket round (18 -> 11-13 ms).  Tested equal to the
    general kernel."""
    n, d = X.shape
    R = labels.shape[1]
    idx = np.empty(d, dtype=np.int64)
    for i in range(n):
        x = X[i]
        for r in range(R):
            base = (r * n_clusters + labels[i, r]) * d
            hb = hbelow[base:base + d]
            hl = hlo[base:base + d]
            hh = hhi[base:base + d]
            hwd = hw[base:base + d]
            q = 0
            for j in range(d):
                v = x[j]
                hb[j] += v < hl[j]
                idx[q] = j
                q += (v >= hl[j]) & (v <= hh[j])
            for t in range(q):
                j = idx[t]
                v = x[j]
                e = base + j
                w = hwd[j]
                b = int((v - hl[j]) / w) if w > 0 else 0
                if b >= n_bins:
                    b = n_bins - 1
                elif b < 0:
                    b = 0
                hist[hist_slot[e], b] += 1
                if v < hmin[e]:
                    hmin[e] = v
                if v > hmax[e]:
                    hmax[e] = v


@njit(cache=True, nogil=True, fastmath=False)
def _median_count_features(X, labels, n_clusters, clo, chi, cbelow, cin):
    """:func:`_median_round_features` for a round that asks for no histogram (warm
    collections, the steady state of RFNMF L1): only the counts below and inside each
    entry's collection window, two compares per value instead of four and no extremes
    (3.6x faster on 50 000 x 64).  Tested equal to the general kernel."""
    n, d = X.shape
    R = labels.shape[1]
    for i in range(n):
        x = X[i]
        for r in range(R):
            base = (r * n_clusters + labels[i, r]) * d
            cb = cbelow[base:base + d]
            ci = cin[base:base + d]
            cl = clo[base:base + d]
            ch = chi[base:base + d]
            for j in range(d):
                v = x[j]
                cb[j] += v < cl[j]
                ci[j] += (v >= cl[j]) & (v <= ch[j])


@njit(cache=True, nogil=True, fastmath=False)
def _median_collect_features(X, labels, n_clusters, clo, chi, keys, vals):
    """The values inside their entries' collection windows (per-feature entries as in
    :func:`_median_round_features`; windows (-inf, -inf] where an entry collects
    nothing), in row order: one predictable branch per row, none per value
    (``keys``/``vals`` need ``d`` slots past the values collected)."""
    n, d = X.shape
    R = labels.shape[1]
    p = 0
    for i in range(n):
        x = X[i]
        for r in range(R):
            base = (r * n_clusters + labels[i, r]) * d
            cl = clo[base:base + d]
            ch = chi[base:base + d]
            hit = False
            for j in range(d):
                hit |= (x[j] >= cl[j]) & (x[j] <= ch[j])
            if not hit:
                continue
            # branch-free compaction: every value is written at p, which moves on only
            # past a value inside its window (the arrays have d slots of slack)
            for j in range(d):
                v = x[j]
                keys[p] = base + j
                vals[p] = v
                p += (v >= cl[j]) & (v <= ch[j])


@njit(cache=True, nogil=True, fastmath=True)
def _certify_features(X, labels, n_clusters, lo, hi, mid, H, rho, x, nb, na, p):
    """The certificate of a median round (RFNMF L1, per-feature entries): whether every
    row keeps its label for *any* centres inside the windows ``[lo, hi]`` (E,; their
    midpoints ``mid`` (n_restarts * n_clusters, n_features)), with
    each entry's count of values below / above its window and each row's L1 distance to
    its cluster's windows.

    A row labelled ``a`` (restart r) keeps its label for every centres ``c_b`` in the
    windows when, with ``D_b`` its L1 distance to the windows' midpoints and
    ``H_b`` the L1 radius of cluster b's windows around them (``sum_j max(hi - mid,
    mid - lo)``, rounded up by the caller), ``D_b - H_b > D_a + H_a`` for every ``b !=
    a`` (triangle inequality) by a margin ``rho (D_a + D_b + H_a + H_b)`` that covers
    the rounding of these sums and of the assignment's own (:func:`~daskrnmf.kernels.
    assign.nearest`, float64 sums in any order).  Returns the number of rows found
    uncertain: 0, or 1 at the first such row (the block stops there; the outputs are
    then incomplete, and unused).  ``nb``/``na`` count each entry's values below ``lo``
    / above ``hi``, and ``p[i, r]`` is ``sum_j (lo - x_ij)^+ + (x_ij - hi)^+`` over row
    i's entries: the L1 objective at any medians inside the windows follows from them
    and the values inside (collected).  ``x``: a float64 row of scratch (n_features,)."""
    n, d = X.shape
    R = labels.shape[1]
    k = n_clusters
    for i in range(n):
        for j in range(d):
            x[j] = X[i, j]
        for r in range(R):
            a = labels[i, r]
            base = (r * k + a) * d
            # slices of the row's entries (an index base + j is checked for wraparound
            # value by value, which kept these loops from vectorising: 39 -> 12 ms on a
            # 100 000 x 64 block, 10 clusters)
            lo_a = lo[base:base + d]
            hi_a = hi[base:base + d]
            nb_a = nb[base:base + d]
            na_a = na[base:base + d]
            s = 0.0
            for j in range(d):
                v = x[j]
                t = lo_a[j] - v
                u = v - hi_a[j]
                nb_a[j] += t > 0.0
                na_a[j] += u > 0.0
                s += (t if t > 0.0 else 0.0) + (u if u > 0.0 else 0.0)
            p[i, r] = s
            Da = _l1(x, mid[r * k + a])
            ha = H[r * k + a]
            for b in range(k):
                if b == a:
                    continue
                Db = _l1(x, mid[r * k + b])
                hb = H[r * k + b]
                if (Db - hb) - (Da + ha) <= rho * (Da + Db + ha + hb):
                    return 1
    return 0


def median_round(X, labels, n_clusters, plan, columns=None):
    """Run one refinement round on a row block.

    Parameters
    ----------
    X : ndarray (n_rows, n_features) float64 or float32 (its values are compared and
        collected as float64, exactly)
    labels : ndarray (n_rows, n_restarts) int
    n_clusters : int
    plan : dict
        ``hist_slot`` (E,) int64 (-1: no histogram), ``hlo``, ``hhi`` (E,) float64,
        ``n_bins`` int, ``n_hist`` int (number of slots), ``coll`` (E,) bool,
        ``clo``, ``chi`` (E,) float64, ``max_collect`` int (optional): at most this many
        values are collected; past it, the entries with the most values inside their
        windows are dropped (``dropped``) and only counted.  ``certify`` (optional, per-
        feature entries): the certificate of :func:`certify_round`, returned as
        ``certify``.
    columns : ndarray (n_restarts, n_features) int, optional
        Column group of every feature per restart (``E = n_restarts * n_clusters *
        n_groups``); None makes every feature its own group.

    Returns
    -------
    dict of ``hbelow`` (E,), ``hist`` (n_hist, n_bins) int32, ``hmin``, ``hmax`` (E,),
    ``cbelow``, ``cin`` (E,) (values below / inside each collection window), ``dropped``
    (E,) bool, ``keys`` (m,) int32 (int64 past 2**31 entries) and ``vals`` (m,).
    """
    E = plan["hist_slot"].shape[0]
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    R, d = labels.shape[1], X.shape[1]
    if columns is None:
        emap = None
        hist_slot, hlo, hhi = plan["hist_slot"], plan["hlo"], plan["hhi"]
        coll_e, clo, chi = plan["coll"], plan["clo"], plan["chi"]
    else:
        # column groups (RFNMTF): every (restart, cluster, feature) gets the window of its
        # group, so the per-feature kernels (branch-free counts) run; the counts are then
        # summed, the extremes and collected keys mapped, per group
        columns = np.ascontiguousarray(columns, dtype=np.int64)
        n_groups = E // max(1, R * n_clusters)
        emap = ((np.arange(R)[:, None, None] * n_clusters
                 + np.arange(n_clusters)[None, :, None]) * n_groups
                + columns[:, None, :]).ravel()
        hist_slot, hlo, hhi = (plan["hist_slot"][emap], plan["hlo"][emap],
                               plan["hhi"][emap])
        coll_e, clo, chi = plan["coll"][emap], plan["clo"][emap], plan["chi"][emap]
    Ef = hist_slot.shape[0]
    hbelow = np.zeros(Ef, dtype=np.int64)
    # int32 per block (a block has < 2**31 rows); merged counts are int64
    hist = np.zeros((plan["n_hist"], plan["n_bins"]), dtype=np.int32)
    hmin = np.full(Ef, np.inf)
    hmax = np.full(Ef, -np.inf)
    cbelow = np.zeros(Ef, dtype=np.int64)
    cin = np.zeros(Ef, dtype=np.int64)
    never = np.full(Ef, -np.inf)
    if X.shape[0]:
        off = hist_slot < 0
        hlo, hhi = np.where(off, never, hlo), np.where(off, never, hhi)
        if off.all():       # collections only
            _median_count_features(X, labels, n_clusters, np.where(coll_e, clo, never),
                                   np.where(coll_e, chi, never), cbelow, cin)
        else:
            with np.errstate(invalid="ignore"):
                hw = np.where(off, 0.0, (hhi - hlo) / plan["n_bins"])
            if not coll_e.any():    # histograms only: nothing below / inside to count
                _median_hist_features(X, labels, n_clusters, hist_slot, hlo, hhi, hw,
                                      plan["n_bins"], hbelow, hist, hmin, hmax)
            else:
                _median_round_features(
                    X, labels, n_clusters, hist_slot, hlo, hhi, hw, plan["n_bins"],
                    np.where(coll_e, clo, never), np.where(coll_e, chi, never), hbelow,
                    hist, hmin, hmax, cbelow, cin)
    if emap is not None:
        hbelow, cbelow, cin = (np.bincount(emap, weights=c, minlength=E).astype(np.int64)
                               for c in (hbelow, cbelow, cin))
        gmin, gmax = np.full(E, np.inf), np.full(E, -np.inf)
        np.minimum.at(gmin, emap, hmin)
        np.maximum.at(gmax, emap, hmax)
        hmin, hmax = gmin, gmax
    dropped = _over_budget(cin, plan.get("max_collect"))
    coll = plan["coll"] & ~dropped
    m = int(cin[coll].sum())
    keys = np.empty(m + d, dtype=np.int32 if max(E, Ef) < 2**31 else np.int64)
    vals = np.empty(m + d, dtype=np.float64)
    if m:
        cf = coll if emap is None else coll[emap]
        _median_collect_features(X, labels, n_clusters, np.where(cf, clo, never),
                                 np.where(cf, chi, never), keys, vals)
    keys, vals = keys[:m], vals[:m]
    if emap is not None:
        keys = emap[keys].astype(keys.dtype)
    out = {"hbelow": hbelow, "hist": hist, "hmin": hmin, "hmax": hmax,
           "cbelow": cbelow, "cin": cin, "dropped": dropped, "keys": keys, "vals": vals,
           "max_collect": plan.get("max_collect")}
    if plan.get("certify") is not None:
        if emap is not None:
            raise ValueError("A median round's certificate is for per-feature entries "
                             "(RFNMF's), not column groups.")
        out["certify"] = certify_round(X, labels, n_clusters, plan["certify"])
    return out


def certify_round(X, labels, n_clusters, cert):
    """:func:`_certify_features` on a block (per-feature entries): ``cert`` holds the
    windows ``lo``, ``hi`` (E,), their midpoints ``mid`` (E,), the radii ``H``
    (n_restarts * n_clusters,) and the margin ``rho``.  Returns ``uncertain`` (the
    block's rows that might change cluster: 0, or 1 at the first), the counts of each
    entry's values below / above its window (``nb``, ``na``) and, per restart, the sum
    over the rows of their L1 distances to their clusters' windows (``outside``: summed
    as NumPy sums, pairwise, like the assignment's objective)."""
    E = cert["lo"].shape[0]
    nb, na = np.zeros(E, dtype=np.int64), np.zeros(E, dtype=np.int64)
    p = np.zeros(labels.shape, dtype=np.float64)
    uncertain = 0
    if X.shape[0]:
        uncertain = int(_certify_features(X, np.ascontiguousarray(labels, dtype=np.int64),
                                          n_clusters, cert["lo"], cert["hi"],
                                          cert["mid"].reshape(-1, X.shape[1]),
                                          cert["H"], float(cert["rho"]),
                                          np.empty(X.shape[1]), nb, na, p))
    return {"uncertain": uncertain, "nb": nb, "na": na, "outside": p.sum(axis=0)}


def _merge_certify(parts):
    return {"uncertain": sum(p["uncertain"] for p in parts),
            **{key: sum_arrays([p[key] for p in parts]) for key in ("nb", "na", "outside")}}


def _over_budget(cin, max_collect, dropped=None):
    """Entries whose collections do not fit in ``max_collect`` values (the largest are
    dropped first); ``dropped`` entries are already out."""
    out = np.zeros(cin.shape[0], dtype=bool) if dropped is None else dropped.copy()
    if max_collect is None:
        return out
    total = int(cin[~out].sum())
    if total <= max_collect:
        return out
    order = np.argsort(np.where(out, -1, cin), kind="stable")[::-1]
    excess = total - max_collect
    sizes = cin[order]
    n_drop = int(np.searchsorted(np.cumsum(sizes), excess, side="left")) + 1
    out[order[:n_drop]] = True
    return out


def merge_median_round(parts):
    """Combine several :func:`median_round` outputs (sum, min, max, concatenation).

    An entry dropped in any part is dropped in the merge (its collected values go); when
    the merged values exceed the plan's ``max_collect`` the entries with the most values
    inside their windows are dropped too, so a tree node never holds more than that.
    """
    max_collect = parts[0].get("max_collect")
    cin = sum_arrays([p["cin"] for p in parts])
    dropped = _over_budget(cin, max_collect, np.logical_or.reduce([p["dropped"] for p in parts]))
    keys = np.concatenate([p["keys"] for p in parts])
    vals = np.concatenate([p["vals"] for p in parts])
    if dropped.any() and keys.size:
        keep = ~dropped[keys]
        keys, vals = keys[keep], vals[keep]
    out = {"hbelow": sum_arrays([p["hbelow"] for p in parts]),
           "hist": sum_arrays([p["hist"] for p in parts], dtype=np.int64),
           "hmin": np.minimum.reduce([p["hmin"] for p in parts]),
           "hmax": np.maximum.reduce([p["hmax"] for p in parts]),
           "cbelow": sum_arrays([p["cbelow"] for p in parts]),
           "cin": cin, "dropped": dropped, "keys": keys, "vals": vals,
           "max_collect": max_collect}
    if "certify" in parts[0]:
        out["certify"] = _merge_certify([p["certify"] for p in parts])
    return out


@njit(cache=True, nogil=True, fastmath=False)
def _select_collected(keys, vals, n_entries, entries, r_lo, r_hi, out, start, fill, grouped):
    # counting sort of the values by entry, then one sort per requested entry.  Scratch
    # from the caller: start (n_entries + 1,) int64 zeros, fill (n_entries,) int64,
    # grouped like vals (np.zeros', np.empty_like's and copy's overloads were compiled
    # for this kernel alone in RFNMTF's first fit out of core)
    for p in range(keys.shape[0]):
        start[keys[p] + 1] += 1
    for e in range(n_entries):
        start[e + 1] += start[e]
        fill[e] = start[e]
    for p in range(keys.shape[0]):
        grouped[fill[keys[p]]] = vals[p]
        fill[keys[p]] += 1
    for t in range(entries.shape[0]):
        e = entries[t]
        seg = grouped[start[e]:start[e + 1]]       # selection, not a sort (in place: the
        m = seg.shape[0]                           # values stay the same multiset)
        lo = _select(seg, m, r_lo[t])
        hi = lo
        if r_hi[t] > r_lo[t]:                      # the next ranks sit above r_lo now
            hi = _select(seg[r_lo[t] + 1:], m - r_lo[t] - 1, r_hi[t] - r_lo[t] - 1)
        out[t] = 0.5 * (lo + hi)


def select_collected(keys, vals, n_entries, entries, rank_lo, rank_hi):
    """Median of ranks ``rank_lo[t]`` and ``rank_hi[t]`` (0-based) among the values
    collected for ``entries[t]``: ``(v[lo] + v[hi]) / 2``, as :func:`numpy.median` has it.

    Every requested rank must exist among that entry's collected values.  A zero median
    is +0.0, whichever of -0.0 and 0.0 its ranks met (NumPy's stable sort, used for a few
    values, keeps tied zeros in their order, the selection of many does not).
    """
    if len(keys) <= SORT_MAX_VALUES:    # few values: NumPy's sort, no kernel compiled
        out = collected_ranks_sorted(keys, vals, n_entries, entries, rank_lo, rank_hi)
    else:
        out = np.empty(len(entries))
        if len(entries):
            _select_collected(keys, vals, n_entries, np.asarray(entries, np.int64),
                              np.asarray(rank_lo, np.int64), np.asarray(rank_hi, np.int64),
                              out, np.zeros(n_entries + 1, dtype=np.int64),
                              np.empty(n_entries, dtype=np.int64), np.empty_like(vals))
    out += 0.0          # -0.0 + 0.0 is +0.0
    return out

