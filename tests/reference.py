"""Small exact in-memory implementations of the papers' update rules (test oracles),
and the median search run on its own (:func:`grouped_medians`)."""

import numpy as np

from daskrnmf import _median_search
from daskrnmf.kernels.median_rounds import merge_median_round


def rfnmf_reference(X, F0, loss, n_iter, eps):
    """RFNMF_L1 (eq. 5, 14, 15) / RFNMF (eq. 6, 16-19), literally, from centres F0.

    Returns the centres after ``n_iter`` iterations, the labels of the last G step and
    the objective J(F_{t-1}, G_t) of every iteration.  Empty clusters take the worst-fit
    samples (largest residual first, ties to the lowest index), as daskrnmf does.
    """
    X = np.asarray(X, dtype=float)
    F = np.array(F0, dtype=float)
    n, k = X.shape[0], F.shape[0]
    history = []
    labels = None
    for _ in range(n_iter):
        diff = X[:, None, :] - F[None, :, :]
        D = np.abs(diff).sum(-1) if loss == "l1" else np.sqrt((diff ** 2).sum(-1))
        labels = D.argmin(axis=1)
        res = D[np.arange(n), labels]
        history.append(res.sum())
        newF = F.copy()
        for c in range(k):
            m = labels == c
            if not m.any():
                continue
            if loss == "l1":
                newF[c] = np.median(X[m], axis=0)
            else:
                w = 1.0 / np.maximum(res[m], eps)
                newF[c] = (w[:, None] * X[m]).sum(0) / w.sum()
        worst = np.lexsort((np.arange(n), -res))
        for slot, c in enumerate(np.flatnonzero(np.bincount(labels, minlength=k) == 0)):
            newF[c] = X[worst[slot]]
        F = newF
    return F, labels, np.array(history)


def objective(X, F, loss):
    diff = X[:, None, :] - F[None, :, :]
    D = np.abs(diff).sum(-1) if loss == "l1" else np.sqrt((diff ** 2).sum(-1))
    return D.min(axis=1).sum(), D.argmin(axis=1)


def rfnmtf_reference(X, S0, c0, n_iter):
    """RFNMTF (eq. 7, 20-22), literally, from block values S0 and column labels c0.

    Per iteration: row step (nearest row prototype S[:, c] in L1), column step with the
    new row labels, S step (block medians).  Empty column clusters take the feature with
    the largest own cost among clusters of more than one feature; empty row clusters the
    worst-fit sample (as daskrnmf does).  Returns S, c, the last row labels and the
    objective after each iteration's row and column steps.
    """
    X = np.asarray(X, dtype=float)
    S, c = np.array(S0, dtype=float), np.array(c0)
    (n, d), (K, L) = X.shape, S.shape
    history, r = [], None
    for _ in range(n_iter):
        D = np.abs(X[:, None, :] - S[:, c][None]).sum(-1)
        r = D.argmin(axis=1)
        res = D[np.arange(n), r]
        cost = np.abs(X[:, :, None] - S[r][:, None, :]).sum(axis=0)  # (d, L)
        c = cost.argmin(axis=1)
        history.append(cost[np.arange(d), c].sum())
        own = cost[np.arange(d), c].copy()
        for l in np.flatnonzero(np.bincount(c, minlength=L) == 0):
            movable = np.bincount(c, minlength=L)[c] > 1
            j = int(np.argmax(np.where(movable, own, -np.inf)))
            c[j], own[j] = l, -np.inf
        newS = np.full((K, L), np.nan)
        for k in range(K):
            for l in range(L):
                block = X[r == k][:, c == l]
                if block.size:
                    newS[k, l] = np.median(block)
        worst = np.lexsort((np.arange(n), -res))
        for slot, k in enumerate(np.flatnonzero(np.bincount(r, minlength=K) == 0)):
            for l in range(L):
                newS[k, l] = np.median(X[worst[slot]][c == l])
        S = newS
    return S, c, r, np.array(history)


# ---------------------------------------------------------------- the median search
def grouped_medians(blocks, labels, n_clusters, n_restarts, lo, hi, *, tol=0.0):
    """Median of every feature within every cluster, for labels kept per block: the
    median search (:class:`daskrnmf._median_search.MedianSearch`) run to its end on its own,
    as the models run it inside their passes.

    Parameters
    ----------
    blocks : RowBlocks
    labels : list of (n_rows_b, n_restarts) int arrays (or persisted Dask blocks)
    n_clusters, n_restarts : int
    lo, hi : ndarray (n_features,)
        Bounds of every feature's values (e.g. from ``reductions.feature_stats``).
    tol : float
        Relative tolerance (0: exact, equal to :func:`numpy.median`).

    Returns
    -------
    medians : ndarray (n_restarts, n_clusters, n_features), NaN for empty clusters
    n_rounds : int, passes over X spent
    """
    d = lo.shape[0]
    reps = n_restarts * n_clusters
    search = _median_search.MedianSearch(np.tile(lo, reps), np.tile(hi, reps), tol=tol,
                                         n_total=blocks.shape[0] * d * n_restarts)
    search.finish(lambda plan: blocks.map_reduce(
        _median_search.median_refine_chunk, merge_median_round, args=(n_clusters, plan),
        state=labels, name="median round"))
    return search.value.reshape(n_restarts, n_clusters, d), search.rounds


def ornmf_reference(X, W0, H0, alpha, n_iter, loss="l21", pair_floor=1e-2):
    """ORNMF (eq. 4) with the paper's dense matrices, literally: D_1 (eq. 7), D_2 (eq. 8,
    norms floored at ``pair_floor`` times the RMS row norm of the current H), R = R^+ - R^- (eq. 11), R_a..R_d, the H rule (13) without its
    square root, D_1 again, the W rule (24); then W's rows scaled to unit norm with the
    scale moved into H (the paper leaves W unnormalised; its penalty then rewards
    inflating W).  Paper orientation inside: V = X^T, W_p = W^T, H_p = H^T.
    ``loss="fro"`` (D_1 = I, alpha = 0) is Lee-Seung.  Returns W, H and the objective
    J(W_{t-1}, H_t) of every iteration.
    """
    V = np.asarray(X, dtype=float).T
    Wp, Hp = np.array(W0, dtype=float).T, np.array(H0, dtype=float).T
    n = V.shape[1]
    R = np.zeros((n, n - 1))
    R[np.arange(n - 1), np.arange(n - 1)] = -1.0
    R[np.arange(1, n), np.arange(n - 1)] = 1.0
    Rp, Rm = (np.abs(R) + R) / 2, (np.abs(R) - R) / 2

    def d1(Wp, Hp):
        if loss == "fro":
            return np.eye(n)
        return np.diag(1.0 / np.maximum(np.linalg.norm(V - Wp @ Hp, axis=0), 1e-10))

    history = []
    for _ in range(n_iter):
        D1 = d1(Wp, Hp)
        floor = pair_floor * np.sqrt((Hp ** 2).sum() / n)
        D2 = np.diag(1.0 / np.maximum(np.linalg.norm(Hp @ R, axis=0), floor))
        Ra, Rb, Rc, Rd = Rp @ D2 @ Rm.T, Rm @ D2 @ Rp.T, Rp @ D2 @ Rp.T, Rm @ D2 @ Rm.T
        num = Wp.T @ V @ D1 + alpha * Hp @ (Ra + Rb)
        den = Wp.T @ Wp @ Hp @ D1 + alpha * Hp @ (Rc + Rd)
        Hp = np.where(den > 0, Hp * num / np.where(den > 0, den, 1.0), 0.0)
        res = np.linalg.norm(V - Wp @ Hp, axis=0)
        loss_value = (res ** 2).sum() if loss == "fro" else res.sum()
        history.append(loss_value + alpha * np.linalg.norm(Hp @ R, axis=0).sum())
        D1 = d1(Wp, Hp)
        Wp = Wp * (V @ D1 @ Hp.T) / (Wp @ Hp @ D1 @ Hp.T)
        norms = np.linalg.norm(Wp, axis=0)
        Wp, Hp = Wp / norms, Hp * norms[:, None]
    return Wp.T, Hp.T, np.array(history)


def _box_qp(Q, lin, upper):
    """max lin^T a - 1/2 a^T Q a over 0 <= a <= upper, by SciPy (L-BFGS-B, tight)."""
    from scipy.optimize import minimize

    res = minimize(lambda a: 0.5 * a @ Q @ a - lin @ a, np.zeros(len(lin)),
                   jac=lambda a: Q @ a - lin, bounds=[(0, upper)] * len(lin), method="L-BFGS-B",
                   options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 100000, "maxcor": 50})
    return res.x


def semi_nmf_reference(X, H0, n_iter):
    """Ding et al.'s semi-NMF, eq. 2-3 literally (rows are samples: X ~ H G^T)."""
    H = H0.copy()
    G = X.T @ H @ np.linalg.inv(H.T @ H)
    for _ in range(n_iter):
        XG, GtG = X @ G, G.T @ G
        num = np.maximum(XG, 0) + H @ np.maximum(-GtG, 0)
        den = H @ np.maximum(GtG, 0) + np.maximum(-XG, 0)
        H = H * np.sqrt(num / den)
        G = X.T @ H @ np.linalg.inv(H.T @ H)
    return G, H


def mnmf_reference(X, y, H0, C, lam, semi_iter, n_iter, intercept_scaling=1.0):
    """Algorithm 1 of Max-Margin Semi-NMF (Kumar, Kotsia & Patras) with every sub-problem solved exactly and densely.

    y in {-1, +1}.  SVM step: the dual of the intercept-regularised linear SVM on
    [G^T x - mean, s], a box QP, by SciPy's L-BFGS-B.  G step (the scale-invariant form
    of daskrnmf.models.mnmf: S + diag(w^2) / (2 lam) for H^T H, centred rows z_i = x_i - xbar,
    the centred intercept c0 held): eq. 9 with T_1 - T_2 = -c/4 Q (eq. 10 simplified for
    M_i = z_i w^T; tests/test_mnmf.py), the same way, G from eq. 7 (lam divided out,
    theta = C / lam); G's columns normalised.  H step: scipy.optimize.nnls per sample
    (eq. 14), also for the initial unit-norm basis.
    Returns G, H, w, b and the objective after each iteration.  L-BFGS-B is reliable on
    these duals only for moderate C and theta (at C = 100, theta = 10^4 it stalls).
    """
    from scipy.optimize import nnls

    k = H0.shape[1]
    G, H = semi_nmf_reference(X, H0, semi_iter)
    xbar = X.mean(axis=0)
    Z = X - xbar
    theta = C / lam

    def unit(G):
        return G / np.linalg.norm(G, axis=0)

    def svm(G):
        F = np.hstack([Z @ G, np.full((len(y), 1), intercept_scaling)])
        A = F * y[:, None]
        v = A.T @ _box_qp(A @ A.T, np.ones(len(y)), C)
        hinge = np.maximum(0, 1 - y * (F @ v)).sum()
        return v, 0.5 * v @ v + C * hinge

    G = unit(G)
    H = np.array([nnls(G, x)[0] for x in X])
    v, _ = svm(G)
    history = []
    for _ in range(n_iter):
        w, c0 = v[:k], v[k] * intercept_scaling
        P = np.linalg.inv(H.T @ H + np.diag(w * w / (2 * lam)))
        G0 = X.T @ H @ P
        c = w @ P @ w
        A = Z * y[:, None]
        a = _box_qp(c / 2 * A @ A.T, 1 - y * (Z @ G0 @ w + c0), theta)
        G = unit(G0 + 0.5 * np.outer(A.T @ a, P @ w))
        H = np.array([nnls(G, x)[0] for x in X])
        v, svm_obj = svm(G)
        history.append(lam * ((X - H @ G.T) ** 2).sum() + svm_obj)
    w = v[:k]
    return G, H, w, v[k] * intercept_scaling - w @ (G.T @ xbar), np.array(history)


# ---------------------------------------------------------------- ONMFO (Zhao & Tan)
def _mu(num, den):
    """Multiplicative ratio with 0/0 -> 0."""
    out = np.zeros_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return out


def onmfo_reference(V, W0, lam, n_inner, n_w, h0_fn, order, forget=0.0):
    """Algorithm 1 read literally, one sample at a time, in the paper's orientation.

    V : (F, N) samples as columns; W0 : (F, K).  ``h0_fn(v, W) -> (h, r)`` gives the
    starting point of (16)-(17).  ``order`` lists the sample indices as they arrive.
    ``forget``: A, B, C scaled by ``(1 - 1/t) ** forget`` before sample t (1, 2, ...)
    is added (Mairal et al.'s scaled past; 0: the paper's sums).
    Returns W (F, K) after the last sample.
    """
    W = W0.copy()
    F, K = W.shape
    A, B, C = np.zeros((F, K)), np.zeros((K, K)), np.zeros((F, K))
    for i, t in enumerate(order, start=1):
        v = V[:, t]
        h, r = h0_fn(v, W)
        beta = (1.0 - 1.0 / i) ** forget if forget else 1.0
        A, B, C = beta * A, beta * B, beta * C
        for _ in range(n_inner):
            h = _mu(h * (W.T @ v), W.T @ W @ h + W.T @ r)                # (16)
            r = _mu(r * v, W @ h + r + lam)                              # (17)
        A = A + np.outer(v, h)                                           # (12)
        B = B + np.outer(h, h)                                           # (13)
        C = C + np.outer(r, h)                                           # (14)
        for _ in range(n_w):
            W = _mu(W * A, W @ B + C)                                    # (18)
    return W


def robust_nmf_reference(V, W0, H0, R0, lam, n_iter):
    """Batch updates in the order the fit uses them: H (7), R (8), then W (6).

    V (F, N), W0 (F, K), H0 (K, N), R0 (F, N).  Returns W, H, R and the objective (5)
    after each iteration's H, R step (under the W of that iteration).
    """
    W, H, R = W0.copy(), H0.copy(), R0.copy()
    hist = []
    for _ in range(n_iter):
        H = _mu(H * (W.T @ V), W.T @ (W @ H + R))                          # (7)
        R = _mu(R * V, W @ H + R + lam)                                    # (8)
        hist.append(0.5 * np.sum((V - W @ H - R) ** 2) + lam * R.sum())
        W = _mu(W * (V @ H.T), (W @ H + R) @ H.T)                          # (6)
    return W, H, R, np.array(hist)


def planted_outliers(n=300, d=40, k=4, rho=0.05, seed=0):
    """Parts-based W (k disjoint bumps), sparse H, and gross non-negative outliers."""
    rng = np.random.default_rng(seed)
    W = np.zeros((k, d))
    for j in range(k):
        W[j, j * d // k:(j + 1) * d // k] = rng.uniform(1.0, 2.0, d // k)
    H = rng.gamma(2.0, 1.0, size=(n, k)) * (rng.random((n, k)) < 0.7)
    clean = H @ W
    mask = rng.random((n, d)) < rho
    X = clean + mask * rng.uniform(8.0, 12.0, size=(n, d))
    return X, clean, W, mask


def planted_missing(n=120, d=24, k=3, frac=0.15, seed=0):
    """Low-rank non-negative X plus noise, and a copy with ``frac`` of it NaN (MCAR)."""
    rng = np.random.default_rng(seed)
    X = rng.gamma(2.0, 1.0, (n, k)) @ rng.uniform(0.0, 1.0, (k, d))
    X += 0.05 * rng.random((n, d))
    Xn = X.copy()
    Xn[rng.random((n, d)) < frac] = np.nan
    return X, Xn
