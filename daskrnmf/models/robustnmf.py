"""RobustNMF — the batch robust NMF with outliers of Zhao & Tan, ONMFO's batch twin —
and what the two share: transform, decompose and inverse_transform of a fitted
X ~ H W + R model.

Samples are rows: X (n_samples, n_features) ~ H W + R with W >= 0 (n_components,
n_features) the components (the paper's W^T), H >= 0 the codes and R >= 0 a sparse matrix
of gross non-negative outliers:

    min_{W, H, R >= 0} 1/2 ||X - H W - R||_F^2 + alpha_R ||R||_{1,1}                (5)

RobustNMF runs the updates (6)-(8) on all of X: one pass per iteration.  State: W on the
client; H and R with X's row blocks on the workers (R is as large as X: held, and
spilled to disk, by the workers, never gathered).  Step: each block takes one round of
(7)-(8) and returns ``H^T X``, ``H^T H``, ``H^T R`` and its objective; W takes one step
of (6) from their tree-reduced sums.  The per-block solves are
:mod:`daskrnmf.models._outliers`; the online model is :mod:`daskrnmf.models.onmfo`.
"""

import dataclasses

import numpy as np

from .. import _validation as v
from .._base import BaseModel, FactorizationMixin
from ..kernels.outliers import update_components, update_components_cd
from ._outliers import (W_SWEEPS, SolveSpec, add_statistics, auto_alpha,
                        batch_chunk, batch_chunk_cd, batch_init_chunk, batch_init_chunk_cd,
                        codes_block, count, initial_components)


#: The codes of :meth:`~_OutlierFactorization.transform` and ``decompose`` are solved to
#: ``min(inner_tol, CODES_TOL)``: ONMFO fits at ``inner_tol=1e-2`` (its codes are solved
#: again at every pass), but final codes at 1e-2 reconstruct worse than its W allows (4M x
#: 64 planted, 1 % gross: E_avg 1.165x a converged RobustNMF's, 1.003x at 1e-3;
#: ``benchmarks/results/onmfo_planted.md``).
CODES_TOL = 1e-3


class _OutlierFactorization(FactorizationMixin, BaseModel):
    """transform / decompose / inverse_transform of a fitted X ~ H W + R model."""

    _non_negative = True
    _supports_missing = True
    _renamed_params = {"lam": "alpha_R"}
    _parameter_constraints = {
        **BaseModel._parameter_constraints,
        "n_components": [v.Interval(int, 1, None)],
        "alpha_R": [v.Interval(float, 0, None, closed="neither"), v.Options(("auto",))],
        "solver": [v.Options(("cd", "mu"))],
        "max_inner_iter": [v.Interval(int, 1, None)],
        "inner_tol": [v.Interval(float, 0, None)],
        "missing": [v.MISSING],
    }

    def _codes(self, X, what, method):
        X = self._checked_input(X, method)
        width = self.n_components_ + (X.shape[1] if what == "hr" else 0)
        W = np.asarray(self.components_, dtype=np.float64)
        spec = dataclasses.replace(self._spec(), tol=min(float(self.inner_tol), CODES_TOL))
        return self._map_rows(X, codes_block, width, self._output_dtype(X), W, spec, what)

    def transform(self, X):
        """Codes H of X for the fitted components (problem (3) per sample, W fixed, by
        the model's ``solver``; each sample's solve stops when a round lowers its
        objective by at most ``min(inner_tol, 1e-3)``, relative).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative
            NumPy array or array-like, Dask array, ``zarr.Array`` or Zarr path.

        Returns
        -------
        H : ndarray of shape (n_samples, n_components), in X's float dtype
            Lazy (a Dask array chunked like X's rows) for Dask/Zarr input.
        """
        return self._codes(X, "h", "transform")

    def decompose(self, X):
        """Split X into its clean part and its gross outliers: ``X ~ H W + R`` (solved as
        in :meth:`transform`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray of shape (n_samples, n_components)
        R : ndarray of shape (n_samples, n_features)
            In X's float dtype; for Dask/Zarr input both lazy and chunked like X's rows
            (computed together, one solve per block, in one ``dask.compute``).
            ``H @ components_`` is the outlier-free reconstruction; R is what the model
            calls gross corruption.  With ``missing="mask"``, H fits the observed entries
            and R is 0 at the missing ones (``H @ components_`` fills them).
        """
        HR = self._codes(X, "hr", "decompose")
        k = self.n_components_
        return HR[:, :k], HR[:, k:]

    def inverse_transform(self, H):
        """``H W``: the outlier-free reconstruction.

        Defined at every entry: with ``missing="mask"``, ``inverse_transform(transform(X))``
        fills X's missing entries.

        Parameters
        ----------
        H : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_components)
            Finite codes (as :meth:`transform` gives); NaN, 1-D H or another number of
            columns is a ValueError.

        Returns
        -------
        X_clean : ndarray of shape (n_samples, n_features)
            Lazy and chunked like H's rows for Dask/Zarr H.
        """
        return self._inverse_transform(H)

    def _outputs(self, X):
        H, R = self.decompose(X)
        return {"H": H, "R": R}

    def _fit_alpha(self, feature_max):
        """The fit's alpha_R: the parameter, or for ``"auto"`` :func:`~daskrnmf.models.
        _outliers.auto_alpha` of ``feature_max()`` (the features' maxima; only called
        then)."""
        if isinstance(self.alpha_R, str):
            return auto_alpha(feature_max())
        return float(self.alpha_R)

    def _spec(self, alpha_R=None):
        # the fitted alpha_R_ (a model saved before it existed: the parameter); given
        # ``alpha_R``, that (a spec before the fit has one: ONMFO's warm-up)
        alpha = getattr(self, "alpha_R_", None) if alpha_R is None else alpha_R
        alpha = float(self.alpha_R) if alpha is None else float(alpha)
        return SolveSpec(alpha_R=alpha, n_iter=int(self.max_inner_iter),
                         where=self._name, solver=self.solver, tol=float(self.inner_tol),
                         missing=self._allow_nan)


class RobustNMF(_OutlierFactorization):
    """Batch robust NMF with a sparse non-negative outlier matrix (Zhao & Tan, eq. 5-8).

    Factorizes non-negative X (n_samples, n_features) as ``H W + R`` by minimising

        1/2 ||X - H W - R||_F^2 + alpha_R ||R||_{1,1}   subject to W, H, R >= 0     (5)

    by block coordinate descent (``solver="cd"``, the default) or the paper's
    multiplicative updates (6)-(8) (``"mu"``).  W starts uniform random with entries of
    the size that reproduces X's mean, H from :func:`daskrnmf.kernels.outliers.
    initial_codes`.  One pass over X per iteration:

    * ``"cd"``: each block takes R exactly (``max(0, X - H W - alpha_R)``), a few HALS
      sweeps over its H for ``X - R``, and returns ``H^T (X - R)``, ``H^T H`` and its
      objective; W takes HALS sweeps over its rows from their tree-reduced sums.  Only H
      (n x k) stays with X's blocks (R is recomputed from it).
    * ``"mu"``: each block updates its H (7) and R (8), returns ``H^T X``, ``H^T H``,
      ``H^T R`` and its objective; W takes one step of (6).  H and R (n x d, as large as
      X) stay with X's blocks on the workers, where Dask may spill them to disk.

    Every step of either solver lowers (5) or leaves it (for "mu", the paper's Lemmas
    1-2); the fit stops when an iteration lowers it by at most ``tol`` relative.  Nothing
    of size n_samples is gathered.

    Parameters
    ----------
    n_components : int, default=8
        Number of components k.
    alpha_R : float > 0 or "auto", default="auto"
        Weight of the L1 penalty on the outlier matrix R (the paper's lambda): a
        residual ``x - h W`` above it is called an outlier (R takes the excess).
        ``"auto"``: 0.03 times the data's scale, the upper quartile over the features
        of their maximum in X (from the first pass, which checks X; features never
        above 0 left out), stored as ``alpha_R_``.  It is proportional to X, so the
        fit does not depend on X's units (``X * c`` gives ``alpha_R_ * c`` and the same
        fit, scaled).  Where X has gross values their size sets it: a residual above
        3 % of it is an outlier.  On the paper's faces (pixels up to 50) it is 1.5,
        which reconstructs better than the paper's 1 at 10 % outliers and as well at
        30 %; on clustered data with 1.25 % gross entries it flags 1.6 times that
        fraction, where alpha_R = 1 flagged 18 times (``benchmarks/results/onmfo.md``).
        On data without gross values the maximum is the clean data's, and more entries
        (small residuals) are then called outliers: give a float for a known noise
        level.  A float is used as it is.
    solver : {"cd", "mu"}, default="cd"
        Block coordinate descent (exact R, HALS sweeps over H and W) or the paper's
        multiplicative updates (6)-(8) literally; both minimise (5).  Also the solver of
        :meth:`transform` and :meth:`decompose` (see :class:`ONMFO`).
    max_iter : int, default=300
        Maximum number of iterations (passes over X).
    tol : float >= 0, default=1e-4
        Stop when the objective falls by at most ``tol`` relative in one iteration.
    max_inner_iter : int, default=100
        Most rounds of the per-sample (h, r) solve in :meth:`transform`,
        :meth:`decompose` and :meth:`fit_transform` (W fixed).
    inner_tol : float >= 0, default=1e-3
        A sample's solve in those methods stops when a round lowers its objective by at
        most this, relative.
    missing : {"raise", "mask"}, default="raise"
        ``"raise"``: NaN in X is an error.  ``"mask"``: NaN entries are missing values:
        objective (3) over each sample's observed entries (r is 0 at the missing ones),
        codes from each sample's own Gram matrix ``W diag(m) W^T``, and W from
        per-feature statistics ``B_j = sum_i m_ij h_i^T h_i`` (n_features x
        n_components^2 floats); ``inverse_transform`` fills the missing entries
        (:mod:`daskrnmf.kernels.missing`).
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every iteration
        (W, and H and R chunked like X, written by the workers), atomically;
        ``fit(X, resume=True)`` continues from it with exactly the uninterrupted result.
        The library owns it (a marker file and its own subfolder; nothing else in it is
        touched); it must be visible to every worker (the user guide's page *Checkpoints and resuming a fit*).
    random_state : int, RandomState instance, Generator or None, default=None
        Seeds W's start.
    verbose : int, default=0
        >= 1 writes one line per pass over X outside an iteration, one per iteration and
        a last one (``daskrnmf`` logger, INFO, when logging is configured; else stderr).
    callback : callable or None, default=None
        ``callback(info) -> bool`` after each iteration with the driver's dict
        (the user guide's page *Progress, verbose and callbacks*); True stops the fit.
    **renamed
        ``lam`` (the old name of ``alpha_R``) is accepted with a FutureWarning until
        daskrnmf 0.3.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        W, in X's float dtype.
    alpha_R_ : float
        The alpha_R of the fit (``"auto"``: the value computed from X), also used by
        :meth:`transform` and :meth:`decompose`.
    objective_ : float
        Objective (5) at the final W and the fit's H, R.
    objective_history_ : ndarray of shape (n_iter_,)
        Objective (5) after each iteration.
    n_iter_ : int
        Iterations run.
    n_passes_ : int
        Passes over X (the check pass, the initial H and R, the iterations, the final
        objective).
    n_components_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names.

    See Also
    --------
    ONMFO : the online model with the same objective, for data of any size.

    References
    ----------
    .. [1] R. Zhao and V. Y. F. Tan, "Online nonnegative matrix factorization with
       outliers", in Proc. IEEE International Conference on Acoustics, Speech and Signal
       Processing (ICASSP), 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import RobustNMF
    >>> X = np.random.default_rng(0).uniform(size=(100, 10))
    >>> model = RobustNMF(n_components=3, max_iter=50, tol=1e-3, random_state=0).fit(X)
    >>> H, R = model.decompose(X)
    >>> H.shape, R.shape
    ((100, 3), (100, 10))
    """

    _parameter_constraints = {
        **_OutlierFactorization._parameter_constraints,
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
        "checkpoint": [v.Location()],
    }

    def __init__(self, n_components=8, *, alpha_R="auto", solver="cd", max_iter=300, tol=1e-4,
                 max_inner_iter=100, inner_tol=1e-3, missing="raise", checkpoint=None,
                 random_state=None, verbose=0, callback=None, **renamed):
        self.n_components = n_components
        self.alpha_R = alpha_R
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.max_inner_iter = max_inner_iter
        self.inner_tol = inner_tol
        self.missing = missing
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback
        self._take_renamed(renamed)

    def fit_transform(self, X, y=None):
        """Factorize X and return its codes: ``fit(X).transform(X)``.

        The codes are solved again with the final W (as :meth:`transform` does), so that
        ``fit_transform`` and ``fit(X).transform(X)`` agree.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative
        y : None
            Ignored.

        Returns
        -------
        H : ndarray of shape (n_samples, n_components)
            In X's float dtype; lazy and chunked like X's rows for Dask/Zarr input.
        """
        self._fit(X, y)
        return self.transform(X)

    def _fit_blocks(self, X, blocks, stats, seed, y):
        n, d = X.shape
        alpha_R = self.alpha_R_ = self._fit_alpha(lambda: stats["max"])
        missing = self._allow_nan
        mean = stats["sum"] / max(1, n * d - stats.get("nan", 0))    # of the observed entries
        W = initial_components(seed, self.n_components, d, mean)
        cd = self.solver == "cd"
        init, chunk = ((batch_init_chunk_cd, batch_chunk_cd) if cd
                       else (batch_init_chunk, batch_chunk))
        _, hr = blocks.map_reduce(init, count, args=(W, alpha_R, missing), keep_state=True,
                                  name="initial H" if cd else "initial H, R")
        state = _BatchState(W=W[None], hr=hr)

        def step(state, active):
            res, state.hr = blocks.map_reduce(chunk, add_statistics,
                                              args=(state.W[0], alpha_R, True, missing),
                                              state=state.hr, keep_state=True,
                                              name="H, R + W statistics")
            if cd:
                W = update_components_cd(state.W[0], res["A"], res["B"], res["C"], W_SWEEPS,
                                         1e-3, Bm=res.get("Bm"))[0]
            else:
                W = update_components(state.W[0], res["A"], res["B"], res["C"], 1,
                                      Bm=res.get("Bm"))
            state.W = W[None]
            return state, np.array([res["loss"]])

        state, log = self._run(step, state, blocks=blocks)
        self._set_iterations(log)
        W = state.W[0]
        final, _ = blocks.map_reduce(chunk, add_statistics, args=(W, alpha_R, False, missing),
                                     state=state.hr, keep_state=True, name="final objective")
        self.components_ = W
        self.objective_ = float(final["loss"])
        self.n_components_ = self.n_components


class _BatchState:
    """RobustNMF's state: W (1, k, d) on the client, per-block H ("cd") or (H, R) ("mu")
    with X's blocks."""

    def __init__(self, *, W, hr):
        self.W, self.hr = W, hr
