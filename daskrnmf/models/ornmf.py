"""ORNMF (Wang et al., IJCNN 2017), out of core: robust NMF of ordered samples.

    min_{W, H >= 0} ||X - H W||_{2,1} + alpha sum_{i=1}^{n-1} ||h_{i+1} - h_i||      (eq. 4)

The rows of X are taken in their stored order: consecutive samples (video frames, motion
capture) get similar codes unless a boundary intervenes.  The fit is the
multiplicative-update fit of :mod:`daskrnmf.models.nmf` with the ordered penalty (its
halo of neighbouring rows makes the result independent of the chunking); the segment
boundaries are read off the jumps ``||h_{i+1} - h_i||`` of the final codes.

References
----------
.. [1] J. Wang, F. Tian, C. H. Liu, H. Yu, X. Wang and X. Tang, "Robust Nonnegative
   Matrix Factorization with Ordered Structure Constraints", International Joint
   Conference on Neural Networks (IJCNN), 2017.
"""

from __future__ import annotations

import numpy as np

from .. import _validation as v
from .._typing import Array, Data
from .nmf import NMF, _MUFit


class ORNMF(NMF):
    """Ordered robust NMF (Wang et al., eq. 4), out of core.

    min_{W, H >= 0} sum_i ||x_i - h_i W|| + alpha sum_{i=1}^{n-1} ||h_{i+1} - h_i||

    Parameters
    ----------
    n_components : int, default=8
        Rows of W (the number of components).
    alpha : float, default=0.3
        Weight of the ordered penalty (the paper tunes it in [0.1, 0.7]); at most 1e100.
    n_clusters : int, default=None
        If given, ``labels_`` is a k-means clustering of H (as in the paper's
        experiments), and ``boundaries_`` holds the ``n_clusters - 1`` strongest jumps.
    boundary_threshold : float, default=0.5
        Without ``n_clusters``: a jump ``||h_{i+1} - h_i||`` that is a local maximum and at
        least this fraction of the largest jump is a boundary (at most 1024 are kept).
    init : {"nndsvda", "random"} or None, default=None
        As :class:`NMF`: None is "nndsvda" when ``n_components <= min(n_samples,
        n_features)``, else "random".
    max_iter : int, default=200
        Multiplicative-update iterations at most (one pass over X each).
    tol : float, default=1e-4
        Stops when the objective falls by at most ``tol`` relative.
    missing : {"raise", "mask"}, default="raise"
        ``"raise"``: NaN in X is an error.  ``"mask"``: NaN entries are missing values;
        the loss and the multiplicative updates run over the observed entries only
        (weighted NMF), ``transform`` fits each sample's observed entries and
        ``inverse_transform`` fills the missing ones (:mod:`daskrnmf.kernels.missing`).
    checkpoint : str, os.PathLike or None, default=None
        Directory (or fsspec URL) where the fit saves its state after every iteration
        (W, and H chunked like X, written by the workers), atomically;
        ``fit(X, resume=True)`` continues from it with exactly the uninterrupted result.
        The library owns it (a marker file and its own subfolder; nothing else in it is
        touched); it must be visible to every worker (the user guide's page *Checkpoints and resuming a fit*).
    random_state : None, int, numpy RandomState or Generator, default=None
        Seeds the initialisation (and the k-means of ``labels_``).
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, default=None
        ``callback(info) -> bool`` after each iteration; returning True stops the fit.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
        As :class:`NMF`.
    reconstruction_err_ : float
        As :class:`NMF`.
    objective_ : float
        As :class:`NMF`.
    objective_history_ : ndarray (n_iter_,)
        As :class:`NMF`.
    n_iter_ : int
        As :class:`NMF`.
    n_passes_ : int
        As :class:`NMF`.
    n_features_in_ : int
        Number of features of X.
    labels_ : ndarray (n_samples,)
        With ``n_clusters``: k-means labels of the rows of H.
    boundaries_ : ndarray of int
        Indices i of the first sample after a segment boundary (the jump between samples
        i-1 and i), ascending: the paper's Figure 1 reading of the column norms of H R.
    jumps_ : ndarray (n_samples - 1,)
        ``||h_{i+1} - h_i||``, in X's float dtype; computed by the workers in the fit's
        last pass and kept as NumPy, as ``labels_`` (for Dask/Zarr input too).

    References
    ----------
    J. Wang, F. Tian, C. H. Liu, H. Yu, X. Wang and X. Tang, "Robust Nonnegative Matrix
    Factorization with Ordered Structure Constraints", International Joint Conference on
    Neural Networks (IJCNN), 2017.

    Examples
    --------
    >>> from daskrnmf import ORNMF
    >>> from daskrnmf.datasets import make_ordered_segments
    >>> X, y = make_ordered_segments(n_features=20, n_segments=3, segment_length=10,
    ...                              random_state=0)
    >>> model = ORNMF(n_components=3, n_clusters=3, random_state=0).fit(X)
    >>> model.boundaries_.shape
    (2,)
    """

    _loss = "l21"
    _parameter_constraints = {
        **NMF._parameter_constraints,
        # alpha multiplies D_2's weights (up to 1 / 1e-10) and the penalty in objective_:
        # at 1e300 they overflow float64 (NaN codes, W = 0); 1e100 leaves room for any X
        # the input checks accept
        "alpha": [v.Interval(float, 0, 1e100)],
        "n_clusters": [v.Interval(int, 1, None), v.Kind((type(None),), "None")],
        "boundary_threshold": [v.Interval(float, 0, 1)],
    }

    def __init__(self, n_components=8, *, alpha=0.3, n_clusters=None, boundary_threshold=0.5,
                 init=None, max_iter=200, tol=1e-4, missing="raise", checkpoint=None,
                 random_state=None, verbose=0, callback=None):
        super().__init__(n_components, init=init, max_iter=max_iter, tol=tol, missing=missing,
                         checkpoint=checkpoint, random_state=random_state, verbose=verbose,
                         callback=callback)
        self.alpha = alpha
        self.n_clusters = n_clusters
        self.boundary_threshold = boundary_threshold

    def _alpha(self):
        return float(self.alpha)

    def transform(self, X: Data) -> Array:
        """Codes H of the ordered samples X for the fitted components (W fixed).

        The samples are taken as one ordered sequence (the penalty ties neighbours), so a
        sample's code depends on its neighbours: ``max_iter`` multiplicative updates of
        eq. (13) with W fixed, from a constant start.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray or dask.array.Array of shape (n_samples, n_components)
        """
        X = self._checked_input(X, "transform")
        blocks, stats = self._check_blocks(X)
        fit = _MUFit(blocks, stats, k=self.n_components, loss=self._loss, alpha=self._alpha(),
                     update_w=False, missing=self._allow_nan)
        W = np.asarray(self.components_, dtype=np.float64)
        fit.init("constant", 0, W=W)
        self._run(fit.step, W[None], blocks=blocks, name=self._name + ".transform", quiet=True)
        fit.final(W)
        H = fit.codes(X)
        return H.astype(self._output_dtype(X), copy=False)

    def _after_fit(self, fit, H, seed):
        from .rfnmf import RFNMF

        jumps, top = segment_jumps(fit, self._fit_dtype)
        # the model owns its per-sample results as RFNMF its labels_ (computed now on the
        # workers, in X's float dtype; never a graph over X)
        self.jumps_ = jumps
        if self.n_clusters is not None:
            self.boundaries_ = np.sort(top["idx"][:self.n_clusters - 1] + 1)
            # the fit's seed is 63-bit; a public estimator takes scikit-learn's [0, 2**32)
            km = RFNMF(self.n_clusters, loss="l2", n_init=20,
                       random_state=seed % 2**32).fit(H)
            self.labels_ = km.labels_
        else:
            self.__dict__.pop("labels_", None)      # a refit without n_clusters: none
            big = top["score"] >= self.boundary_threshold * top["max"]
            self.boundaries_ = np.sort(top["idx"][big] + 1)


def segment_jumps(fit, dtype=np.float64, m=1024):
    """``||h_{i+1} - h_i||`` (n_samples - 1,) of the fit's final codes, as NumPy in
    ``dtype`` (X's float dtype: the model keeps it), and its ``m`` largest local maxima,
    strongest first: ``{"score", "idx", "max"}`` (idx i: the jump after sample i).  Each
    block's jumps are computed where its codes are (the next block's first row from the
    halo) and come back in ``dtype``."""
    J = fit.blocks.gather(fit.H, _block_jumps, fit.halo, np.dtype(dtype), starts=True)
    return J, {**_top_block(_peak_scores(J), 0, m), "max": J.max(initial=0.0)}


def _block_jumps(h, start, halo, dtype=np.float64):
    """Jumps ``||h_{i+1} - h_i||`` for the block's rows i (the last one uses the next
    block), computed in float64, returned in ``dtype``."""
    b = int(np.searchsorted(halo["starts"], start))
    nxt = halo["first"][b + 1] if b + 1 < halo["first"].shape[0] else None
    ext = np.vstack([h, nxt[None]]) if nxt is not None else h
    return np.sqrt(((ext[1:] - ext[:-1]) ** 2).sum(axis=1)).astype(dtype, copy=False)


def _peak_scores(J):
    """J where it is a local maximum (>= both neighbours), -inf elsewhere."""
    left = np.concatenate([[-np.inf], J[:-1]])
    right = np.concatenate([J[1:], [-np.inf]])
    return np.where((J >= left) & (J >= right), J, -np.inf)


def _top_block(score, offset, m):
    """The ``m`` largest finite scores with their global indices (ties: lowest index)."""
    take = np.lexsort((np.arange(score.size), -score))[:m]
    take = take[np.isfinite(score[take])]
    return {"score": score[take], "idx": offset + take.astype(np.int64)}
