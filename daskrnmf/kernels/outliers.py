"""Per-block multiplicative updates of NMF with a sparse non-negative outlier matrix
(Zhao & Tan, ICASSP 2016: X ~ H W + R, eq. 5-8 and 16-18).

Samples are rows: a block x (m, d) has codes h (m, k) and outliers r (m, d); the
components W (k, d) are the paper's W^T.  Its objective per sample is

    l(x, W) = min_{h, r >= 0} 1/2 ||x - h W - r||^2 + lam ||r||_1                 (3)

The updates never leave the non-negative orthant and never increase their block of (5)
(the paper's Lemmas 1-2); 0/0 keeps 0.
"""

import numpy as np

_TINY = 1e-300


def initial_codes(x, W, lam):
    """Starting h and r for (16)-(17): positive wherever they can be.

    h is the constant code whose reconstruction ``h W`` best fits x in least squares,
    ``c 1`` with ``c = x s^T / ||s||^2`` and ``s = 1^T W``.  r is the exact minimiser of
    (3) for that code, ``max(x - c s - lam, 0)``, plus a sliver ``1e-3 x * x / (x + lam)``
    so that no entry where x > 0 starts at 0 (a multiplicative update cannot leave 0); the
    factor ``x / (x + lam)`` is what one step of (17) from h = 0 would apply, so a huge lam
    starts r at ~0.  Both depend on the sample alone, not on its block.
    """
    k = W.shape[0]
    s = W.sum(axis=0)
    c = (x @ s) / max(float(s @ s), _TINY)
    c = np.maximum(c, 1e-12 * max(float(x.max(initial=0.0)), 1.0))
    h = np.repeat(c[:, None], k, axis=1)
    shrink = np.divide(x, x + lam, out=np.zeros_like(x), where=(x + lam) > 0)
    r = np.maximum(x - c[:, None] * s[None, :] - lam, 0.0) + 1e-3 * x * shrink
    return h, r


def solve_codes(x, W, lam, n_iter, h=None, r=None, WWt=None):
    """``n_iter`` rounds of (16) then (17) for all samples of the block, W fixed.

    Parameters
    ----------
    x : ndarray (m, d), non-negative
    W : ndarray (k, d), non-negative components
    lam : float, weight of ||r||_1
    n_iter : int >= 0
    h, r : ndarray (m, k), (m, d), optional
        Starting point (default `initial_codes`).
    WWt : ndarray (k, k), optional, W W^T

    Returns
    -------
    h : ndarray (m, k), r : ndarray (m, d)
        (16): ``h <- h * (x W^T) / (h W W^T + r W^T)``;
        (17): ``r <- r * x / (h W + r + lam)`` with the new h.
    """
    if h is None or r is None:
        h0, r0 = initial_codes(x, W, lam)
        h = h0 if h is None else h
        r = r0 if r is None else r
    h = np.array(h, dtype=np.float64)
    r = np.array(r, dtype=np.float64)
    WWt = W @ W.T if WWt is None else WWt
    xWt = x @ W.T
    Wt = np.ascontiguousarray(W.T)
    rx = np.empty_like(r)
    for _ in range(n_iter):
        den = h @ WWt
        den += r @ Wt
        h = _ratio(h * xWt, den)
        den = h @ W                 # (m, d): updated in place to spare temporaries
        den += r
        if lam > 0:                 # den >= lam > 0: no 0/0 to guard
            den += lam
            np.multiply(r, x, out=rx)
            np.divide(rx, den, out=r)
        else:
            r = _ratio(r * x, den)
    return h, r


def _ratio(num, den):
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    return np.where(den > 0, out, 0.0)


def block_statistics(x, h, r, W, lam):
    """The block's sufficient statistics and its part of objective (5).

    Returns
    -------
    dict with ``A = h^T x`` (k, d), ``B = h^T h`` (k, k), ``C = h^T r`` (k, d) — eq. 12-14
    summed over the block — ``loss`` = sum of 1/2 ||x - h W - r||^2 + lam ||r||_1 and
    ``n`` = m.
    """
    res = x - h @ W - r
    return {"A": h.T @ x, "B": h.T @ h, "C": h.T @ r,
            "loss": 0.5 * float(np.einsum("ij,ij->", res, res)) + lam * float(r.sum()),
            "n": x.shape[0]}


def update_components(W, A, B, C, n_iter):
    """``n_iter`` rounds of (18) (= (6) for the batch model): ``W <- W * A / (B W + C)``."""
    W = np.array(W, dtype=np.float64)
    for _ in range(n_iter):
        W = _ratio(W * A, B @ W + C)
    return W
