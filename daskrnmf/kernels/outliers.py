"""Per-block solvers of NMF with a sparse non-negative outlier matrix (Zhao & Tan, "Online
nonnegative matrix factorization with outliers", ICASSP 2016: X ~ H W + R, eq. 5-8, 16-18).

Samples are rows: a block x (m, d) has codes h (m, k) and outliers r (m, d); the
components W (k, d) are the paper's W^T.  Its objective per sample is

    l(x, W) = min_{h, r >= 0} 1/2 ||x - h W - r||^2 + lam ||r||_1                 (3)

Two solvers of (3) and of the components' problem (15):

* ``"cd"`` (the default of the models).  For h fixed, r is in closed form,
  ``r = max(0, x - h W - lam)``, so (3) is ``min_{h >= 0} sum_j psi(x_j - (h W)_j)`` with
  the one-sided Huber function ``psi(e) = e^2 / 2`` (e <= lam), ``lam e - lam^2 / 2``
  (e > lam).  :func:`solve_codes_cd` alternates the exact r and the exact non-negative
  least squares h for ``x - r`` (a k x k Gram matrix ``W W^T`` shared by the rows; the
  active-set solver of :mod:`daskrnmf.kernels.nnls`, warm-started from the previous h):
  each round minimises a majoriser of the row's objective, which therefore never rises,
  and each row stops on its own tolerance.  W given the statistics A, B, C is solved by
  block coordinate descent over its rows (HALS; Mairal et al., JMLR 2010; Cichocki & Phan
  2009), :func:`update_components_cd`; the batch model's H by HALS sweeps
  (:func:`hals_codes`).
* ``"mu"``: the paper's multiplicative rounds (16)-(18) literally
  (:func:`solve_codes`, :func:`update_components`); they never leave the non-negative
  orthant and never increase their block of (5) (the paper's Lemmas 1-2); 0/0 keeps 0.

Missing values (``mask``, the observed entries of a block whose x is zero at the missing
ones; :mod:`daskrnmf.kernels.missing`): (3) sums over the observed entries and r is 0 at
the missing ones.  The exact r needs no change (at a missing entry ``x - h W - lam < 0``);
the exact h uses each row's Gram matrix ``W diag(m_i) W^T``; the statistics of W get a
per-feature part ``Bm_j = sum_i m_ij h_i^T h_i`` (d, k, k) for the masked rows, and W's
updates use ``B + Bm_j`` for column j (HALS per column, or ``(B + Bm_j) w_j`` in (18)).
"""

import numpy as np
from numba import njit

from .blocks import work_dtype
from .cd_rows import read_only, solve_rows_fused
from .missing import feature_grams, feature_products, row_grams
from .nnls import nnls_codes_each

_TINY = 1e-300


def initial_codes(x, W, lam, mask=None):
    """Starting h and r for (16)-(17): positive wherever they can be.

    h is the constant code whose reconstruction ``h W`` best fits x in least squares,
    ``c 1`` with ``c = x s^T / ||s||^2`` and ``s = 1^T W``.  r is the exact minimiser of
    (3) for that code, ``max(x - c s - lam, 0)``, plus a sliver ``1e-3 x * x / (x + lam)``
    so that no entry where x > 0 starts at 0 (a multiplicative update cannot leave 0); the
    factor ``x / (x + lam)`` is what one step of (17) from h = 0 would apply, so a huge lam
    starts r at ~0.  Both depend on the sample alone, not on its block.  ``mask``: the
    least-squares fit is over each row's observed entries (x is 0 at the missing ones,
    where r is 0).
    """
    k = W.shape[0]
    s = W.sum(axis=0)
    if mask is None:
        c = (x @ s) / max(float(s @ s), _TINY)
    else:
        c = (x @ s) / np.maximum(mask @ (s * s), _TINY)
    c = np.maximum(c, 1e-12 * max(float(x.max(initial=0.0)), 1.0))
    h = np.repeat(c[:, None], k, axis=1)
    shrink = np.divide(x, x + lam, out=np.zeros_like(x), where=(x + lam) > 0)
    r = np.maximum(x - c[:, None] * s[None, :] - lam, 0.0) + 1e-3 * x * shrink
    return h, r


def residual_target(x, P, lam):
    """Fused for the batch model's block step: from ``P = h W`` (overwritten), the
    per-row objective (3) of ``e = x - P`` (as :func:`huber_rows`) and, in P, the target
    ``x - r = min(x, P + lam)`` of the H and W updates; one pass, no temporaries."""
    out = np.zeros(x.shape[0])
    if x.size:
        _residual_target(read_only(x), P, float(lam), out)
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _residual_target(x, P, lam, out):
    n, d = x.shape
    for i in range(n):
        acc = 0.0
        xi = x[i]
        pi = P[i]
        for j in range(d):
            v = xi[j] - pi[j]
            q = v if v < lam else lam
            acc += q * (v - 0.5 * q)
            t = pi[j] + lam
            pi[j] = t if t < xi[j] else xi[j]
        out[i] = acc


def huber_rows(e, lam):
    """Per-row objective (3) for residuals ``e = x - h W`` with the exact r:
    ``sum_j psi(e_j)``, ``psi(e) = q (e - q / 2)``, ``q = min(e, lam)`` (float64 sums)."""
    e = np.ascontiguousarray(e)
    out = np.zeros(e.shape[0])
    if e.size:
        _huber_rows(e, float(lam), out)
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _huber_rows(e, lam, out):
    n, d = e.shape
    for i in range(n):
        acc = 0.0
        for j in range(d):
            v = e[i, j]
            q = v if v < lam else lam
            acc += q * (v - 0.5 * q)
        out[i] = acc


def solve_codes_cd(x, W, lam, max_iter, tol, h=None, mask=None, **fused):
    """Exact r, exact NNLS h, alternated until each row's objective (3) stalls.

    Parameters
    ----------
    x : ndarray (m, d), non-negative
        Computed in :func:`work_dtype` (float32 stays float32).
    W : ndarray (k, d), non-negative components
    lam : float, weight of ||r||_1
    max_iter : int >= 0
        Most (r, h) rounds per row.
    tol : float >= 0
        A row stops when a round lowers its objective by at most ``tol`` relative.
    h : ndarray (m, k), optional
        Warm start; default the NNLS codes of x itself (r = 0).
    mask : ndarray (m, d) of bool, optional
        Observed entries (x is 0 at the missing ones): the objective over them, each row's
        NNLS with its own Gram matrix ``W diag(m_i) W^T``; r is 0 at the missing entries.

    Returns
    -------
    h : ndarray (m, k) float64
    r : ndarray (m, d), ``max(0, x - h W - lam)`` in the work dtype
    rounds : ndarray (m,) int
        Rounds each row took.  Rows are solved independently (the result of a row does
        not depend on the other rows of the block).

    Complete rows (``mask=None``) run in one compiled loop per row
    (:func:`daskrnmf.kernels.cd_rows.solve_rows_fused`, 1.9x faster on long narrow blocks;
    ``**fused``: its keywords), whose first round starts from the clipped least-squares
    codes.
    """
    if mask is None:
        return solve_rows_fused(x, W, lam, max_iter, tol, h=h, **fused)
    dt = work_dtype(x)
    x = np.ascontiguousarray(x, dtype=dt)
    W64 = np.asarray(W, dtype=np.float64)
    Wd = W64.astype(dt)
    Wt = np.ascontiguousarray(Wd.T)
    G = W64 @ W64.T
    xWt = (x @ Wt).astype(np.float64)
    G3 = row_grams(W64, mask, G)      # (m, k, k): each row's Gram on its observed entries
    if h is None:
        # each row's clipped least-squares codes on its observed entries: the start of
        # the complete rows' solve (cd_rows.solve_rows_fused), row for row
        reg = (1e-12 * np.trace(G3, axis1=1, axis2=2) + 1e-300)[:, None, None]
        ls = np.linalg.solve(G3 + reg * np.eye(G.shape[0]), xWt[:, :, None])[:, :, 0]
        h = np.maximum(ls, 0.0)
    else:
        h = np.array(h, dtype=np.float64)
    m = x.shape[0]
    rounds = np.zeros(m, dtype=np.int64)
    f_prev = np.full(m, np.inf)
    idx = np.arange(m)
    xa, ha, ba, ma, Ga = x, h, xWt, mask, G3
    for it in range(max_iter + 1):
        e = xa - ha.astype(dt) @ Wd
        e *= ma                         # the objective over the observed entries
        f = huber_rows(e, lam)
        done = (f_prev[idx] - f <= tol * f_prev[idx]) if it else np.zeros(idx.size, bool)
        if it == max_iter:
            done[:] = True
        f_prev[idx] = f
        if done.any():
            h[idx[done]] = ha[done]
            keep = ~done
            idx, xa, ha, ba, e = idx[keep], xa[keep], ha[keep], ba[keep], e[keep]
            ma, Ga = ma[keep], Ga[keep]
            if not idx.size:
                break
        np.subtract(e, lam, out=e)
        np.maximum(e, 0.0, out=e)                   # r of the active rows
        ha = nnls_codes_each(Ga, ba - (e @ Wt), init=ha)
        rounds[idx] += 1
    r = x - h.astype(dt) @ Wd
    r -= lam
    np.maximum(r, 0.0, out=r)
    return h, r, rounds


def update_components_cd(W, A, B, C, max_iter, tol, Bm=None):
    """Block coordinate descent on the rows of W for (15), ``min_{W >= 0} 1/2 tr(W^T B W)
    - tr(W^T (A - C))``: each row takes its exact minimiser with the others fixed (HALS),
    sweeps until one moves W by at most ``tol`` relative (Frobenius) or ``max_iter``.

    Returns ``W`` (k, d) float64 and the number of sweeps.  A component no sample uses
    (``B[j, j] = 0``) is left as it is.

    ``Bm`` (d, k, k), missing values: column c of W has the Gram matrix ``B + Bm[c]``
    (the problem separates over W's columns); each row's update is then exact per
    column (:func:`_update_components_cd_masked`), and the column of a feature that no
    sample observes is 0."""
    if Bm is not None:
        return _update_components_cd_masked(W, A, B, C, Bm, max_iter, tol)
    W = np.array(W, dtype=np.float64)
    D = np.ascontiguousarray(np.asarray(A, dtype=np.float64) - np.asarray(C, dtype=np.float64))
    # (G and D read only, as for the codes: one signature, see read_only)
    sweeps = _hals_sweeps(W, read_only(np.ascontiguousarray(B, dtype=np.float64)),
                          read_only(D), np.empty(W.shape[1]), int(max_iter), float(tol),
                          False) if W.size else 0
    return W, sweeps


def _update_components_cd_masked(W, A, B, C, Bm, max_iter, tol):
    """HALS on W's rows with a Gram matrix per column, ``B + Bm[c]`` (missing values).

    The per-column Gram matrices are laid out row-major for the sweep (``(k, d, k)``: row
    j of every column's matrix contiguous), and W is swept transposed (d, k), so that
    each row's update reads contiguous memory."""
    D = np.asarray(A, dtype=np.float64) - np.asarray(C, dtype=np.float64)
    k = D.shape[0]
    Bt = np.ascontiguousarray((np.asarray(Bm, dtype=np.float64)
                               + np.asarray(B, dtype=np.float64)[None]).transpose(1, 0, 2))
    diag = np.einsum("ccj->cj", Bt.transpose(0, 2, 1)) if k else np.zeros((0, D.shape[1]))
    WT = np.array(np.asarray(W, dtype=np.float64).T, order="C")        # (d, k)
    # a feature that no sample (with a non-zero code) observes has no Gram matrix: its
    # column of W would keep its start; it is 0, as the multiplicative updates make it
    # (nothing to reconstruct there, and inverse_transform does not invent values)
    WT[~(diag > 0).any(axis=0)] = 0.0
    sweeps = 0
    for sweeps in range(1, max_iter + 1):
        moved = 0.0
        for j in range(k):
            dj = diag[j]
            use = dj > 0.0
            if not use.any():
                continue
            grad = D[j] - np.einsum("cb,cb->c", Bt[j], WT)
            old = WT[:, j].copy()
            new = old + np.divide(grad, dj, out=np.zeros_like(grad), where=use)
            np.maximum(new, 0.0, out=new)
            new = np.where(use, new, old)
            moved += float(np.dot(new - old, new - old))
            WT[:, j] = new
        if moved <= tol * tol * float(np.einsum("ij,ij->", WT, WT)):
            break
    return np.ascontiguousarray(WT.T), sweeps


def hals_codes(h, G, b, n_sweeps):
    """``n_sweeps`` HALS sweeps over the columns of h for ``min_{h >= 0} 1/2 h G h^T -
    h b^T`` row by row (``G = W W^T`` (k, k), ``b = (x - r) W^T`` (m, k)); returns the
    new h (m, k).

    Every row's sweeps are those of :func:`_hals_row` (columns in order, each exact
    given the others), run for all rows at once on the transposed codes: the inner loop
    then runs over the rows, contiguous, and vectorises (3x faster on 400 x 49 codes)."""
    hT = np.ascontiguousarray(np.asarray(h, dtype=np.float64).T)
    _hals_sweeps(hT, read_only(np.ascontiguousarray(G, dtype=np.float64)),
                 read_only(np.ascontiguousarray(np.asarray(b, dtype=np.float64).T)),
                 np.empty(hT.shape[1]), int(n_sweeps), -1.0, True)
    return np.ascontiguousarray(hT.T)


@njit(cache=True, nogil=True, fastmath=True)
def _hals_sweeps(V, G, D, acc, n_sweeps, tol, clear_unused):
    """HALS sweeps over the rows of V (k, m) in place for ``min_{V >= 0} 1/2 tr(V^T G V)
    - tr(V^T D)`` (G (k, k) symmetric, D (k, m)): row j becomes ``max(0, V_j + (D_j -
    G_j V) / G_jj)``, exact given the others; the inner loops run along the rows,
    contiguous, and vectorise.  One kernel for W's update (:func:`update_components_cd`,
    V = W, G = B, D = A - C) and the codes of every row at once (:func:`hals_codes`, V =
    h^T, G = W W^T, D = b^T): one compile for both.

    At most ``n_sweeps``; with ``tol >= 0`` stops after a sweep that moves V by at most
    ``tol`` relative (Frobenius), else makes them all.  A row with ``G_jj <= 0`` is set
    to 0 (``clear_unused``) or left as it is.  ``acc``: (m,) scratch from the caller.
    Rows are copied and cleared by loops: an array-to-array assignment compiles Numba's
    broadcast check and its message.  Returns the sweeps made."""
    k, m = V.shape
    track = tol >= 0.0
    sweeps = 0
    for sweeps in range(1, n_sweeps + 1):
        moved = 0.0
        for j in range(k):
            vj = V[j]
            gjj = G[j, j]
            if gjj <= 0.0:
                if clear_unused:
                    for i in range(m):
                        vj[i] = 0.0
                continue
            dj = D[j]
            for i in range(m):
                acc[i] = dj[i]
            for t in range(k):
                g = G[j, t]
                vt = V[t]
                for i in range(m):
                    acc[i] -= g * vt[i]
            inv = 1.0 / gjj
            for i in range(m):          # (the move summed untracked too: one loop to
                old = vj[i]             # compile, the same V)
                v = old + acc[i] * inv
                v = v if v > 0.0 else 0.0
                delta = v - old
                moved += delta * delta
                vj[i] = v
        if track:
            total = 0.0
            for j in range(k):
                vj = V[j]
                for i in range(m):
                    total += vj[i] * vj[i]
            if moved <= tol * tol * total:
                break
    return sweeps


def hals_codes_each(h, G3, b, n_sweeps):
    """:func:`hals_codes` with a Gram matrix of its own for every row (``G3`` (m, k, k),
    missing values: ``W diag(m_i) W^T``)."""
    h = np.ascontiguousarray(h, dtype=np.float64)
    _hals_rows_each(h, np.ascontiguousarray(G3, dtype=np.float64),
                    np.ascontiguousarray(b, dtype=np.float64), int(n_sweeps))
    return h


@njit(cache=True, nogil=True, fastmath=True)
def _hals_row(h, G, b, n_sweeps):
    """HALS sweeps over one row's codes h (k,) for ``1/2 h G h^T - h b^T``; G symmetric,
    so row j of G is read (contiguous) for column j."""
    k = h.shape[0]
    for _ in range(n_sweeps):
        for j in range(k):
            if G[j, j] <= 0.0:
                h[j] = 0.0
                continue
            acc = b[j]
            for t in range(k):
                acc -= h[t] * G[j, t]
            v = h[j] + acc / G[j, j]
            h[j] = v if v > 0.0 else 0.0


@njit(cache=True, nogil=True, fastmath=False)
def _hals_rows_each(h, G3, b, n_sweeps):
    for i in range(h.shape[0]):
        _hals_row(h[i], G3[i], b[i], n_sweeps)


def solve_codes(x, W, lam, n_iter, h=None, r=None, WWt=None, tol=0.0, mask=None):
    """``n_iter`` rounds of (16) then (17) for all samples of the block, W fixed.

    With ``tol > 0`` the rounds stop early when one lowers the block's objective (3) by
    at most ``tol`` relative (evaluated from the round's own products, no extra GEMM).

    Parameters
    ----------
    x : ndarray (m, d), non-negative
    W : ndarray (k, d), non-negative components
    lam : float, weight of ||r||_1
    n_iter : int >= 0
    h, r : ndarray (m, k), (m, d), optional
        Starting point (default `initial_codes`).
    WWt : ndarray (k, k), optional, W W^T
    mask : ndarray (m, d) of bool, optional
        Observed entries (x is 0 at the missing ones): (16) with ``(M o (h W)) W^T`` for
        ``h W W^T`` and the objective over the observed entries; (17) keeps r at 0 where x
        is missing (x = 0 there).

    Returns
    -------
    h : ndarray (m, k), r : ndarray (m, d)
        (16): ``h <- h * (x W^T) / (h W W^T + r W^T)``;
        (17): ``r <- r * x / (h W + r + lam)`` with the new h.
    rounds : int (only with ``tol > 0``)
    """
    if h is None or r is None:
        h0, r0 = initial_codes(x, W, lam, mask)
        h = h0 if h is None else h
        r = r0 if r is None else r
    h = np.array(h, dtype=np.float64)
    r = np.array(r, dtype=np.float64)
    WWt = W @ W.T if WWt is None else WWt
    xWt = x @ W.T
    Wt = np.ascontiguousarray(W.T)
    rx = np.empty_like(r)
    prev, rounds = np.inf, 0
    for _ in range(n_iter):
        if mask is None:
            den = h @ WWt
        else:
            den = h @ W
            den *= mask
            den = den @ Wt
        den += r @ Wt
        h = _ratio(h * xWt, den)
        den = h @ W                 # (m, d): updated in place to spare temporaries
        den += r
        if tol > 0:                 # (3) at (new h, old r): x - den is the residual
            res = x - den
            if mask is not None:
                res *= mask
            f = 0.5 * float(np.einsum("ij,ij->", res, res)) + lam * float(r.sum())
            if np.isfinite(prev) and prev - f <= tol * prev:
                break
            prev = f
        rounds += 1
        if lam > 0:                 # den >= lam > 0: no 0/0 to guard
            den += lam
            np.multiply(r, x, out=rx)
            np.divide(rx, den, out=r)
        else:
            r = _ratio(r * x, den)
    return (h, r, rounds) if tol > 0 else (h, r)


def _ratio(num, den):
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    return np.where(den > 0, out, 0.0)


def block_statistics(x, h, r, W, lam, mask=None, loss=None):
    """The block's sufficient statistics and its part of objective (5) (computed in x's
    dtype when it is float32, summed in float64).

    Returns
    -------
    dict with ``A = h^T x`` (k, d), ``B = h^T h`` (k, k), ``C = h^T r`` (k, d) — eq. 12-14
    summed over the block — ``loss`` = sum of 1/2 ||x - h W - r||^2 + lam ||r||_1 and
    ``n`` = m.  With ``mask`` (x zero at the missing entries, r too): the loss over the
    observed entries, ``B`` = 0 and ``Bm`` (d, k, k) = ``sum_i m_ij h_i^T h_i``.
    ``loss``: the rows' objectives (3) at (h, r) as the solver returned them (complete
    rows), summed instead of computed again from the residual.
    """
    dt = x.dtype if x.dtype == np.float32 else np.float64
    hd, Wd = h.astype(dt, copy=False), np.asarray(W, dtype=dt)
    if loss is not None and mask is None:     # the solver's own per-row objectives
        return {"A": (hd.T @ x).astype(np.float64), "B": h.T @ h,
                "C": (hd.T @ r.astype(dt, copy=False)).astype(np.float64),
                "loss": float(np.sum(loss)), "n": x.shape[0]}
    res = x - hd @ Wd
    res -= r
    if mask is not None:
        res *= mask
        k = h.shape[1]
        return {"A": (hd.T @ x).astype(np.float64), "B": np.zeros((k, k)),
                "Bm": feature_grams(h, mask),
                "C": (hd.T @ r.astype(dt, copy=False)).astype(np.float64),
                "loss": 0.5 * float(np.einsum("ij,ij->", res, res, dtype=np.float64))
                + lam * float(r.sum(dtype=np.float64)),
                "n": x.shape[0]}
    return {"A": (hd.T @ x).astype(np.float64), "B": h.T @ h,
            "C": (hd.T @ r.astype(dt, copy=False)).astype(np.float64),
            "loss": 0.5 * float(np.einsum("ij,ij->", res, res, dtype=np.float64))
            + lam * float(r.sum(dtype=np.float64)),
            "n": x.shape[0]}


def update_components(W, A, B, C, n_iter, Bm=None):
    """``n_iter`` rounds of (18) (= (6) for the batch model): ``W <- W * A / (B W + C)``;
    with ``Bm`` (missing values) column c of ``B W`` is ``(B + Bm[c]) w_c``."""
    W = np.array(W, dtype=np.float64)
    for _ in range(n_iter):
        den = B @ W + C
        if Bm is not None:
            den += feature_products(Bm, W)
        W = _ratio(W * A, den)
    return W
