"""ONMFO — online NMF with outliers (paper 004, Zhao & Tan) — and its batch twin RobustNMF.

Samples are rows: X (n_samples, n_features) ~ H W + R with W >= 0 (n_components,
n_features) the components (the paper's W^T), H >= 0 the codes and R >= 0 a sparse matrix
of gross non-negative outliers:

    min_{W, H, R >= 0} 1/2 ||X - H W - R||_F^2 + lam ||R||_{1,1}                    (5)

**RobustNMF** runs the multiplicative updates (6)-(8) on all of X: one pass per
iteration; H and R live with X's row blocks on the workers (R is as large as X: it is
held, and spilled to disk, by the workers, never gathered), only the k x d statistics
``H^T X``, ``H^T H``, ``H^T R`` are tree-reduced for W.

**ONMFO** (Algorithm 1) streams X in batches (X's row chunks by default) in a seeded
shuffled order, ``n_passes`` times.  For each batch, on the worker that holds it, the codes
and outliers of all its samples are found with W fixed (``max_inner_iter`` rounds of (16)
and (17)); only W goes out and the statistics A = sum h^T x, B = sum h^T h, C = sum h^T r
(eq. 12-14, k x d, k x k, k x d) come back; then W takes ``max_w_iter`` rounds of (18).
Nothing of size n_samples is ever held: memory is a few batches on the workers plus
O(k d) on the client.  While one batch is being solved, the next ``prefetch`` batches are
already being read.  With batches of one sample this is the paper's per-sample
algorithm.  Choices the paper leaves open (see ERRATA): the starting h and r of each
solve (:func:`daskrnmf.kernels.outliers.initial_codes`), the inner iteration counts, and
whether A, B, C start again at each pass (``reset_statistics``, measured to help).
"""

import hashlib
import logging
import os
import time

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .. import _checkpoint
from .. import _validation as v
from .._blocks import active_client, tree_reduce
from .._driver import iterate, warn_if_not_converged
from ..kernels.blocks import as_float_block, sum_arrays
from ..kernels.outliers import block_statistics, initial_codes, solve_codes, update_components
from ..reductions import checked_blocks

logger = logging.getLogger("daskrnmf")

SOLVE_ROWS = 2048  # rows solved at a time inside a batch: bounds the kernels' temporaries
_NUMPY_BATCH = 1024


# ---------------------------------------------------------------- worker-side functions
def _check_rows(x, start, where, name):
    bad = x.size - int(np.count_nonzero(np.isfinite(x)))
    if bad:
        raise ValueError(f"{where} contains {bad} NaN or infinite value(s) in rows "
                         f"{start}..{start + x.shape[0] - 1}; remove or impute them before fitting.")
    low = float(x.min(initial=0.0))
    if low < 0:
        raise ValueError(f"Negative values in data passed to {where} (min {low:g}, in rows "
                         f"{start}..{start + x.shape[0] - 1}); {name} factorizes non-negative "
                         "data only.")


def add_statistics(parts):
    """Sum of :func:`block_statistics` dicts (associative; the tree keeps the order)."""
    return {"A": sum_arrays([p["A"] for p in parts]), "B": sum_arrays([p["B"] for p in parts]),
            "C": sum_arrays([p["C"] for p in parts]), "loss": sum(p["loss"] for p in parts),
            "n": sum(p["n"] for p in parts)}


def solve_batch_piece(block, start, W, spec):
    """Codes and outliers of one piece of a batch (W fixed), reduced to its statistics.

    Runs where the piece lives.  Checks it (finite, non-negative), then solves
    ``SOLVE_ROWS`` rows at a time, so the temporaries stay a few times that size.
    """
    x = as_float_block(block)
    _check_rows(x, start, spec["where"], spec["name"])
    parts = []
    for s in range(0, x.shape[0], SOLVE_ROWS):
        xs = x[s:s + SOLVE_ROWS]
        h, r = solve_codes(xs, W, spec["lam"], spec["n_iter"])
        parts.append(block_statistics(xs, h, r, W, spec["lam"]))
    return add_statistics(parts)


def piece_sum(block):
    x = as_float_block(block)
    return float(x.sum()), x.size


def codes_block(block, W, lam, n_iter, what, where, name):
    """``what="h"``: H (m, k); ``"hr"``: [H | R] (m, k + d) for one block of X."""
    x = as_float_block(block)
    _check_rows(x, 0, where, name)
    out = np.empty((x.shape[0], W.shape[0] + (x.shape[1] if what == "hr" else 0)))
    for s in range(0, x.shape[0], SOLVE_ROWS):
        h, r = solve_codes(x[s:s + SOLVE_ROWS], W, lam, n_iter)
        out[s:s + SOLVE_ROWS, :W.shape[0]] = h
        if what == "hr":
            out[s:s + SOLVE_ROWS, W.shape[0]:] = r
    return out


# ---------------------------------------------------------------- batches and their feed
def make_batches(X, batch_size):
    """Row ranges ``[(start, stop), ...]`` of the batches, and each one's pieces (its
    intersections with X's row chunks, solved in parallel)."""
    n = X.shape[0]
    if isinstance(X, np.ndarray):
        bounds = np.array([0, n])
    else:
        bounds = np.cumsum((0,) + tuple(X.chunks[0]))
    if batch_size is None:
        step = _NUMPY_BATCH if isinstance(X, np.ndarray) else None
        edges = list(range(0, n, step)) + [n] if step else list(bounds)
    else:
        edges = list(range(0, n, batch_size)) + [n]
    batches = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
    pieces = []
    for a, b in batches:
        cuts = [int(c) for c in bounds if a < c < b]
        pts = [a] + cuts + [b]
        pieces.append(list(zip(pts[:-1], pts[1:])))
    return batches, pieces


def batch_order(seed, pass_index, n_batches, shuffle=True):
    """The order in which pass ``pass_index`` visits the batches (seeded, reproducible)."""
    if not shuffle:
        return np.arange(n_batches)
    return np.random.default_rng([seed, pass_index]).permutation(n_batches)


class _Feed:
    """Reads batches ahead of their use and solves them where their data is.

    * A distributed Client is active and X is a Dask array: each piece is computed into a
      future on a worker ``prefetch`` batches ahead; the solve is submitted to run where
      that future lives, and only its statistics are gathered.
    * Dask without a distributed Client: the next batches are computed by a background
      thread while the current one is solved in-process.
    * NumPy: the pieces are views of X.
    """

    def __init__(self, X, pieces, spec):
        self.X, self.pieces, self.spec = X, pieces, spec
        self.is_dask = not isinstance(X, np.ndarray)
        self.client = active_client() if self.is_dask else None
        self.pending = {}
        self._pool = None
        if self.is_dask and self.client is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskrnmf-prefetch")

    def want(self, b):
        """Start reading batch ``b`` (no-op if it is already on its way)."""
        if b in self.pending:
            return
        if self.client is not None:
            self.pending[b] = [self.client.compute(self.X[s:e], priority=-1)
                               for s, e in self.pieces[b]]
        elif self._pool is not None:
            import dask

            self.pending[b] = [self._pool.submit(lambda s=s, e=e: dask.compute(self.X[s:e])[0])
                               for s, e in self.pieces[b]]
        else:
            self.pending[b] = [self.X[s:e] for s, e in self.pieces[b]]

    def _take(self, b):
        self.want(b)
        return self.pending.pop(b)

    def mean(self, b):
        """Mean entry of batch ``b`` (its data stays where it is)."""
        data = self.pending.get(b) or self._take(b)
        self.pending[b] = data
        if self.client is not None:
            sums = self.client.gather([self.client.submit(piece_sum, f, priority=10)
                                       for f in data])
        elif self._pool is not None:
            sums = [piece_sum(f.result()) for f in data]
        else:
            sums = [piece_sum(x) for x in data]
        return sum(s for s, _ in sums) / max(1, sum(c for _, c in sums))

    def solve(self, b, W):
        """Statistics of batch ``b`` under W (pieces summed in row order)."""
        data = self._take(b)
        starts = [s for s, _ in self.pieces[b]]
        if self.client is not None:
            futures = [self.client.submit(solve_batch_piece, f, s, W, self.spec, pure=False,
                                          priority=10) for f, s in zip(data, starts)]
            parts = self.client.gather(futures)
            del futures, data
        elif self._pool is not None:
            parts = [solve_batch_piece(f.result(), s, W, self.spec) for f, s in zip(data, starts)]
        else:
            parts = [solve_batch_piece(x, s, W, self.spec) for x, s in zip(data, starts)]
        return tree_reduce(parts, add_statistics, 8)

    def close(self):
        if self.client is not None:
            for futures in self.pending.values():
                for f in futures:
                    f.cancel()
        self.pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- shared transform
class _OutlierFactorization(TransformerMixin, BaseEstimator):
    """transform / decompose / inverse_transform of a fitted X ~ H W + R model."""

    def _checked_input(self, X, method):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "components_")
        name = type(self).__name__
        X = v.check_array(X, estimator_name=f"{name}.{method}")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {name} was fitted with "
                             f"{self.n_features_in_}.")
        if isinstance(X, np.ndarray):
            _check_rows(X, 0, f"X of {name}.{method}", name)
        return X

    def _codes(self, X, what, method):
        X = self._checked_input(X, method)
        name = type(self).__name__
        args = (self.components_, float(self.lam), int(self.max_inner_iter), what,
                f"X of {name}.{method}", name)
        width = self.n_components_ + (X.shape[1] if what == "hr" else 0)
        if isinstance(X, np.ndarray):
            return codes_block(X, *args)
        return X.map_blocks(codes_block, *args, chunks=(X.chunks[0], (width,)),
                            dtype=np.float64, meta=np.empty((0, 0), np.float64))

    def transform(self, X):
        """Codes H of X for the fitted components (eq. 16-17 with W fixed).

        Parameters
        ----------
        X : array-like (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray or dask.array.Array (n_samples, n_components)
            Lazy and chunked like X for Dask/Zarr input.
        """
        return self._codes(X, "h", "transform")

    def decompose(self, X):
        """Split X into its clean part and its gross outliers: ``X ~ H W + R``.

        Parameters
        ----------
        X : array-like (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray or dask.array.Array (n_samples, n_components)
        R : ndarray or dask.array.Array (n_samples, n_features)
            Both chunked like X for Dask/Zarr input (computed together, one solve per
            block, when computed in one ``dask.compute``).  ``H @ components_`` is the
            outlier-free reconstruction; R is what the model calls gross corruption.
        """
        HR = self._codes(X, "hr", "decompose")
        k = self.n_components_
        return HR[:, :k], HR[:, k:]

    def inverse_transform(self, H):
        """``H W``: the outlier-free reconstruction, shape (n_samples, n_features)."""
        return H @ self.components_


def _initial_components(seed, k, d, mean):
    """Uniform random W >= 0 with entries of the size that reproduces ``mean``."""
    avg = np.sqrt(max(mean, 1e-10) / k)
    return avg * np.random.default_rng([seed, 4]).uniform(size=(k, d))


_COMMON = {
    "n_components": [v.Interval(int, 1, None)],
    "lam": [v.Interval(float, 0, None, closed="neither")],
    "max_inner_iter": [v.Interval(int, 1, None)],
    "random_state": [v.RANDOM_STATE],
    "verbose": [v.Interval(int, 0, None)],
    "callback": [v.CallableOrNone()],
}


# ---------------------------------------------------------------- ONMFO
class ONMFO(_OutlierFactorization):
    """Online NMF with outliers (Zhao & Tan, Algorithm 1), streaming X's batches.

    Minimises, over the stream, the surrogate of

        1/t sum_i  min_{h_i, r_i >= 0}  1/2 ||x_i - h_i W - r_i||^2 + lam ||r_i||_1,   W >= 0

    keeping only W and the statistics A = sum h_i^T x_i, B = sum h_i^T h_i,
    C = sum h_i^T r_i: memory independent of n_samples.

    Parameters
    ----------
    n_components : int, default=8
    lam : float > 0, default=1.0
        Weight of the outliers' L1 norm (the paper uses 1 for pixels scaled to [0, 50]).
    n_passes : int, default=2
        Passes over X (the paper: two).
    batch_size : int, optional
        Samples per batch (one W update per batch).  Default: X's row chunks for
        Dask/Zarr input, 1024 rows for NumPy.  A fixed ``batch_size`` makes the fit
        independent of the chunking; with 1 it is the paper's per-sample algorithm.
    max_inner_iter : int, default=300
        Rounds of (16)-(17) per batch (ERRATA: 100 leave a 2-3 % gap on (11), 300 < 1 %);
        also used by :meth:`transform` and :meth:`decompose`.
    max_w_iter : int, default=10
        Rounds of (18) per batch (ERRATA: 1 instead of 10 raises E_avg by ~35 %).
    reset_statistics : bool, default=True
        Start A, B, C again from zero at each pass after the first (W is kept), so that
        codes found with the early, poor W stop weighing on it; measured to lower E_avg.
        False accumulates them over all passes (Algorithm 1 read literally).
    shuffle : bool, default=True
        Visit the batches in a seeded random order in every pass.
    prefetch : int, default=2
        Batches read ahead of the one being solved.
    checkpoint : str or os.PathLike, optional
        Directory receiving W, A, B, C, the position in the stream and the seed, atomically,
        every ``checkpoint_every`` batches and at the end of every pass (a fit without
        ``resume=True`` replaces what an earlier run left there).
    checkpoint_every : int, default=10
    random_state : int, RandomState, Generator or None
        Seeds W's start and the batch orders.
    verbose : int, default=0
        1 logs one line per pass, 2 one per batch (``daskrnmf`` logger, INFO).
    callback : callable, optional
        ``callback(info) -> bool`` after each batch, with ``pass``, ``batch`` (position in
        the pass), ``n_batches``, ``loss`` (mean per-sample objective of the batch under the
        W it was solved with), ``n_samples_seen`` and ``n_steps``; True stops the fit
        (the attributes describe the W reached, and the checkpoint is saved).

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
    objective_history_ : ndarray (n_passes_,)
        Per pass, the mean per-sample objective of its batches, each evaluated under the W
        it was solved with (the online surrogate; no extra pass over X).
    n_steps_ : int
        W updates (batches) since the model was created (fit and partial_fit).
    n_passes_ : int
        Complete passes over X in the last ``fit`` (its reads of X).
    n_samples_seen_ : int
    n_features_in_, n_components_ : int
    """

    _parameter_constraints = {
        **_COMMON,
        "n_passes": [v.Interval(int, 1, None)],
        "batch_size": [v.Interval(int, 1, None), v.Kind((type(None),), "None")],
        "max_w_iter": [v.Interval(int, 1, None)],
        "reset_statistics": [v.Kind((bool,), "a bool")],
        "shuffle": [v.Kind((bool,), "a bool")],
        "prefetch": [v.Interval(int, 0, None)],
        "checkpoint": [v.Kind((str, os.PathLike, type(None)), "a path or None")],
        "checkpoint_every": [v.Interval(int, 1, None)],
    }

    def __init__(self, n_components=8, *, lam=1.0, n_passes=2, batch_size=None,
                 max_inner_iter=300, max_w_iter=10, reset_statistics=True, shuffle=True,
                 prefetch=2, checkpoint=None, checkpoint_every=10, random_state=None, verbose=0,
                 callback=None):
        self.n_components = n_components
        self.lam = lam
        self.n_passes = n_passes
        self.batch_size = batch_size
        self.max_inner_iter = max_inner_iter
        self.max_w_iter = max_w_iter
        self.reset_statistics = reset_statistics
        self.shuffle = shuffle
        self.prefetch = prefetch
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    def _spec(self):
        name = type(self).__name__
        return {"lam": float(self.lam), "n_iter": int(self.max_inner_iter),
                "where": f"X of {name}", "name": name}

    # -- the stream
    def fit(self, X, y=None, *, resume=False):
        """Stream X ``n_passes`` times.

        Parameters
        ----------
        X : array-like (n_samples, n_features), non-negative
            NumPy array, Dask array chunked along rows, ``zarr.Array`` or Zarr path.
        y : ignored
        resume : bool, default=False
            Continue from ``checkpoint`` if it holds a run of this model on this X (same
            shape, batches, parameters and seed; ``n_passes`` may differ); the result is
            the W of an uninterrupted run.  Without a checkpoint the fit starts afresh.

        Returns
        -------
        self
        """
        v.validate_params(self, self._parameter_constraints)
        name = type(self).__name__
        if resume and self.checkpoint is None:
            raise ValueError(f"resume=True needs the 'checkpoint' parameter of {name} to be set.")
        X = v.check_array(X, estimator_name=name)
        if isinstance(X, np.ndarray):
            _check_rows(X, 0, f"X of {name}", name)   # before anything is written
        n, d = X.shape
        k = self.n_components
        batches, pieces = make_batches(X, self.batch_size)
        saved = _checkpoint.load(self.checkpoint) if resume else None
        seed = int(saved[1]["seed"]) if saved and self.random_state is None \
            else v.seed_from(self.random_state)
        key = self._fingerprint(n, d, batches, seed)
        feed = _Feed(X, pieces, self._spec())
        try:
            if saved:
                run = self._restore(saved, key)
            else:
                first = batch_order(seed, 0, len(batches), self.shuffle)[0]
                W = _initial_components(seed, k, d, feed.mean(first))
                run = _Run(W=W, A=np.zeros((k, d)), B=np.zeros((k, k)), C=np.zeros((k, d)))
            run = self._stream(run, feed, batches, seed, key)
        finally:
            feed.close()
        self.components_ = run.W
        self._A, self._B, self._C, self._seed = run.A, run.B, run.C, seed
        self.objective_history_ = np.array(run.history)
        self.n_steps_ = run.n_steps
        self.n_passes_ = run.passes_done
        self.n_samples_seen_ = run.n_seen
        self.n_features_in_ = d
        self.n_components_ = k
        return self

    def _stream(self, run, feed, batches, seed, key):
        name = type(self).__name__
        orders = {}

        def order(p):
            if p not in orders:
                orders[p] = batch_order(seed, p, len(batches), self.shuffle)
            return orders[p]

        def upcoming(p, j, count):
            out = []
            while len(out) < count and p < self.n_passes:
                if j >= len(batches):
                    p, j = p + 1, 0
                    continue
                out.append(int(order(p)[j]))
                j += 1
            return out

        stopped = False
        while run.pass_ < self.n_passes and not stopped:
            p = run.pass_
            if run.pos == 0:
                tic_pass = time.perf_counter()
                run.loss_sum, run.pass_n = 0.0, 0
                if p > 0 and self.reset_statistics:
                    run.A[:], run.B[:], run.C[:] = 0.0, 0.0, 0.0
            while run.pos < len(batches):
                j = run.pos
                for b in upcoming(p, j, 1 + self.prefetch):
                    feed.want(b)
                tic = time.perf_counter()
                st = feed.solve(int(order(p)[j]), run.W)
                run.A += st["A"]
                run.B += st["B"]
                run.C += st["C"]
                run.W = update_components(run.W, run.A, run.B, run.C, self.max_w_iter)
                run.loss_sum += st["loss"]
                run.pass_n += st["n"]
                run.n_seen += st["n"]
                run.n_steps += 1
                run.pos += 1
                if self.verbose >= 2:
                    logger.info("%s pass %d batch %d/%d: loss %.6g per sample, %.3f s", name,
                                p + 1, j + 1, len(batches), st["loss"] / max(st["n"], 1),
                                time.perf_counter() - tic)
                info = {"pass": p, "batch": j, "n_batches": len(batches),
                        "loss": st["loss"] / max(st["n"], 1), "n_samples_seen": run.n_seen,
                        "n_steps": run.n_steps, "total_steps": self.n_passes * len(batches)}
                stopped = bool(self.callback is not None and self.callback(info))
                if run.pos == len(batches):
                    run.history.append(run.loss_sum / max(run.pass_n, 1))
                    run.pass_, run.pos = p + 1, 0
                    run.passes_done += 1
                    if self.verbose:
                        logger.info("%s pass %d: objective %.6g per sample, %d batches, %.3f s",
                                    name, p + 1, run.history[-1], len(batches),
                                    time.perf_counter() - tic_pass)
                if self.checkpoint is not None and (
                        stopped or run.pos == 0 or run.n_steps % self.checkpoint_every == 0):
                    self._save(run, key)
                if stopped or run.pos == 0:
                    break
        return run

    # -- checkpoints
    def _fingerprint(self, n, d, batches, seed):
        bounds = np.array(batches, dtype=np.int64).tobytes()
        return {"model": type(self).__name__, "n_samples": int(n), "n_features": int(d),
                "n_components": int(self.n_components), "lam": float(self.lam),
                "max_inner_iter": int(self.max_inner_iter), "max_w_iter": int(self.max_w_iter),
                "reset_statistics": bool(self.reset_statistics), "shuffle": bool(self.shuffle),
                "batches": hashlib.sha256(bounds).hexdigest()[:16], "seed": str(seed)}

    def _save(self, run, key):
        arrays = {"W": run.W, "A": run.A, "B": run.B, "C": run.C,
                  "history": np.array(run.history, dtype=np.float64)}
        attrs = {"fingerprint": key, "seed": key["seed"], "pass": run.pass_, "position": run.pos,
                 "n_steps": run.n_steps, "n_samples_seen": run.n_seen,
                 "passes_done": run.passes_done, "loss_sum": run.loss_sum, "pass_n": run.pass_n}
        _checkpoint.save(self.checkpoint, arrays, attrs)

    def _restore(self, saved, key):
        arrays, attrs = saved
        old = attrs["fingerprint"]
        differ = sorted(f for f in key if old.get(f) != key[f])
        if differ:
            raise ValueError(f"The checkpoint at {self.checkpoint} is of a different run: "
                             + ", ".join(f"{f} {old.get(f)!r} there, {key[f]!r} here" for f in differ)
                             + ". Fit without resume=True to start afresh.")
        return _Run(W=arrays["W"], A=arrays["A"], B=arrays["B"], C=arrays["C"],
                    history=list(arrays["history"]), pass_=int(attrs["pass"]),
                    pos=int(attrs["position"]), n_steps=int(attrs["n_steps"]),
                    n_seen=int(attrs["n_samples_seen"]), passes_done=int(attrs["passes_done"]),
                    loss_sum=float(attrs["loss_sum"]), pass_n=int(attrs["pass_n"]))

    # -- data that arrives over time
    def partial_fit(self, X, y=None):
        """One step of Algorithm 1 with the samples of X as the batch.

        The first call starts W (as ``fit`` does, from X's mean and ``random_state``);
        every call solves X's codes and outliers under the current W, adds its statistics
        and updates W.  Repeated calls on the batches of ``fit``'s order give ``fit``'s W
        (with ``reset_statistics`` irrelevant for one pass).

        Parameters
        ----------
        X : array-like (n_batch, n_features), non-negative

        Returns
        -------
        self
        """
        name = type(self).__name__
        first = not hasattr(self, "components_")
        if first:
            v.validate_params(self, self._parameter_constraints)
        X = v.check_array(X, estimator_name=f"{name}.partial_fit")
        if not first and X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {name} was fitted with "
                             f"{self.n_features_in_}.")
        if isinstance(X, np.ndarray):
            _check_rows(X, 0, f"X of {name}.partial_fit", name)
        _, pieces = make_batches(X, X.shape[0])
        feed = _Feed(X, pieces, self._spec())
        try:
            if first:
                seed = v.seed_from(self.random_state)
                k, d = self.n_components, X.shape[1]
                W = _initial_components(seed, k, d, feed.mean(0))
                A, B, C = np.zeros((k, d)), np.zeros((k, k)), np.zeros((k, d))
            else:
                W, A, B, C = self.components_, self._A.copy(), self._B.copy(), self._C.copy()
            st = feed.solve(0, W)
        finally:
            feed.close()
        A, B, C = A + st["A"], B + st["B"], C + st["C"]
        self.components_ = update_components(W, A, B, C, self.max_w_iter)
        self._A, self._B, self._C = A, B, C
        if first:
            self._seed = seed
            self.n_features_in_, self.n_components_ = X.shape[1], self.n_components
            self.n_steps_, self.n_samples_seen_, self.n_passes_ = 0, 0, 0
            self.objective_history_ = np.array([])
        self.n_steps_ += 1
        self.n_samples_seen_ += int(st["n"])
        return self


class _Run:
    """State of a streaming fit (everything a checkpoint holds)."""

    def __init__(self, *, W, A, B, C, history=None, pass_=0, pos=0, n_steps=0, n_seen=0,
                 passes_done=0, loss_sum=0.0, pass_n=0):
        self.W, self.A, self.B, self.C = W, np.array(A), np.array(B), np.array(C)
        self.history = list(history or [])
        self.pass_, self.pos, self.n_steps, self.n_seen = pass_, pos, n_steps, n_seen
        self.passes_done, self.loss_sum, self.pass_n = passes_done, loss_sum, pass_n


# ---------------------------------------------------------------- RobustNMF
class RobustNMF(_OutlierFactorization):
    """Batch robust NMF with a non-negative L1 outlier matrix (paper 004, eq. 5-8).

        min_{W, H, R >= 0} 1/2 ||X - H W - R||_F^2 + lam ||R||_{1,1}

    One pass over X per iteration: each block updates its H (7) and R (8) with the
    current W, then returns ``H^T X``, ``H^T H``, ``H^T R`` and its objective; W takes one
    step of (6) from their tree-reduced sums.  The objective cannot increase (the paper's
    Lemmas 1-2); the fit stops when it falls by at most ``tol`` relative.

    H (n x k) and R (n x d, as large as X) stay with X's blocks on the workers, where
    Dask may spill them to disk; neither is gathered.

    Parameters
    ----------
    n_components : int, default=8
    lam : float > 0, default=1.0
    max_iter : int, default=200
    tol : float, default=1e-4
    max_inner_iter : int, default=300
        Rounds of (16)-(17) in :meth:`transform` / :meth:`decompose` (W fixed).
    random_state, verbose, callback
        As :class:`daskrnmf.NMF`.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
    objective_ : float
        Objective (5) at the final W, H, R.
    objective_history_ : ndarray (n_iter_,)
    n_iter_, n_passes_, n_features_in_, n_components_
    """

    _parameter_constraints = {
        **_COMMON,
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
    }

    def __init__(self, n_components=8, *, lam=1.0, max_iter=200, tol=1e-4, max_inner_iter=300,
                 random_state=None, verbose=0, callback=None):
        self.n_components = n_components
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.max_inner_iter = max_inner_iter
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    def fit(self, X, y=None):
        """Factorize X; see :meth:`fit_transform`."""
        self.fit_transform(X)
        return self

    def fit_transform(self, X, y=None):
        """Factorize X and return H.

        Parameters
        ----------
        X : array-like (n_samples, n_features), non-negative

        Returns
        -------
        H : ndarray or dask.array.Array (n_samples, n_components)
            Dask (chunked like X, persisted) for Dask/Zarr input.
        """
        from .ornmf import _check_non_negative

        v.validate_params(self, self._parameter_constraints)
        name = type(self).__name__
        X = v.check_array(X, estimator_name=name)
        n, d = X.shape
        blocks, stats = checked_blocks(X, f"X passed to {name}")
        _check_non_negative(stats, name)
        seed = v.seed_from(self.random_state)
        lam = float(self.lam)
        mean = stats["sum"] / max(1, n * d)
        W = _initial_components(seed, self.n_components, d, mean)
        _, state = blocks.map_reduce(_rnmf_init_chunk, _count, args=(W, lam), keep_state=True,
                                     name="initial H, R")

        def step(W, active):
            nonlocal state
            res, state = blocks.map_reduce(_rnmf_chunk, add_statistics, args=(W[0], lam, True),
                                           state=state, keep_state=True, name="H, R + W statistics")
            return update_components(W[0], res["A"], res["B"], res["C"], 1)[None], \
                np.array([res["loss"]])

        W, log = iterate(step, W[None], n_restarts=1, max_iter=self.max_iter, tol=self.tol,
                         callback=self.callback, verbose=self.verbose, name=name,
                         passes=lambda: blocks.n_passes)
        W = W[0]
        final, state = blocks.map_reduce(_rnmf_chunk, add_statistics, args=(W, lam, False),
                                         state=state, keep_state=True, name="final objective")
        if not log.stopped_by_callback:
            warn_if_not_converged(name, log.converged[0], self.max_iter)
        self.components_ = W
        self.objective_ = float(final["loss"])
        self.objective_history_ = log.restart_history(0)
        self.n_iter_ = int(log.n_iter[0])
        self.n_passes_ = blocks.n_passes
        self.n_features_in_ = d
        self.n_components_ = self.n_components
        if not blocks.is_dask:
            return np.concatenate([h for h, _ in state])
        import dask.array as da

        return da.concatenate([da.from_delayed(st[0], (m, self.n_components), dtype=np.float64)
                               for st, m in zip(state, blocks.sizes)])


def _rnmf_init_chunk(block, start, W, lam):
    h, r = initial_codes(as_float_block(block), W, lam)
    return block.shape[0], (h, r)


def _count(parts):
    return sum(parts)


def _rnmf_chunk(block, start, hr, W, lam, update):
    """(7) then (8) for the block's rows with W fixed (``update``), then its statistics."""
    x = as_float_block(block)
    h, r = hr
    if update:
        h, r = solve_codes(x, W, lam, 1, h=h, r=r)
    return block_statistics(x, h, r, W, lam), (h, r)
