"""The ``"cd"`` solve of (3) for complete rows, fused per row in one compiled loop.

Same algorithm and stopping rule as :func:`daskrnmf.kernels.outliers.solve_codes_cd`
(exact r, exact warm-started NNLS h, alternated until a round lowers the row's objective
by at most ``tol`` relative), but each row runs all its rounds in one compiled loop with
its residual in a d-vector (its row of r): no (m, d) temporaries per round, which on
long, narrow blocks (k ~ 10, d ~ 100s) cost more than the arithmetic.  The residual is computed in the work
dtype (float32 data stays float32), the codes, their NNLS and the objectives in float64;
with k up to :data:`daskrnmf.kernels.nnls.TABLE_MAX_K` each NNLS step is a product with
the tabled inverse of its passive set's Gram matrix (:func:`support_table`), which a
caller solving many slices with one W passes along (``table``).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from .blocks import work_dtype
from .nnls import _fill_table, _nnls_row, support_table

TABLE_MAX_COND = 1e8   # condition number of W W^T above which the NNLS is not tabled


@njit(cache=True, nogil=True, fastmath=True)
def _cd_rows(x, W, G, Ginv, h0, h, consts, max_iter, tol, nnls_tol, r_out, rounds,
             loss, tab, F, hw, bz, idx, passive, sup):
    """Every row: b0 = W x (a loop, so that a row's numbers do not depend on its block),
    clipped least squares ``max(0, Ginv b0)`` (Ginv: the inverse of the ridged G; a
    product, no division chain) or, given ``h0`` (m, k), the warm start ``h0[i]`` (h
    itself may be passed: row i is read before it is written; None, the fits' case,
    prunes the warm start's code), then the rounds; ``loss[i]`` gets the row's final
    objective (3).  ``consts``: (lam, 1/2, 0) in the work dtype.

    x, W and the residual are in the work dtype (float32 stays float32: half the memory
    traffic, twice the vector width), h, G and the NNLS in float64, the objective summed
    in float64.  ``tab``: :func:`daskrnmf.kernels.nnls.support_table`, filled (the
    NNLS by tabled inverses) and ``F`` None, or ``tab`` None and ``F`` (k, k)
    scratch for the NNLS with a Cholesky factor updated along the active set, rebuilt
    for every row (k above the table's limit, or G near-singular).  Numba prunes the
    branch whose ``is not None`` test a None argument decides before it types the
    kernel, so a process compiles only the NNLS it calls (each about a second of
    compile); a branch on a flag would compile both.  Scratch from the caller (np.empty's
    and np.zeros' overloads are then not compiled for this kernel): ``bz`` (4, k)
    float64, ``idx`` (k,) int64, ``passive`` (k,) bool, all False, ``sup`` (k + 3,)
    int64 (h's support) and ``hw`` (k + 3,) in the work dtype (its codes).  The
    row's residual x - h W and then its r live in ``r_out[i]`` itself (r overwrites the
    residual entry by entry, and the next round's residual r once b has read it): no row
    allocated, so np.empty_like's overload (0.09 s of compile) is not compiled either.

    The residual takes four of h's non-zero codes a pass over the row (``r -= h_a W_a +
    h_b W_b + h_c W_c + h_d W_d``, the support padded with zero codes to a multiple of
    four), where one pass a code stored and loaded the row again each time, a chain
    through memory (perf: 16 % of the kernel in that loop).  ``W x`` and ``W r`` four
    rows of W a pass as well gained another 6-10 % at 64 features and nothing at 256 on
    one machine (Xeon model 167) and nothing on another (model 207), for a quarter to
    half a second more compile (``benchmarks/results/onmfo_solve.md``,
    ``onmfo_pass.md``): not taken; the first four codes taken from x itself instead of a
    copy of x, 0.07 s more compile for nothing faster: not taken either.

    A row whose r is 0 in two rounds in a row stops without a third NNLS: its b is b0
    again, whose NNLS it already has; the round is counted as the loop would have run it
    (h, r and the objective are those the round would give, bit for bit)."""
    m, d = x.shape
    k = W.shape[0]
    b = bz[0]
    b0 = bz[1]
    z = bz[2]                         # idx, z, passive: the factored NNLS's passive set
    #                                   and its factor, kept from one round to the next
    hi = bz[3]                        # the row's h (copied to h[i] at its end)
    # no view of a row is taken in the row loop (x[i], W[c], ...): each is an atomic
    # reference count up and down, which the calls in the loop keep Numba from pruning
    # (a quarter of perf's samples were in them; the kernel 0.89 -> 0.78 µs a row at 64
    # features without them)
    lamw, half, zero = consts[0], consts[1], consts[2]
    amax = 0.0
    for c in range(k):
        v = abs(G[c, c])
        amax = v if v > amax else amax          # max(amax, v) as Numba writes it
    for i in range(m):
        for c in range(k):
            acc = zero
            for j in range(d):
                acc += W[c, j] * x[i, j]
            b0[c] = acc
        if h0 is not None:
            for c in range(k):
                hi[c] = h0[i, c]
        else:
            for c in range(k):          # (G + ridge)^-1 b0, clipped at 0
                acc2 = 0.0
                for t in range(k):
                    acc2 += Ginv[c, t] * b0[t]
                hi[c] = acc2 if acc2 > 0.0 else 0.0
        f_prev = np.inf
        f = 0.0
        s = -1
        nz_prev = zero + 1
        for it in range(max_iter + 1):
            n = 0
            for c in range(k):          # h's support and its codes in the work dtype,
                sup[n] = c              # listed without a branch: a test of each h_c
                hw[n] = hi[c]           # mispredicts on codes half zero, more than the
                n += hw[n] != zero      # skipped products save
            for t in range(n, n + 3):   # zero codes up to a multiple of four
                sup[t] = 0
                hw[t] = zero
            for j in range(d):          # the residual x - h W, four codes a pass over
                r_out[i, j] = x[i, j]   # the row
            for t in range(0, n, 4):
                c0, c1, c2, c3 = sup[t], sup[t + 1], sup[t + 2], sup[t + 3]
                a0, a1, a2, a3 = hw[t], hw[t + 1], hw[t + 2], hw[t + 3]
                for j in range(d):
                    r_out[i, j] -= ((a0 * W[c0, j] + a1 * W[c1, j])
                                    + (a2 * W[c2, j] + a3 * W[c3, j]))
            f = 0.0
            nz = zero                   # r's sum: 0 exactly when r is
            for j in range(d):          # (3) summed in float64, and r
                ej = r_out[i, j]
                q = ej if ej < lamw else lamw
                f += np.float64(q * (ej - half * q))
                rj = ej - lamw
                rj = rj if rj > zero else zero
                r_out[i, j] = rj
                nz += rj
            if it > 0 and f_prev - f <= tol * f_prev:
                break
            if it == max_iter:
                break
            if it > 0 and nz == zero and nz_prev == zero:
                # r = 0 now and in the round before: b = W x again, whose NNLS h is
                # already (a warm start at its solution returns it bit for bit), and the
                # next round would find the same objective and stop: it is counted, not
                # run (most rows of data whose outliers are sparse)
                rounds[i] += 1
                break
            f_prev = f
            nz_prev = nz
            for c in range(k):          # b = W (x - r): dense and branch-free, it
                acc = zero              # vectorises (a loop over r's non-zeros scans r
                if nz != zero:          # with a branch an entry: 1.4x slower at 256
                    for j in range(d):  # features); b0 itself where r = 0
                        acc += W[c, j] * r_out[i, j]
                b[c] = b0[c] - acc
            if tab is not None:
                # The NNLS of the round (h >= 0 minimising ||x - r - h W||, from G and b),
                # warm from the support of hi, each solve on a passive set P (a bitmask) a
                # product with the tabled inverse of G[P, P] (tab[P]: zero outside P's rows
                # and columns, so a product over every c gives 0 off P and no membership
                # test is taken): Lawson-Hanson's active set in Bro & de Jong's form.  It
                # is written here, not called: a function given the scratch rows (views of
                # bz) takes and drops a reference to bz's memory at every call, inlined or
                # not (atomic counts, 13 % of perf's samples), and its branches on P's
                # bits mispredicted; without both the kernel is 0.75 -> 0.56 us a row at 64
                # features, bit for bit the same
                P = 0
                bmax = 0.0
                for c in range(k):
                    inP = (hi[c] > 0.0) & (G[c, c] > 0.0)
                    P |= np.int64(inP) << c
                    hi[c] = hi[c] if inP else 0.0
                    bc = abs(b[c])
                    bmax = bc if bc > bmax else bmax
                if bmax == 0.0:
                    for c in range(k):
                        hi[c] = 0.0
                else:
                    resume = P != 0
                    for _outer in range(3 * k + 3):
                        best = -1
                        if resume:
                            resume = False
                        else:
                            xmax = 0.0
                            for c in range(k):
                                xc = hi[c]
                                xmax = xc if xc > xmax else xmax
                            wbest = nnls_tol * (bmax + amax * xmax)
                            for c in range(k):
                                w = b[c]
                                for t in range(k):
                                    w -= G[c, t] * hi[t]
                                take = (((P >> c) & 1) == 0) & (G[c, c] > 0.0) & (w > wbest)
                                best = c if take else best
                                wbest = w if take else wbest
                            if best < 0:
                                break
                            P |= 1 << best
                        stalled = False
                        for inner in range(3 * k + 3):
                            nneg = 0
                            for c in range(k):
                                s64 = 0.0
                                for t in range(k):
                                    s64 += tab[P, c, t] * b[t]
                                z[c] = s64
                                nneg += ((P >> c) & 1) & np.int64(s64 <= 0.0)
                            if nneg == 0:
                                for c in range(k):
                                    hi[c] = z[c]
                                break
                            if inner == 0 and best >= 0 and hi[best] == 0.0 and z[best] <= 0.0:
                                stalled = True
                                P &= ~(1 << best)
                                break
                            alpha, tmin = 1.0, -1
                            for c in range(k):
                                if (P >> c) & 1 and z[c] <= 0.0:
                                    ratio = hi[c] / (hi[c] - z[c])
                                    if ratio < alpha or tmin < 0:
                                        alpha, tmin = ratio, c
                            for c in range(k):
                                hi[c] += alpha * (z[c] - hi[c])
                            hi[tmin] = 0.0
                            for c in range(k):
                                drop = ((P >> c) & 1) & np.int64(hi[c] <= 0.0)
                                hi[c] = 0.0 if drop else hi[c]
                                P &= ~(drop << c)
                        if stalled:
                            break
            if F is not None:
                # warm from the last round's h (first round: the clipped least squares,
                # whose support may exceed G's rank when k > d: _nnls_row starts the
                # dependent columns at 0)
                s = _nnls_row(G, b, hi, nnls_tol, True, amax, idx, z, F, passive, s)
            rounds[i] += 1
        # the loop left with r of the final h, and the row's objective (3)
        loss[i] = f
        for c in range(k):
            h[i, c] = hi[c]


def read_only(a):
    """A read-only view of array a (the array itself if it is one already): what the
    kernels only read, passed as one Numba type.  A read-only array is another type than
    a writable one (a user's memory map, ``setflags(write=False)``, a buffer Dask or a
    user hands over read-only), and a kernel given both would compile twice
    (``_cd_rows`` about a second)."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


class FusedComponents(NamedTuple):
    """What the fused solve needs of W, computed once for all the slices solved with it
    (:func:`prepare_components`)."""

    W: np.ndarray       # (k, d) in the work dtype
    G: np.ndarray       # W W^T (k, k) float64
    Ginv: np.ndarray    # the inverse of the ridged G
    table: np.ndarray   # support_table(k), filled, or None: the factored NNLS


def prepare_components(W, dtype, table=None):
    """W's part of :func:`solve_rows_fused` in the work dtype ``dtype``: W, G = W W^T,
    the inverse of the ridged G and the NNLS table, filled for every passive set
    (:func:`~daskrnmf.kernels.nnls._fill_table`; ``table``: the array to fill, default a
    new one; None above :data:`~daskrnmf.kernels.nnls.TABLE_MAX_K` or when G is
    near-singular),
    a :class:`FusedComponents` to pass to every slice (G's condition number and inverse,
    about 0.1 ms, were computed for every slice of 2 048 rows: 0.05 µs a row)."""
    W64 = np.ascontiguousarray(W, dtype=np.float64)
    G = W64 @ W64.T
    k = W64.shape[0]
    Ginv = np.linalg.inv(G + (1e-12 * np.trace(G) + 1e-300) * np.eye(k)) if k else G
    # tabled inverses only for a well-conditioned G (a passive set's Gram matrix is then
    # no worse, by interlacing); near-singular sets keep the factored solves, whose
    # triangular solves stay exact where an explicit inverse would not
    if not k or np.linalg.cond(G) > TABLE_MAX_COND:
        table = None
    else:
        table = support_table(k) if table is None else table
        if table is not None:
            _fill_table(G, table)
    return FusedComponents(read_only(np.ascontiguousarray(W64, dtype=np.dtype(dtype))), G,
                           np.ascontiguousarray(Ginv), table)


def solve_rows_fused(x, W, lam, max_iter, tol, h=None, *, dtype=None, return_loss=False,
                     out=None, table=None, prepared=None):
    """:func:`daskrnmf.kernels.outliers.solve_codes_cd` for complete data, row by row in
    one compiled loop (see the module docstring); same parameters and returns, and with
    ``return_loss`` each row's objective (3) at the returned h, r (float64, as
    :func:`daskrnmf.kernels.outliers.huber_rows` of its residual).  ``dtype``: the work
    dtype the caller already chose (:func:`daskrnmf.kernels.outliers.work_dtype`; its
    check is a pass over x).  ``out``: arrays (h (>= m, k) float64, r (>= m, d) in the
    work dtype, rounds (>= m,) int64, loss (>= m,) float64) whose first m rows receive
    the results (a caller that solves a block in slices reuses them: fresh arrays of that
    size cost page faults each time, several µs a page on VMs), without ``h``.
    ``table``: :func:`daskrnmf.kernels.nnls.support_table` ``(len(W))``, memory for the
    NNLS table kept across calls (filled for W at every call; default a new one).  ``prepared``:
    :func:`prepare_components` ``(W, dtype, table)``, kept for this W across calls
    (``table`` is then its own)."""
    dt = work_dtype(x) if dtype is None else np.dtype(dtype)
    x = np.ascontiguousarray(x, dtype=dt)
    if prepared is None or prepared.W.dtype != dt:
        prepared = prepare_components(W, dt, table)
    k = prepared.G.shape[0]
    warm = h is not None
    m = x.shape[0]
    if out is not None and not warm:
        h, r, rounds, loss = (a[:m] for a in out)
        rounds[:] = 0
    else:
        h = np.array(h, dtype=np.float64) if warm else np.zeros((m, k))
        rounds = np.zeros(m, dtype=np.int64)
        r = np.empty(x.shape, dtype=dt)
        loss = np.zeros(m)
    h = np.ascontiguousarray(h)
    if m:
        tab = prepared.table
        F = None if tab is not None else np.empty((k, k))
        _cd_rows(read_only(x), prepared.W, prepared.G, prepared.Ginv, h if warm else None,
                 h, np.array([lam, 0.5, 0.0], dtype=dt), int(max_iter), float(tol),
                 32 * max(k, 1) * np.finfo(np.float64).eps, r, rounds, loss, tab, F,
                 np.empty(k + 3, dtype=dt), np.empty((4, k)),
                 np.empty(k, dtype=np.int64), np.zeros(k, dtype=np.bool_),
                 np.empty(k + 3, dtype=np.int64))
    if return_loss:
        return h, r, rounds, loss
    return h, r, rounds
