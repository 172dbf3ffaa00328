"""Max-Margin Semi-NMF: the G step's dual (eq. 9-10) against its simplified form."""

import numpy as np
import pytest
from scipy.optimize import minimize

from daskrnmf.kernels.dual import sweep


def _problem(seed, n=24, d=6, k=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 1.0          # rows are samples (paper: columns)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    H = rng.random((n, k))
    w = rng.normal(size=k)
    return X, y, H, w, 0.3


def _eq10(X, y, H, w, b):
    """T_1, T_2, t_3..t_7 of eq. 10 literally (paper orientation, T_2 with y_i y_j)."""
    V, Hp = X.T, H.T                           # m x L, k x L
    L = V.shape[1]
    B = np.linalg.inv(2 * Hp @ Hp.T)
    M = [np.outer(V[:, i], w) for i in range(L)]
    T1 = np.array([[sum(y[i] * y[j] * Hp[:, kk] @ B @ M[i].T @ M[j] @ B @ Hp[:, kk]
                        for kk in range(L)) for j in range(L)] for i in range(L)])
    T2 = np.array([[y[i] * y[j] * w @ B @ M[j].T @ V[:, i] for j in range(L)] for i in range(L)])
    t3 = np.array([4 * sum(y[i] * Hp[:, kk] @ B @ Hp @ V.T @ M[i] @ B @ Hp[:, kk]
                           for kk in range(L)) for i in range(L)])
    t4 = np.array([2 * sum(y[i] * Hp[:, kk] @ B @ w * V[:, i] @ V[:, kk] for kk in range(L))
                   for i in range(L)])
    t5 = np.array([2 * y[i] * w @ B @ Hp @ V.T @ V[:, i] for i in range(L)])
    t6 = b * y
    t7 = np.ones(L)
    return T1 - T2, t3 - t4 - t5 - t6 + t7, B


@pytest.mark.parametrize("seed", [0, 1])
def test_eq9_dual_is_a_linear_kernel_svm_dual(seed):
    X, y, H, w, b = _problem(seed)
    Q2, lin, B = _eq10(X, y, H, w, b)
    P = np.linalg.inv(H.T @ H)
    c = w @ P @ w
    f = X @ (X.T @ H @ P) @ w                   # x_i^T G_0 w
    Q = np.outer(y, y) * (X @ X.T)
    np.testing.assert_allclose(Q2, -c / 4 * Q, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(lin, 1 - y * (f + b), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_dual_coordinate_ascent_solves_eq9(seed):
    X, y, H, w, b = _problem(seed)
    theta = 5.0
    Q2, lin, B = _eq10(X, y, H, w, b)
    # SciPy on eq. 9 as printed (with T_2's y_i y_j), G from eq. 7
    res = minimize(lambda a: -(a @ Q2 @ a + lin @ a), np.zeros(len(y)),
                   jac=lambda a: -(2 * Q2 @ a + lin), bounds=[(0, theta)] * len(y),
                   method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
    a = res.x
    V, Hp = X.T, H.T
    G_ref = (2 * V @ Hp.T + sum(a[i] * y[i] * np.outer(V[:, i], w) for i in range(len(y)))) @ B
    # ours: kappa = c / 2, p = 1 - y (f + b), z = x; G = G_0 + v w^T P / c with v = kappa u
    P = np.linalg.inv(H.T @ H)
    G0 = X.T @ H @ P
    c = w @ P @ w
    alpha = np.zeros(len(y))
    u = sweep(X, y, 1 - y * (X @ G0 @ w + b), alpha, np.zeros(X.shape[1]), c / 2, theta,
              n_sweeps=20000, tol=1e-14)
    G = G0 + np.outer(c / 2 * u, P @ w) / c
    np.testing.assert_allclose(G, G_ref, rtol=1e-5, atol=1e-6)
