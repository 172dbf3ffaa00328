"""X as a sequence of row blocks, and the one way daskrnmf makes a pass over it.

A *pass* applies a per-block kernel to every row block and folds the small per-block
results up a pairwise tree (``split_every`` children per node); the root is aggregated
where the tree ends — on a worker for Dask input.  NumPy input runs the very same
kernels, tree and aggregation in-process, without a scheduler round-trip, so the two
paths give bit-identical results for the same row blocks.

Every pass increments :attr:`RowBlocks.n_passes`: passes over X are the cost model.
"""

import logging
import time

import dask
import numpy as np
from dask import delayed

logger = logging.getLogger(__name__)


def tree_reduce(parts, combine, split_every, wrap=None):
    """Fold ``parts`` pairwise-up-a-tree: ``split_every`` consecutive parts per node.

    Parameters
    ----------
    parts : list
        Per-block partial results (or Delayed objects).
    combine : callable
        ``combine(list_of_partials) -> partial``.
    split_every : int >= 2
    wrap : callable, optional
        Applied to ``combine`` before calling it (``dask.delayed`` to build a task tree).

    Returns
    -------
    The root partial; the tree has depth ``ceil(log_split_every(len(parts)))``.
    """
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    fn = combine if wrap is None else wrap(combine)
    level = list(parts)
    while len(level) > 1:
        level = [fn(level[i:i + split_every]) if len(level[i:i + split_every]) > 1
                 else level[i] for i in range(0, len(level), split_every)]
    return level[0]


class RowBlocks:
    """Row blocks of X with their global offsets.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
        Already validated; a Dask array must be chunked along rows only.
    block_rows : int, optional
        Rows per block for NumPy input (Dask input keeps its own chunks).
    split_every : int, default=8
        Fan-in of the reduction tree.
    """

    def __init__(self, X, *, block_rows=None, split_every=8):
        self.shape = X.shape
        self.split_every = split_every
        self.is_dask = not isinstance(X, np.ndarray)
        if self.is_dask:
            sizes = X.chunks[0]
            self._blocks = list(X.to_delayed().ravel())
        else:
            rows = block_rows or default_block_rows(X.shape[1])
            sizes = [min(rows, X.shape[0] - s) for s in range(0, X.shape[0], rows)]
            bounds = np.cumsum([0] + sizes)
            self._blocks = [X[bounds[b]:bounds[b + 1]] for b in range(len(sizes))]
        self.sizes = tuple(int(s) for s in sizes)
        self.starts = tuple(int(s) for s in np.cumsum((0,) + self.sizes[:-1]))
        self.n_passes = 0

    @property
    def n_blocks(self):
        return len(self._blocks)

    def map_reduce(self, chunk, combine, finalize=None, args=(), state=None, keep_state=False,
                   name="pass"):
        """One pass over X.

        Parameters
        ----------
        chunk : callable
            ``chunk(block, start, *args)`` — or ``chunk(block, start, state_block, *args)``
            when ``state`` is given — returning a partial result, or
            ``(partial, new_state_block)`` when ``keep_state``.
        combine : callable
            ``combine(list_of_partials) -> partial``; must be associative.
        finalize : callable, optional
            Applied to the root partial (on a worker for Dask input).
        args : tuple
            Small model state broadcast to every block (one task / one copy).
        state : list, optional
            Per-block state from an earlier pass (``keep_state=True``).
        keep_state : bool
            Keep the per-block state the chunk function returns (persisted next to
            the blocks on the cluster; never gathered to the client).

        Returns
        -------
        result, or ``(result, new_state)`` when ``keep_state``.
        """
        self.n_passes += 1
        tic = time.perf_counter()
        if self.is_dask:
            out = self._map_reduce_dask(chunk, combine, finalize, args, state, keep_state)
        else:
            out = self._map_reduce_numpy(chunk, combine, finalize, args, state, keep_state)
        logger.debug("pass %d (%s) over %d blocks in %.3f s", self.n_passes, name,
                     self.n_blocks, time.perf_counter() - tic)
        return out

    def _map_reduce_numpy(self, chunk, combine, finalize, args, state, keep_state):
        parts, states = [], []
        for b, block in enumerate(self._blocks):
            extra = () if state is None else (state[b],)
            res = chunk(block, self.starts[b], *extra, *args)
            if keep_state:
                res, st = res
                states.append(st)
            parts.append(res)
        root = tree_reduce(parts, combine, self.split_every)
        if finalize is not None:
            root = finalize(root)
        return (root, states) if keep_state else root

    def _map_reduce_dask(self, chunk, combine, finalize, args, state, keep_state):
        dargs = [delayed(a, traverse=False) if isinstance(a, (np.ndarray, dict)) else a
                 for a in args]
        fn = delayed(chunk, pure=True, nout=2 if keep_state else None)
        parts, states = [], []
        for b, block in enumerate(self._blocks):
            extra = () if state is None else (state[b],)
            res = fn(block, self.starts[b], *extra, *dargs)
            if keep_state:
                res, st = res
                states.append(st)
            parts.append(res)
        root = tree_reduce(parts, combine, self.split_every, wrap=_pure_delayed)
        if finalize is not None:
            root = delayed(finalize, pure=True)(root)
        if not keep_state:
            return dask.compute(root)[0]
        persisted = dask.persist(root, *states)
        return persisted[0].compute(), list(persisted[1:])


def _pure_delayed(fn):
    return delayed(fn, pure=True)


def default_block_rows(n_features, target_bytes=32 * 2**20):
    """Rows per in-memory block: about 32 MiB of float64 per block."""
    return max(1, int(target_bytes // (8 * max(1, n_features))))
