"""X as a sequence of row blocks, and the one way daskrnmf makes a pass over it.

A *pass* applies a per-block kernel to every row block and folds the small per-block
results up a pairwise tree (``split_every`` children per node); the root is aggregated
where the tree ends — on a worker for Dask input.  NumPy input runs the very same
kernels, tree and aggregation in-process, without a scheduler round-trip, so the two
paths give bit-identical results for the same row blocks.

Every pass increments :attr:`RowBlocks.n_passes`: passes over X are the cost model.

Per-block state that a pass computes from the previous pass's state (H of the
multiplicative-update models, the outliers R, ...) forms a chain as long as the fit.  A
worker that dies takes its links of the chain with it; distributed (2026.7, seen in a
SLURM test with a killed worker) rebuilds them from the tasks that made them, back along
the chain, exactly.  Still, on a distributed cluster, chained state is also written to a
scratch directory (one file per block, written atomically) and the next pass reads it
from there, as insurance: a block lost with its worker is then recomputed from its file,
one step, not along the whole chain, and without relying on the scheduler keeping the
chain's history.
The scratch directory is ``dask.config`` ``"daskrnmf.scratch-directory"`` (it must be
visible to every worker), else the system temporary directory when every worker runs on
this host; a generation of files is deleted as soon as the next one is complete, the last
one when nothing refers to it any more.  A scratch directory left by a process that was
killed (SIGKILL, or SIGTERM without cleanup) is removed by the next fit that makes one in
the same place (:func:`daskrnmf._stores.make_scratch`).
"""

import dataclasses
import logging
import os
import pickle
import shutil
import socket
import tempfile
import time
import uuid
import warnings
import weakref
from collections import Counter

import dask
import numpy as np
from dask import delayed
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from ._stores import make_scratch

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


class BlockState(list):
    """Per-block state a pass kept (``keep_state=True``): one entry per row block, NumPy
    values for NumPy input, tasks (persisted on the cluster, or reading a scratch file)
    for Dask input.  Its own type so that a checkpoint (:mod:`daskrnmf._resume`) writes
    it block by block, never gathered."""


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
    on_pass : callable, optional
        ``on_pass(n_passes, name, seconds)`` as each pass over X ends (a fit's
        :class:`daskrnmf._driver.Progress`): the passes a progress display shows.
    """

    def __init__(self, X, *, block_rows=None, split_every=8, on_pass=None):
        self.shape = X.shape
        self.split_every = split_every
        self.is_dask = not isinstance(X, np.ndarray)
        if self.is_dask:
            sizes = X.chunks[0]
            self._blocks = list(X.to_delayed().ravel())
            # each block's read, where it is one task of its own that needs no other
            # (a Zarr or file source, a random array): a pass runs it inside the block's
            # task (None: the block's graph is kept as it is)
            self._reads = _root_reads(self._blocks)
        else:
            # once, not in every pass: the kernels take C-contiguous float32 or float64
            # blocks (as_kernel_block), and a strided or integer X was copied into that
            # form by each of them (on face data a copy of X per pass, most of the fit's
            # page faults)
            X = np.ascontiguousarray(X, dtype=np.float32 if X.dtype == np.float32
                                     else np.float64)
            rows = block_rows or default_block_rows(X.shape[1])
            sizes = [min(rows, X.shape[0] - s) for s in range(0, X.shape[0], rows)]
            bounds = np.cumsum([0] + sizes)
            self._blocks = [X[bounds[b]:bounds[b + 1]] for b in range(len(sizes))]
        # NumPy input: the array itself, for kernels that need all of it at once (the
        # in-memory medians of RFNMF_L1); None for Dask input, which is never gathered
        self.array = None if self.is_dask else X
        self.sizes = tuple(int(s) for s in sizes)
        self.starts = tuple(int(s) for s in np.cumsum((0,) + self.sizes[:-1]))
        self.n_passes = 0
        self.n_state_passes = 0
        self.on_pass = on_pass
        self._scratch = False   # False: not decided yet; None: state stays in memory

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
        seconds = time.perf_counter() - tic
        logger.debug("pass %d (%s) over %d blocks in %.3f s", self.n_passes, name,
                     self.n_blocks, seconds)
        if self.on_pass is not None:
            self.on_pass(self.n_passes, name, seconds)
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
        return (root, BlockState(states)) if keep_state else root

    def _map_reduce_dask(self, chunk, combine, finalize, args, state, keep_state):
        dargs = _broadcast(args)
        fn = delayed(chunk, pure=True, nout=2 if keep_state else None)
        parts, states, calls = [], [], []
        for b, block in enumerate(self._blocks):
            extra = () if state is None else (state[b],)
            res = fn(block, self.starts[b], *extra, *dargs)
            calls.append(res)
            if keep_state:
                res, st = res
                states.append(st)
            parts.append(res)
        root = tree_reduce(parts, combine, self.split_every, wrap=_pure_delayed)
        if finalize is not None:
            root = delayed(finalize, pure=True)(root)
        root, *states = _reads_inline([root, *states], calls, self._blocks, self._reads)
        if not keep_state:
            return dask.compute(root)[0]
        scratch = self._scratch_directory() if state is not None else None
        if scratch is None:
            persisted = dask.persist(root, *states)
            return persisted[0].compute(), BlockState(persisted[1:])
        return scratch.spill(root, states, consumed=state)

    def map_state(self, chunk, combine, state, args=(), name="state pass"):
        """A reduction over the per-block state alone: X is not read, and the pass is
        not counted in :attr:`n_passes` (it is in :attr:`n_state_passes`).

        ``chunk(state_block, *args)`` returns a partial result; ``combine`` as in
        :meth:`map_reduce`.  For passes over small per-row state kept next to the blocks
        (MNMF's k features per row), which cost a fraction of a pass over X.
        """
        self.n_state_passes += 1
        tic = time.perf_counter()
        if not self.is_dask:
            out = tree_reduce([chunk(st, *args) for st in state], combine, self.split_every)
        else:
            dargs = _broadcast(args)
            if isinstance(state, SpilledState) and state.paths:
                # state on the scratch disk: any worker reads any block, so a task takes a
                # run of blocks (a few tasks per thread, not one per block: a state pass
                # is short and the per-task overhead would dominate it)
                size = -(-len(state.paths) // (4 * _total_threads()))
                fn = delayed(_state_group, pure=True)
                parts = [fn(state.paths[i:i + size], state.keep_alive, chunk, combine, *dargs)
                         for i in range(0, len(state.paths), size)]
            else:
                fn = delayed(chunk, pure=True)
                parts = [fn(st, *dargs) for st in state]
            out = dask.compute(tree_reduce(parts, combine, self.split_every,
                                           wrap=_pure_delayed))[0]
        logger.debug("state pass %d (%s) over %d blocks in %.3f s", self.n_state_passes, name,
                     self.n_blocks, time.perf_counter() - tic)
        return out

    def gather(self, state, fn=None, *args, starts=False):
        """Per-block state as one NumPy array, the blocks' rows in order; ``fn(block_state,
        *args)`` — ``fn(block_state, start, *args)`` with ``starts`` — is applied per block
        first (on the workers for Dask input), e.g. to keep one restart's column of the
        labels."""
        lead = [(s,) if starts else () for s in self.starts]
        if not self.is_dask:
            parts = [fn(st, *a, *args) if fn is not None else st for st, a in zip(state, lead)]
        else:
            parts = dask.compute(*[delayed(fn or _identity, pure=True)(st, *a, *args)
                                   for st, a in zip(state, lead)])
        return np.concatenate([np.asarray(p) for p in parts])

    def as_array(self, state, width, dtype, fn=None, *args):
        """Per-block state as one array of shape (n_samples, width), rows in order:
        NumPy for NumPy input; for Dask input a lazy Dask array chunked like X's rows,
        each chunk ``fn(block_state, *args)`` (or the block's state) computed where the
        state is — never gathered here.  Its values are the state's at the time of the
        call (a later pass's state is another list)."""
        if not self.is_dask:
            parts = [fn(st, *args) if fn is not None else st for st in state]
            return np.concatenate(parts).astype(dtype, copy=False)
        import dask.array as da

        make = delayed(fn or _identity, pure=True)
        dargs = _broadcast(args)
        return da.concatenate([da.from_delayed(make(st, *dargs), (n, width), dtype=dtype)
                               for st, n in zip(state, self.sizes)])

    def per_block(self, fn, values, *args):
        """``fn(value, *args)`` for the ``values`` given one per block: computed now for
        NumPy input, as tasks (per-block state for :meth:`map_reduce`) for Dask input."""
        if not self.is_dask:
            return BlockState(fn(a, *args) for a in values)
        make = delayed(fn, pure=True)
        return BlockState(make(a, *args) for a in values)

    def split(self, y):
        """A 1-D array of n_samples values (NumPy or Dask) cut into X's row blocks:
        NumPy pieces, or for Dask input the tasks of ``y`` rechunked to X's row chunks
        (a NumPy ``y`` is sent once, in those pieces; a Dask ``y`` is never gathered)."""
        if not self.is_dask:
            y = np.asarray(y)
            return [y[s:s + n] for s, n in zip(self.starts, self.sizes)]
        import dask.array as da

        yd = y if isinstance(y, da.Array) else da.from_array(np.asarray(y),
                                                               chunks=(self.sizes,))
        return list(yd.rechunk((self.sizes,)).to_delayed().ravel())

    def close(self):
        """Remove the scratch directory of spilled state now (the fit is over, or failed):
        not when garbage collection gets to it, which an exception's traceback can delay
        for as long as the session runs."""
        if self._scratch:
            self._scratch.remove()
        self._scratch = False

    def _scratch_directory(self):
        """The :class:`_Scratch` chained state is spilled to, or None (kept in memory)."""
        if self._scratch is False:
            self._scratch = _choose_scratch()
        return self._scratch


def active_client():
    """The distributed Client that Dask computations go to, or None."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a core dependency
        return None
    try:
        client = default_client()
    except ValueError:
        return None
    scheduler = dask.config.get("scheduler", None)
    if scheduler is not None and scheduler not in ("dask.distributed", "distributed"):
        return None          # a local scheduler was asked for explicitly
    return client


# What a worker holds before it holds any data: the interpreter, NumPy/SciPy/Dask,
# distributed and daskrnmf's compiled Numba kernels (measured on a LocalCluster worker
# process: 359 MiB fresh, 389 MiB after an L1 fit, 395 MiB after every model).
WORKER_BASELINE = 400 * 2**20
# Copies of one block a worker may hold at once: the block read, its float64 copy, the
# kernels' temporaries, and the next block being read.
BLOCK_COPIES = 6


def worker_block_budget():
    """Bytes one row block may take on the smallest worker of the active cluster, or None
    (no distributed cluster, or no memory limit).

    A worker pauses at ``distributed.worker.memory.pause`` (0.8) of its limit; below that
    it holds :data:`WORKER_BASELINE` plus :data:`BLOCK_COPIES` blocks per thread.  The value is
    negative when the limit is too small for the baseline itself.
    """
    client = active_client()
    if client is None:
        return None
    workers = [w for w in _workers(client) if w.get("memory_limit")]
    if not workers:
        return None
    fraction = dask.config.get("distributed.worker.memory.pause", 0.8) or 0.95
    baseline = dask.config.get("daskrnmf.worker-baseline-memory", WORKER_BASELINE)
    # a worker with T threads holds T blocks (and their copies) at once
    return int(min((w["memory_limit"] * float(fraction) - baseline)
                   // (BLOCK_COPIES * max(1, w.get("nthreads") or 1)) for w in workers))


def _workers(client):
    """The scheduler's description of every worker (``n_workers=-1`` lists them all on
    distributed versions that page the list)."""
    return list(_worker_info(client).values())


def worker_addresses(client):
    """Every worker's address, sorted."""
    return sorted(_worker_info(client))


def _worker_info(client):
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:                     # distributed < 2025: no paging, all listed
        info = client.scheduler_info()
    return info["workers"]


def check_block_fits(block_bytes, where):
    """A clear error, before any work, when the workers' memory limit cannot hold
    ``block_bytes`` blocks (see :func:`worker_block_budget`); ``block_bytes=None`` checks
    only that a worker's limit holds its baseline."""
    budget = worker_block_budget()
    if budget is None or (budget > 0 and (block_bytes is None or block_bytes <= budget)):
        return
    client = active_client()
    limit = min(w["memory_limit"] for w in _workers(client) if w.get("memory_limit"))
    baseline = dask.config.get("daskrnmf.worker-baseline-memory", WORKER_BASELINE)
    pause = dask.config.get("distributed.worker.memory.pause", 0.8) or 0.95
    if budget <= 0:
        need = (baseline + BLOCK_COPIES * 2**20) / pause
        raise MemoryError(
            f"The workers' memory limit ({limit / 2**20:.0f} MiB) is too small for {where}: a "
            f"worker holds about {baseline / 2**20:.0f} MiB before any data (Python, NumPy, "
            f"Dask and daskrnmf's compiled kernels) and pauses at {pause:.0%} of its limit. "
            f"Give the workers at least {need / 2**20:.0f} MiB; more gives larger blocks and "
            "faster passes.")
    need = (baseline + BLOCK_COPIES * block_bytes) / pause
    raise MemoryError(
        f"The workers' memory limit ({limit / 2**20:.0f} MiB) is too small for {where}: a "
        f"worker holds about {baseline / 2**20:.0f} MiB before any data, plus "
        f"{BLOCK_COPIES} row blocks of {block_bytes / 2**20:.1f} MiB, and pauses at "
        f"{pause:.0%} of its limit. Give the workers at least {need / 2**20:.0f} MiB, or use "
        "smaller row chunks (X.rechunk({0: rows}) for a Dask array).")


def check_stored_chunk_fits(chunk_bytes, budget, where):
    """A clear MemoryError, before any work, when one stored chunk of a Zarr array
    (``chunk_bytes`` decoded) does not fit in what a worker thread may hold
    (``BLOCK_COPIES * budget``, see :func:`worker_block_budget`): any row of a compressed
    chunk is read by decoding the whole chunk, so blocks smaller than a stored chunk do
    not help, and the workers would be killed one after the other (KilledWorker)."""
    room = BLOCK_COPIES * budget
    if chunk_bytes <= room:
        return
    client = active_client()
    limit = min(w["memory_limit"] for w in _workers(client) if w.get("memory_limit"))
    baseline = dask.config.get("daskrnmf.worker-baseline-memory", WORKER_BASELINE)
    pause = dask.config.get("distributed.worker.memory.pause", 0.8) or 0.95
    threads = max(1, int(min((w.get("nthreads") or 1) for w in _workers(client))))
    need = (baseline + threads * (chunk_bytes + BLOCK_COPIES * 2**20)) / pause
    raise MemoryError(
        f"The stored chunks of {where} are {chunk_bytes / 2**20:.0f} MiB each (decoded), and "
        f"a worker decodes a whole stored chunk to read any of its rows; the workers' memory "
        f"limit ({limit / 2**20:.0f} MiB) leaves {room / 2**20:.0f} MiB per thread after "
        f"their baseline ({baseline / 2**20:.0f} MiB) below the pause threshold "
        f"({pause:.0%}). Give the workers at least {need / 2**20:.0f} MiB, or rewrite the "
        "store with smaller row chunks, e.g. dask.array.from_zarr(path).rechunk({0: rows})"
        ".to_zarr(new_path), with rows * n_features * itemsize of a few tens of MiB.")


def _choose_scratch():
    client = active_client()
    if client is None:
        return None          # threads / processes / sync: no worker can be lost
    root = dask.config.get("daskrnmf.scratch-directory", None)
    if root is None:
        here = socket.gethostname()
        hosts = set(client.run(socket.gethostname).values())
        if hosts - {here}:
            warnings.warn("daskrnmf keeps per-block state in worker memory, so a lost "
                          "worker ends the fit: set dask config 'daskrnmf.scratch-directory' "
                          "to a directory every worker can read and write to survive worker "
                          "loss.", RuntimeWarning, stacklevel=4)
            return None
        root = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    return _Scratch(root)


class _Scratch:
    """A directory of spilled per-block state, one subdirectory per generation."""

    def __init__(self, root):
        self.path = make_scratch(root)     # sweeps the scratch of processes that are gone
        # removed by remove(), else when collected, else at interpreter exit
        self._remove = weakref.finalize(self, shutil.rmtree, self.path, ignore_errors=True)
        self._generation = 0

    def remove(self):
        """Delete the directory and everything in it (once)."""
        self._remove()

    def spill(self, root, states, consumed):
        """Compute ``root`` and write every state block; return the root's value and the
        state as tasks that read the files."""
        self._generation += 1
        directory = os.path.join(self.path, f"g{self._generation:06d}")
        os.makedirs(directory)
        paths = [os.path.join(directory, f"b{b:06d}.pkl") for b in range(len(states))]
        writes = [delayed(write_state, pure=True)(st, p) for st, p in zip(states, paths)]
        value = dask.compute(root, *writes)[0]
        if isinstance(consumed, SpilledState):
            consumed.discard()
        keep = _KeepAlive(self)
        return value, SpilledState((delayed(read_state, pure=True)(p, keep) for p in paths),
                                   directory, paths, keep)


class SpilledState(BlockState):
    """Per-block state as tasks that read it from a scratch generation."""

    def __init__(self, blocks, directory, paths=(), keep_alive=None):
        super().__init__(blocks)
        self.directory = directory
        self.paths = list(paths)
        self.keep_alive = keep_alive

    def discard(self):
        """Delete this generation's files (after a later pass consumed them)."""
        shutil.rmtree(self.directory, ignore_errors=True)


class _KeepAlive:
    """Holds the scratch directory alive (on the client) while a graph refers to it; on a
    worker it is an empty token."""

    def __init__(self, scratch):
        self.scratch = scratch

    def __reduce__(self):
        return _KeepAlive, (None,)

    def __dask_tokenize__(self):
        return "daskrnmf-scratch"


def write_state(state, path):
    """Write one block's state to ``path`` atomically (a unique temporary name, then
    ``os.replace``), so a reader never sees a partial file."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh, protocol=5)
    os.replace(tmp, path)
    return path


def read_state(path, keep_alive=None):
    """Read one block's state written by :func:`write_state`."""
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _state_group(paths, keep_alive, chunk, combine, *args):
    """:meth:`RowBlocks.map_state` on a run of spilled state blocks, combined."""
    return combine([chunk(read_state(p), *args) for p in paths])


def _total_threads():
    client = active_client()
    return max(1, sum(client.nthreads().values())) if client is not None else 1


def _broadcast(args):
    """Arguments sent to every block's task: arrays, dicts and dataclasses as one task
    each (not embedded in every block's task, nor traversed for tasks)."""
    return [delayed(a, traverse=False)
            if isinstance(a, (np.ndarray, dict)) or dataclasses.is_dataclass(a) else a
            for a in args]


def _identity(x):
    return x


def _root_reads(blocks):
    """For each of a Dask array's blocks (``X.to_delayed()``, one optimised graph), the
    task that makes it when that task depends on no other (a Zarr or file source read in
    its own task, a random block), else None.  None for every block with a Dask older than
    its task specification (``dask._task_spec``, 2025): the graph is then kept as it is."""
    try:
        from dask._task_spec import Alias, Task
    except ImportError:             # dask < 2025: tasks are tuples, nothing is inlined
        return [None] * len(blocks)

    if not blocks:
        return []
    graph = dict(blocks[0].dask)
    reads = []
    for block in blocks:
        node = graph.get(block.key)
        for _ in range(8):                  # an optimised graph's alias of a fused key
            if not isinstance(node, Alias):
                break
            node = graph.get(node.target)
        reads.append(node if isinstance(node, Task) and not node.dependencies else None)
    # a read two blocks share (X = da.concatenate([A, A])) stays a task of its own, read
    # once a pass, not once in each block's task
    uses = Counter(r.key for r in reads if r is not None)
    return [r if r is not None and uses[r.key] == 1 else None for r in reads]


def _reads_inline(outs, calls, blocks, reads):
    """The Delayed ``outs`` of a pass with each block's read (``reads``, from
    :func:`_root_reads`) run inside the block's task (``calls``) instead of in a task of its
    own.

    A read in a task of its own is a root task, which the scheduler hands to whichever
    worker has a thread free, and the block's task then runs wherever the scheduler
    judges best: on a 1 000 000 x 64 fit, blocks read on one worker went to the other
    (25 MB moved a block), and one worker took 6 of 10 blocks while the other sat idle
    at the end of every pass.  One task a block reads and works where it runs, holds the
    block only while it runs, and the scheduler balances whole blocks."""
    if not any(r is not None for r in reads):
        return outs
    dsk = dict(HighLevelGraph.merge(*(o.__dask_graph__() for o in outs)))
    # a block another task of the pass needs too (a state made from X's blocks) keeps its
    # read in a task of its own, as before: inlined as well, it would be read twice
    users = Counter(d for t in dsk.values() for d in getattr(t, "dependencies", ()))
    for call, block, read in zip(calls, blocks, reads):
        if read is None or users[block.key] > 1:
            continue
        dsk[call.key] = dsk[call.key].substitute({block.key: read})
        dsk.pop(block.key, None)
    # one layer every out shares: merging the outs' graphs (dask.persist, a spill's writes)
    # then takes the layer once, not a copy of the pass's graph for each block's state
    name = f"reads-inline-{uuid.uuid4().hex}"
    graph = HighLevelGraph({name: dsk}, {name: set()})
    return [Delayed(o.key, graph, layer=name) for o in outs]


def _pure_delayed(fn):
    return delayed(fn, pure=True)


def default_block_rows(n_features, target_bytes=32 * 2**20):
    """Rows per in-memory block: about 32 MiB of float64 per block."""
    return max(1, int(target_bytes // (8 * max(1, n_features))))
