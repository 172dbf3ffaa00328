"""Choosing the number of clusters: :func:`choose_k`.

A model is fitted for every k of a range with several seeds; per k are reported the
objective, the stability of the solutions across seeds and a simplified silhouette, and a
k is recommended.  Everything of size n_samples stays on the workers: the stability and
the silhouette are computed in a pass over X whose per-block summaries (k x k contingency
tables, a histogram of the per-sample silhouettes) are summed up a tree.  Data larger
than ``max_samples`` rows is fitted on a uniform sample drawn in the first pass and
scored, every k at once, in a second: two passes over X in all.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _validation as v
from ._typing import Data

#: models :func:`choose_k` supports, and the parameter that is their k
K_PARAMETER = {"RFNMF": "n_clusters", "RFNMTF": "n_row_clusters"}
#: bins of the per-cluster histograms of the per-sample silhouettes in [0, 1] (the
#: resolution of the medians)
N_BINS = 512

SCORES = ("objective", "stability", "stability_min", "silhouette", "silhouette_mean",
          "n_passes", "seconds")


# ---------------------------------------------------------------- the result
@dataclass
class ChooseKResult:
    """What :func:`choose_k` found.

    Attributes
    ----------
    k : int
        The recommended k.
    ks : ndarray of int
        The k tried, increasing.
    scores : dict of str -> ndarray (len(ks),)
        Per k: ``objective`` (the lowest over the seeds), ``stability`` (mean adjusted
        Rand index over the pairs of seeds; NaN with one seed), ``stability_min`` (the
        lowest pair), ``silhouette`` (the simplified silhouette: mean over the
        clusters of their median, averaged over the seeds), ``silhouette_mean`` (its
        mean over the samples, idem), ``n_passes`` (passes over the data fitted, X or the
        sample, fits and scoring), ``seconds``.
    model : str
        The estimator's class name.
    k_parameter : str
        The estimator's parameter set to k.
    n_seeds : int
    stability_threshold, tolerance : float
        The rule's parameters (see :func:`choose_k`).
    stable : ndarray of bool (len(ks),)
        The k that passed the rule's stability test.
    n_passes : int
        Passes over X in all: the fits' and the scoring's when X was fitted itself; 2 when
        a sample was (the pass that draws it, the pass that scores every k on X).
    n_fitted : int
        Rows the fits used: n_samples, or the sample's size (``max_samples``).
    """

    k: int
    ks: np.ndarray
    scores: dict
    model: str
    k_parameter: str
    n_seeds: int
    stability_threshold: float
    tolerance: float = 0.05
    stable: np.ndarray = field(default=None)
    n_passes: int = 0
    n_fitted: int = 0

    def to_markdown(self) -> str:
        """The scores as a Markdown table, the recommended k marked."""
        lines = ["| k | objective | stability (mean ARI) | min ARI | silhouette (cluster medians) "
                 "| silhouette (mean) | passes | seconds | |",
                 "|---:|---:|---:|---:|---:|---:|---:|---:|:---|"]
        s = self.scores
        for i, k in enumerate(self.ks):
            mark = "**recommended**" if k == self.k else ("" if self.stable[i] else "unstable")
            lines.append(f"| {k} | {s['objective'][i]:.6g} | {s['stability'][i]:.3f} | "
                         f"{s['stability_min'][i]:.3f} | {s['silhouette'][i]:.3f} | "
                         f"{s['silhouette_mean'][i]:.3f} | {int(s['n_passes'][i])} | "
                         f"{s['seconds'][i]:.1f} | {mark} |")
        return "\n".join(lines)

    def __repr__(self) -> str:
        head = (f"ChooseKResult(k={self.k}, model={self.model}, n_seeds={self.n_seeds}, "
                f"stability_threshold={self.stability_threshold}, tolerance={self.tolerance})")
        rows = ["    k  objective    stability  silhouette"]
        for i, k in enumerate(self.ks):
            rows.append(f"  {'*' if k == self.k else ' '}{k:3d}  {self.scores['objective'][i]:<11.5g}"
                        f"  {self.scores['stability'][i]:9.3f}  {self.scores['silhouette'][i]:10.3f}")
        return "\n".join([head] + rows)

    def plot(self, *, fig: Any = None):
        """One panel per score against k (objective, stability, silhouette), integer k
        ticks, the recommended k marked by a vertical line.

        Returns
        -------
        fig : matplotlib.figure.Figure
        """
        from .plotting import _integer_ticks, _pyplot

        plt = _pyplot()
        if fig is None:
            fig = plt.figure(figsize=(5.5, 6.5))
        axes = fig.subplots(3, 1, sharex=True)
        panels = (("objective", f"objective\n(lowest of {self.n_seeds} seeds)"),
                  ("stability", "stability\n(mean ARI of seeds)"),
                  ("silhouette", "silhouette\n(cluster medians)"))
        for ax, (key, label) in zip(axes, panels):
            ax.plot(self.ks, self.scores[key], "o-", lw=1, ms=4, label=key)
            ax.axvline(self.k, color="red", lw=0.8, ls="--", label=f"recommended k = {self.k}")
            ax.set_ylabel(label)
        axes[1].axhline(self.stability_threshold, color="grey", lw=0.6, ls=":",
                        label="stability threshold")
        axes[0].set_title(f"{self.model}: choosing k (recommended k = {self.k})")
        axes[-1].set_xlabel("k (" + self.k_parameter + ")")
        _integer_ticks(axes[-1].xaxis)
        fig.tight_layout()
        return fig


# ---------------------------------------------------------------- per-block scoring
def scoring_chunk(block, start, F, metric, n_bins, squared=False):
    """Per block, for the seeds' centres ``F`` (n_seeds, k, d): the contingency table of
    every pair of seeds' labels, the sum of the per-sample simplified silhouettes
    ``1 - a / b`` (a: distance to the nearest centre, b: to the second), their
    histogram per cluster (n_seeds, k, n_bins) and each seed's objective (the sum of
    ``a``, squared for the k-means loss)."""
    from .kernels.assign import distances

    S, k = F.shape[0], F.shape[1]
    n = block.shape[0]
    labels = np.empty((S, n), dtype=np.int64)
    sums = np.zeros(S)
    objective = np.zeros(S)
    hist = np.zeros((S, k, n_bins), dtype=np.int64)
    for s in range(S):
        D = distances(block, F[s], metric)
        labels[s] = np.argmin(D, axis=1)          # ties: the lowest index, as nearest()
        a = D[np.arange(n), labels[s]]
        objective[s] = (a * a).sum() if squared else a.sum()
        sil = silhouette_values(D)
        sums[s] = sil.sum()
        bins = np.minimum((sil * n_bins).astype(np.int64), n_bins - 1)
        hist[s] = np.bincount(labels[s] * n_bins + bins,
                              minlength=k * n_bins).reshape(k, n_bins)
    pairs = [(s, t) for s in range(S) for t in range(s + 1, S)]
    tables = np.zeros((len(pairs), k, k), dtype=np.int64)
    for p, (s, t) in enumerate(pairs):
        tables[p] = np.bincount(labels[s] * k + labels[t], minlength=k * k).reshape(k, k)
    return {"tables": tables, "sums": sums, "hist": hist, "n": np.int64(n),
            "objective": objective}


def scoring_combine(parts):
    return {key: sum(p[key] for p in parts) for key in parts[0]}


def silhouette_values(D):
    """Simplified silhouette of every row of the distances ``D`` (n, k) to the centres:
    ``(b - a) / max(a, b) = 1 - a / b`` with ``a`` the smallest and ``b`` the second
    smallest distance (0 when ``b = 0``; in [0, 1])."""
    if D.shape[1] < 2:
        return np.zeros(D.shape[0])
    two = np.partition(D, 1, axis=1)
    a, b = two[:, 0], two[:, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, (b - a) / np.where(b > 0, b, 1.0), 0.0)


def histogram_median(hist):
    """Median of values in [0, 1] from their histogram (``len(hist)`` equal bins), by
    linear interpolation inside the bin that holds it: within one bin width of the
    interval between the lower and upper middle values (:func:`numpy.median` is their
    mean)."""
    hist = np.asarray(hist, dtype=np.float64)
    n = hist.sum()
    if n == 0:
        return np.nan
    cum = np.cumsum(hist)
    half = n / 2.0
    b = int(np.searchsorted(cum, half))
    below = cum[b] - hist[b]
    width = 1.0 / hist.size
    return (b + (half - below) / hist[b]) * width if hist[b] else b * width


def cluster_median_silhouette(hist):
    """Mean over the non-empty clusters of the median silhouette of each, from the
    per-cluster histograms (k, n_bins)."""
    medians = [histogram_median(h) for h in hist if h.sum() > 0]
    return float(np.mean(medians)) if medians else np.nan


def adjusted_rand_from_table(table):
    """Adjusted Rand index (Hubert & Arabie, 1985) from a contingency table; equal to
    :func:`sklearn.metrics.adjusted_rand_score` of the labels it counts."""
    t = np.asarray(table, dtype=np.int64)
    n = int(t.sum())
    sum_sq = int((t.astype(object) ** 2).sum())
    rows = t.sum(axis=1).astype(object)
    cols = t.sum(axis=0).astype(object)
    # the pair confusion matrix, as scikit-learn computes it (Python ints: no overflow)
    tp = sum_sq - n
    fp = int((cols ** 2).sum()) - sum_sq
    fn = int((rows ** 2).sum()) - sum_sq
    tn = n * n - fp - fn - sum_sq
    if fn == 0 and fp == 0:
        return 1.0
    return float(2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn)))


def score_centers(blocks, F, metric, n_bins=N_BINS, squared=False):
    """One pass over X: stability and silhouettes of the seeds' centres ``F`` (S, k, d).

    Returns
    -------
    dict with ``ari`` (one per pair of seeds), ``silhouette`` (per seed: the mean over
    its non-empty clusters of the cluster's median) and ``silhouette_mean`` (per seed:
    the mean over the samples) and ``objective`` (per seed).
    """
    F = np.ascontiguousarray(F, dtype=np.float64)
    res = blocks.map_reduce(scoring_chunk, scoring_combine, args=(F, metric, n_bins, squared),
                            name="choose_k scores")
    return _summary(res)


def _summary(res):
    n = int(res["n"])
    return {"ari": np.array([adjusted_rand_from_table(t) for t in res["tables"]]),
            "silhouette": np.array([cluster_median_silhouette(h) for h in res["hist"]]),
            "silhouette_mean": res["sums"] / max(n, 1), "objective": res["objective"]}


def scoring_many_chunk(block, start, Fs, metric, n_bins, squared=False):
    """:func:`scoring_chunk` for the centres of every k (a list of (S, k, d) arrays)."""
    return [scoring_chunk(block, start, F, metric, n_bins, squared) for F in Fs]


def scoring_many_combine(parts):
    return [scoring_combine([p[i] for p in parts]) for i in range(len(parts[0]))]


def score_all_centers(blocks, Fs, metric, n_bins=N_BINS, squared=False):
    """One pass over X for every k at once: :func:`score_centers` of each ``Fs[i]``."""
    Fs = [np.ascontiguousarray(F, dtype=np.float64) for F in Fs]
    res = blocks.map_reduce(scoring_many_chunk, scoring_many_combine,
                            args=(Fs, metric, n_bins, squared), name="choose_k scores, every k")
    return [_summary(r) for r in res]


# ---------------------------------------------------------------- the fits
def _fit_stacked(estimator, X, k, n_seeds, seed, score=True):
    """RFNMF: the seeds' restarts stacked in one fit (one pass serves all of them); the
    best restart of every group of ``n_init`` is a seed's solution.  Returns the seeds'
    objectives (S,), their scores on X (None without ``score``: the caller scores them
    elsewhere), the passes over X, their centres (S, k, d), the metric and whether the
    loss squares distances."""
    from .models.rfnmf import RFNMF

    out = {}

    class _Stacked(RFNMF):
        @property
        def _name(self):
            return "RFNMF"

        def _fit_blocks(self, X, blocks, stats, seed, y):
            from .models._clustering import objective_chunk, objective_combine

            squared = self.loss == "l2"
            fit, F, _, per = self._fit_groups(blocks, stats, seed, n_groups=n_seeds)
            if per > 1:         # every group's restarts ran on X: its best is the seed's
                objective = blocks.map_reduce(objective_chunk, objective_combine,
                                              args=(F, self._metric, False, squared),
                                              name="final objectives")
                F = F[[g * per + int(np.argmin(objective[g * per:(g + 1) * per]))
                       for g in range(n_seeds)]]
            out["scores"] = (score_centers(blocks, F, self._metric, squared=squared)
                             if score else None)
            out["centres"], out["metric"], out["squared"] = F, self._metric, squared

    params = estimator.get_params(deep=False)
    # every k is a fit of its own: no checkpoint (one directory would hold them all)
    params.update(n_clusters=k, random_state=seed, checkpoint=None)
    model = _Stacked(**params)
    model.fit(X)
    objective = None if out["scores"] is None else out["scores"]["objective"]
    return (objective, out["scores"], model.n_passes_, out["centres"], out["metric"],
            out["squared"])


def _fit_separately(estimator, X, k, n_seeds, seed, score=True):
    """Any supported model: one fit per seed, then one scoring pass over X.  Returns as
    :func:`_fit_stacked`."""
    from sklearn.base import clone

    from ._blocks import RowBlocks

    name = type(estimator).__name__
    F, objective, passes, metric, Xv = [], [], 0, None, None
    for s in range(n_seeds):
        model = clone(estimator).set_params(**{K_PARAMETER[name]: k},
                                            random_state=(seed + s) % 2**32)
        model.fit(X)
        centres, metric = model._prototypes()
        F.append(np.asarray(centres, dtype=np.float64))
        objective.append(model.objective_)
        passes += getattr(model, "n_passes_", 0)
        if Xv is None:
            Xv = model._validate_data(X, reset=False, method="predict")
    F = np.stack(F)
    if not score:
        return np.array(objective), None, passes, F, metric, False
    blocks = RowBlocks(Xv)
    scores = score_centers(blocks, F, metric)
    return np.array(objective), scores, passes + blocks.n_passes, F, metric, False


# ---------------------------------------------------------------- the rule
def recommend(ks, stability, silhouette, threshold, tolerance):
    """The rule of :func:`choose_k`: ``(k, stable)``."""
    ks = np.asarray(ks)
    stab = np.asarray(stability, dtype=float)
    sil = np.asarray(silhouette, dtype=float)
    if np.all(np.isnan(stab)):                   # one seed: no stability to test
        stable = np.ones(ks.size, dtype=bool)
    else:
        stable = stab >= threshold
    if not stable.any():
        return int(ks[int(np.nanargmax(stab))]), stable
    cand = np.flatnonzero(stable & np.isfinite(sil))
    if not cand.size:
        return int(ks[np.flatnonzero(stable)[0]]), stable
    top = np.max(sil[cand])
    near = cand[sil[cand] >= (1.0 - tolerance) * top]
    return int(ks[near[-1]]), stable


# ---------------------------------------------------------------- validation
def _check_param(name, value, constraints):
    if not any(c.accepts(value) for c in constraints):
        described = [c.describe() for c in constraints]
        what = described[0] if len(described) == 1 else (", ".join(described[:-1]) + " or "
                                                          + described[-1])
        raise ValueError(f"The {name!r} parameter of choose_k must be {what}. Got {value!r} "
                         "instead.")


def _check_arguments(estimator, X, ks, *, n_seeds=5, random_state=None,
                     stability_threshold=0.9, tolerance=0.05, verbose=0, max_samples=20_000):
    """:func:`choose_k`'s checks, on their own (the command makes them before it starts
    a cluster); returns the checked estimator and ks."""
    estimator = _check_estimator(estimator)
    ks = _check_ks(ks)
    _check_param("n_seeds", n_seeds, [v.Interval(int, 1, None)])
    _check_param("random_state", random_state, [v.RANDOM_STATE])
    _check_param("stability_threshold", stability_threshold, [v.Interval(float, 0, 1)])
    _check_param("tolerance", tolerance, [v.Interval(float, 0, 1, closed="left")])
    _check_param("verbose", verbose, [v.Interval(int, 0, None)])
    _check_param("max_samples", max_samples, [v.Interval(int, 2, None)])
    if ks[-1] > max_samples:
        raise ValueError(f"The largest k ({ks[-1]}) must be <= max_samples={max_samples}.")
    v.validate_params(estimator, estimator._parameter_constraints)
    if hasattr(X, "shape") and len(X.shape) == 2 and ks[-1] > X.shape[0]:
        raise ValueError(f"The largest k ({ks[-1]}) must be <= n_samples={X.shape[0]}.")
    return estimator, ks


def _check_ks(ks):
    bad = ValueError("The 'ks' parameter of choose_k must be a sequence of at least 2 "
                     f"distinct ints >= 2 (e.g. range(2, 13)). Got {ks!r} instead.")
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise bad
    values = list(ks)
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in values):
        raise bad
    values = sorted({int(x) for x in values})
    if len(values) < 2 or values[0] < 2:
        raise bad
    return np.array(values)


def _check_estimator(estimator):
    from .models import REGISTRY

    if isinstance(estimator, str):
        for name in REGISTRY:
            if name.lower() == estimator.lower():
                estimator = REGISTRY[name].cls()
                break
    elif isinstance(estimator, type):
        estimator = estimator()
    name = type(estimator).__name__
    if name not in K_PARAMETER or not hasattr(estimator, "get_params"):
        raise ValueError(f"choose_k supports the clustering models "
                         f"{', '.join(K_PARAMETER)} (they have labels and prototypes); got "
                         f"{estimator!r}. Factorization models (NMF, RNMF, ORNMF, SemiNMF, "
                         "RobustNMF, ONMFO) and MNMF are not supported.")
    if isinstance(estimator.get_params().get("init"), (np.ndarray, tuple)):
        raise ValueError(f"choose_k refits {name} for every k: its 'init' must be "
                         "'k-medians++' or 'random', not starting centres.")
    return estimator


# ---------------------------------------------------------------- choose_k
def choose_k(estimator: Any, X: Data, ks: Any, *, n_seeds: int = 5,
             random_state: Any = None, stability_threshold: float = 0.9,
             tolerance: float = 0.05, max_samples: int = 20_000,
             verbose: int = 0) -> ChooseKResult:
    """Fit a clustering model for every k of ``ks`` with several seeds and recommend k.

    For every k the model is fitted with ``n_seeds`` seeds; each seed's solution is the
    best of the estimator's ``n_init`` restarts.  For :class:`~daskrnmf.RFNMF` all the
    seeds' restarts run stacked in one fit (one pass over X serves them all); other models
    are fitted once per seed.  Then one more pass over X scores the seeds' solutions:

    * **objective** — the model's own (``objective_``), the lowest over the seeds; it
      falls with k and is shown, not used by the rule;
    * **stability** — the mean adjusted Rand index (ARI) between the labels of every
      pair of seeds, an agreement index between restarts in the spirit of the consensus
      of Brunet et al. [1]_ (1: every seed finds the same partition).  The k x k
      contingency tables of the pairs are summed block by block;
    * **silhouette** — a simplified silhouette [2]_: per sample ``1 - a / b``, with ``a``
      its distance to its own (nearest) centre and ``b`` to the next nearest, in the
      model's distance (L1 for ``loss="l1"`` and RFNMTF, L2 otherwise), so it is O(n k)
      rather than the silhouette's O(n^2).  The score is the mean over the clusters of
      each cluster's **median** value (from per-cluster 512-bin histograms summed block
      by block: within 1/512 of the clusters' middle values), averaged over the seeds.  Medians:
      gross outliers, far from every centre, have values near 0 whatever k is and do
      not move a median as they move a mean.  Clusters weigh alike: one split (or
      merged) group out of twelve lowers the score by about a twelfth of its fall,
      where it barely moves the median over all samples.

    Nothing of size n_samples comes to the client: the labels of the seeds are made and
    compared where X's blocks are.

    **Data larger than max_samples rows** (and any Dask or Zarr X) is read twice in
    all, whatever the number of k and seeds: the first pass checks X and draws a uniform
    sample of ``max_samples`` rows (depending on X alone, not on its chunking); every fit
    runs on that sample, in memory; then one more pass scores the solutions of every k and
    seed over all of X at once — the stability, the silhouette and the objective reported
    and used by the rule are X's.  A NumPy X of at most ``max_samples`` rows is fitted
    itself, as before.

    **The rule.** The k whose stability is at least ``stability_threshold`` are the
    stable ones (with ``n_seeds=1`` every k is); among them, those whose silhouette is
    within ``tolerance`` (relative) of the largest are near the top, and the
    **largest k near the top** is recommended.  If no k is stable, the most stable k is
    recommended.  Why: the stability test removes the k whose partition depends on the
    seed (typically too many clusters).  Splitting a group costs the silhouette much
    (its halves' members are as near the other half's centre as to their own: near 0),
    merging two *nearby* groups costs it little (the merged members stay far from the
    other centres) — so the best silhouette alone would merge planted groups that lie
    close together, while the largest k near the top keeps them apart and stops before
    the first split.  On planted clusters (k = 3 .. 12, clean and with 5 % gross outlier rows,
    ``benchmarks/results/choose_k.md``) it recommends the planted k with RFNMF, both
    losses.

    Parameters
    ----------
    estimator : estimator, class or str
        An unfitted :class:`~daskrnmf.RFNMF` or :class:`~daskrnmf.RFNMTF` (k is its
        ``n_clusters`` / ``n_row_clusters``; its other parameters are kept), its class
        or its name.  Factorization models (NMF, RNMF, ORNMF, SemiNMF, RobustNMF, ONMFO)
        and MNMF are not supported: a ValueError says so.
    X : array-like of shape (n_samples, n_features)
        NumPy array, Dask array chunked along rows, ``zarr.Array`` or Zarr path.
    ks : sequence of int
        The k to try (at least two distinct values, each >= 2).
    n_seeds : int, default=5
        Seeds per k.
    random_state : None, int, numpy RandomState or Generator, default=None
        The seeds of every k derive from it (the same seeds for every k).
    stability_threshold : float in [0, 1], default=0.9
        Mean ARI a k needs to be stable.
    tolerance : float in [0, 1), default=0.05
        How far below the best silhouette (relative) a stable k may be to count as near
        the top.  0 recommends the stable k with the best silhouette.
    max_samples : int, default=20_000
        The most rows the fits use: a larger (or lazy) X is fitted on a uniform sample of
        this many rows and scored on all of X (two passes over X in all).  20 000 rows
        leave about 2 000 per cluster at k = 10.
    verbose : int, default=0
        >= 1 prints one line per k (on the ``daskrnmf`` logger when logging is set up to
        show INFO, else on stderr).

    Returns
    -------
    result : ChooseKResult
        ``result.k`` the recommended k, ``result.scores`` the scores per k,
        ``result.plot()`` a figure, ``result.to_markdown()`` a table.

    Raises
    ------
    ValueError
        For a parameter out of range (scikit-learn's message form), an unsupported
        model, or a k larger than n_samples.

    References
    ----------
    .. [1] J.-P. Brunet, P. Tamayo, T. R. Golub and J. P. Mesirov, "Metagenes and
       molecular pattern discovery using matrix factorization", Proceedings of the
       National Academy of Sciences (PNAS), 101(12), 2004.
    .. [2] P. J. Rousseeuw, "Silhouettes: a graphical aid to the interpretation and
       validation of cluster analysis", Journal of Computational and Applied
       Mathematics, 20, 1987.
    .. [3] L. Hubert and P. Arabie, "Comparing partitions", Journal of Classification,
       2, 1985.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import RFNMF, choose_k
    >>> rng = np.random.default_rng(0)
    >>> centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.vstack([c + rng.normal(size=(30, 2)) for c in centres])
    >>> result = choose_k(RFNMF(loss="l1", n_init=2), X, [2, 3, 4], n_seeds=3,
    ...                   random_state=0)
    >>> result.k
    3
    >>> sorted(result.scores)[:3]
    ['n_passes', 'objective', 'seconds']
    """
    from ._driver import say

    estimator, ks = _check_arguments(estimator, X, ks, n_seeds=n_seeds,
                                     random_state=random_state,
                                     stability_threshold=stability_threshold,
                                     tolerance=tolerance, verbose=verbose,
                                     max_samples=max_samples)
    name = type(estimator).__name__
    seed = v.seed_from(random_state) % 2**32
    fit = _fit_stacked if name == "RFNMF" else _fit_separately
    scores = {key: np.full(ks.size, np.nan) for key in SCORES}
    data, blocks = _data_to_fit(estimator, X, max_samples)
    centres = []
    for i, k in enumerate(ks):
        tic = time.perf_counter()
        objective, sc, passes, F, metric, squared = fit(estimator, data, int(k), n_seeds, seed,
                                                        score=blocks is None)
        centres.append(F)
        scores["n_passes"][i] = passes
        scores["seconds"][i] = time.perf_counter() - tic
        if sc is None:          # scored on X below, every k in one pass
            if verbose:
                say("choose_k %s k=%d: fitted on the sample (%.1f s)", name, k,
                    scores["seconds"][i])
            continue
        _record(scores, i, sc, objective)
        if verbose:
            say("choose_k %s k=%d: objective %.6g, stability %.3f, silhouette %.3f (%.1f s)",
                name, k, scores["objective"][i], scores["stability"][i],
                scores["silhouette"][i], scores["seconds"][i])
    n_passes = int(np.sum(scores["n_passes"]))
    if blocks is not None:
        # X itself: every k's solutions scored over all of X in one pass
        tic = time.perf_counter()
        for i, sc in enumerate(score_all_centers(blocks, centres, metric, squared=squared)):
            _record(scores, i, sc, sc["objective"])
        n_passes = blocks.n_passes
        scores["seconds"] += (time.perf_counter() - tic) / ks.size
        if verbose:
            say("choose_k %s: every k scored on X (%d passes over X in all)", name,
                        n_passes)
    k, stable = recommend(ks, scores["stability"], scores["silhouette"], stability_threshold,
                          tolerance)
    return ChooseKResult(k=k, ks=ks, scores=scores, model=name, k_parameter=K_PARAMETER[name],
                         n_seeds=n_seeds, stability_threshold=stability_threshold,
                         tolerance=tolerance, stable=stable, n_passes=n_passes,
                         n_fitted=int(data.shape[0]))


def _record(scores, i, sc, objective):
    scores["objective"][i] = float(np.min(objective))
    if sc["ari"].size:
        scores["stability"][i] = float(np.mean(sc["ari"]))
        scores["stability_min"][i] = float(np.min(sc["ari"]))
    scores["silhouette"][i] = float(np.mean(sc["silhouette"]))
    scores["silhouette_mean"][i] = float(np.mean(sc["silhouette_mean"]))


def _data_to_fit(estimator, X, max_samples):
    """What :func:`choose_k` fits: ``(data, blocks)``.  X itself (``blocks`` None) when it
    is a NumPy array of at most ``max_samples`` rows; otherwise a uniform sample of at
    most ``max_samples`` rows in memory, drawn in the first pass over X (which also checks
    its values; the sample depends on X alone, not on its chunking), and X's row
    ``blocks`` for the scoring pass."""
    from sklearn.base import clone

    model = clone(estimator)            # the user's estimator stays as given
    Xv = model._validate_data(X, reset=True)
    if isinstance(Xv, np.ndarray) and Xv.shape[0] <= max_samples:
        return Xv, None
    # the model's own first pass: its checks (NaN unless missing="mask", magnitude,
    # negatives) and messages, with the sample
    blocks, stats = model._check_blocks(Xv, sample_size=min(max_samples, Xv.shape[0]))
    return stats["sample"], blocks
