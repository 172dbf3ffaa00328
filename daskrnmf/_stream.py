"""X as a stream of batches for the online models: batch bounds, seeded visiting orders,
and a feed that reads batches ahead of their use and solves each where its data lives.

Nothing here knows a model's maths: the feed runs whatever ``solve(piece, start, *args)``
the model gives it and sums the pieces' partial results with the model's ``combine``.
"""

import numpy as np

from ._blocks import active_client, tree_reduce
from .kernels.blocks import as_float_block

NUMPY_BATCH = 1024   # rows per batch of a NumPy X when no batch_size is given


def make_batches(X, batch_size):
    """Row ranges of the batches and of each batch's pieces.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
    batch_size : int or None
        Rows per batch; None takes X's row chunks (Dask) or ``NUMPY_BATCH`` rows (NumPy).

    Returns
    -------
    batches : list of (start, stop)
    pieces : list of list of (start, stop)
        Each batch cut at X's chunk boundaries (its pieces are solved in parallel).
    """
    n = X.shape[0]
    if isinstance(X, np.ndarray):
        bounds = np.array([0, n])
    else:
        bounds = np.cumsum((0,) + tuple(X.chunks[0]))
    if batch_size is None:
        step = NUMPY_BATCH if isinstance(X, np.ndarray) else None
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


def upcoming(order, n_batches, n_passes, pass_index, position, count):
    """The next ``count`` batches of the stream from (``pass_index``, ``position``) on;
    ``order(p)`` gives pass ``p``'s visiting order."""
    out = []
    p, j = pass_index, position
    while len(out) < count and p < n_passes:
        if j >= n_batches:
            p, j = p + 1, 0
            continue
        out.append(int(order(p)[j]))
        j += 1
    return out


def piece_sum(block, start=0):
    """Sum and count of one piece's entries (run where the piece lives)."""
    x = as_float_block(block)
    return float(x.sum()), x.size


class Feed:
    """Reads batches ahead of their use and solves them where their data is.

    * A distributed Client is active and X is a Dask array: each piece is computed into a
      future on a worker ``prefetch`` batches ahead; the solve is submitted to run where
      that future lives, and only its (small) result is gathered.
    * Dask without a distributed Client: the next batches are computed by a background
      thread while the current one is solved in-process.
    * NumPy: the pieces are views of X.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
    pieces : list of list of (start, stop)
        As returned by :func:`make_batches`.
    """

    def __init__(self, X, pieces):
        self.X, self.pieces = X, pieces
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

    def _run(self, fn, data, starts, args):
        if self.client is not None:
            futures = [self.client.submit(fn, f, s, *args, pure=False, priority=10)
                       for f, s in zip(data, starts)]
            return self.client.gather(futures)
        if self._pool is not None:
            return [fn(f.result(), s, *args) for f, s in zip(data, starts)]
        return [fn(x, s, *args) for x, s in zip(data, starts)]

    def mean(self, b):
        """Mean entry of batch ``b`` (its data stays where it is, and stays read)."""
        data = self._take(b)
        self.pending[b] = data
        sums = self._run(piece_sum, data, [s for s, _ in self.pieces[b]], ())
        return sum(s for s, _ in sums) / max(1, sum(c for _, c in sums))

    def solve(self, b, fn, combine, *args):
        """``combine`` of ``fn(piece, start, *args)`` over batch ``b``'s pieces (in row
        order, tree-reduced), each run where the piece lives; the batch is consumed."""
        data = self._take(b)
        parts = self._run(fn, data, [s for s, _ in self.pieces[b]], args)
        del data
        return tree_reduce(parts, combine, 8)

    def close(self):
        """Cancel the batches read ahead and stop the reader thread."""
        if self.client is not None:
            for futures in self.pending.values():
                for f in futures:
                    f.cancel()
        self.pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
