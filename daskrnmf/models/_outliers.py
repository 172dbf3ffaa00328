"""The pieces ONMFO and RobustNMF share: X ~ H W + R with a sparse non-negative R.

For W fixed, the codes h and outliers r of a sample x solve

    min_{h, r >= 0} 1/2 ||x - h W - r||^2 + alpha_R ||r||_1                          (3)

by the exact alternation of :func:`daskrnmf.kernels.outliers.solve_codes_cd` (``solver=
"cd"``) or the paper's multiplicative rounds (16)-(17) (``"mu"``,
:func:`daskrnmf.kernels.outliers.solve_codes`); a row block reduces to the statistics
A = H^T X, B = H^T H, C = H^T R and its objective (:func:`daskrnmf.kernels.outliers.
block_statistics`), from which W is updated (:func:`daskrnmf.kernels.outliers.
update_components_cd` or (18)).  The functions here run on the workers (NumPy in, small
arrays out; they import neither Dask nor scikit-learn).
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .._validation import MASK_HINT
from ..kernels.blocks import (THREAD_SCRATCH_BYTES, check_values, thread_scratch,
                              work_dtype)
from ..kernels.cd_rows import prepare_components
from ..kernels.missing import feature_grams, gram_rows, observed, row_grams
from ..kernels.nnls import support_table
from ..kernels.outliers import (block_statistics, hals_codes, hals_codes_each, huber_rows,
                                initial_codes, residual_target, solve_codes, solve_codes_cd,
                                update_components, update_components_cd)

SOLVE_ROWS = 2048  # rows solved at a time: bounds the kernels' temporaries
H_SWEEPS = 4       # RobustNMF (cd): HALS sweeps over H per pass (cheap beside the pass's GEMMs)
W_SWEEPS = 8       # RobustNMF (cd): most HALS sweeps over W per iteration


def add_statistics(parts):
    """Key-wise sum of statistics dicts (associative; the tree keeps the order).  A key
    some parts lack counts as 0 there (``Bm``: only pieces with missing values have it)."""
    keys = list(parts[0])
    keys += [key for p in parts[1:] for key in p if key not in keys]
    out = {}
    for key in keys:
        have = [p[key] for p in parts if key in p]
        out[key] = sum(have) if np.isscalar(have[0]) else _sum(have)
    return out


def _sum(arrays):
    out = np.array(arrays[0], dtype=np.float64)
    for a in arrays[1:]:
        out += a
    return out


@dataclass(frozen=True)
class SolveSpec:
    """The (h, r) solve of a batch: ``alpha_R``, ``solver`` ("cd" or "mu"), at most
    ``n_iter`` rounds, stopping at relative decrease ``tol``, ``where`` (the
    estimator, for error messages), ``missing`` (``missing="mask"``: NaN entries are
    missing values, see :mod:`daskrnmf.kernels.missing`) and ``threads``: how many
    threads :func:`solve_batch_piece` solves a piece's slices with (1: in this thread;
    more only where the piece's solve runs alone in its process, see
    :func:`solve_batch_piece`); ``checked``: the pieces are parts of a block
    :func:`checked_block` already checked (ONMFO's row groups, where they were read;
    each piece still takes its own work dtype)."""

    alpha_R: float
    n_iter: int
    where: str
    solver: str = "cd"
    tol: float = 0.0
    missing: bool = False
    threads: int = 1
    #: the pieces come from a block :func:`checked_block` checked where it was read
    checked: bool = False


def solve_rows(x, W, spec, mask=None, out=None, table=None, prepared=None):
    """h (m, k), r (m, d), the rounds taken (summed over rows) and the rows' objectives
    (3) when the solver gives them (complete rows, "cd"; else None) for rows x, in the
    work dtype of :func:`as_work_block`.  ``mask``: their observed entries, x zero at the
    others; the rows are then solved :func:`daskrnmf.kernels.missing.gram_rows` at a
    time, which bounds their Gram matrices' memory.  ``out``, ``table``, ``prepared``:
    for the complete-row solver (:func:`~daskrnmf.kernels.cd_rows.solve_rows_fused`, see
    :func:`_solve_buffers`): buffers it fills instead of new arrays, its NNLS table and
    W's part of the solve for this W."""
    step = gram_rows(W.shape[0])
    if mask is not None and spec.solver == "cd" and x.shape[0] > step:
        parts = [solve_rows(x[s:s + step], W, spec, mask[s:s + step])
                 for s in range(0, x.shape[0], step)]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                sum(p[2] for p in parts), None)
    if spec.solver == "cd" and mask is None:
        # the work dtype is x's (as_work_block chose it); the rows' objectives come along
        h, r, rounds, loss = solve_codes_cd(x, W, spec.alpha_R, spec.n_iter, spec.tol,
                                            dtype=x.dtype, return_loss=True, out=out,
                                            table=table, prepared=prepared)
        return h, r, int(rounds.sum()), loss
    if spec.solver == "cd":
        h, r, rounds = solve_codes_cd(x, W, spec.alpha_R, spec.n_iter, spec.tol, mask=mask)
        return h, r, int(rounds.sum()), None
    if spec.tol > 0:
        h, r, rounds = solve_codes(x, W, spec.alpha_R, spec.n_iter, tol=spec.tol, mask=mask)
        return h, r, rounds * x.shape[0], None
    h, r = solve_codes(x, W, spec.alpha_R, spec.n_iter, mask=mask)
    return h, r, spec.n_iter * x.shape[0], None


def _solve_buffers(x, W, spec, prepared=None):
    """Keywords of :func:`solve_rows` for the slices of block x solved with one W: the
    complete-row solver's outputs (h, r, rounds, objectives) for ``SOLVE_ROWS`` rows,
    reused slice after slice (fresh arrays per slice page-fault), and W's part of its
    solve (:func:`daskrnmf.kernels.cd_rows.prepare_components`: G, its inverse and the
    NNLS table of W's passive-set inverses, computed once for all the slices; read only,
    so threads share it: ``prepared``, one computed before); none where that solver
    does not run (``spec``: missing values, or ``"mu"``).

    The outputs and the table's memory are this thread's, kept from one call to the
    next (:func:`daskrnmf.kernels.blocks.thread_scratch`): a batch's results are its
    statistics, computed before the next batch's solve, and :func:`codes_block` copies
    its codes out.  ONMFO solves thousands of batches a pass, each of these arrays new
    pages on a worker (0.7-0.76 against 0.66-0.69 us a row at 64 features); the table
    (2^k, k, k) is filled again for each W (entries outside a passive set stay 0)."""
    if spec.solver != "cd" or spec.missing:
        return {}
    k, d = W.shape[0], x.shape[1]
    rows = min(SOLVE_ROWS, x.shape[0])
    # SOLVE_ROWS rows where they are kept (any block's slices fit), else the rows asked
    # for (wide data: a block of a few rows does not take 2,048 rows of memory)
    wide = SOLVE_ROWS * d * x.dtype.itemsize > THREAD_SCRATCH_BYTES // 2
    cap = rows if wide else SOLVE_ROWS
    h, r, rounds, loss, table = thread_scratch(
        "solve", (k, d, x.dtype.str, cap),
        lambda: (np.empty((cap, k)), np.empty((cap, d), dtype=x.dtype),
                 np.empty(cap, dtype=np.int64), np.empty(cap), support_table(k)))
    return {"out": (h[:rows], r[:rows], rounds[:rows], loss[:rows]),
            "prepared": (prepare_components(W, x.dtype, table) if prepared is None
                         else prepared)}


_POOL = None                    # (ThreadPoolExecutor, its threads): solve_batch_piece's
_POOL_LOCK = threading.Lock()


def _solve_pool(threads):
    """The module's thread pool, with at least ``threads`` threads: created at its first
    use and kept (a larger count asked for later replaces it).  The old pool is not shut
    down: another thread may have taken it and not yet submitted to it; it finishes what
    it is given, and its threads end when it is collected."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[1] < threads:
            _POOL = (ThreadPoolExecutor(threads, thread_name_prefix="daskrnmf-solve"), threads)
        return _POOL[0]


def _solve_slice(x, W, spec, s, buf):
    """The statistics of rows ``s:s + SOLVE_ROWS`` of the work block x (``buf``:
    :func:`_solve_buffers`, this thread's)."""
    xs, mask = _block(x[s:s + SOLVE_ROWS], spec.missing)
    h, r, rounds, loss = solve_rows(xs, W, spec, mask, **buf)
    st = block_statistics(xs, h, r, W, spec.alpha_R, mask, loss=loss)
    st["rounds"] = rounds
    # observed entries: a batch with none holds no information on W
    st["observed"] = int(xs.size if mask is None else np.count_nonzero(mask))
    return st


def _block(x, missing):
    """A block (or some of its rows) and its mask (None: nothing missing, or
    ``missing="raise"``); x is zero at the missing entries."""
    return observed(x) if missing else (x, None)


def as_work_block(block, magnitude=None):
    """One row block, C-contiguous, in the solvers' dtype (float32 kept; ``magnitude``:
    its largest |value| if known, see :func:`daskrnmf.kernels.outliers.work_dtype`)."""
    block = np.asarray(block)
    return np.ascontiguousarray(block, dtype=work_dtype(block, magnitude)
                                if block.dtype.kind == "f" else np.float64)


def checked_block(block, start, where, missing, convert=True, n_rows=None):
    """A block (or piece) of X checked for the model ``where`` (finite, non-negative;
    NaN allowed with ``missing``; ``start``: its first row, for the messages) and, with
    ``convert``, in the solvers' dtype (:func:`as_work_block`; else as it is: ONMFO's
    row groups, whose batches each take their own work dtype, :func:`_largest`).
    ``n_rows``: the rows the messages name from ``start`` (a piece of a row group
    checked alone names its group), default the block's."""
    x = np.asarray(block)
    last = start + (x.shape[0] if n_rows is None else n_rows) - 1
    top = check_values(x, where, non_negative=True, rows=f", in rows {start}..{last}",
                       allow_nan=missing, hint=MASK_HINT)
    return as_work_block(x, top) if convert else x


def _largest(block, missing):
    """The largest value of a checked (non-negative, finite; NaN with ``missing``)
    float32 piece, all its work dtype depends on (0 for none; None for other dtypes,
    whose work dtype does not depend on it): one pass where :func:`check_values` made
    two."""
    x = np.asarray(block)
    if x.dtype != np.float32 or not x.size:
        return None if x.dtype != np.float32 else 0.0
    top = float(np.fmax.reduce(x, axis=None) if missing else x.max())
    return 0.0 if np.isnan(top) else top


def solve_batch_piece(block, start, W, spec):
    """Codes and outliers of one piece of a batch (W fixed), reduced to its statistics
    (with ``rounds``: the inner rounds its rows took).

    Checks the piece (finite, non-negative; NaN allowed with ``spec.missing``), then
    solves ``SOLVE_ROWS`` rows at a time.  ``spec``: a :class:`SolveSpec`.

    ``spec.threads`` above 1: the slices are solved by that many threads at once (this
    one and the others of a pool kept by the module, :func:`_solve_pool`), each with
    its own output buffers, taking the next slice not yet taken; the rows are
    independent and the slices' statistics are added in slice order as one thread adds
    them, so the result is the same, bit for bit, whatever the number of threads.  A
    piece of one slice (``SOLVE_ROWS`` rows or fewer) gains nothing.  For a solve that
    runs alone in its process (ONMFO's batches, one after the other): pieces solved
    as parallel tasks keep 1.
    """
    if spec.checked:        # checked where its group was read: its work dtype chosen here
        x = as_work_block(block, _largest(block, spec.missing))
    else:
        x = checked_block(block, start, spec.where, spec.missing)
    starts = range(0, x.shape[0], SOLVE_ROWS)
    threads = min(int(spec.threads), len(starts))
    if threads <= 1:
        out = _solve_buffers(x, W, spec)   # (the statistics are taken slice by slice)
        parts = [_solve_slice(x, W, spec, s, out) for s in starts]
    else:
        parts = _solve_threaded(x, W, spec, starts, threads)
    if not parts:
        k, d = W.shape
        return {"A": np.zeros((k, d)), "B": np.zeros((k, k)), "C": np.zeros((k, d)),
                "loss": 0.0, "n": 0, "rounds": 0, "observed": 0}
    return add_statistics(parts)


def _solve_threaded(x, W, spec, starts, threads):
    """The slices' statistics (in slice order) solved by ``threads`` threads: this one
    and ``threads - 1`` of the pool, each with its own buffers and W's prepared part
    shared."""
    first = _solve_buffers(x, W, spec)
    prepared = first.get("prepared")
    parts = [None] * len(starts)
    lock = threading.Lock()
    taken = [0]

    def work(buf):
        while True:
            with lock:
                i = taken[0]
                taken[0] += 1
            if i >= len(starts):
                return
            parts[i] = _solve_slice(x, W, spec, starts[i], buf)

    pool = _solve_pool(threads - 1)
    futures = [pool.submit(lambda: work(_solve_buffers(x, W, spec, prepared)))
               for _ in range(threads - 1)]
    try:
        work(first)
    finally:
        for f in futures:               # every thread done before the buffers go
            f.exception()
    for f in futures:
        f.result()                      # a thread's error raised here
    return parts


def codes_block(block, W, spec, what):
    """``what="h"``: H (m, k); ``"hr"``: [H | R] (m, k + d) of one (checked) block of X."""
    x = as_work_block(block)
    k = W.shape[0]
    out = np.empty((x.shape[0], k + (x.shape[1] if what == "hr" else 0)), dtype=x.dtype)
    buf = _solve_buffers(x, W, spec)
    for s in range(0, x.shape[0], SOLVE_ROWS):
        xs, mask = _block(x[s:s + SOLVE_ROWS], spec.missing)
        h, r = solve_rows(xs, W, spec, mask, **buf)[:2]
        out[s:s + SOLVE_ROWS, :k] = h
        if what == "hr":
            out[s:s + SOLVE_ROWS, k:] = r
    return out


# ---------------------------------------------------------------- alpha_R="auto"
#: ``alpha_R="auto"``: this fraction of the data's scale (:func:`auto_alpha`).  The paper's
#: alpha_R = 1 is for faces whose pixels reach 50 (``0.02 x``); on its corrupted faces
#: (``benchmarks/results/onmfo.md``) 1.5 reconstructs better than 1 at 10 % outliers (E_avg
#: -11 to -12 %) and within 3 % of it at 30 % (RobustNMF: as well; 2 is 4-10 % worse
#: there; 2 seeds), and on the blob data with 1.25 % gross entries (20 000 x 64, 8
#: components) it flags 1.9-2.0 % of the entries where alpha_R = 1 flagged 22-23 %.
AUTO_ALPHA = 0.03


def piece_feature_max(block, start=0):
    """Per-feature maximum of one piece's observed entries (NaN where a feature has none;
    NaN entries are missing values), as float64 (run where the piece lives)."""
    x = np.asarray(block)
    if x.shape[0] == 0:
        return np.full(x.shape[1], np.nan)
    return np.fmax.reduce(x, axis=0).astype(np.float64)


def feature_max(parts):
    """The per-feature maxima of pieces (:func:`piece_feature_max`) merged."""
    return np.fmax.reduce([np.asarray(p, dtype=np.float64) for p in parts])


def auto_alpha(feature_max):
    """``alpha_R="auto"``: ``AUTO_ALPHA`` times the data's scale, the upper quartile over
    the features of their maximum (features never above 0 left out: zero columns of
    sparse data are no scale), from ``feature_max`` (n_features,) (NaN: a feature with
    no observed value).

    Proportional to X: ``X * c`` gives ``alpha * c``, and then the same fit scaled (R and
    ``H W`` by c; W and H each by ``sqrt(c)``, as W's start is).  Where X has gross
    values, they set it (residuals above 3 % of their size are outliers); a value of
    any size in fewer than a quarter of the features leaves it unchanged.  The upper
    quartile rather than the median: in a small first batch of ONMFO many features hold
    no gross value, and the median then falls to the clean data's maximum (on 2000 x 32
    blobs, 8 first batches of 5 seeds: 10th percentile 1.8 with the median, 2.5 with
    the quartile, against 2.9 from all of X).  Data with no positive value: 1.0 (every
    alpha_R gives R = 0 there)."""
    m = np.asarray(feature_max, dtype=np.float64)
    m = m[np.isfinite(m) & (m > 0)]
    return AUTO_ALPHA * float(np.quantile(m, 0.75)) if m.size else 1.0


def update_W(W, A, B, C, solver, n_iter, tol, Bm=None):
    """W's update from the statistics: HALS sweeps (``"cd"``) or rounds of (18) (``Bm``:
    the per-feature Gram matrices of rows with missing values, or None)."""
    if solver == "cd":
        return update_components_cd(W, A, B, C, n_iter, tol, Bm=Bm)[0]
    return update_components(W, A, B, C, n_iter, Bm=Bm)


def past_weight(t, forget_power):
    """The factor the statistics are scaled by before they take batch ``t`` (1, 2, ...;
    counted from their last reset): ``(1 - 1/t) ** forget_power`` (Mairal et al. 2010,
    scaling the past data), 1 when ``forget_power`` is 0."""
    p = float(forget_power)
    return 1.0 if p == 0 or t <= 1 else (1.0 - 1.0 / t) ** p


@dataclass(frozen=True)
class UpdateSpec:
    """W's update after a batch: ``solver`` ("cd" or "mu"), at most ``n_iter`` sweeps or
    rounds, stopping at relative change ``tol`` ("cd"), and ``forget_power`` (see
    :func:`past_weight`)."""

    solver: str
    n_iter: int
    tol: float
    forget_power: float


def take_batch(state, st, upd):
    """The stream's state after one batch: ``state`` (a dict of W, A, B, C, Bm (or None),
    ``n_stat``: batches with observed values in the statistics, ``n_observed``: observed
    entries so far) and the batch's statistics ``st`` (:func:`solve_batch_piece`).

    A batch with observed values scales the statistics by ``past_weight(n_stat + 1)``,
    adds its own and updates W (:func:`update_W`); an all-missing batch changes nothing
    but ``n_observed``.  A new dict; the arrays of ``state`` are not written."""
    out = dict(state)
    out["n_observed"] = state["n_observed"] + st["observed"]
    if not st["observed"]:
        return out
    n_stat = state["n_stat"] + 1
    w = past_weight(n_stat, upd.forget_power)
    A, B, C, Bm = state["A"], state["B"], state["C"], state["Bm"]
    if w != 1.0:        # (as the in-place scaling it replaces: the same roundings)
        A, B, C = A * w, B * w, C * w
        Bm = None if Bm is None else Bm * w
    A, B, C = A + st["A"], B + st["B"], C + st["C"]
    if st.get("Bm") is not None:
        Bm = np.array(st["Bm"], dtype=np.float64) if Bm is None else Bm + st["Bm"]
    W = update_W(state["W"], A, B, C, upd.solver, upd.n_iter, upd.tol, Bm)
    out.update(W=W, A=A, B=B, C=C, Bm=Bm, n_stat=n_stat)
    return out


def _columns(dicts):
    """The values of dicts with the same keys, key by key: arrays of one shape and dtype
    (some of them None, e.g. ``Bm`` before a batch with missing values) as one stacked
    array and which dicts have one, other values as a list."""
    out = {}
    for key in dicts[0]:
        values = [d[key] for d in dicts]
        arrays = [v for v in values if v is not None]
        first = arrays[0] if arrays else None
        if isinstance(first, np.ndarray) and all(
                isinstance(v, np.ndarray) and v.shape == first.shape
                and v.dtype == first.dtype for v in arrays):
            out[key] = (np.array([v is not None for v in values]), np.stack(arrays))
        else:
            out[key] = values
    return out


def _rows(columns, n):
    """The dicts :func:`_columns` was given (a stacked array's rows: writeable copies of
    the message's buffers, each an array of its own, not a view of the stack: the
    fitted ``components_``, the last batch's W, held every batch's W of its run)."""
    values = {}
    for key, column in columns.items():
        if isinstance(column, tuple):
            present, stack = column
            rows = (np.array(row) for row in stack)
            values[key] = [next(rows) if has else None for has in present]
        else:
            values[key] = column
    return [{key: v[i] for key, v in values.items()} for i in range(n)]


def _unpack_results(figures, states, n):
    return RunResults(zip(_rows(figures, n), _rows(states, n)))


class RunResults(list):
    """:func:`solve_batches`' list of (figures, state), pickled as a few stacked arrays
    (W, A, B, C of every batch, each one array): sent to the next run's worker and to
    the client, a list of dicts of small arrays was about 640 frames at 128 batches
    (6 ms to serialize on a busy worker, 16-40 ms a transfer), stacked it is a dozen.
    The values come back equal, each state's arrays its own (copies of the stacks'
    rows)."""

    def __reduce__(self):
        if not self:
            return (RunResults, ())
        return (_unpack_results, (_columns([f for f, _ in self]),
                                  _columns([s for _, s in self]), len(self)))


def solve_batches(pieces, state, spec, upd):
    """Batches one after the other where their data lives, as the stream would take them
    one at a time: each solved with the W the batches before it gave
    (:func:`solve_batch_piece`), then :func:`take_batch`.

    ``pieces``: iterable of (batch, first row); ``state``: as in :func:`take_batch`.
    Returns one ``(figures, state)`` per batch solved, ``figures`` the batch's ``loss``,
    ``n``, ``rounds``, ``observed``.  Stops after a batch that leaves ``n_observed`` at
    0 (W's start then comes from the next batch's mean, which the caller computes).
    A run of many small batches is one task instead of one round trip each."""
    out = RunResults()
    for x, start in pieces:
        st = solve_batch_piece(x, start, state["W"], spec)
        state = take_batch(state, st, upd)
        out.append(({key: st[key] for key in ("loss", "n", "rounds", "observed")}, state))
        if state["n_observed"] == 0:
            break
    return out


def initial_components(seed, k, d, mean):
    """Uniform random W >= 0 (k, d) with entries of the size that reproduces ``mean``."""
    avg = np.sqrt(max(mean, 1e-10) / k)
    return avg * np.random.default_rng([seed, 4]).uniform(size=(k, d))


# ---------------------------------------------------------------- the batch model's pass
def batch_init_chunk(block, start, W, alpha_R, missing=False):
    """A block's starting H, R (kept on its worker) and its row count."""
    x = as_work_block(block)
    x64, mask = _block(x.astype(np.float64, copy=False), missing)
    h, r = initial_codes(x64, W, alpha_R, mask)
    return block.shape[0], (h, r.astype(x.dtype, copy=False))


def count(parts):
    return sum(parts)


def batch_chunk(block, start, hr, W, alpha_R, update, missing=False):
    """(7) then (8) for the block's rows with W fixed (when ``update``), then its
    statistics; the new H, R stay with the block (``missing``: masked, see
    :func:`daskrnmf.kernels.outliers.solve_codes`)."""
    x, mask = _block(as_work_block(block).astype(np.float64, copy=False), missing)
    h, r = hr
    if update:
        h, r = solve_codes(x, W, alpha_R, 1, h=h, r=r, mask=mask)
    return block_statistics(x, h, r, W, alpha_R, mask), (h, r)


def batch_chunk_cd(block, start, hr, W, alpha_R, update, missing=False):
    """One block-coordinate step of the batch model on a block (``solver="cd"``).

    At the block's current h: r = max(0, x - h W - alpha_R) exactly, the objective (3)
    summed over the rows; then (when ``update``) ``H_SWEEPS`` HALS sweeps of h for
    ``x - r``, and W's statistics ``A = h^T (x - r)`` (so C = 0), ``B = h^T h``.  Every
    step lowers (5): r is exact, each sweep minimises over one column of h.  Only h (m, k)
    stays with the block (r is recomputed from it).

    ``missing``: the objective over the observed entries; at a missing entry x = 0 and
    ``x - r = min(x, h W + alpha_R) = 0``, the sweeps use each row's Gram matrix
    ``W diag(m_i) W^T`` and the statistics ``B`` per feature (``Bm``)."""
    x, mask = _block(as_work_block(block), missing)
    h = hr
    dt = x.dtype
    Wd = np.asarray(W, dtype=dt)
    k, d = W.shape
    if mask is None:
        # one fused pass: the objective of e = x - h W and, in place of h W, the target
        # x - r = min(x, h W + alpha_R)
        y = h.astype(dt) @ Wd
        loss = float(residual_target(x, y, alpha_R).sum())
        if not update:
            return {"loss": loss, "n": x.shape[0]}, h
    else:
        e = x - h.astype(dt) @ Wd
        loss = float(huber_rows(e * mask, alpha_R).sum())
        if not update:
            return {"loss": loss, "n": x.shape[0]}, h
        np.subtract(x, e, out=e)            # h W
        e += alpha_R
        np.minimum(e, x, out=e)             # x - r = min(x, h W + alpha_R)
        y = e
    W64 = np.asarray(W, dtype=np.float64)
    if mask is None:
        h = hals_codes(np.array(h, dtype=np.float64), W64 @ W64.T,
                       (y @ Wd.T).astype(np.float64), H_SWEEPS)
    else:                   # per-row Gram matrices, a bounded number of rows at a time
        h = np.array(h, dtype=np.float64)
        b = (y @ Wd.T).astype(np.float64)
        G, step = W64 @ W64.T, gram_rows(k)
        for s in range(0, h.shape[0], step):
            h[s:s + step] = hals_codes_each(h[s:s + step], row_grams(W64, mask[s:s + step], G),
                                            b[s:s + step], H_SWEEPS)
    hd = h.astype(dt)
    out = {"A": (hd.T @ y).astype(np.float64), "B": h.T @ h, "C": np.zeros((k, d)),
           "loss": loss, "n": x.shape[0]}
    if mask is not None:
        out["B"] = np.zeros((k, k))
        out["Bm"] = feature_grams(h, mask)
    return out, h


def batch_init_chunk_cd(block, start, W, alpha_R, missing=False):
    """A block's starting h (the constant code of :func:`initial_codes`) and row count."""
    x, mask = _block(as_work_block(block).astype(np.float64, copy=False), missing)
    h, _ = initial_codes(x, W, alpha_R, mask)
    return block.shape[0], h
