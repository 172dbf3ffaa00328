"""Small exact in-memory implementations of the papers' update rules (test oracles)."""

import numpy as np


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
