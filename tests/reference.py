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
