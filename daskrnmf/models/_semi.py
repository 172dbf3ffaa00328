"""The passes of (max-margin) semi-NMF: per-block functions, the problem's state, NNLS.

Private helpers of :mod:`daskrnmf.models.mnmf`.  Everything a Dask worker runs lives
here and needs NumPy and Numba only (no scikit-learn, no dask import), so unpickling a
task does not import the estimators.

Samples are rows: X (n, d) ~ H G^T, H (n, k) >= 0, G (d, k) of any sign.
"""

from dataclasses import dataclass, replace

import numpy as np

from ..kernels import hinge, rng
from ..kernels.blocks import as_float_block, checked_apply, sum_arrays
from ..kernels.mu import residual_squares
from ..kernels.nnls import nnls_codes

_EPS = 1e-12


# ---------------------------------------------------------------- the problem's passes
@dataclass
class DingState:
    """The state of a semi-NMF iteration the driver carries (H stays on the blocks)."""

    G: np.ndarray


class SemiProblem:
    """Passes of a (max-margin) semi-NMF on the rows with a non-zero label.

    Per-block state (persisted next to X's blocks, never gathered): ``y`` (+1 / -1, 0 for
    rows outside the problem) and the block's rows of ``H``.  Creating the problem is one
    pass (seeded H and its statistics).

    Parameters
    ----------
    blocks : daskrnmf._blocks.RowBlocks
    labels : list
        Per block, the rows' labels (NumPy or Delayed): +1 / -1 in the problem, 0 out.
    k : int
        Number of components.
    seed : int
    """

    # what a checkpoint of a semi-NMF run holds besides G (daskrnmf._resume): every
    # block's state (its H, which Ding's update multiplies, and labels; written by the
    # workers), the last pass's statistics and H's pending scale; ``xbar`` is the first
    # pass's and is computed again.  (MNMF's runs save less: _MarginFit.)
    checkpoint_attributes = ("state", "stats", "scale")

    def __init__(self, blocks, labels, *, k, seed):
        self.blocks, self.k = blocks, k
        self.stats, self.state = blocks.map_reduce(init_chunk, sum_combine, args=(k, seed),
                                                   state=labels, keep_state=True,
                                                   name="initial H")
        # the problem's mean row (its rows do not change; only the first pass sums them)
        self.xbar = self.stats.pop("xsum") / max(float(self.stats.pop("n")), 1.0)
        self.scale = np.ones(k)              # pending scale of H (from normalising G)

    def basis(self, penalty=None):
        """G_0 = X^T H P from the last pass's statistics, P = (H^T H + diag(penalty))^-1:
        semi-NMF's basis (eq. 2) without ``penalty``; with it, the minimiser of
        ``||X - H G^T||^2 + sum_j penalty_j ||g_j||^2`` (MNMF's G step)."""
        S = self.stats["HtH"]
        if penalty is not None:
            S = S + np.diag(penalty)
        ridge = _EPS * max(np.trace(S), 1.0)
        P = np.linalg.inv(S + ridge * np.eye(self.k))
        return self.stats["XtH"] @ P, P

    def ding_step(self, state, active):
        """One iteration of Ding's semi-NMF (one pass): H by eq. 3 for the current G, then
        G by eq. 2 for the new H.  Objective: ``||X - H G^T||^2`` (new H, previous G),
        which these updates cannot increase."""
        loss = self.h_pass(state.G, "semi")
        return replace(state, G=self.basis()[0]), np.array([loss])

    def h_pass(self, G, kind, keep_features=False):
        """Update every block's H for fixed G — one Ding step (eq. 3, ``kind="semi"``) or
        the exact NNLS codes per sample (``kind="nnls"``) — and return the loss
        ``||X - H G^T||^2`` with the new H (the statistics for the next G are kept).
        ``keep_features``: the blocks also keep ``G^T x`` per row (MNMF's SVM step)."""
        spec = HSpec(kind=kind, G=G, GtG=G.T @ G, scale=self.scale,
                     keep_features=keep_features)
        self.stats, self.state = self.blocks.map_reduce(h_chunk, sum_combine, args=(spec,),
                                                        state=self.state, keep_state=True,
                                                        name=f"H update ({kind})")
        self.scale = np.ones(self.k)
        return float(self.stats["loss"])

    def hinge_solve(self, spec, v0, kappa, theta, *, max_passes, tol, mu0=None):
        """The hinge problem of the G step (``spec.key == "G"``, one pass over X a step)
        or the SVM step (``"svm"``, one pass over the kept features a step), solved by
        :func:`daskrnmf.kernels.hinge.solve`; ``mu0``: warm start at that smoothing width."""
        def run_pass(v, d, mu):
            return self.blocks.map_reduce(hinge_chunk, sum_combine,
                                          args=(replace(spec, v=v, d=d, mu=mu),),
                                          state=self.state, name=f"{spec.key} step")

        def run_state_pass(v, d, mu):
            return self.blocks.map_state(hinge_state_chunk, sum_combine, self.state,
                                         args=(replace(spec, v=v, d=d, mu=mu),),
                                         name=f"{spec.key} step")

        warm = {} if mu0 is None else {"mu0": mu0, "warm": True}
        return hinge.solve(run_state_pass if spec.key == "svm" else run_pass, v0, kappa,
                           theta, max_passes=max_passes, tol=tol, **warm)

    def unit_columns(self, G):
        """G's columns scaled to unit norm, the scale moved into H (applied on the blocks
        at the next pass) and into H's statistics: the reconstruction is unchanged.
        Returns the scaled G and the column norms."""
        norms = np.sqrt((G ** 2).sum(axis=0))
        norms = np.where(norms > 0, norms, 1.0)
        self.scale = self.scale * norms
        self.stats = {**self.stats, "XtH": self.stats["XtH"] * norms,
                      "HtH": self.stats["HtH"] * np.outer(norms, norms)}
        return G / norms, norms

    def codes(self, dtype):
        """H (n_samples, k) in ``dtype``: NumPy, or a Dask array of the persisted blocks."""
        return self.blocks.as_array(self.state, self.k, dtype, scaled_codes, self.scale, dtype)


# ---------------------------------------------------------------- per-block functions
def init_chunk(block, start, labels, k, seed):
    """State of a block: labels (+1 / -1 / 0) and a seeded uniform H (keyed on the global
    row index, so it does not depend on the chunking); the statistics of that H."""
    x = as_float_block(block)
    idx = np.arange(start, start + x.shape[0], dtype=np.uint64)
    H = np.stack([rng.uniform(seed, rng.stream_id(11, j), idx) for j in range(k)], axis=1)
    y = np.asarray(labels, dtype=np.float64)
    keep = y != 0
    out = {**_stats(x, H, keep, 0.0), "n": float(keep.sum()), "xsum": x[keep].sum(axis=0)}
    return out, {"y": y, "H": H}


def _stats(x, H, keep, loss):
    Hk = H * keep[:, None]
    return {"XtH": x.T @ Hk, "HtH": Hk.T @ Hk, "loss": loss}


def sum_combine(parts):
    return {key: sum_arrays([np.asarray(p[key], dtype=np.float64) for p in parts])
            for key in parts[0]}


@dataclass(frozen=True)
class HSpec:
    """An H pass: ``kind`` ("semi": Ding's update, eq. 3; "nnls": exact codes), the basis
    ``G`` (n_features, k), ``G^T G``, the pending ``scale`` of H, and whether the blocks
    keep the features ``G^T x`` (``keep_features``)."""

    kind: str
    G: np.ndarray
    GtG: np.ndarray
    scale: np.ndarray
    keep_features: bool = False


@dataclass(frozen=True)
class HingeSpec:
    """A Newton pass of the hinge problems: ``key`` ("G": the G step over X, with
    ``G0w``, the centred intercept ``c0`` and the mean row ``xbar``; "svm": the SVM step
    over the features kept on the blocks, with ``fmean`` and ``intercept_scaling``), and
    the solver's point ``v``, direction ``d`` and smoothing ``mu``."""

    key: str
    G0w: np.ndarray = None
    c0: float = 0.0
    xbar: np.ndarray = None
    G: np.ndarray = None
    fmean: np.ndarray = None
    intercept_scaling: float = 1.0
    v: np.ndarray = None
    d: np.ndarray = None
    mu: float = None


def h_chunk(block, start, st, spec):
    x = as_float_block(block)
    H = st["H"] * spec.scale
    G, GtG = spec.G, spec.GtG
    XG = x @ G
    if spec.kind == "semi":
        pos, neg = np.maximum(GtG, 0.0), np.maximum(-GtG, 0.0)
        num = np.maximum(XG, 0.0) + H @ neg
        den = H @ pos + np.maximum(-XG, 0.0)
        # H sqrt(num / den), with den >= H_ik (G^T G)_kk: as num / den, a row of H that
        # decayed toward 0 (den ~ 1e-320) overflows to inf, whose NaN then ended as H = 0
        # (a zero classifier in MNMF).  sqrt(num) * (H / sqrt(den)) is the same update
        # with every factor bounded: H / sqrt(den) <= sqrt(H_ik / (G^T G)_kk).  den = 0
        # means H_ik = 0 (or g_k = 0, then num = 0 too): the entry stays 0.  A NaN (there
        # is none for finite X) is not hidden: ``den != 0`` holds for it.
        root = np.sqrt(den)
        H = np.sqrt(num) * np.divide(H, root, out=np.zeros_like(H), where=den != 0)
    else:
        H = nnls_codes(GtG, XG)
    new = {"y": st["y"], "H": H}
    if spec.keep_features:
        new["F"] = XG                     # the features G^T x of the SVM step
    keep = st["y"] != 0
    loss = float(residual_squares(x, H, G.T)[keep].sum())
    return _stats(x, H, keep, loss), new


def hinge_chunk(block, start, st, spec):
    """The block's share of a Newton pass of the G step: z = x - xbar,
    p = 1 - y ((x - xbar)^T G_0 w + c0)."""
    Z = as_float_block(block) - spec.xbar
    y = st["y"]
    p = 1.0 - y * (Z @ spec.G0w + spec.c0)
    return hinge.block_pass(Z, y, p, (y != 0).astype(np.float64), spec.v, spec.d,
                            spec.mu)


def hinge_state_chunk(st, spec):
    """The block's share of a Newton pass of the SVM step, from the features G^T x the
    last H pass kept (X is not read): z = [G^T x - mean, intercept_scaling], p = 1."""
    F, y = st["F"], st["y"]
    Z = np.hstack([F - spec.fmean, np.full((F.shape[0], 1), spec.intercept_scaling)])
    return hinge.block_pass(Z, y, np.ones(F.shape[0]), (y != 0).astype(np.float64), spec.v,
                            spec.d, spec.mu)


def scaled_codes(st, scale, dtype):
    return (st["H"] * scale).astype(dtype, copy=False)


def ones(n):
    """Labels of a semi-NMF: every row in the problem."""
    return np.ones(n)


def pair_labels(y, positive, negative):
    """+1 for ``positive``, -1 for ``negative``, 0 (outside the problem) for other classes."""
    y = np.asarray(y)
    return np.where(y == positive, 1.0, np.where(y == negative, -1.0, 0.0))


# ---------------------------------------------------------------- predictions (one block)
def codes_block(x, G, GtG):
    """Exact NNLS codes of a block's rows for the basis G (SemiNMF.transform)."""
    x = as_float_block(x)
    return nnls_codes(GtG, x @ G)


def features_block(x, Gs):
    """``G^T x`` of every binary problem, side by side (MNMF.transform)."""
    x = as_float_block(x)
    return np.hstack([x @ G for G in Gs])


def pair_decisions(x, Gs, coefs, intercepts):
    """Decision values of every binary problem, (n_rows, n_pairs)."""
    x = as_float_block(x)
    return np.stack([(x @ G) @ w + b for G, w, b in zip(Gs, coefs, intercepts)], axis=1)


def ovr_decision(dec, n_classes):
    """One-vs-one decision values (n_rows, n_pairs), pairs (i, j), i < j, in order,
    positive for class i, as votes plus confidences (n_rows, n_classes), the way
    scikit-learn's SVC builds its "ovr" shape (``_ovr_decision_function``): votes, and
    summed confidences squashed into (-1/3, 1/3) that only break ties."""
    votes = np.zeros((dec.shape[0], n_classes))
    conf = np.zeros((dec.shape[0], n_classes))
    j = 0
    for a in range(n_classes):
        for b in range(a + 1, n_classes):
            votes[:, a] += dec[:, j] >= 0
            votes[:, b] += dec[:, j] < 0
            conf[:, a] += dec[:, j]
            conf[:, b] -= dec[:, j]
            j += 1
    return votes + conf / (3 * (np.abs(conf) + 1))


def decision_block(x, Gs, coefs, intercepts, n_classes):
    """MNMF.decision_function of a block: (n_rows,) for two classes, else
    (n_rows, n_classes)."""
    dec = pair_decisions(x, Gs, coefs, intercepts)
    return dec[:, 0] if n_classes == 2 else ovr_decision(dec, n_classes)


def predict_block(x, Gs, coefs, intercepts, classes, dtype):
    """MNMF.predict of a block: the class of the largest decision value (its sign for
    two classes), decided on the values decision_function returns (in ``dtype``)."""
    dec = decision_block(x, Gs, coefs, intercepts, len(classes)).astype(dtype, copy=False)
    idx = (dec > 0).astype(np.intp) if dec.ndim == 1 else np.argmax(dec, axis=1)
    return np.asarray(classes)[idx]


def score_chunk(block, start, labels, check, Gs, coefs, intercepts, classes, dtype):
    """MNMF.score on one block: ``[weight of the rows predicted right, weight of all
    rows]`` (float64; a row weighs 1 without sample weights).  ``labels``: the block's
    ``(y, sample_weight or None)``; the block is checked as predict checks it
    (``check``, see :func:`daskrnmf.kernels.blocks.checked_apply`)."""
    y, w = labels
    pred = checked_apply(block, predict_block, check, np.asarray(classes).dtype, Gs, coefs,
                         intercepts, classes, dtype)
    right = (pred == np.asarray(y)).astype(np.float64)
    if w is None:
        return np.array([right.sum(), right.size], dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    return np.array([right @ w, w.sum()])
