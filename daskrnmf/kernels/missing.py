"""Missing values: NaN entries of X treated as unobserved (``missing="mask"``).

This is the one place that describes what the models do with missing values; the
estimators' ``missing`` parameter points here.

The convention
--------------
A model that supports missing values has the parameter ``missing`` (constraint
:data:`daskrnmf._validation.MISSING`):

* ``"raise"`` (the default): NaN in X is a ValueError, exactly as before the parameter
  existed (the message says how to mask them instead);
* ``"mask"``: NaN entries are missing.  ``inf`` is still an error.  The estimator's
  ``allow_nan`` tag is True.

The mask ``M = ~isnan(x)`` is made per row block, on the worker that holds it, when the
block is processed (:func:`observed`): X is never copied, and no mask of X's size is
stored (a block's mask and its zero-filled copy are temporaries of the kernel, like the
float64 copy every kernel makes).  A block without NaN takes the unmasked code path, so
complete data gives, with ``missing="mask"``, the results of ``missing="raise"``
bit for bit.

What the factorization models minimise (samples are rows, X ~ H W, O_i the observed
features of sample i)
--------------------------------------------------------------------------------------
* **NMF / RNMF / ORNMF** (Lee-Seung multiplicative updates, weighted as in Ho's and
  Blondel, Ho & Van Dooren's weighted NMF): the loss over observed entries
  ``1/2 ||M o (X - H W)||_F^2`` (NMF; RNMF and ORNMF: ``sum_i ||m_i o (x_i - h_i W)||``)
  with ``H <- H o ((M o X) W^T) / ((M o (H W)) W^T)`` and ``W <- W o (H^T (M o X)) /
  (H^T (M o (H W)))``.  W's denominator is no longer ``(H^T H) W``: each block returns
  ``H^T (M o (H W))`` (k x d), tree-reduced like the numerator.  Cost: two more
  GEMMs of the block's size (``H W`` and ``(M o H W) W^T``) per pass, ~1.5x an unmasked
  pass.  The objective never increases (the weighted updates are majorisation steps).
  Initialisation (``nndsvda``) uses the zero-filled rows rescaled by ``d / |O_i|``.
* **RobustNMF / ONMFO** (``1/2 ||m_i o (x_i - h_i W - r_i)||^2 + alpha_R ||r_i||_1`` per
  sample, r_i = 0 on missing entries).  ``solver="cd"``: the exact r needs no change (at
  a missing entry x is 0 and ``x - h W - alpha_R < 0``); the exact non-negative least
  squares h (and RobustNMF's HALS sweeps over H) use a Gram matrix per sample,
  ``G_i = W diag(m_i) W^T`` (:func:`row_grams`: one GEMM of the block's mask by the
  k (k + 1) / 2 products of pairs of W's rows, ``k^2 d / 2`` per sample, once per solve;
  the active-set solver with a Gram matrix per row,
  :func:`daskrnmf.kernels.nnls.nnls_codes_each`).  W's statistics become per feature:
  ``B_j = sum_i m_ij h_i^T h_i`` (:func:`feature_grams`, ``k^2 d / 2`` per sample; d x k x
  k floats, e.g. 1024 x 49^2 = 2.5 M, summed up the tree and, for ONMFO, accumulated over
  the stream and checkpointed), and W's HALS sweep uses ``B_j`` for column j (the problem
  separates over W's columns): exact for the masked objective.  ``solver="mu"``: (16)
  with ``(M o (h W)) W^T`` for ``h W W^T``, (17) unchanged (r stays 0 where x is
  missing), (18)/(6) with ``[B_j w_j]_j`` for ``B W``.  Pieces without a missing value
  keep the shared k x k B (``Bm`` holds only masked pieces' rows), so complete data costs
  nothing more.  For very large ``d k^2`` the per-feature statistics are the memory cost.
  ONMFO: a batch with no observed entry (all-NaN rows) leaves W as it is, W starts from
  the first batch that has one, and an X with none is a ValueError at the end of the
  stream's first pass (a lazy X is not read before).
* A feature that no sample observes has 0 in every component (W's column; the
  multiplicative updates make it so, the HALS sweeps of ``solver="cd"`` set it):
  ``inverse_transform`` gives 0 there.
* ``transform`` / ``decompose`` solve the codes from the observed entries only;
  ``inverse_transform(H) = H W`` is defined everywhere: it *fills* the missing entries.
  ``decompose``'s R is 0 at missing entries.  ``reconstruction_err_`` and the
  objectives are over observed entries.

RFNMF (both losses, and ``"l2"``)
--------------------------------
* Distances over each sample's observed features, rescaled by ``d / |O_i|``
  (:func:`daskrnmf.kernels.assign.nearest`; a row with no observed entry is at distance
  0 of every centre), for the assignment, the objective, ``predict`` and ``transform``.
* L1 centres: the median of each feature over the members that observe it.  In memory by
  selection (:func:`daskrnmf.kernels.median_select.group_medians` skips NaN); out of core the
  median search's histograms and collections skip NaN by construction and each
  (restart, cluster, feature) entry's rank targets come from its observed count, which
  the fused pass returns (``observed``, (R, k, d) integers).
* L2,1 / L2 centres: ``sum_i d_i m_ij x_ij / sum_i d_i m_ij`` per feature (the pass
  returns the per-feature weight sums ``wsum_f``).
* A feature that no member of a cluster observes keeps the previous centre's value (the
  middle of its range at the start); seeds come from the first pass's row sample with its
  missing entries set to the feature's sample median.  A feature that no sample observes
  has the value 0 in every centre: it carries no information, and a value shared by all
  centres does not change which one is nearest (on rows that observe it, ``predict``
  and ``transform`` add the same |x_j| or x_j^2 to every centre's distance).  A row with
  no observed entry is at distance 0 of every centre (label 0) and moves no centre.
* Complete blocks take the unmasked kernels; cost with NaN: the masked distance loop (no
  GEMM, no early abandon) and one more per-block sum for the observed counts.

Not supported: RFNMTF (its co-cluster assignment would need masked block distances),
SemiNMF and MNMF (mixed-sign least squares would need per-feature k x k solves, and MNMF
its classifier step): their ``missing`` parameter does not exist, so NaN is refused.
"""

import numpy as np

# Per-row / per-feature Gram matrices are formed this many float64 entries at a time.
GRAM_ENTRIES = 2 ** 22


def observed(x):
    """``(x0, mask)`` of one float block: ``mask = ~isnan(x)`` and ``x0`` = x with its NaN
    entries set to 0 (a copy); ``(x, None)`` when x has no NaN (no copy)."""
    miss = np.isnan(x)
    if not miss.any():
        return x, None
    x0 = np.where(miss, 0.0, x).astype(x.dtype, copy=False)
    np.logical_not(miss, out=miss)
    return x0, miss


def gram_rows(k):
    """Rows whose per-row Gram matrices (k x k each) a kernel forms at a time: their
    memory is bounded by ``GRAM_ENTRIES`` float64 (32 MiB), whatever the block size."""
    return max(1, GRAM_ENTRIES // max(k * k, 1))


def observed_rows(mask):
    """Rows of a mask with at least one missing entry (bool (m,))."""
    return ~mask.all(axis=1)


def rescaled_rows(x0, mask):
    """The zero-filled rows scaled by ``d / |O_i|``: for values missing at random an
    unbiased estimate of the complete rows' linear statistics (initialisations).  Rows
    with nothing observed stay 0."""
    if mask is None:
        return x0
    d = x0.shape[1]
    n_obs = mask.sum(axis=1)
    return x0 * (d / np.maximum(n_obs, 1))[:, None]


def _symmetric(flat, k):
    """(n, k (k + 1) / 2) upper triangles -> (n, k, k) symmetric matrices (one gather)."""
    iu, ju = np.triu_indices(k)
    where = np.empty((k, k), dtype=np.intp)
    where[iu, ju] = where[ju, iu] = np.arange(iu.size)
    return np.take(flat, where.ravel(), axis=1).reshape(flat.shape[0], k, k)


def row_grams(W, mask, G=None):
    """Per-row Gram matrices ``G_i = W diag(m_i) W^T`` (m, k, k) for a block's mask (m, d).

    Rows without a missing entry get ``G = W W^T`` itself (the same numbers as the
    unmasked solvers use); the others one GEMM of their mask rows by the k (k + 1) / 2
    products of pairs of W's rows (``k^2 d / 2`` per row), ``GRAM_ENTRIES`` at a time."""
    W = np.asarray(W, dtype=np.float64)
    k, d = W.shape
    G = W @ W.T if G is None else G
    m = mask.shape[0]
    out = np.empty((m, k, k))
    out[:] = G
    rows = np.flatnonzero(observed_rows(mask))
    if rows.size:
        iu, ju = np.triu_indices(k)
        pairs = W[iu] * W[ju]                                   # (k (k + 1) / 2, d)
        step = max(1, GRAM_ENTRIES // max(iu.size, 1))
        for s in range(0, rows.size, step):
            r = rows[s:s + step]
            out[r] = _symmetric(mask[r].astype(np.float64) @ pairs.T, k)
    return out


def feature_grams(h, mask):
    """Per-feature Gram matrices ``B_j = sum_i m_ij h_i^T h_i`` (d, k, k) of a block's codes
    h (m, k) and mask (m, d): one GEMM of the mask's transpose by the rows' k (k + 1) / 2
    pair products, ``GRAM_ENTRIES`` at a time."""
    h = np.asarray(h, dtype=np.float64)
    m, k = h.shape
    d = mask.shape[1]
    iu, ju = np.triu_indices(k)
    out = np.zeros((d, iu.size))
    step = max(1, GRAM_ENTRIES // max(iu.size, 1))
    for s in range(0, m, step):
        hs = h[s:s + step]
        out += mask[s:s + step].T.astype(np.float64) @ (hs[:, iu] * hs[:, ju])
    return _symmetric(out, k)


def feature_products(Bm, W):
    """``[B_j w_j]_j`` (k, d): the per-feature Gram matrices times W's columns."""
    return np.einsum("jab,bj->aj", Bm, W)

