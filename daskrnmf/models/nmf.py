"""NMF (Lee & Seung) and RNMF (Kong, Ding & Huang), out of core, and the
multiplicative-update fit they share with ORNMF (:mod:`daskrnmf.models.ornmf`).

Samples are rows: X (n_samples, n_features) ~ H W with H >= 0 (n_samples, n_components)
the codes and W >= 0 (n_components, n_features) the components (``components_``).

    NMF   : min ||X - H W||_F^2
    RNMF  : min ||X - H W||_{2,1} = sum_i ||x_i - h_i W||
    ORNMF : min ||X - H W||_{2,1} + alpha sum_{i=1}^{n-1} ||h_{i+1} - h_i||      (eq. 4)

Updates (one pass over X per iteration, all of it on the workers except W):

* H (eq. 13 of Wang et al. without its square root — the form of Kong, Ding & Huang's
  L2,1 rule and of the paper's own eq. 24; both forms decrease the objective):
  ``h_i <- h_i * (d_i x_i W^T + alpha (q_{i-1} h_{i-1} + q_i h_{i+1}))
  / (d_i h_i W W^T + alpha (q_{i-1} + q_i) h_i)`` with ``d_i = 1 / ||x_i - h_i W||``
  (D_1, eq. 7; 1 for NMF) and ``q_i = 1 / ||h_{i+1} - h_i||`` (D_2, eq. 8, the norm
  floored at 1e-2 times the RMS row norm of H: an absolute 1e-10 freezes identical
  neighbours at their initial codes, see `daskrnmf.kernels.mu.pair_floor`); alpha is 0
  for NMF and RNMF.  The n x n matrices R_a..R_d of the paper are tri-diagonal and never
  formed; a block needs only the last row of the block before it and the first row of
  the block after it (an explicit halo, exchanged through the reduction tree), so the
  result does not depend on the chunking and an iteration costs O(n d k).
* W (eq. 24): ``W <- W * (H^T D_1 X) / (H^T D_1 H W)``, with D_1 from the new H; the two
  k x d and k x k sums are tree-reduced.
* The rows of W are then scaled to unit L2 norm and the scale moved into H (ORNMF's
  penalty can be lowered by inflating W without it).  For NMF and RNMF this changes
  nothing in the objective.

References
----------
.. [1] D. D. Lee and H. S. Seung, "Algorithms for Non-negative Matrix Factorization",
   Advances in Neural Information Processing Systems 13 (NIPS), 2001.
.. [2] D. Kong, C. Ding and H. Huang, "Robust Nonnegative Matrix Factorization using
   L21-norm", Proceedings of the 20th ACM International Conference on Information and
   Knowledge Management (CIKM), 2011.
.. [3] J. Wang, F. Tian, C. H. Liu, H. Yu, X. Wang and X. Tang, "Robust Nonnegative
   Matrix Factorization with Ordered Structure Constraints", International Joint
   Conference on Neural Networks (IJCNN), 2017.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validation as v
from .._base import BaseModel, FactorizationMixin
from .._typing import Array, Data, Labels
from ..kernels import rng
from ..kernels.blocks import as_float_block, sum_arrays, sum_dicts
from ..kernels.missing import gram_rows, observed, rescaled_rows, row_grams
from ..kernels.mu import pair_floor, residual_norms, update_h
from ..kernels.nnls import nnls_codes, nnls_codes_each

_EPS = 1e-10


class _FactorizationBase(FactorizationMixin, BaseModel):
    """What NMF, RNMF and ORNMF share: the multiplicative-update fit, transform, outputs."""

    _loss = "l21"
    _non_negative = True
    _supports_missing = True
    _parameter_constraints = {
        **BaseModel._parameter_constraints,
        "n_components": [v.Interval(int, 1, None)],
        "init": [v.Options(("random", "nndsvda")), v.Kind((type(None),), "None")],
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
        "missing": [v.MISSING],
        "checkpoint": [v.Location()],
    }

    def _alpha(self):
        return 0.0

    def fit_transform(self, X: Data, y: Labels | None = None) -> Array:
        """Factorize X and return its codes under the fitted components.

        The codes are what :meth:`transform` gives for X (so ``fit_transform(X)`` equals
        ``fit(X).transform(X)``): for NMF and RNMF the exact non-negative least squares
        codes of every sample (one more pass over X), for ORNMF the codes of the ordered
        problem with W fixed.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The data, in any form :meth:`fit` takes.
        y : None
            Ignored.

        Returns
        -------
        H : ndarray or dask.array.Array of shape (n_samples, n_components)
            Dask (chunked like X) for Dask/Zarr input.
        """
        self._fit(X)
        return self.transform(X)   # the input as given: DataFrame feature names checked


    def _fit_blocks(self, X, blocks, stats, seed, y):
        init = self._resolved_init(*X.shape)
        fit = _MUFit(blocks, stats, k=self.n_components, loss=self._loss, alpha=self._alpha(),
                     missing=self._allow_nan)
        W, log = self._run(fit.step, fit.init(init, seed)[None], blocks=blocks, problem=fit)
        W = W[0]
        err = fit.final(W)
        self._set_iterations(log)
        self.components_ = W
        self.reconstruction_err_ = err["error"]
        self.objective_ = err["objective"]
        self.n_components_ = self.n_components
        self._after_fit(fit, fit.codes(X), seed)

    def _after_fit(self, fit, H, seed):
        pass

    def _resolved_init(self, n, d):
        """``init`` for X of shape (n, d): None is scikit-learn's rule (``_initialize_nmf``),
        NNDSVD-a where it applies (k <= min(n, d): it takes k singular vectors), else
        random; an explicit "nndsvda" that cannot apply is an error, as there."""
        k = self.n_components
        if self.init is None:
            return "nndsvda" if k <= min(n, d) else "random"
        if self.init == "nndsvda" and k > min(n, d):
            raise ValueError(f"init='nndsvda' needs n_components <= min(n_samples, n_features) "
                             f"= {min(n, d)}; got n_components={k}. Use init=None (scikit-learn's "
                             "default: random here), init='random' or fewer components.")
        return self.init

    def transform(self, X: Data) -> Array:
        """Codes H of samples X for the fitted components (W fixed).

        NMF and RNMF: ``min_{h >= 0} ||x - h W||`` for every sample, solved exactly
        (non-negative least squares by an active-set method; the L2,1 and the squared loss
        have the same minimiser per sample).  ORNMF: the samples are one ordered sequence
        (its penalty ties neighbours), ``max_iter`` multiplicative updates with W fixed.
        With ``missing="mask"`` the codes fit the observed entries of each sample only
        (its own Gram matrix ``W diag(m) W^T``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray of shape (n_samples, n_components), in X's float dtype; lazy and
            chunked like X's rows for Dask input
        """
        X = self._checked_input(X, "transform")
        W = np.asarray(self.components_, dtype=np.float64)
        return self._map_rows(X, _nnls_codes, self.n_components_, self._output_dtype(X),
                              W @ W.T, W, self._allow_nan)

    def inverse_transform(self, H: Array) -> Array:
        """``H W``: the reconstruction, shape (n_samples, n_features).

        Defined at every entry: with ``missing="mask"``, ``inverse_transform(transform(X))``
        fills X's missing entries.

        Parameters
        ----------
        H : array-like, dask array, zarr.Array or Zarr path of shape (n_samples, n_components)
            Finite codes (as :meth:`transform` gives); NaN, 1-D H or another number of
            columns is a ValueError.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            Lazy and chunked like H's rows for Dask/Zarr H.
        """
        return self._inverse_transform(H)

    def _outputs(self, X):
        return {"H": self.transform(X)}


def _nnls_codes(block, WWt, W, missing=False):
    """Exact non-negative least-squares codes of one block's rows for fixed W (``missing``:
    of the observed entries of each row, with the row's own Gram matrix)."""
    x = as_float_block(block)
    if missing:
        x, mask = observed(x)
        if mask is not None:
            step = gram_rows(W.shape[0])        # bounds the (rows, k, k) Gram matrices
            return np.concatenate([
                nnls_codes_each(row_grams(W, mask[s:s + step], WWt), x[s:s + step] @ W.T)
                for s in range(0, x.shape[0], step)]).reshape(x.shape[0], W.shape[0])
    return nnls_codes(WWt, x @ W.T)


class NMF(_FactorizationBase):
    """Lee-Seung multiplicative-update NMF, min ||X - H W||_F^2, out of core.

    Parameters
    ----------
    n_components : int, default=8
        Rows of W (the number of components).
    init : {"nndsvda", "random"} or None, default=None
        scikit-learn's choices: NNDSVD with zeros filled by the mean of X (from the top
        singular vectors of X, computed out of core from the tree-reduced d x d Gram
        matrix; it needs ``n_components <= min(n_samples, n_features)``), or uniform
        random factors scaled by sqrt(mean(X) / n_components).  None (scikit-learn's
        default): "nndsvda" when ``n_components <= min(n_samples, n_features)``, else
        "random".
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
        Seeds the initialisation; results depend on it alone, not on the chunking or
        the number of workers.
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, default=None
        ``callback(info) -> bool`` after each iteration (the dict described in
        the user guide's page *Progress, verbose and callbacks*); returning True stops the fit.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
        W, rows of unit L2 norm.
    reconstruction_err_ : float
        ``||X - H W||_F`` at the end (scikit-learn's meaning; over the observed entries
        with ``missing="mask"``).
    objective_ : float
        The model's objective at the end.
    objective_history_ : ndarray (n_iter_,)
    n_iter_ : int
        Iterations made.
    n_passes_ : int
        Passes over X the fit made, initialisation included.
    n_features_in_ : int
        Number of features of X.
    n_components_ : int
        The number of components, ``n_components``.
    feature_names_in_ : ndarray of str (n_features_in_,)
        Only when X had string column names (a DataFrame).

    References
    ----------
    D. D. Lee and H. S. Seung, "Algorithms for Non-negative Matrix Factorization",
    Advances in Neural Information Processing Systems 13 (NIPS), 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import NMF
    >>> X = np.random.default_rng(0).random((30, 6))
    >>> model = NMF(n_components=2, max_iter=500, random_state=0).fit(X)
    >>> model.components_.shape
    (2, 6)
    """

    _loss = "fro"

    def __init__(self, n_components=8, *, init=None, max_iter=200, tol=1e-4,
                 missing="raise", checkpoint=None, random_state=None, verbose=0,
                 callback=None):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.missing = missing
        self.checkpoint = checkpoint
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback


class RNMF(NMF):
    """Kong et al.'s L2,1 robust NMF, min sum_i ||x_i - h_i W||, out of core (ORNMF, alpha=0).

    Whole corrupted samples weigh by their distance, not its square: the updates are
    NMF's, reweighted by d_i = 1 / ||x_i - h_i W|| (one pass over X per iteration).

    Parameters
    ----------
    n_components : int, default=8
        Rows of W (the number of components).
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
        Seeds the initialisation; results depend on it alone, not on the chunking or
        the number of workers.
    verbose : int, default=0
        >= 1 logs the objective per iteration on the ``daskrnmf`` logger.
    callback : callable, default=None
        ``callback(info) -> bool`` after each iteration (the dict described in
        the user guide's page *Progress, verbose and callbacks*); returning True stops the fit.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
        W, rows of unit L2 norm.
    reconstruction_err_ : float
        ``||X - H W||_F`` at the end.
    objective_ : float
        ``sum_i ||x_i - h_i W||`` at the end.
    objective_history_ : ndarray (n_iter_,)
    n_iter_ : int
        Iterations made.
    n_passes_ : int
        Passes over X the fit made, initialisation included.
    n_features_in_ : int
        Number of features of X.
    n_components_ : int
        The number of components, ``n_components``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import RNMF
    >>> X = np.random.default_rng(0).random((30, 6))
    >>> RNMF(n_components=2, max_iter=500, random_state=0).fit(X).components_.shape
    (2, 6)

    References
    ----------
    D. Kong, C. Ding and H. Huang, "Robust Nonnegative Matrix Factorization using
    L21-norm", Proceedings of the 20th ACM International Conference on Information and
    Knowledge Management (CIKM), 2011.
    """

    _loss = "l21"


class _MUFit:
    """Passes of one multiplicative-update fit.  H lives with X's row blocks (state)."""

    # what a checkpoint holds besides W (daskrnmf._resume): H per block, its pending
    # scale and the halo the next pass needs
    checkpoint_attributes = ("H", "scale", "halo")

    def __init__(self, blocks, stats, *, k, loss, alpha, update_w=True, missing=False):
        self.blocks, self.k, self.loss, self.alpha = blocks, k, loss, alpha
        # mean (observed) entry of X
        n_obs = stats.get("n", 0) * blocks.shape[1] - stats.get("nan", 0)
        self.mean = stats["sum"] / max(1, n_obs)
        self.missing = missing              # missing="mask": blocks masked as they are read
        self.update_w = update_w
        self.H = [None] * blocks.n_blocks   # per-block codes (persisted on the cluster)
        self.scale = np.ones(k)             # pending scale of H (from normalising W)
        self.halo = None
        self.h_init = None

    # -- initialisation
    def init(self, init, seed, W=None):
        """Initial W (normalised); the initial H is built on the workers in one pass that
        also hands out the first halo.  ``W`` given: kept fixed (transform), H constant."""
        if W is not None:
            # W's rows have unit norm (entries ~ 1/sqrt(d)): h = mean(X) sqrt(d) / k
            # reproduces the mean, and scales with X
            value = max(self.mean, _EPS) * np.sqrt(self.blocks.shape[1]) / self.k
            self.h_init = {"kind": "constant", "value": value}
        elif init == "random":
            avg = np.sqrt(max(self.mean, _EPS) / self.k)
            W = avg * np.random.default_rng(seed).uniform(size=(self.k, self.blocks.shape[1]))
            self.h_init = {"kind": "random", "avg": avg, "seed": seed}
        else:
            W = self._nndsvda()
        ends, self.H = self.blocks.map_reduce(_init_h_chunk, _ends_combine,
                                              args=(self.h_init, self.k), keep_state=True,
                                              name="initial H")
        self.halo = self._halo(ends)
        return W if self.update_w is False else self._normalise(W)

    def _nndsvda(self):
        """NNDSVD-a (Boutsidis & Gallopoulos; scikit-learn's ``init="nndsvda"``).

        The top k right singular vectors come from the tree-reduced Gram matrix X^T X
        (d x d, one pass); the left ones, ``u_j = X v_j / s_j``, are never gathered: the
        norms of their positive and negative parts are tree-reduced (a second pass) and
        each block builds its rows of H from them in the first iteration.
        """
        g = self.blocks.map_reduce(_gram_chunk, sum_dicts, name="Gram matrix")
        evals, evecs = np.linalg.eigh(g["gram"])
        order = np.argsort(evals)[::-1][:self.k]
        s = np.sqrt(np.maximum(evals[order], 0.0))
        V = evecs[:, order].T.copy()                     # (k, d), rows v_j
        k_eff = int(np.sum(s > s[0] * 1e-12)) if s.size else 0
        norms = self.blocks.map_reduce(_svd_norms_chunk, sum_arrays, args=(V, s), name="NNDSVD norms")
        pos, neg = np.sqrt(norms[0]), np.sqrt(norms[1])  # (k,) norms of u_j's parts
        mean = self.mean
        W = np.zeros((self.k, V.shape[1]))
        sign = np.ones(self.k)
        lam = np.zeros(self.k)
        for j in range(min(self.k, k_eff)):
            y = V[j]
            yp, yn = np.maximum(y, 0), np.maximum(-y, 0)
            if j == 0:
                W[0] = np.sqrt(s[0]) * np.abs(y)
                lam[0] = np.sqrt(s[0])
                sign[0] = 0.0   # |u_0|
                continue
            mp = pos[j] * np.linalg.norm(yp)
            mn = neg[j] * np.linalg.norm(yn)
            if mp > mn:
                sigma, v_, un, sign[j] = mp, yp / max(np.linalg.norm(yp), _EPS), pos[j], 1.0
            else:
                sigma, v_, un, sign[j] = mn, yn / max(np.linalg.norm(yn), _EPS), neg[j], -1.0
            lam[j] = np.sqrt(s[j] * sigma)
            W[j] = lam[j] * v_
            lam[j] = lam[j] / max(un, _EPS)
        W[W < _EPS] = 0.0
        W[W == 0] = mean
        self.h_init = {"kind": "nndsvda", "V": V, "s": np.where(s > 0, s, 1.0), "sign": sign,
                       "lam": lam, "mean": mean}
        return W

    def _normalise(self, W):
        norms = np.sqrt((W ** 2).sum(axis=1))
        norms = np.where(norms > 0, norms, 1.0)
        self.scale = self.scale * norms
        if self.halo is not None:
            self.halo = {**self.halo, "first": self.halo["first"] * norms,
                         "last": self.halo["last"] * norms, "col_sq": self.halo["col_sq"] * norms ** 2}
        return W / norms[:, None]

    # -- one iteration
    def step(self, W, active):
        W = W[0]
        spec = self._spec(W, update=True)
        res, self.H = self.blocks.map_reduce(mu_chunk, mu_combine, args=(W, spec), state=self.H,
                                             keep_state=True, name="H update + W statistics")
        self.scale = np.ones(self.k)
        self.halo = self._halo(res)
        objective = res["loss"] + self.alpha * res["penalty"]
        if self.update_w:
            den = res["B"] @ W
            if "Bd" in res:     # missing="mask": H^T (M o (H W)) of the masked blocks
                den += res["Bd"]
            # den = 0 means W_kj = 0 or H's column k is 0 (then A_kj = 0): the entry
            # stays 0.  A NaN or inf is not replaced by 0 (a W of zeros is a wrong answer).
            newW = np.divide(W * res["A"], den, out=np.zeros_like(W), where=den != 0)
            W = self._normalise(newW)
        return W[None], np.array([objective])

    def _halo(self, res):
        """What the next pass needs of H's other blocks: their first and last rows and
        H's squared column norms (for the D_2 floor)."""
        return {"starts": np.array(self.blocks.starts), "first": res["first"],
                "last": res["last"], "col_sq": res["col_sq"]}

    def _spec(self, W, update):
        floor = pair_floor(self.halo["col_sq"], self.blocks.shape[0])
        return MUSpec(loss=self.loss, alpha=self.alpha, WWt=W @ W.T, scale=self.scale,
                      halo=self.halo, update=update, floor=max(floor, _EPS),
                      missing=self.missing)

    # -- the end
    def final(self, W):
        """Errors at the final W and H (one pass, H not updated); applies the pending scale."""
        spec = self._spec(W, update=False)
        res, self.H = self.blocks.map_reduce(mu_chunk, mu_combine, args=(W, spec), state=self.H,
                                             keep_state=True, name="final error")
        self.scale = np.ones(self.k)
        self.halo = self._halo(res)
        l21 = res["loss"] if self.loss == "l21" else res["l21"]
        fro2 = res["fro2"]
        objective = (res["loss"] + self.alpha * res["penalty"])
        return {"error": float(np.sqrt(fro2)), "objective": float(objective), "l21": float(l21)}

    def codes(self, X):
        """H as NumPy (NumPy input) or a Dask array chunked like X."""
        return self.blocks.as_array(self.H, self.k, np.float64)


# ---------------------------------------------------------------- per-block functions
def _filled(block):
    """A block for the initialisation: with missing entries, the zero-filled rows scaled
    by d / |O_i| (:func:`daskrnmf.kernels.missing.rescaled_rows`); else the block."""
    return rescaled_rows(*observed(as_float_block(block)))


def _gram_chunk(block, start):
    x = _filled(block)
    return {"gram": x.T @ x}


def _svd_norms_chunk(block, start, V, s):
    u = (_filled(block) @ V.T) / np.where(s > 0, s, 1.0)
    return np.stack([(np.maximum(u, 0) ** 2).sum(axis=0), (np.maximum(-u, 0) ** 2).sum(axis=0)])


def _initial_h(x, start, spec_init, k):
    n = x.shape[0]
    kind = spec_init["kind"]
    if kind == "random":
        idx = np.arange(start, start + n, dtype=np.uint64)
        return spec_init["avg"] * np.stack(
            [rng.uniform(spec_init["seed"], rng.stream_id(8, j), idx) for j in range(k)], axis=1)
    if kind == "constant":
        return np.full((n, k), spec_init["value"])
    u = (x @ spec_init["V"].T) / spec_init["s"]           # (n, k) left singular vectors
    sign = spec_init["sign"]
    H = np.where(sign == 0, np.abs(u), np.maximum(u * np.where(sign == 0, 1.0, sign), 0.0))
    H = H * spec_init["lam"]
    H[H < _EPS] = 0.0
    H[H == 0] = spec_init["mean"]
    return H


@dataclass(frozen=True)
class MUSpec:
    """One multiplicative-update pass: the loss (``"fro"``/``"l21"``), the ordered
    penalty's ``alpha``, ``W W^T``, the pending ``scale`` of H, the ``halo`` (neighbouring
    blocks' first/last rows of H), whether H is ``update``-d, and the D_2 ``floor``."""

    loss: str
    alpha: float
    WWt: np.ndarray
    scale: np.ndarray
    halo: dict
    update: bool
    floor: float
    missing: bool = False


def mu_chunk(block, start, H, W, spec):
    """One block of a multiplicative-update pass.

    Updates the block's H (``spec.update``), then returns the partial statistics for W
    (``A = H^T D_1 X``, ``B = H^T D_1 H``), the loss, the penalty inside the block and the
    block's first and last rows of H (the halo of the next pass).
    """
    x = as_float_block(block)
    mask = None
    if spec.missing:        # missing="mask": x zero at the missing entries, mask M
        x, mask = observed(x)
    H = H * spec.scale
    if spec.update:
        halo = spec.halo
        b = int(np.searchsorted(halo["starts"], start))
        prev = halo["last"][b - 1] if b > 0 else None
        nxt = halo["first"][b + 1] if b + 1 < halo["first"].shape[0] else None
        if spec.loss == "l21":
            d1 = 1.0 / np.maximum(residual_norms(x, H, W, mask), _EPS)
        else:
            d1 = np.ones(x.shape[0])
        H = update_h(x, H, W, spec.WWt, d1, spec.alpha, prev, nxt, floor=spec.floor,
                     mask=mask)
    if mask is None:
        r = residual_norms(x, H, W)
    else:
        HWm = H @ W
        HWm *= mask                         # M o (H W)
        E = x - HWm                         # the residual at the observed entries, else 0
        r = np.sqrt(np.einsum("ij,ij->i", E, E))
        del E
    d1 = 1.0 / np.maximum(r, _EPS) if spec.loss == "l21" else np.ones(x.shape[0])
    Hd = H * d1[:, None]
    fro2 = float((r ** 2).sum())
    part = {"A": Hd.T @ x, "B": Hd.T @ H, "loss": float(r.sum()) if spec.loss == "l21" else fro2,
            "fro2": fro2, "l21": float(r.sum()),
            "penalty": float(np.sqrt(((H[1:] - H[:-1]) ** 2).sum(axis=1)).sum()),
            "first": H[:1].copy(), "last": H[-1:].copy(), "col_sq": (H ** 2).sum(axis=0)}
    if spec.missing:
        # W's denominator H^T (M o (H W)): B @ W for complete blocks, Bd for masked ones
        if mask is None:
            part["Bd"] = np.zeros(W.shape)
        else:
            part["B"] = np.zeros_like(part["B"])
            part["Bd"] = Hd.T @ HWm
    return part, H


def _init_h_chunk(block, start, spec_init, k):
    H = _initial_h(_filled(block), start, spec_init, k)
    return {"first": H[:1].copy(), "last": H[-1:].copy(), "col_sq": (H ** 2).sum(axis=0)}, H


def mu_combine(parts):
    """Merge partials of consecutive blocks (order matters: the tree keeps it)."""
    out = {"A": sum_arrays([p["A"] for p in parts]), "B": sum_arrays([p["B"] for p in parts]),
           "loss": sum(p["loss"] for p in parts), "fro2": sum(p["fro2"] for p in parts),
           "l21": sum(p["l21"] for p in parts), "penalty": sum(p["penalty"] for p in parts),
           "col_sq": sum_arrays([p["col_sq"] for p in parts]),
           "first": np.concatenate([p["first"] for p in parts]),
           "last": np.concatenate([p["last"] for p in parts])}
    if "Bd" in parts[0]:
        out["Bd"] = sum_arrays([p["Bd"] for p in parts])
    for left, right in zip(parts[:-1], parts[1:]):
        out["penalty"] += float(np.sqrt(((right["first"][0] - left["last"][-1]) ** 2).sum()))
    return out


def _ends_combine(parts):
    return {"first": np.concatenate([p["first"] for p in parts]),
            "last": np.concatenate([p["last"] for p in parts]),
            "col_sq": sum_arrays([p["col_sq"] for p in parts])}
