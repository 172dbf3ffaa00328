"""Semi-NMF (Ding et al.) and Max-Margin Semi-NMF (Kumar, Kotsia, Patras), out of core.

Samples are rows here: X (n, d) ~ H G^T with H (n, k) >= 0 and G (d, k) of any sign; the
paper's X, H are our X^T, H^T.  MNMF (paper 003, eq. 4)::

    min_{G, H >= 0, w, b}  lam ||X - H G^T||_F^2 + 1/2 ||w||^2
                           + C sum_i max(0, 1 - y_i (w^T G^T x_i + b))

alternating a G step (eq. 5-10), an SVM step on the features G^T x (eq. 11) and an H step
(eq. 12-14, NNLS per sample).

The G step without an L x L matrix
----------------------------------
Divide eq. 5 by lam (theta = C / lam, ERRATA: eq. 7 drops lam).  With S = H^T H,
P = S^-1, the semi-NMF basis G_0 = X^T H P and alpha_i the multipliers of the margin
constraints, u = sum_i alpha_i y_i x_i (a d-vector), stationarity (eq. 7) reads::

    G = G_0 + 1/2 u w^T P.

Put it back into the Lagrangian.  ||X - H G^T||^2 is a quadratic in G minimised at G_0;
at G_0 + D it exceeds its minimum by tr(D S D^T), here 1/4 (w^T P w) ||u||^2, and the
margin term is linear in G: sum_i alpha_i y_i x_i^T G w = u^T G_0 w + 1/2 (w^T P w) ||u||^2.
So with c = w^T P w and f_i = x_i^T G_0 w, the dual (eq. 9) is::

    max_{0 <= alpha_i <= theta}  sum_i alpha_i (1 - y_i (f_i + b)) - c/4 alpha^T Q alpha,
                                 Q_ij = y_i y_j x_i^T x_j,   alpha^T Q alpha = ||u||^2.

Term by term, eq. 10 agrees: with M_i = x_i w^T and B = (2 H H^T)^-1, T_1 = c/4 Q and
T_2 = c/2 Q (T_2 printed with y_1 y_2: it is y_i y_j, ERRATA), t_3 = t_5 cancel,
t_4 = y_i f_i, t_6 = b y_i, t_7 = 1.  This is a linear-kernel SVM dual in the
d-dimensional variable u: with v = (c/2) u the primal is
``min_v ||v||^2 / c + theta sum_i max(0, 1 - y_i (f_i + b) - y_i x_i^T v)`` and
``G = G_0 + v w^T P / c``.  Nothing n x n is formed, and nothing of size n leaves the
workers: :mod:`daskrnmf.kernels.hinge` solves this primal in the d-dimensional v by
Newton's method on the Huber-smoothed hinge with continuation in the smoothing width, one
pass a Newton step (every block sums its rows' gradient, Hessian and losses along the
step, tree-reduced).  The multipliers ``alpha_i = theta clip(r_i / mu, 0, 1)`` of every
iterate are a feasible point of eq. 9, so each pass measures the exact duality gap, which
stops the step.  The SVM step (eq. 11) is the same problem on the k + 1 features
``[G^T x - mean, intercept_scaling]`` (the intercept regularised, as in liblinear /
scikit-learn's LinearSVC).  (Dual coordinate ascent over the multipliers, the obvious
alternative, needs tens of thousands of sweeps at the large theta this model needs, as
liblinear does on the same problems.)

Scale of G (ERRATA): the margin term can be improved by inflating G (features G^T x
grow, ||w|| shrinks), so after each G step G's columns are scaled to unit norm, the scale
moved into H (the reconstruction is unchanged) and into w (the decision values are
unchanged).  The paper's Algorithm 1 needs w, b before the first G step: they come from
the SVM step on the features of the initial semi-NMF (ERRATA).
"""

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin

from .. import _validation as v
from .._driver import iterate, warn_if_not_converged
from ..kernels import hinge, rng
from ..kernels.blocks import as_float_block, sum_arrays
from ..kernels.nnls import nnls_rows
from ..reductions import checked_blocks

_EPS = 1e-12


# ---------------------------------------------------------------- the fit of one problem
class _SemiFit:
    """Passes of a (max-margin) semi-NMF on the rows with non-zero label.

    Per-block state (persisted next to X's blocks, never gathered): ``y`` (+1 / -1, 0 for
    rows outside the problem) and the block's rows of ``H``.
    """

    def __init__(self, blocks, labels, *, k, seed):
        self.blocks, self.k = blocks, k
        self.stats, self.state = blocks.map_reduce(_init_chunk, _sum_combine, args=(k, seed),
                                                   state=labels, keep_state=True,
                                                   name="initial H")
        # the problem's mean row (its rows do not change; only the first pass sums them)
        self.xbar = self.stats.pop("xsum") / max(float(self.stats.pop("n")), 1.0)
        self.scale = np.ones(k)              # pending scale of H (from normalising G)

    def basis(self):
        """G_0 = X^T H (H^T H)^-1 from the last pass's statistics (semi-NMF, eq. 2), and
        P = (H^T H)^-1."""
        S = self.stats["HtH"]
        ridge = _EPS * max(np.trace(S), 1.0)
        P = np.linalg.inv(S + ridge * np.eye(self.k))
        return self.stats["XtH"] @ P, P

    def h_pass(self, G, kind):
        """Update every block's H for fixed G — one Ding step (eq. 3, ``kind="semi"``) or
        the exact NNLS solution per sample (eq. 14, ``kind="nnls"``) — and return the
        loss ``||X - H G^T||^2`` with the new H (the statistics for the next G are kept)."""
        spec = {"kind": kind, "G": G, "GtG": G.T @ G, "scale": self.scale}
        self.stats, self.state = self.blocks.map_reduce(_h_chunk, _sum_combine, args=(spec,),
                                                        state=self.state, keep_state=True,
                                                        name=f"H update ({kind})")
        self.scale = np.ones(self.k)
        return self.stats["loss"]

    def hinge_solve(self, spec, v0, kappa, theta, *, max_passes, tol):
        """The hinge problem of the G step (``spec["key"] == "G"``) or the SVM step
        (``"svm"``), solved by :func:`daskrnmf.kernels.hinge.solve`, one pass a step."""
        def run_pass(v, d, mu):
            return self.blocks.map_reduce(_hinge_chunk, _sum_combine,
                                          args=({**spec, "v": v, "d": d, "mu": mu},),
                                          state=self.state, name=f"{spec['key']} step")

        return hinge.solve(run_pass, v0, kappa, theta, max_passes=max_passes, tol=tol)

    def rescale(self, norms):
        """H <- H * norms (columns; applied on the blocks at the next pass) and the
        statistics of H with it."""
        self.scale = self.scale * norms
        self.stats = {**self.stats, "XtH": self.stats["XtH"] * norms,
                      "HtH": self.stats["HtH"] * np.outer(norms, norms)}


# ---------------------------------------------------------------- per-block functions
def _init_chunk(block, start, labels, k, seed):
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


def _sum_combine(parts):
    return {key: sum_arrays([np.asarray(p[key], dtype=np.float64) for p in parts])
            for key in parts[0]}


def _h_chunk(block, start, st, spec):
    x = as_float_block(block)
    H = st["H"] * spec["scale"]
    G, GtG = spec["G"], spec["GtG"]
    XG = x @ G
    if spec["kind"] == "semi":
        pos, neg = np.maximum(GtG, 0.0), np.maximum(-GtG, 0.0)
        num = np.maximum(XG, 0.0) + H @ neg
        den = H @ pos + np.maximum(-XG, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            H = np.where(den > 0, H * np.sqrt(num / den), 0.0)
    else:
        H = nnls_rows(GtG, XG, H)
    keep = st["y"] != 0
    loss = float((((x - H @ G.T) ** 2).sum(axis=1))[keep].sum())
    return _stats(x, H, keep, loss), {**st, "H": H}


def _hinge_chunk(block, start, st, spec):
    """The block's share of a Newton pass: z = x, p = 1 - y (x^T G_0 w + b) for the G
    step; z = [x^T G - mean, intercept_scaling], p = 1 for the SVM step."""
    x = as_float_block(block)
    y = st["y"]
    if spec["key"] == "G":
        Z, p = x, 1.0 - y * (x @ spec["G0w"] + spec["b"])
    else:
        Z = np.hstack([x @ spec["G"] - spec["fmean"],
                       np.full((x.shape[0], 1), spec["intercept_scaling"])])
        p = np.ones(x.shape[0])
    return hinge.block_pass(Z, y, p, (y != 0).astype(np.float64), spec["v"], spec["d"],
                            spec["mu"])


def _pair_labels(y, positive, negative):
    y = np.asarray(y)
    return np.where(y == positive, 1.0, np.where(y == negative, -1.0, 0.0))


def _decision_block(block, Gs, coefs, intercepts):
    """Decision values of every pairwise classifier, (n_rows, n_pairs)."""
    x = as_float_block(block)
    return np.stack([(x @ G) @ w + b for G, w, b in zip(Gs, coefs, intercepts)], axis=1)


def _features_block(block, Gs):
    x = as_float_block(block)
    return np.hstack([x @ G for G in Gs])


def _vote_block(dec, pairs, n_classes):
    """One-vs-one voting (ties: the class with the larger summed confidence, then the
    lower index); returns class indices."""
    votes = np.zeros((dec.shape[0], n_classes))
    conf = np.zeros((dec.shape[0], n_classes))
    for j, (a, b) in enumerate(pairs):
        win = dec[:, j] > 0
        votes[:, a] += win
        votes[:, b] += ~win
        conf[:, a] += dec[:, j]
        conf[:, b] -= dec[:, j]
    # confidences are squashed into (-1/3, 1/3) so they only break ties (as scikit-learn)
    score = votes + conf / (3 * (np.abs(conf) + 1))
    return np.argmax(score, axis=1)


# ---------------------------------------------------------------- estimators
_COMMON = {
    "n_components": [v.Interval(int, 1, None)],
    "max_iter": [v.Interval(int, 0, None)],
    "tol": [v.Interval(float, 0, None)],
    "random_state": [v.RANDOM_STATE],
    "verbose": [v.Interval(int, 0, None)],
    "callback": [v.CallableOrNone()],
}


def _check_x(X, name):
    X = v.check_array(X, estimator_name=name)
    blocks, _ = checked_blocks(X, f"X passed to {name}")
    return X, blocks


def _semi_nmf(fit, max_iter, tol, **driver):
    """Ding's iterations (eq. 2-3) on the fit's rows, one pass each; returns G and the
    driver's log (objective ``||X - H G^T||^2``, new H with the previous G)."""
    G = fit.basis()[0]

    def step(state, active):
        nonlocal G
        loss = fit.h_pass(G, "semi")
        G = fit.basis()[0]
        return state, np.array([loss])

    _, log = iterate(step, None, n_restarts=1, max_iter=max_iter, tol=tol,
                     passes=lambda: fit.blocks.n_passes, **driver)
    return G, log


class SemiNMF(TransformerMixin, BaseEstimator):
    """Semi-NMF (Ding, Li & Jordan), ``min ||X - H G^T||_F^2`` with H >= 0, out of core.

    X (n_samples, n_features) may have any sign; G (n_features, n_components) too.  Each
    iteration is one pass over X: every row block updates its rows of H by eq. 3
    (``H <- H * sqrt(([XG]^+ + H [G^T G]^-) / (H [G^T G]^+ + [XG]^-))``) and returns
    X^T H and H^T H, tree-reduced; then ``G = X^T H (H^T H)^-1`` (eq. 2).  H starts seeded
    uniform (keyed on the row index: the fit does not depend on the chunking) and stays on
    the workers next to X's blocks.

    Parameters
    ----------
    n_components : int
    max_iter : int, default=200
    tol : float, default=1e-4
        Stop when the loss decreases by less than ``tol`` relative.
    random_state : None, int, RandomState or Generator
    verbose : int, default=0
        >= 1 logs the loss per iteration on the ``daskrnmf`` logger.
    callback : callable, optional
        ``callback(info)`` after every iteration (as :class:`daskrnmf.RFNMF`); returning
        True stops the fit.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
        G^T.
    reconstruction_err_ : float
        ``||X - H G^T||_F`` at the end.
    objective_history_ : ndarray
        ``||X - H G^T||_F^2`` per iteration (new H, previous G).
    n_iter_, n_passes_ : int
    """

    _parameter_constraints = {**_COMMON, "max_iter": [v.Interval(int, 1, None)]}

    def __init__(self, n_components=8, *, max_iter=200, tol=1e-4, random_state=None, verbose=0,
                 callback=None):
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    def fit(self, X, y=None):
        self.fit_transform(X)
        return self

    def fit_transform(self, X, y=None):
        """Factorize X; returns H (n_samples, n_components), Dask for Dask/Zarr input."""
        v.validate_params(self, self._parameter_constraints)
        X, blocks = _check_x(X, type(self).__name__)
        fit = _SemiFit(blocks, [_map(blocks, np.ones, n) for n in blocks.sizes],
                       k=self.n_components, seed=v.seed_from(self.random_state))
        G, log = _semi_nmf(fit, self.max_iter, self.tol, callback=self.callback,
                           verbose=self.verbose, name="SemiNMF")
        if not log.stopped_by_callback:
            warn_if_not_converged("SemiNMF", log.converged[0], self.max_iter)
        history = log.restart_history(0)
        self.components_ = G.T
        self.objective_history_ = history
        self.reconstruction_err_ = float(np.sqrt(history[-1]))
        self.n_iter_ = len(history)
        self.n_passes_ = blocks.n_passes
        self.n_features_in_ = X.shape[1]
        return _codes(fit, blocks, self.n_components)

    def transform(self, X):
        """Non-negative least-squares codes H for fixed G (eq. 14 per sample)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "components_")
        X = _check_features(X, self)
        G = self.components_.T
        if isinstance(X, np.ndarray):
            return nnls_rows(G.T @ G, X @ G)
        return X.map_blocks(lambda b: nnls_rows(G.T @ G, as_float_block(b) @ G),
                            chunks=(X.chunks[0], (G.shape[1],)), dtype=np.float64)

    def inverse_transform(self, H):
        return H @ self.components_


def _check_features(X, est):
    name = type(est).__name__
    X = v.check_array(X, estimator_name=name)
    if X.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but {name} was fitted with "
                         f"{est.n_features_in_}.")
    return X


def _codes(fit, blocks, k):
    Hs = [None] * blocks.n_blocks
    if not blocks.is_dask:
        return np.concatenate([st["H"] * fit.scale for st in fit.state])
    import dask.array as da
    from dask import delayed

    for b, (st, n) in enumerate(zip(fit.state, blocks.sizes)):
        Hs[b] = da.from_delayed(delayed(lambda s, c: s["H"] * c)(st, fit.scale), (n, k),
                                dtype=np.float64)
    return da.concatenate(Hs)


class MNMF(ClassifierMixin, BaseEstimator):
    """Max-Margin Semi-NMF (paper 003, eq. 4): a semi-NMF basis trained jointly with a
    linear SVM on the features ``G^T x``, out of core.

    Objective (per binary problem, labels y_i in {-1, +1})::

        lam ||X - H G^T||_F^2 + 1/2 (||w||^2 + (b / intercept_scaling)^2)
            + C sum_i max(0, 1 - y_i (w^T G^T x_i + b)),   H >= 0, ||g_j|| = 1

    (the intercept regularised as in LinearSVC; G's columns of unit norm, ERRATA).
    Algorithm 1, per iteration: the G step (eq. 9 in its d-dimensional primal form, see
    the module docstring: smoothed Newton, one pass a step, stopped by the duality gap),
    G's columns normalised, the H step (NNLS per sample, one pass, which also gathers
    the statistics for the next G step), the SVM step (the same solver on the k + 1
    features).  Initialisation: ``semi_max_iter`` semi-NMF iterations, then the SVM step.
    Passes over X per iteration: the G step's and the SVM step's Newton passes plus one.
    The objective is reported after each iteration; the normalisation of G does not keep
    it monotone (the paper proves nothing about it), so the fit stops when it changes by
    less than ``tol`` relative.
    More than two classes: one-vs-one, one MNMF per pair of classes (on that pair's
    samples), prediction by voting, as the paper does on KTH.

    Parameters
    ----------
    n_components : int
        k, the number of basis vectors (features).
    C : float, default=100.0
        Weight of the hinge losses.
    lam : float, default=0.01
        Weight of the reconstruction error; the G step's box is ``theta = C / lam``
        (ERRATA: theta must be large for the margin to shape G; with C = lam = 1 MNMF
        does no better than semi-NMF + SVM).
    max_iter : int, default=10
        Outer iterations of Algorithm 1 (0: semi-NMF + SVM).  The paper's toy converges in
        6.
    tol : float, default=1e-3
        Stop when the objective changes by less than ``tol`` relative.
    semi_max_iter : int, default=200
        Semi-NMF iterations of the initialisation.
    inner_max_iter : int, default=50
        Passes (Newton steps) per G step / SVM step.
    inner_tol : float, default=1e-3
        Relative duality gap that ends a G step / SVM step.
    intercept_scaling : float, default=1.0
        The constant feature that carries the intercept (as LinearSVC's).
    random_state, verbose, callback
        As the other estimators (``callback(info)`` after each outer iteration of each
        binary problem).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    components_ : ndarray (n_components, n_features), or (n_pairs, n_components,
        n_features) for more than two classes: G^T per binary problem.
    coef_ : ndarray (1, n_components) or (n_pairs, n_components)
    intercept_ : ndarray (1,) or (n_pairs,)
    pairs_ : list of (i, j) class-index pairs, one per binary problem (the first class
        of a pair is the positive one).
    objective_history_ : list of ndarray, one per binary problem.
    n_iter_ : ndarray (n_pairs,)
    n_passes_ : int
    inner_passes_ : list of ndarray (n_iter + 1, 2), one per binary problem: passes of
        the G step and of the SVM step in each iteration; row 0 is the initial SVM step
        (no G step).
    inner_gaps_ : list of ndarray (n_iter + 1, 2): their final relative duality gaps.
    """

    _parameter_constraints = {
        **_COMMON,
        "C": [v.Interval(float, 0, None, closed="neither")],
        "lam": [v.Interval(float, 0, None, closed="neither")],
        "semi_max_iter": [v.Interval(int, 1, None)],
        "inner_max_iter": [v.Interval(int, 1, None)],
        "inner_tol": [v.Interval(float, 0, None, closed="neither")],
        "intercept_scaling": [v.Interval(float, 0, None, closed="neither")],
    }

    def __init__(self, n_components=8, *, C=100.0, lam=0.01, max_iter=10, tol=1e-3,
                 semi_max_iter=200, inner_max_iter=50, inner_tol=1e-3,
                 intercept_scaling=1.0, random_state=None, verbose=0, callback=None):
        self.n_components = n_components
        self.C = C
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.semi_max_iter = semi_max_iter
        self.inner_max_iter = inner_max_iter
        self.inner_tol = inner_tol
        self.intercept_scaling = intercept_scaling
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    # -- fit
    def fit(self, X, y):
        """Fit on samples X (n_samples, n_features) and labels y (n_samples,).

        X: NumPy, Dask (row-chunked), zarr.Array or Zarr path; y: NumPy or Dask, aligned
        with X's rows (a Dask y is rechunked to X's row chunks, never gathered).
        """
        v.validate_params(self, self._parameter_constraints)
        name = type(self).__name__
        X, blocks = _check_x(X, name)
        y_blocks, classes = _check_labels(y, X, blocks, name)
        seed = v.seed_from(self.random_state)
        pairs = [(i, j) for i in range(len(classes)) for j in range(i + 1, len(classes))]
        if len(classes) == 2:
            pairs = [(1, 0)]    # positive class: classes_[1], as scikit-learn
        out = []
        for a, b in pairs:
            labels = [_map(blocks, _pair_labels, yb, classes[a], classes[b]) for yb in y_blocks]
            out.append(self._fit_binary(blocks, labels, seed))
        self.classes_ = classes
        self.pairs_ = pairs
        Gs = np.stack([o["G"] for o in out])
        self._Gs = Gs
        self.components_ = Gs[0].T if len(out) == 1 else np.transpose(Gs, (0, 2, 1))
        self.coef_ = np.stack([o["w"] for o in out])
        self.intercept_ = np.array([o["b"] for o in out])
        self.objective_history_ = [o["history"] for o in out]
        self.n_iter_ = np.array([o["n_iter"] for o in out])
        self.inner_passes_ = [o["passes"] for o in out]
        self.inner_gaps_ = [o["gaps"] for o in out]
        self.n_passes_ = blocks.n_passes
        self.n_features_in_ = X.shape[1]
        return self

    def _fit_binary(self, blocks, labels, seed):
        k, s = self.n_components, float(self.intercept_scaling)
        C, theta = float(self.C), float(self.C) / float(self.lam)
        fit = _SemiFit(blocks, labels, k=k, seed=seed)
        G, _ = _semi_nmf(fit, self.semi_max_iter, self.tol)
        G = _unit_columns(G, fit)
        inner = dict(max_passes=self.inner_max_iter, tol=self.inner_tol)
        xbar = fit.xbar

        def svm(G, v0):
            # features centred on the problem's mean: the intercept is then near 0, and
            # its regularisation acts on the centred intercept
            spec = {"key": "svm", "G": G, "fmean": G.T @ xbar, "intercept_scaling": s}
            return fit.hinge_solve(spec, v0, 1.0, C, **inner)

        def classifier(v_s, G):
            w = v_s[:k]
            return w, float(v_s[k] * s - w @ (G.T @ xbar))

        # ERRATA: w, b before the first G step, from the SVM on the semi-NMF features
        v_s, info_s = svm(G, np.zeros(k + 1))
        v_g = np.zeros(blocks.shape[1])
        passes, gaps = [(0, info_s["passes"])], [(0.0, info_s["gap"])]

        def step(state, active):
            nonlocal G, v_s, v_g
            w, b = classifier(v_s, G)
            G0, P = fit.basis()
            c = float(w @ P @ w)
            if c > _EPS:
                # G = G_0 + v w^T P / c with v the primal solution (module docstring)
                spec = {"key": "G", "G0w": G0 @ w, "b": b}
                v_g, info_g = fit.hinge_solve(spec, np.zeros_like(v_g), c / 2, theta, **inner)
                G = G0 + np.outer(v_g, P @ w) / c
            else:            # w = 0: the margin term does not depend on G
                G, info_g = G0, {"passes": 0, "gap": 0.0}
            G = _unit_columns(G, fit)
            loss = fit.h_pass(G, "nnls")
            v_s, info_s = svm(G, v_s)
            passes.append((info_g["passes"], info_s["passes"]))
            gaps.append((info_g["gap"], info_s["gap"]))
            objective = float(self.lam) * loss + 0.5 * float(v_s @ v_s) + C * info_s["hinge"]
            return state, np.array([objective])

        history, n_iter = np.zeros(0), 0
        if self.max_iter > 0:
            _, log = iterate(step, None, n_restarts=1, max_iter=self.max_iter, tol=self.tol,
                             callback=self.callback, verbose=self.verbose, name="MNMF",
                             passes=lambda: blocks.n_passes, rule="change")
            if not log.stopped_by_callback:
                warn_if_not_converged("MNMF", log.converged[0], self.max_iter)
            history, n_iter = log.restart_history(0), int(log.n_iter[0])
        w, b = classifier(v_s, G)
        return {"G": G, "w": w.copy(), "b": b, "history": history, "n_iter": n_iter,
                "passes": np.array(passes, dtype=int).reshape(-1, 2),
                "gaps": np.array(gaps, dtype=float).reshape(-1, 2)}

    # -- predict
    def decision_function(self, X):
        """``w^T G^T x + b``: (n_samples,) for two classes (positive: classes_[1]), else
        (n_samples, n_pairs) one-vs-one values (positive: the first class of the pair)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "coef_")
        X = _check_features(X, self)
        args = (list(self._Gs), list(self.coef_), list(self.intercept_))
        if isinstance(X, np.ndarray):
            dec = _decision_block(X, *args)
        else:
            dec = X.map_blocks(_decision_block, *args, chunks=(X.chunks[0], (len(self.pairs_),)),
                               dtype=np.float64)
        return dec[:, 0] if len(self.pairs_) == 1 else dec

    def predict(self, X):
        """Class labels: the sign of the decision value, or one-vs-one voting."""
        dec = self.decision_function(X)
        if len(self.pairs_) == 1:
            idx = (dec > 0).astype(np.intp)
        elif isinstance(dec, np.ndarray):
            idx = _vote_block(dec, self.pairs_, len(self.classes_))
        else:
            idx = dec.map_blocks(_vote_block, self.pairs_, len(self.classes_), drop_axis=1,
                                 dtype=np.intp)
        return self.classes_[idx] if isinstance(idx, np.ndarray) else idx.map_blocks(
            lambda i, c: c[i], self.classes_, dtype=self.classes_.dtype)

    def transform(self, X):
        """The features ``G^T x`` (n_samples, n_components), or all pairs' features side by
        side (n_samples, n_pairs * n_components)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "coef_")
        X = _check_features(X, self)
        Gs = list(self._Gs)
        if isinstance(X, np.ndarray):
            return _features_block(X, Gs)
        return X.map_blocks(_features_block, Gs, chunks=(X.chunks[0], (len(Gs) * self.n_components,)),
                            dtype=np.float64)

    def score(self, X, y, sample_weight=None):
        """Mean accuracy (computed with the cluster for Dask input)."""
        pred = self.predict(X)
        if isinstance(pred, np.ndarray) and isinstance(y, np.ndarray):
            return float(np.mean(pred == np.asarray(y)))
        import dask.array as da

        y = da.asarray(y)
        return float((da.asarray(pred) == y.rechunk(da.asarray(pred).chunks)).mean().compute())


def _unit_columns(G, fit):
    """G's columns scaled to unit norm, the scale moved into H (ERRATA: fixes the scale the
    margin could otherwise exploit)."""
    norms = np.sqrt((G ** 2).sum(axis=0))
    norms = np.where(norms > 0, norms, 1.0)
    fit.rescale(norms)
    return G / norms


def _map(blocks, fn, *args):
    if not blocks.is_dask:
        return fn(*args)
    from dask import delayed

    return delayed(fn, pure=True)(*args)


def _check_labels(y, X, blocks, name):
    """Labels aligned with X's row blocks (NumPy pieces or Delayed) and the classes."""
    import dask.array as da

    if y is None:
        raise ValueError(f"{name} requires y to be passed, but the target y is None.")
    lazy = isinstance(y, da.Array)
    if not lazy:
        y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y passed to {name} must be 1-D (n_samples,), got shape {tuple(y.shape)}.")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                         f"X has {X.shape[0]} rows, y has {y.shape[0]}.")
    if lazy and not blocks.is_dask:
        y = y.compute()
        lazy = False
    classes = da.unique(y).compute() if lazy else np.unique(y)
    if len(classes) < 2:
        raise ValueError(f"{name} needs samples of at least 2 classes in y; got 1 class "
                         f"({classes[0]!r}).")
    if lazy or blocks.is_dask:
        yd = y if lazy else da.from_array(y, chunks=(blocks.sizes,))
        pieces = list(yd.rechunk((blocks.sizes,)).to_delayed().ravel())
    else:
        pieces = [y[s:s + n] for s, n in zip(blocks.starts, blocks.sizes)]
    return pieces, classes
