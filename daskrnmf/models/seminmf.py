"""Semi-NMF (Ding, Li & Jordan), out of core: ``min ||X - H G^T||_F^2`` with H >= 0
and G of any sign; the factorization MNMF (:mod:`daskrnmf.models.mnmf`) trains jointly
with its classifier.  The passes over X are :class:`daskrnmf.models._semi.SemiProblem`'s.

References
----------
.. [1] C. Ding, T. Li and M. I. Jordan, "Convex and Semi-Nonnegative Matrix
   Factorizations", IEEE Transactions on Pattern Analysis and Machine Intelligence 32(1),
   2010.
"""

from __future__ import annotations

import numpy as np

from .. import _validation as v
from .._base import BaseModel, FactorizationMixin
from .._typing import Array, Data, Labels
from . import _semi

_COMMON = {
    **BaseModel._parameter_constraints,
    "n_components": [v.Interval(int, 1, None)],
    "tol": [v.Interval(float, 0, None)],
    "checkpoint": [v.Location()],
}


class SemiNMF(FactorizationMixin, BaseModel):
    """Semi-NMF, ``min ||X - H G^T||_F^2`` with H >= 0 and G of any sign, out of core.

    X (n_samples, n_features) may have any sign; G (n_features, n_components) too, and
    ``components_`` is G^T.  Each iteration is one pass over X: every row block updates
    its rows of H by Ding et al.'s multiplicative rule (eq. 3)::

        H <- H * sqrt(([X G]^+ + H [G^T G]^-) / (H [G^T G]^+ + [X G]^-))

    and returns X^T H and H^T H, tree-reduced; then ``G = X^T H (H^T H)^-1`` (eq. 2).
    These updates never increase the objective.  H starts seeded uniform (keyed on the
    row index, so the fit does not depend on the chunking) and stays on the workers next
    to X's blocks.  After the last iteration one more pass replaces H by the exact
    non-negative least-squares codes for the final G, the ones :meth:`transform` gives,
    so that ``fit_transform(X)`` equals ``fit(X).transform(X)``.

    Parameters
    ----------
    n_components : int, default=8
        Number of components k.
    max_iter : int, default=200
        Maximum number of iterations (passes over X).
    tol : float, default=1e-4
        Stop when the objective decreases by no more than ``tol`` relative.
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every iteration
        (G, and H chunked like X, written by the workers), atomically;
        ``fit(X, resume=True)`` continues from it with exactly the uninterrupted result.
        The library owns it (a marker file and its own subfolder; nothing else in it is
        touched); it must be visible to every worker (the user guide's page *Checkpoints and resuming a fit*).
    random_state : None, int, RandomState or Generator, default=None
        Seed of the initial H.  Never modified.
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, default=None
        ``callback(info) -> bool`` after every iteration, ``info`` the driver's dict
        (``iteration``, ``objective``, ``n_passes``, ...; see the user guide's page *Progress, verbose and callbacks*);
        returning True stops the fit.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        G^T, in X's float dtype.
    n_components_ : int
        Number of components.
    reconstruction_err_ : float
        ``||X - H G^T||_F`` for the final G and its exact codes H.
    objective_history_ : ndarray of shape (n_iter_,)
        ``||X - H G^T||_F^2`` after each iteration (new H, previous G).
    n_iter_ : int
        Iterations run.
    n_passes_ : int
        Passes over X the fit made.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the features seen during fit (only when X has string column names).

    See Also
    --------
    MNMF : semi-NMF features trained jointly with a max-margin classifier.

    References
    ----------
    .. [1] C. H. Q. Ding, T. Li and M. I. Jordan, "Convex and Semi-Nonnegative Matrix
       Factorizations", IEEE Transactions on Pattern Analysis and Machine Intelligence,
       32(1):45-55, 2010.
    .. [2] R. Bro and S. De Jong, "A fast non-negativity-constrained least squares
       algorithm", Journal of Chemometrics, 11(5):393-401, 1997 (the NNLS of
       :meth:`transform`).

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import SemiNMF
    >>> X = np.random.default_rng(0).normal(size=(100, 6))
    >>> est = SemiNMF(n_components=3, random_state=0, max_iter=500)
    >>> H = est.fit_transform(X)
    >>> H.shape, bool((H >= 0).all())
    ((100, 3), True)
    >>> bool(np.allclose(est.transform(X), H))
    True
    """

    _parameter_constraints = {**_COMMON, "max_iter": [v.Interval(int, 1, None)]}

    def __init__(self, n_components=8, *, max_iter=200, tol=1e-4, checkpoint=None,
                 random_state=None, verbose=0, callback=None):
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    def fit_transform(self, X: Data, y: Labels | None = None) -> Array:
        """Factorize X and return its codes.

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        H : ndarray or dask array of shape (n_samples, n_components)
            The exact NNLS codes for the fitted basis (equal to ``transform(X)``), in X's
            float dtype; a Dask array (of the persisted blocks) for Dask/Zarr input.
        """
        return self._fit(X)

    def _fit_blocks(self, X, blocks, stats, seed, y):
        problem = _semi.SemiProblem(blocks, blocks.per_block(_semi.ones, blocks.sizes),
                                    k=self.n_components, seed=seed)
        state, log = self._run(problem.ding_step, _semi.DingState(G=problem.basis()[0]),
                               blocks=blocks, problem=problem)
        self._set_iterations(log)
        loss = problem.h_pass(state.G, "nnls")      # the final codes: exact for the final G
        self.components_ = state.G.T
        self.n_components_ = self.n_components
        self.reconstruction_err_ = float(np.sqrt(max(loss, 0.0)))
        return problem.codes(self._fit_dtype)

    def transform(self, X: Data) -> Array:
        """The non-negative least-squares codes of X for the fitted basis.

        ``h_i = argmin_{h >= 0} ||x_i - G h||`` per sample, solved exactly (active set).

        Parameters
        ----------
        X : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_features)

        Returns
        -------
        H : ndarray of shape (n_samples, n_components)
            In X's float dtype; a lazy Dask array chunked like X's rows for Dask/Zarr
            input.
        """
        X = self._checked_input(X, "transform")
        G = np.asarray(self.components_, dtype=np.float64).T
        return self._map_rows(X, _semi.codes_block, self.n_components_, self._output_dtype(X),
                              G, G.T @ G)

    def inverse_transform(self, H: Array) -> Array:
        """Data from codes: ``H G^T``.

        Parameters
        ----------
        H : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_components)
            Finite codes (as :meth:`transform` gives); NaN, 1-D H or another number of
            columns is a ValueError.

        Returns
        -------
        X : ndarray or dask array of shape (n_samples, n_features)
        """
        return self._inverse_transform(H)

    def _outputs(self, X):
        return {"H": self.transform(X)}
