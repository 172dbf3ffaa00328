"""Max-Margin Semi-NMF (Kumar, Kotsia & Patras), out of core: the semi-NMF of
:mod:`daskrnmf.models.seminmf` (Ding, Li & Jordan) trained jointly with a max-margin
classifier.

Samples are rows here: X (n, d) ~ H G^T with H (n, k) >= 0 and G (d, k) of any sign; the
papers' X, H are our X^T, H^T.  Max-Margin Semi-NMF (Kumar et al., eq. 4), with
``lam`` the ``reconstruction_weight``::

    min_{G, H >= 0, w, b}  lam ||X - H G^T||_F^2 + 1/2 ||w||^2
                           + C sum_i max(0, 1 - y_i (w^T G^T x_i + b))

alternating a G step (eq. 5-10), an SVM step on the features G^T x (eq. 11) and an H step
(eq. 12-14, NNLS per sample).

The G step without an L x L matrix
----------------------------------
Divide eq. 5 by lam (theta = C / lam; the paper's eq. 7 drops lam).  With S = H^T H,
P = S^-1, the semi-NMF basis G_0 = X^T H P and alpha_i the multipliers of the margin
constraints, u = sum_i alpha_i y_i x_i (a d-vector), stationarity (eq. 7) reads (the
steps below replace S by S + diag(w^2) / (2 lam) and x_i by x_i - xbar: see "Scale of G"
at the end)::

    G = G_0 + 1/2 u w^T P.

Put it back into the Lagrangian.  ||X - H G^T||^2 is a quadratic in G minimised at G_0;
at G_0 + D it exceeds its minimum by tr(D S D^T), here 1/4 (w^T P w) ||u||^2, and the
margin term is linear in G: sum_i alpha_i y_i x_i^T G w = u^T G_0 w + 1/2 (w^T P w) ||u||^2.
So with c = w^T P w and f_i = x_i^T G_0 w, the dual (eq. 9) is::

    max_{0 <= alpha_i <= theta}  sum_i alpha_i (1 - y_i (f_i + b)) - c/4 alpha^T Q alpha,
                                 Q_ij = y_i y_j x_i^T x_j,   alpha^T Q alpha = ||u||^2.

Term by term, eq. 10 agrees: with M_i = x_i w^T and B = (2 H H^T)^-1, T_1 = c/4 Q and
T_2 = c/2 Q (T_2 is printed with y_1 y_2: it is y_i y_j), t_3 = t_5 cancel,
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

Two choices the paper leaves open.  Scale of G: the margin term can be improved by
inflating G (features G^T x grow, ||w|| shrinks), so G's columns are held at unit norm.
Normalising after an unconstrained G step (scale moved into H and w) lets the objective
rise: the G step inflates the columns along w and the normalisation hands the growth to
||w||.  So the steps descend the scale-invariant form of the objective::

    J = lam ||X - H G^T||^2 + 1/2 sum_j w_j^2 ||g_j||^2 + 1/2 (c0 / s)^2
        + C sum_i max(0, 1 - y_i (w^T G^T (x_i - xbar) + c0)),

equal to the model's objective on unit-norm columns (c0 the intercept of the centred
features, s the intercept scaling) and unchanged by moving a column's scale into
H and w.  Its G step is the problem above with S + diag(w^2) / (2 lam) for S and the
centred rows x_i - xbar (c0 held, not b), warm started at the v that keeps the current
decision values, whose objective is no higher than the current G's; the solver returns
the best point it measured.  Each step (G; H by exact NNLS; w, c0 warm started) then
minimises J over its own variables from where the last one left it, and normalising
changes nothing: the objective cannot rise (tested).  The G step need not be solved to
the end for that, so it is given ``max_inner_iter`` passes over X and continues from
its last point at the next iteration.  The SVM step reads the k features per row that
the H pass keeps next to X's blocks, not X.  Start: Algorithm 1 needs w, b before the
first G step; they come from the exact codes of the initial semi-NMF basis (one pass)
and the SVM step on their features.

The passes themselves (per-block functions, the exact NNLS) are in
:mod:`daskrnmf.models._semi`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import accuracy_score
from sklearn.utils import assert_all_finite
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, column_or_1d

from .. import _validation as v
from .._base import BaseModel, FactorizationMixin
from .._blocks import RowBlocks
from .._typing import Array, Data, Labels
from ..kernels.blocks import sum_arrays
from ..reductions import label_counts
from . import _semi
from .seminmf import _COMMON

#: range of C, reconstruction_weight and intercept_scaling (see the constraint table)
_WEIGHT_MIN, _WEIGHT_MAX = 1e-50, 1e50
#: Newton passes allowed to an SVM step (over the k features kept per row, not over X)
_SVM_PASSES = 100
#: smallest smoothing width a warm-started SVM step begins at (the margin is 1): a solve to
#: a tight inner_tol ends far below the residuals' scale of the next problem, where
#: Newton's Hessian sees almost no rows.  (The G step starts where its last one ended.)
_SVM_WARM_MU = 1e-3



# ---------------------------------------------------------------- MNMF's outer iteration
@dataclass(frozen=True)
class _MarginState:
    """What Algorithm 1 carries from one iteration to the next (H stays on the blocks):
    the basis G, the SVM step's primal point, the smoothing widths the last G step and
    SVM step ended at (the next ones start there), and per iteration the Newton passes
    and final relative duality gaps of (G step, SVM step)."""

    G: np.ndarray
    v_svm: np.ndarray
    mu: tuple
    passes: tuple
    gaps: tuple


class _MarginFit:
    """Algorithm 1 of Max-Margin Semi-NMF on one binary problem: ``step`` is one outer
    iteration (G step, normalisation, H step, SVM step) for the driver.

    The objective it descends (per binary problem, ``c0`` the intercept of the centred
    features, the one the SVM step regularises)::

        J = lam ||X - H G^T||^2 + 1/2 sum_j w_j^2 ||g_j||^2 + 1/2 (c0 / s)^2
            + C sum_i max(0, 1 - y_i (w^T G^T (x_i - xbar) + c0))

    which is the model's objective on unit-norm columns and does not change when a
    column is scaled and the scale moved into H and w — so normalising G changes nothing,
    and each step minimises J over its block of variables (G; H; w, c0) from the point
    the previous step left: the objective cannot rise.
    """

    # what a checkpoint holds besides the driver's state (daskrnmf._resume): the last H
    # pass's statistics (the next G step's basis) and H's pending scale.  Nothing per
    # row: of the blocks' state a step reads only the labels (made again from y), and
    # its H pass computes H and the features G^T x afresh (exact NNLS codes for the new
    # G), so a resumed run recomputes them exactly where the NMF family must save H
    checkpoint_attributes = ("stats", "scale")
    stats = property(lambda self: self.problem.stats,
                     lambda self, value: setattr(self.problem, "stats", value))
    scale = property(lambda self: self.problem.scale,
                     lambda self, value: setattr(self.problem, "scale", value))

    def __init__(self, problem, *, C, reconstruction_weight, intercept_scaling,
                 max_inner_iter, inner_tol):
        self.problem = problem
        self.C = float(C)
        self.weight = float(reconstruction_weight)
        self.theta = self.C / self.weight
        self.s = float(intercept_scaling)
        self.max_passes = int(max_inner_iter)
        self.tol = float(inner_tol)

    def svm(self, G, v0, mu0=None):
        """The SVM step (eq. 11) on ``[G^T x - mean, intercept_scaling]``, over the
        features the last H pass kept on the blocks (no pass over X): centred on the
        problem's mean, so the intercept is near 0 and its regularisation acts on the
        centred intercept."""
        spec = _semi.HingeSpec(key="svm", fmean=G.T @ self.problem.xbar,
                               intercept_scaling=self.s)
        return self.problem.hinge_solve(spec, v0, 1.0, self.C,
                                        max_passes=max(self.max_passes, _SVM_PASSES),
                                        tol=self.tol,
                                        mu0=None if mu0 is None else max(mu0, _SVM_WARM_MU))

    def classifier(self, state):
        """``(w, b)`` of the decision value ``w^T G^T x + b``."""
        k = state.G.shape[1]
        w = state.v_svm[:k]
        return w.copy(), float(state.v_svm[k] * self.s - w @ (state.G.T @ self.problem.xbar))

    def objective(self, loss, v_svm, info):
        """The objective (class docstring) from the H pass's loss and the SVM step."""
        return self.weight * loss + 0.5 * float(v_svm @ v_svm) + self.C * info["hinge"]

    def initial_state(self, G):
        """w, b before the first G step: exact codes for the unit-norm semi-NMF basis (one
        pass, which keeps the features), then the SVM step on them."""
        G, _ = self.problem.unit_columns(G)
        self.problem.h_pass(G, "nnls", keep_features=True)
        v_svm, info = self.svm(G, np.zeros(G.shape[1] + 1))
        return _MarginState(G=G, v_svm=v_svm, mu=(None, info["mu"]),
                            passes=((0, info["passes"]),), gaps=((0.0, info["gap"]),))

    def step(self, state, active):
        problem = self.problem
        k = state.G.shape[1]
        w, c0 = state.v_svm[:k], float(state.v_svm[k]) * self.s
        # the G step minimises lam ||X - H G^T||^2 + 1/2 sum_j w_j^2 ||g_j||^2 + hinge
        G0, P = problem.basis(w * w / (2 * self.weight))
        c = float(w @ P @ w)
        # c = 0 only for w = 0; c is of the order reconstruction_weight / w^2, so no fixed
        # floor fits (1e-12 skipped every G step at reconstruction_weight <= 1e-13)
        if c > 0:
            # G = G_0 + v w^T P / c with v the primal solution (module docstring), warm
            # started at the v that keeps the current decision values (its objective is
            # no higher than the current G's)
            G0w = G0 @ w
            spec = _semi.HingeSpec(key="G", G0w=G0w, c0=c0, xbar=problem.xbar)
            v_basis, info_g = problem.hinge_solve(spec, state.G @ w - G0w, c / 2,
                                                  self.theta, max_passes=self.max_passes,
                                                  tol=self.tol, mu0=state.mu[0])
            G = G0 + np.outer(v_basis, P @ w) / c
        else:            # w = 0: the margin term does not depend on G
            G, info_g = G0, {"passes": 0, "gap": 0.0, "mu": state.mu[0]}
        G, norms = problem.unit_columns(G)
        loss = problem.h_pass(G, "nnls", keep_features=True)
        # the SVM step starts from the same classifier on the rescaled features
        v_svm, info_s = self.svm(G, np.append(w * norms, state.v_svm[k]), state.mu[1])
        new = replace(state, G=G, v_svm=v_svm, mu=(info_g["mu"], info_s["mu"]),
                      passes=state.passes + ((info_g["passes"], info_s["passes"]),),
                      gaps=state.gaps + ((info_g["gap"], info_s["gap"]),))
        return new, np.array([self.objective(loss, v_svm, info_s)])


class MNMF(ClassifierMixin, FactorizationMixin, BaseModel):
    """Max-Margin Semi-NMF: a semi-NMF basis trained jointly with a linear SVM on the
    features ``G^T x``, out of core.

    Objective per binary problem (labels y_i in {-1, +1}, xbar the problem's mean row)::

        reconstruction_weight ||X - H G^T||_F^2 + 1/2 (||w||^2 + (c0 / intercept_scaling)^2)
            + C sum_i max(0, 1 - y_i (w^T G^T x_i + b)),   H >= 0, ||g_j|| = 1,
        c0 = b + w^T G^T xbar

    (the intercept of the centred features regularised, as LinearSVC regularises its
    intercept; G's columns of unit norm, a choice the paper leaves open).  Algorithm 1 of
    Kumar et al., per iteration: the G step (eq. 9 in its d-dimensional primal form, see
    the module docstring: smoothed Newton, one pass over X a step, at most
    ``max_inner_iter``), G's columns normalised, the H step (exact NNLS per sample, one
    pass, which also gathers the statistics for the next G step and keeps the features
    G^T x next to the blocks), the SVM step (the same solver on the k + 1 features, over
    those kept features: no pass over X).  Passes over X per iteration: at most
    ``max_inner_iter + 1`` (9 at the defaults).  Each step minimises the objective over
    its variables from where the previous one left it, so the objective does not rise
    from one iteration to the next (module docstring: "Scale of G").  Initialisation:
    ``semi_max_iter`` semi-NMF iterations, one pass for the exact codes of that basis,
    then the SVM step.

    More than two classes: one-vs-one, one binary problem per pair of classes (on that
    pair's samples), as the paper does on KTH; :meth:`decision_function` turns the pairs'
    votes and confidences into one score per class, as scikit-learn's SVC does.  The
    n_classes (n_classes - 1) / 2 problems are fitted one after the other, each with its
    own passes over X, so the fit's time grows with the square of the number of classes.
    Every class needs at least 2 samples.

    Parameters
    ----------
    n_components : int, default=8
        k, the number of basis vectors (features).
    C : float, default=100.0
        Weight of the hinge losses, in [1e-50, 1e50].
    reconstruction_weight : float, default=0.01
        Weight of the reconstruction error (``lam`` in the paper); the G step's box is
        ``theta = C / reconstruction_weight``, which must be large for the margin to
        shape G (with both 1, MNMF does no better than semi-NMF + SVM).  In [1e-50, 1e50]
        (beyond, the solvers' products overflow float64).
    max_iter : int, default=10
        Outer iterations of Algorithm 1 (0: semi-NMF + SVM).  The paper's toy converges in
        6.
    tol : float, default=1e-3
        Stop when the objective decreases by no more than ``tol`` relative; also the
        tolerance of the semi-NMF initialisation.
    semi_max_iter : int, default=200
        Semi-NMF iterations of the initialisation.
    max_inner_iter : int, default=8
        Newton steps (passes over X) per G step.  The G step need not be solved to the
        end for the objective to fall, and it continues from its last point at the next
        iteration; 8 gives the accuracy of solving it to ``inner_tol`` (50 passes) on the
        benchmark sets at a fifth of the passes.  The SVM step's Newton passes, over the
        k features per row, are allowed ``max(max_inner_iter, 100)``.
    inner_tol : float, default=1e-3
        Relative duality gap that ends a G step / SVM step.
    intercept_scaling : float, default=1.0
        The constant feature that carries the intercept (as LinearSVC's), in
        [1e-50, 1e50].
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every outer
        iteration of every binary problem (G, the classifier and the last pass's
        statistics: small arrays; H and the features G^T x are computed afresh by each
        iteration and not saved), atomically; ``fit(X, y, resume=True)`` continues from
        it with exactly the uninterrupted result (the binary problems already fitted are
        taken from it).  The library owns it (a marker file and its own subfolder;
        nothing else in it is touched).
    random_state : None, int, RandomState or Generator, default=None
        Seed of the initial H.  Never modified.
    verbose : int, default=0
        >= 1 logs the objective per outer iteration on the ``daskrnmf`` logger.
    callback : callable, default=None
        ``callback(info) -> bool`` after each outer iteration of each binary problem
        (the driver's dict, see the user guide's page *Progress, verbose and callbacks*); returning True stops that
        problem's iterations.
    lam, inner_max_iter
        Deprecated names of ``reconstruction_weight`` and ``max_inner_iter``: accepted
        with a FutureWarning, removed in daskrnmf 0.3.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    components_ : ndarray
        G^T per binary problem, in X's float dtype: of shape (n_components, n_features)
        for two classes, else (n_pairs, n_components, n_features).
    coef_ : ndarray of shape (n_pairs, n_components)
        w per binary problem (one row for two classes).
    intercept_ : ndarray of shape (n_pairs,)
        b per binary problem.
    pairs_ : list of (int, int)
        Class-index pairs, one per binary problem, the first class of a pair the positive
        one: ``[(1, 0)]`` for two classes (positive: ``classes_[1]``, as scikit-learn),
        else ``(i, j)`` for i < j.
    n_components_ : int
        Number of components per binary problem.
    objective_history_ : list of ndarray
        The objective after each outer iteration, one array per binary problem.
    n_iter_ : ndarray of shape (n_pairs,)
        Outer iterations run per binary problem.
    n_passes_ : int
        Passes over X the fit made.
    inner_passes_ : list of ndarray of shape (n_iter + 1, 2)
        Per binary problem, the Newton passes of the G step (over X) and of the SVM step
        (over the kept features) in each iteration; row 0 is the initial SVM step (no G
        step).
    inner_gaps_ : list of ndarray of shape (n_iter + 1, 2)
        Their final relative duality gaps.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the features seen during fit (only when X has string column names).

    See Also
    --------
    SemiNMF : the factorization alone.

    References
    ----------
    .. [1] B. G. Vijay Kumar, I. Kotsia and I. Patras, "Max-Margin Semi-NMF", Proceedings
       of the British Machine Vision Conference (BMVC), 2011.
    .. [2] C. H. Q. Ding, T. Li and M. I. Jordan, "Convex and Semi-Nonnegative Matrix
       Factorizations", IEEE Transactions on Pattern Analysis and Machine Intelligence,
       32(1):45-55, 2010.
    .. [3] O. Chapelle, "Training a Support Vector Machine in the Primal", Neural
       Computation, 19(5):1155-1178, 2007 (the smoothed Newton solver).

    Examples
    --------
    >>> from daskrnmf import MNMF
    >>> from daskrnmf.datasets import make_margin_gaussians
    >>> X, y = make_margin_gaussians(random_state=0)
    >>> clf = MNMF(n_components=2, max_iter=3, random_state=0).fit(X, y)
    >>> clf.predict(X[:5]).shape, clf.transform(X).shape
    ((5,), (200, 2))
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    _parameter_constraints = {
        **_COMMON,
        "max_iter": [v.Interval(int, 0, None)],
        # the G step's Hessian holds C / reconstruction_weight and the SVM step's
        # intercept_scaling^2 (over a smoothing width down to 1e-9): beyond 1e+-50 these
        # products overflow float64 (measured: non-finite intercept_ at intercept_scaling
        # 1e200, overflowing Hessians at C / reconstruction_weight 1e200)
        "C": [v.Interval(float, _WEIGHT_MIN, _WEIGHT_MAX)],
        "reconstruction_weight": [v.Interval(float, _WEIGHT_MIN, _WEIGHT_MAX)],
        "semi_max_iter": [v.Interval(int, 1, None)],
        "max_inner_iter": [v.Interval(int, 1, None)],
        "inner_tol": [v.Interval(float, 0, None, closed="neither")],
        "intercept_scaling": [v.Interval(float, _WEIGHT_MIN, _WEIGHT_MAX)],
    }
    _renamed_params = {"lam": "reconstruction_weight", "inner_max_iter": "max_inner_iter"}
    _fitted_attribute = "coef_"
    _cast_attributes = BaseModel._cast_attributes + ("coef_", "intercept_")

    def __init__(self, n_components=8, *, C=100.0, reconstruction_weight=0.01, max_iter=10,
                 tol=1e-3, semi_max_iter=200, max_inner_iter=8, inner_tol=1e-3,
                 intercept_scaling=1.0, checkpoint=None, random_state=None, verbose=0,
                 callback=None, **renamed):
        self.n_components = n_components
        self.C = C
        self.reconstruction_weight = reconstruction_weight
        self.max_iter = max_iter
        self.tol = tol
        self.semi_max_iter = semi_max_iter
        self.max_inner_iter = max_inner_iter
        self.inner_tol = inner_tol
        self.intercept_scaling = intercept_scaling
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback
        self._take_renamed(renamed)

    # ------------------------------------------------------------ fit
    def fit(self, X: Data, y: Labels, *, resume: bool = False,
            overwrite_checkpoint: bool = False) -> MNMF:
        """Fit on samples X and their class labels y.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
            Class labels.  A Dask y stays lazy for Dask/Zarr X: it is rechunked to X's row
            chunks and never gathered (only its distinct values are).
        resume : bool, default=False
            Continue from the ``checkpoint`` directory if it holds a run of this model on
            this X (same data, chunking, parameters and seed; ``max_iter`` may differ):
            the result is exactly the uninterrupted fit's.  Without a checkpoint there
            the fit starts afresh.  A damaged checkpoint, or one made from other data or
            parameters, is a ValueError.  Needs the parameter ``checkpoint``.
        overwrite_checkpoint : bool, default=False
            Without ``resume``, a ``checkpoint`` directory that holds an earlier run's
            checkpoint is a ValueError unless this is True (the earlier run is then
            replaced at the first save).

        Returns
        -------
        self
        """
        fit_params = {}
        if resume or overwrite_checkpoint:
            fit_params.update(resume=resume, overwrite_checkpoint=overwrite_checkpoint)
        self._fit(X, y, **fit_params)
        return self

    def _validate_target(self, X, y):
        """y as a 1-D NumPy array, or a 1-D Dask array when X is lazy; sets ``classes_``."""
        if y is None:
            raise ValueError(f"{self._name} requires y to be passed, but the target y is None.")
        if _is_dask_array(y):
            if y.ndim == 2 and y.shape[1] == 1:
                warnings.warn("A column-vector y was passed when a 1d array was expected. "
                              "Please change the shape of y to (n_samples, ), for example "
                              "using ravel().", DataConversionWarning, stacklevel=4)
                y = y[:, 0]
            if y.ndim != 1:
                raise ValueError(f"y should be a 1d array, got an array of shape "
                                 f"{tuple(y.shape)} instead.")
            check_consistent_length(X, y)
            if isinstance(X, np.ndarray):
                y = y.compute()        # X is in memory: y is small next to it
            else:
                # the labels and their counts in one pass (unsorted: mixed str / int
                # labels reach the check below instead of failing a sort)
                counts = label_counts(y)
                labels = np.empty(len(counts), dtype=object)
                labels[:] = list(counts)
                _refuse_mixed_labels(labels)
                order = sorted(range(len(labels)), key=lambda i: labels[i])
                classes = labels[order] if y.dtype == object else \
                    np.asarray(labels[order].tolist(), dtype=y.dtype)
                self.classes_ = _checked_classes(classes, [counts[c] for c in labels[order]])
                return y
        y = column_or_1d(y, warn=True)
        check_consistent_length(X, y)
        self.classes_ = _checked_classes(y)
        return y

    def _fit_blocks(self, X, blocks, stats, seed, y):
        classes = self.classes_
        y_blocks = blocks.split(y)
        n = len(classes)
        pairs = [(1, 0)] if n == 2 else [(i, j) for i in range(n) for j in range(i + 1, n)]
        out = []
        for a, b in pairs:
            labels = blocks.per_block(_semi.pair_labels, y_blocks, classes[a], classes[b])
            name = self._name if n == 2 else (f"{self._name} ({_plain(classes[a])!r} vs "
                                               f"{_plain(classes[b])!r})")
            out.append(self._fit_pair(blocks, labels, seed, name))
        Gs = np.stack([o["G"] for o in out])
        self.pairs_ = pairs
        self.n_components_ = self.n_components
        self.components_ = Gs[0].T if len(out) == 1 else np.transpose(Gs, (0, 2, 1))
        self.coef_ = np.stack([o["w"] for o in out])
        self.intercept_ = np.array([o["b"] for o in out])
        self.objective_history_ = [o["history"] for o in out]
        self.n_iter_ = np.array([o["n_iter"] for o in out])
        self.inner_passes_ = [o["passes"] for o in out]
        self.inner_gaps_ = [o["gaps"] for o in out]

    def _fit_pair(self, blocks, labels, seed, name):
        """Algorithm 1 on one binary problem (the rows labelled +1 / -1 in ``labels``)."""
        problem = _semi.SemiProblem(blocks, labels, k=self.n_components, seed=seed)
        semi, _ = self._run(problem.ding_step, _semi.DingState(G=problem.basis()[0]),
                            max_iter=self.semi_max_iter, blocks=blocks, quiet=True,
                            name=f"{name} semi-NMF initialisation")
        fit = _MarginFit(problem, C=self.C, reconstruction_weight=self.reconstruction_weight,
                         intercept_scaling=self.intercept_scaling,
                         max_inner_iter=self.max_inner_iter, inner_tol=self.inner_tol)
        state = fit.initial_state(semi.G)
        history, n_iter = np.zeros(0), 0
        if self.max_iter > 0:
            state, log = self._run(fit.step, state, blocks=blocks, name=name, problem=fit)
            # warns if it did not converge; the per-problem values are collected below
            self._set_iterations(log, name=name)
            history, n_iter = self.objective_history_, self.n_iter_
        w, b = fit.classifier(state)
        return {"G": state.G, "w": w, "b": b, "history": history, "n_iter": n_iter,
                "passes": np.array(state.passes, dtype=int).reshape(-1, 2),
                "gaps": np.array(state.gaps, dtype=float).reshape(-1, 2)}

    # ------------------------------------------------------------ predict
    def _problems(self):
        """G (n_features, k), w and b of every binary problem, in float64."""
        C = np.asarray(self.components_, dtype=np.float64)
        Gs = [C.T] if C.ndim == 2 else [c.T for c in C]
        return (Gs, list(np.asarray(self.coef_, dtype=np.float64)),
                [float(b) for b in self.intercept_])

    def decision_function(self, X: Data) -> Array:
        """Confidence scores.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Two classes: ``w^T G^T x + b`` (positive: ``classes_[1]``).  More: the
            one-vs-one votes plus squashed summed confidences (SVC's ``"ovr"`` shape),
            whose argmax is :meth:`predict`.  In X's float dtype; lazy for Dask/Zarr
            input.
        """
        X = self._checked_input(X, "decision_function")
        n = len(self.classes_)
        dtype = self._output_dtype(X)
        return self._map_rows(X, _semi.decision_block, None if n == 2 else n, dtype,
                              *self._problems(), n)

    def predict(self, X: Data) -> Array:
        """Class labels: the sign of the decision value, or the argmax of the scores.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Labels from ``classes_``; lazy for Dask/Zarr input.
        """
        return self._predicted(self._checked_input(X, "predict"))

    def _predicted(self, X):
        """:meth:`predict` of an already checked X."""
        return self._map_rows(X, _semi.predict_block, None, self.classes_.dtype,
                              *self._problems(), self.classes_, self._output_dtype(X))

    def transform(self, X: Data) -> Array:
        """The features ``G^T x``.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)

        Returns
        -------
        features : ndarray of shape (n_samples, n_pairs * n_components)
            All binary problems' features side by side (n_components columns for two
            classes).  In X's float dtype; lazy for Dask/Zarr input.
        """
        X = self._checked_input(X, "transform")
        Gs = self._problems()[0]
        return self._map_rows(X, _semi.features_block, len(Gs) * self.n_components_,
                              self._output_dtype(X), Gs)

    @property
    def _n_features_out(self):
        return len(self.pairs_) * self.n_components_

    def score(self, X: Data, y: Labels, sample_weight: Labels | None = None) -> float:
        """Mean accuracy on (X, y).

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
            True labels.
        sample_weight : array-like or dask array of shape (n_samples,), optional

        Returns
        -------
        score : float
            The (weighted) fraction of samples predicted right.  For Dask/Zarr X one pass
            on the cluster: neither the predictions nor y are gathered.
        """
        X = self._checked_input(X, "score")
        if isinstance(X, np.ndarray):      # X is in memory: y is small next to it
            y, sample_weight = (a.compute() if _is_dask_array(a) else a
                                for a in (y, sample_weight))
            return float(accuracy_score(y, self._predicted(X), sample_weight=sample_weight))
        for a in (y, sample_weight):
            if a is not None and np.ndim(a) != 1:
                raise ValueError(f"y should be a 1d array, got an array of shape "
                                 f"{tuple(np.shape(a))} instead.")
        check_consistent_length(X, y, sample_weight)
        # strings beside numbers never match: scikit-learn's accuracy_score (NumPy X)
        # refuses them; the blocks' comparisons would give 0 without a word
        kinds = [(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype).kind
                 for a in (y, self.classes_)]      # a Dask y is not computed
        if {"U", "S"} & set(kinds) and set(kinds) & set("biuf"):
            raise ValueError("Mix of label input types (string and number): y holds "
                             f"{'strings' if kinds[0] in 'US' else 'numbers'}, classes_ "
                             f"{'strings' if kinds[1] in 'US' else 'numbers'}.")
        blocks = RowBlocks(X)
        labels = blocks.split(y)
        weights = [None] * blocks.n_blocks if sample_weight is None else \
            blocks.split(sample_weight)
        right, total = blocks.map_reduce(
            _semi.score_chunk, sum_arrays, state=list(zip(labels, weights)),
            args=((f"X passed to {self._name}", self._non_negative, self._allow_nan),
                  *self._problems(), self.classes_, self._output_dtype(X)), name="score")
        if total == 0:      # scikit-learn's accuracy_score refuses it (NumPy X here too)
            raise ValueError("Sample weights must contain at least one non-zero number.")
        return float(right / total)

    def _outputs(self, X):
        return {"predictions": self.predict(X)}


# ---------------------------------------------------------------- labels
def _plain(label):
    """A class label as a Python scalar (for messages: 1, not np.int64(1))."""
    return label.item() if isinstance(label, np.generic) else label


def _is_dask_array(y):
    return (type(y).__module__ or "").startswith("dask.")


def _checked_classes(y, counts=None):
    """The sorted classes of y: a classification target (a continuous y is an error), no
    NaN, labels all strings or all numbers, at least two classes, at least two samples of
    each.

    ``counts``: when given, ``y`` is already its sorted distinct values and ``counts``
    their numbers of samples (a Dask y is never gathered, only these).

    A class of one sample is refused, as scikit-learn's QuadraticDiscriminantAnalysis
    does: each class is a side of ``n_classes - 1`` binary problems, every one a fit of
    its own over all of X, so labels that are (nearly) all distinct make a fit of about
    n_samples**2 / 2 problems that would run for hours on Dask input and learn a margin
    from single points.
    """
    y = np.asarray(y)
    if y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")
    _refuse_mixed_labels(y)
    check_classification_targets(y)
    if counts is None:
        classes, counts = np.unique(y, return_counts=True)
    else:
        classes, counts = y, np.asarray(counts)
    if len(classes) < 2:
        raise ValueError(f"MNMF needs samples of at least 2 classes in y; got 1 class "
                         f"({classes[0]!r}).")
    single = classes[counts < 2]
    if len(single):
        shown = ", ".join(repr(_plain(c)) for c in single[:10]) + (", ..." if len(single) > 10
                                                                   else "")
        raise ValueError(f"MNMF needs at least 2 samples of every class in y; {len(single)} "
                         f"class{'es have' if len(single) > 1 else ' has'} 1 sample: "
                         f"[{shown}]. Merge or drop those classes (one binary problem is "
                         "fitted per pair of classes, over all of X).")
    return classes


def _refuse_mixed_labels(y):
    """scikit-learn's unique_labels message for an object y mixing strings and numbers
    (np.unique could not sort them)."""
    if y.dtype == object and len({isinstance(label, str) for label in y}) > 1:
        raise ValueError("Mix of label input types (string and number)")
