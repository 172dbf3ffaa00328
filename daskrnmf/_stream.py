"""X as a stream of batches for the online models: batch bounds, seeded visiting orders,
and a feed that reads X's chunks ahead of their use and solves each batch where its data
lives.

Nothing here knows a model's maths: the feed runs whatever ``solve(piece, start, *args)``
the model gives it and sums the pieces' partial results with the model's ``combine``.

**The default batches** (``batch_size=None``) are defined by X's shape and the seed,
never by its chunks (:func:`make_batches`), so that the fit does not depend on how X is
stored:

* **row groups** (*units*): X's rows cut into consecutive groups of at most
  :func:`unit_rows` rows (:data:`UNIT_BYTES` as float64: 524,288 rows at 64 features),
  each read as one block (its chunks concatenated where they are read; a chunk that
  straddles two groups is read for each);
* **batches**: each group cut into :func:`default_batch_rows`-row batches; a pass makes
  ``max(UPDATES_PER_PASS, n_samples / BATCH_ROWS)`` dictionary updates: a small X (up to
  ``8 * BATCH_ROWS`` rows) gives :data:`UPDATES_PER_PASS` batches of ``n_samples / 8``
  rows, a large X batches of :data:`BATCH_ROWS` rows, many updates per pass (a pass of
  4M rows makes about 1,000);
* a pass visits the groups in a seeded random order and the batches of a group
  consecutively, so every group is read once per pass; the batches of a group are solved
  one after the other in one task where it was read (:meth:`Feed.submit_run`), the model's
  state updated between them there, so a pass makes one round trip a group, not a batch.
  With a distributed Client the model queues the next group's task behind the one being
  solved (:meth:`Feed.submit_run` given the run before's future, from whose results it
  starts): the workers go from one group to the next without waiting for the client,
  which takes each result (:meth:`Feed.take_run`) while the next group is solved.  The reads are
  prioritised in the order they are wanted, below the solves.  A batch takes the rows of its
  slot in a seeded random permutation of its group's rows drawn anew at every pass
  (:func:`batch_rows`): data stored sorted (by class, by time) does not give batches of
  one kind.  The worker that reads a group checks it and puts it in its pass's batch
  order (``Feed(layout=..., prepare=...)``), while another solves: the solve takes each
  batch as a slice, neither gathering its rows nor checking them (an eighth of its time
  at 64 features).  With a distributed Client consecutive groups are asked to be read on
  different workers (:meth:`Feed._reader`), each put together from its pieces of X's
  chunks and put in order in one copy there (:func:`_arranged_parts`), its read submitted
  once that worker has no other group to solve first (:class:`_Unread`), and a group held
  for the next pass is put in that pass's order after the run that solves it there.

A ``batch_size`` set by the user is taken exactly: batches of that many contiguous rows,
visited in a seeded random order of their own (a chunk may then be read once per batch
that needs it); their pieces are X's chunks, solved in parallel where they are read.

**Chunk checksums** (``Feed(..., checksums=...)``, for checkpointed fits): the feed
records a SHA-256 of every block it reads (a chunk of X, or a row group of the default
batches; computed where the block is read, as it is read: no pass of its own) under the
block's row range, and a block read again whose checksum differs from the one recorded
is a ValueError.  A fit resumed from a checkpoint gives the feed the checksums recorded
before it stopped, so X changed anywhere in the rows the first run read is refused when
they are read again, not mixed with the rows read before.  NumPy X is one chunk,
checksummed once per feed.
"""

import functools
import math
import operator
import time
from dataclasses import dataclass

import numpy as np

from ._blocks import active_client, tree_reduce, worker_addresses
from ._stores import digest, digest_rows
from .kernels.blocks import as_float_block

UPDATES_PER_PASS = 8        # default batches: at least this many W updates per pass
BATCH_ROWS = 4096            # default batches: the rows of a batch of a large X
UNIT_BYTES = 2 ** 28         # default batches: a row group read at once (as float64)


def unit_rows(n_features):
    """Most rows of a row group of the default batches (:data:`UNIT_BYTES` as float64)."""
    return max(1, UNIT_BYTES // (8 * max(1, int(n_features))))


def default_batch_rows(n_samples, n_features):
    """Rows of a default batch: ``n_samples / UPDATES_PER_PASS`` for a small X (a pass
    makes :data:`UPDATES_PER_PASS` updates), :data:`BATCH_ROWS` for a large one (a pass
    makes ``n_samples / BATCH_ROWS``), and never more than a row group."""
    return max(1, min(math.ceil(n_samples / UPDATES_PER_PASS), BATCH_ROWS,
                      unit_rows(n_features)))


def make_batches(X, batch_size):
    """Row ranges of the batches, of each batch's pieces, and the units of the order.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
    batch_size : int or None
        Rows per batch; None chooses them from X's shape alone (see the module's
        docstring).

    Returns
    -------
    batches : list of (start, stop)
    pieces : list of list of (start, stop)
        ``batch_size`` given: each batch cut at X's chunk boundaries (its pieces are
        solved in parallel).  None: each batch's own range (one piece, in one row
        group).
    units : list of list of int
        Batches visited consecutively (a row group); one unit per batch when
        ``batch_size`` is given.
    """
    n, d = X.shape[0], X.shape[1]
    if batch_size is not None:
        bounds = (np.array([0, n]) if isinstance(X, np.ndarray)
                  else np.cumsum((0,) + tuple(X.chunks[0])))
        bounds = [int(b) for b in bounds]
        edges = list(range(0, n, batch_size)) + [n]
        batches = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
        pieces = []
        for a, b in batches:
            pts = [a] + [c for c in bounds if a < c < b] + [b]
            pieces.append(list(zip(pts[:-1], pts[1:])))
        return batches, pieces, [[b] for b in range(len(batches))]
    target = default_batch_rows(n, d)
    groups = math.ceil(n / unit_rows(d)) if n else 0
    group_edges = [(n * i) // groups for i in range(groups + 1)]
    batches, units = [], []
    for lo, hi in zip(group_edges[:-1], group_edges[1:]):
        size = hi - lo
        parts = math.ceil(size / target)
        cuts = [lo + (size * i) // parts for i in range(parts + 1)]
        first = len(batches)
        batches += [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
        units.append(list(range(first, len(batches))))
    return batches, [[b] for b in batches], units


def unit_bounds(batches, units):
    """Row boundaries of the units (``n + 1`` edges of their consecutive ranges): the
    blocks the :class:`Feed` of default batches reads."""
    if not units:
        return [0, 0]
    return [batches[u[0]][0] for u in units] + [batches[units[-1][-1]][1]]


def batch_order(seed, pass_index, units, shuffle=True):
    """The order in which pass ``pass_index`` visits the batches (seeded, reproducible):
    the units in a random order, each unit's batches consecutively in a random order.
    ``units`` may be an int (that many single-batch units)."""
    if isinstance(units, (int, np.integer)):
        units = [[b] for b in range(int(units))]
    if not shuffle:
        return np.array([b for u in units for b in u], dtype=np.int64)
    rng = np.random.default_rng([seed, pass_index])
    out = []
    for u in rng.permutation(len(units)):
        unit = units[u]
        out.extend(rng.permutation(unit).tolist() if len(unit) > 1 else unit)
    return np.array(out, dtype=np.int64)


def batch_rows(seed, pass_index, units, batches, b):
    """Rows of batch ``b`` in pass ``pass_index``, or None for its own contiguous range.

    A batch that shares its unit (a row group cut into batches) takes the rows of its
    slot in a seeded random permutation of the unit's rows (sorted, for locality); the
    batches of a unit still cover its rows exactly once per pass."""
    unit = next((u for u in units if u[0] <= b <= u[-1]), None)
    if unit is None or len(unit) < 2:
        return None
    lo, hi = batches[unit[0]][0], batches[unit[-1]][1]
    perm = _unit_permutation(seed, pass_index, units.index(unit), hi - lo)
    a, z = batches[b][0] - lo, batches[b][1] - lo
    return np.sort(perm[a:z]) + lo


@functools.lru_cache(maxsize=4)
def _unit_permutation(seed, pass_index, u, size):
    """The permutation of unit ``u``'s rows in a pass (drawn once for all its batches;
    read-only)."""
    perm = np.random.default_rng([seed, pass_index, u, 7]).permutation(size)
    perm.flags.writeable = False
    return perm


def upcoming(order, n_batches, n_passes, pass_index, position, count):
    """The next ``count`` batches of the stream from (``pass_index``, ``position``) on,
    as (pass, batch); ``order(p)`` gives pass ``p``'s visiting order."""
    out = []
    p, j = pass_index, position
    while len(out) < count and p < n_passes:
        if j >= n_batches:
            p, j = p + 1, 0
            continue
        out.append((p, int(order(p)[j])))
        j += 1
    return out


def read_ahead(ahead, unit_of, groups):
    """The (pass, batch) to want now: the first of ``ahead`` (the stream's next batches,
    from :func:`upcoming`) as they are, then the first batch of each of the next
    ``groups`` row groups (``unit_of``: a batch's unit; a group again in the next pass
    counts anew), so that a group is read while the one before it is solved."""
    out = list(ahead[:1 + groups])
    seen = {(p, unit_of[b]) for p, b in out}
    new = 0
    for p, b in ahead[1 + groups:]:
        if new >= groups:
            break
        if (p, unit_of[b]) not in seen:
            seen.add((p, unit_of[b]))
            out.append((p, b))
            new += 1
    return out


#: Most bytes of the states a task of batches returns (:func:`group_rest`'s ``limit``)
RUN_STATE_BYTES = 2 ** 26


def group_rest(order, position, unit_of, limit=None):
    """The batches of ``order`` from ``position`` to the end of that batch's unit (row
    group), at most ``limit`` of them: the run of batches one task solves
    (:meth:`Feed.submit_run`)."""
    u = unit_of[int(order[position])]
    end = position + 1
    stop = len(order) if limit is None else min(len(order), position + max(1, int(limit)))
    while end < stop and unit_of[int(order[end])] == u:
        end += 1
    return [int(b) for b in order[position:end]]


def process_threads():
    """How many threads ONMFO's batches, solved one after the other
    (:func:`daskrnmf.models._outliers.solve_batch_piece`), may use in this process: on a
    distributed worker its own thread count (the task solving them takes one; the others
    are then idle but for the reads ahead), elsewhere 1 (the user's process: more
    threads there competed with BLAS's own and gained nothing on 2 cores, and limiting
    BLAS would change the process for everything else it runs)."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        return 1


def piece_sum(block, start=0):
    """Sum and count of one piece's entries (run where the piece lives); NaN entries
    (missing values, ``missing="mask"``; the solve checks the piece) are left out of
    both."""
    x = as_float_block(block)
    total = float(x.sum())
    if np.isnan(total):
        miss = np.isnan(x)
        return float(np.where(miss, 0.0, x).sum()), int(x.size - miss.sum())
    return total, x.size


def chunk_checksum(chunk):
    """SHA-256 (64 bits of it, as hex) of a chunk's dtype, shape and values
    (:func:`daskrnmf._stores.digest`)."""
    return digest(chunk)[:16]


def _read_with_checksum(block):
    """A Dask chunk computed, and its :func:`chunk_checksum` (in the reading thread)."""
    import dask

    data = dask.compute(block)[0]
    return data, chunk_checksum(data)


class _Failed:
    """A block whose ``prepare`` raised: the error is raised where the block is used
    (:func:`_on_piece`, :func:`_on_pieces`), after the block's checksum was checked
    (a resumed fit's X changed since its checkpoint says so, not what changed)."""

    def __init__(self, error):
        self.error = error

    def __getitem__(self, rows):        # rows of a failed block: the same failure
        return self


def _usable(chunk):
    if isinstance(chunk, _Failed):
        raise chunk.error
    return chunk


def _arranged_parts(parts, order, use, prepare, start, checksum):
    """The block whose rows are the arrays ``parts`` one after the other (a row group's
    pieces of X's chunks as read, or the block read whole), passed through ``prepare``
    (if given: each part, ``prepare(part, start, n_rows=...)``, its messages naming the
    block's rows from ``start``) and put in the order ``order(use)`` (None: as stored),
    where it was read (:meth:`Feed._read`; the order is drawn there, not sent): each
    part copied once, to its rows' places, without concatenating the parts first (the
    concatenation and then the arrangement had copied a group twice on the worker
    reading it, 0.2-0.3 s of CPU for 128 MiB).  Returns the block (or a :class:`_Failed`
    if ``prepare`` raised) and, with ``checksum``, the :func:`chunk_checksum` of the rows
    as stored (else None)."""
    parts = [np.asarray(p) for p in parts]
    n = sum(p.shape[0] for p in parts)
    total = digest_rows(parts)[:16] if checksum else None
    if prepare is not None:
        try:
            parts = [prepare(p, start, n_rows=n) for p in parts]
        except Exception as exc:        # raised where the block is used  # noqa: BLE001
            error = exc
            if len(parts) > 1:
                # the group's message, not its first failing piece's: its counts, its
                # minimum and which check fails are the whole group's, as without a
                # Client (the pieces then put together only on this path)
                try:
                    prepare(np.concatenate(parts), start)
                except Exception as whole:  # noqa: BLE001
                    error = whole
            return _Failed(error), total
    rows = order(use)
    if rows is None:
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)), total
    places = _inverse(np.asarray(rows))     # where each stored row goes
    out = np.empty((n,) + parts[0].shape[1:], dtype=np.result_type(*parts))
    lo = 0
    for p in parts:
        out[places[lo:lo + p.shape[0]]] = p
        lo += p.shape[0]
    return out, total


def _read_arranged(block, order, use, prepare, start, checksum):
    """In the reader thread: a Dask block computed and :func:`_arranged_parts`, with the
    :func:`chunk_checksum` of the rows as stored when ``checksum``."""
    import dask

    return _arranged_parts([dask.compute(block)[0]], order, use, prepare, start, checksum)


def _inverse(order):
    positions = np.empty_like(order)
    positions[order] = np.arange(order.size)
    return positions


class _Relay:
    """A copy of a held block's data for another use, not yet submitted
    (:meth:`Feed._rearranged`): its source (a future), block, and the two uses."""

    def __init__(self, data, c, held, use):
        self.data, self.c, self.held, self.use = data, c, held, use


class _Unread:
    """A row group's read not yet submitted (:meth:`Feed._read`): it waits for the run of
    the group its worker solves before it to be taken (:meth:`Feed.take_run`), or for
    its data to be asked for (:meth:`Feed._data`)."""

    def __init__(self, c, use, workers, priority, first):
        self.c, self.use, self.workers, self.priority = c, use, workers, priority
        self.first = first          # the feed's first read


def _relaid(data, order, held, use, *after):
    """A block's ``data``, kept in the order ``order(held)``, put in the order
    ``order(use)`` (where it is); ``after``: futures it was made to wait for (unused)."""
    if isinstance(data, _Failed):
        return data
    target, source = order(use), order(held)
    if source is None:
        return data[target] if target is not None else data
    positions = _inverse(np.asarray(source))
    return data[positions if target is None else positions[target]]


def _relaid_from(source, order, held, use, with_checksum):
    """In the reader thread: :func:`_relaid` of a block read there before (``source``:
    its future or data; ``with_checksum``: a (data, checksum) pair, kept a pair)."""
    value = source.result() if hasattr(source, "result") else source
    if with_checksum and isinstance(value, tuple):
        return _relaid(value[0], order, held, use), value[1]
    return _relaid(value, order, held, use)


def _on_piece(chunk, lo, hi, start, fn, *args, rows=None):
    """``fn`` on rows ``lo:hi`` (or the local ``rows``) of a chunk read once (run where
    the chunk lives)."""
    chunk = _usable(chunk)
    return fn(chunk[lo:hi] if rows is None else chunk[rows], start, *args)


def _on_pieces(chunk, items, fn, *args):
    """``fn`` on the pieces ``items`` (lo, hi, first row, local rows or None) of a chunk
    read once, as an iterator of (piece, first row): each piece is taken from the chunk
    when ``fn`` comes to it (run where the chunk lives).  On a distributed worker, a
    task cancelled while it runs (the fit stopped: the next pass's run queued behind the
    last one) stops before its next piece, raising distributed's ``Reschedule``: the
    worker then drops it silently, or computes it again whole should the scheduler
    want it after all, never a run cut short."""
    chunk = _usable(chunk)

    def pieces():
        for lo, hi, s, rows in items:
            if _cancelled_here():
                from distributed import Reschedule

                raise Reschedule()
            yield (chunk[lo:hi] if rows is None else chunk[rows]), s

    return fn(pieces(), *args)


def _cancelled_here():
    """Whether the task this thread runs was cancelled on its distributed worker (no
    client wants it any more); False outside a worker's task.  A read of the worker's
    own state, no round trip."""
    try:
        from distributed import get_worker
        from distributed.worker import thread_state

        ts = get_worker().state.tasks.get(thread_state.key)
    except (ImportError, ValueError, AttributeError):
        return False
    return ts is None or ts.state == "cancelled"


#: most seconds a fit's end waits for its cancelled tasks to stop on the workers
SETTLE_SECONDS = 10.0


async def _nothing():
    return None


def _after_releases(client):
    """Return once ``client``'s event loop has taken the releases queued before this
    call.  A Future dropped in this thread is released in a callback on that loop
    (``Future.release``), which only then queues its message to the scheduler: a message
    this thread sent straight after the drop (a task submitted) would go first."""
    try:
        client.sync(_nothing)       # queued behind the releases on the same loop
    except Exception:               # a cluster going away: nothing left to wait for  # noqa: BLE001
        return


def _settle(client, timeout=None):
    """Wait (at most ``timeout`` seconds, :data:`SETTLE_SECONDS` by default) until no
    worker runs a task cancelled while it ran: a stopped fit's run, copy or read, the
    futures :meth:`Feed.close` cancelled or dropped.

    Each worker is first sent a task of its own, constrained there, after the
    releases (:func:`_after_releases`).  The client's messages reach the scheduler in
    order, and the scheduler's reach each worker in order: once a worker holds that task
    it has taken every release sent before, and a released task still running there is
    marked cancelled.  Asked at once (``Client.run`` takes another connection), a worker
    may not yet have known of a release: the fit returned while a row group's copy or
    piece read ran (CI; 10 fits in 40 beside two busy cores).  The task is waited for
    until it arrives, not until it runs: a worker busy with other work does not hold
    the fit's end."""
    deadline = time.monotonic() + (SETTLE_SECONDS if timeout is None else timeout)
    # (worker_addresses' own round trip to the scheduler would order them too: the order
    # is not left to it)
    _after_releases(client)
    try:
        marks = {w: client.submit(_here, pure=False, workers=[w], allow_other_workers=False,
                                  priority=100) for w in worker_addresses(client)}
    except Exception:               # a cluster going away: nothing left to wait for  # noqa: BLE001
        return
    where = {w: future.key for w, future in marks.items()}
    while True:
        try:
            running = client.run(_running, where)
        except Exception:           # a cluster going away: nothing left to wait for  # noqa: BLE001
            return
        if not any(running.values()) or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _here():
    return None


def _running(marks, dask_worker=None):
    """On a worker (``Client.run``): 1 while it has not yet taken its task of ``marks``
    (worker address -> key; nor so the releases sent before it) or runs it, and how many
    of its running tasks were cancelled while they ran."""
    state = dask_worker.state
    mark = marks.get(dask_worker.address)
    behind = mark is not None and getattr(state.tasks.get(mark), "state", None) in (
        None, "executing")
    return int(behind) + sum(1 for ts in state.executing if ts.state == "cancelled")


@dataclass
class _SubmittedRun:
    """A run of batches submitted to be solved in one task (:meth:`Feed.submit_run`)."""

    batches: list
    block: int
    items: list
    fn: object
    args: tuple
    future: object = None
    use: object = None


class Feed:
    """Reads X's chunks ahead of their use and solves batches where their data is.

    * A distributed Client is active and X is a Dask array: each chunk a batch needs is
      computed into a future on a worker ``prefetch`` batches ahead (once, however many
      batches use it: it is released when the last one pending has been solved); each
      piece's solve is submitted to run where its chunk lives, and only its (small)
      result is gathered.
    * Dask without a distributed Client: the chunks are computed by a background thread
      while the current batch is solved in-process.
    * NumPy: the pieces are views of X.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
    pieces : list of list of (start, stop)
        As returned by :func:`make_batches`.
    bounds : sequence of int or None, default=None
        Dask X: the row boundaries of the blocks read (each piece lies in one), e.g. the
        row groups of the default batches (:func:`unit_bounds`), each read as one array
        (its chunks concatenated on the worker that reads it); None: X's chunks.  NumPy
        X is one block whatever ``bounds``.
    checksums : dict or None, default=None
        None: no checksums.  Else the checksums of chunks read before (``"start:stop"``
        -> hex, e.g. from a checkpoint; empty for a new run): every chunk read is
        checked against it and recorded in :attr:`checksums` (see the module's
        docstring).
    since : str, default="it was read before"
        Where the checksums come from, for the message of a mismatch.
    hint : str, default="X must not change while it is fitted."
        What the message of a mismatch advises.
    layout : callable or None, default=None
        Dask X with ``bounds`` (row groups): ``layout(c)(use)``, the order (local rows,
        an int array) in which block ``c`` is kept for ``use`` (e.g. a pass: its batches'
        rows one after the other), or None for the stored order; ``layout(c)`` is sent
        to the worker that reads the block, which draws the order.  The block is put in
        that order where it is read, by the worker that reads it (while another solves),
        so that each batch is a slice of it; a second use of a block still held is
        rearranged from it, not read again.  Rows are still asked for by their stored
        positions (``rows`` of :meth:`solve`, :meth:`submit_run`): the feed finds them.
    prepare : callable or None, default=None
        With ``layout``: ``prepare(block, first_row, n_rows=...)``, run on each block as
        it is read (where it is read) before it is put in order; returns the block to
        keep (e.g. the block itself, its values checked).  With a distributed Client it
        is run on each piece of X's chunks that the block is made of (``first_row`` and
        ``n_rows`` still the block's: what its messages name), and returns the piece to
        keep.
    """

    def __init__(self, X, pieces, checksums=None, since="it was read before",
                 hint="X must not change while it is fitted.", bounds=None, layout=None,
                 prepare=None):
        self.X, self.pieces = X, pieces
        self.checksums = None if checksums is None else dict(checksums)
        self.since, self.hint = since, hint
        self._numpy_checksum = None     # NumPy X: checksummed once per feed
        self.is_dask = not isinstance(X, np.ndarray)
        self.client = active_client() if self.is_dask else None
        self.bounds = (np.array([0, X.shape[0]]) if not self.is_dask
                       else np.cumsum((0,) + tuple(X.chunks[0])) if bounds is None
                       else np.array(bounds, dtype=np.int64))
        self._own_blocks = self.is_dask and bounds is not None
        # blocks kept in a use's order (row groups only): chunks then keyed (c, use)
        self.layout = layout if self._own_blocks else None
        self.prepare = prepare if self.layout is not None else None
        # (use, batch) -> its pieces' chunk keys (wanted, unsolved): chunk indices, or
        # (index, use) with a layout
        self.pending = {}
        # chunk key -> [data or future, pending uses, checksum, checked, laid] (laid:
        # (use,), the data in layout(c)(use)'s order; None: as stored)
        self.chunks = {}
        self._laid = {}            # (block, use) -> its stored rows' positions (_positions)
        self.runs = []             # submitted runs of batches not yet taken
        # held block key -> entries of copies for other uses waiting for its run
        # (:meth:`_rearranged`)
        self._deferred = {}
        # chunk key -> entries of row groups whose reads wait for its run to be taken
        # (_read)
        self._unread = {}
        self._reads = 0            # blocks read so far (their reads' priorities)
        # row groups with a Client (_reader): the worker of the group wanted last, and
        # the worker each group was asked to be read on
        self._last_worker, self._held_on = None, {}
        self._pool = None
        if self.is_dask and self.client is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskrnmf-prefetch")

    def _chunk_of(self, s):
        return int(np.searchsorted(self.bounds, s, side="right") - 1)

    def _key(self, c, use):
        return (c, use) if self.layout is not None else c

    @staticmethod
    def _index(key):
        return key[0] if isinstance(key, tuple) else key

    def _read(self, key):
        """``[data or future, pending uses, checksum (or its future, or None), checked,
        laid]`` of chunk ``key``."""
        if not self.is_dask:
            return [self.X, 0, None, False, None]
        c = self._index(key)
        if self.layout is not None:
            # a block held for another use: put in this order from there, not read again
            for other, entry in self.chunks.items():
                if self._index(other) == c and other != key:
                    return self._rearranged(other, entry, c, key[1])
        if self._own_blocks:        # rows lo:hi as one block, whatever X's chunks
            lo, hi = int(self.bounds[c]), int(self.bounds[c + 1])
            block = self.X[lo:hi].rechunk({0: -1, 1: -1})
        else:
            block = self.X.blocks[c]
        lo = int(self.bounds[c])
        # laid out: (the use whose order the data is in,); None: as stored
        laid = (key[1],) if self.layout is not None else None
        if self.client is not None:
            # below the solves, and each read below the ones wanted before it: the block
            # needed first is read first (by the idle workers), not beside the next ones
            self._reads += 1
            priority = -1 - self._reads
            if laid:
                workers = self._reader(c)
                unread = _Unread(c, key[1], workers, priority, self._reads == 1)
                entry = [unread, 0, None, False, laid]
                # the group wanted first of those still to be solved on its worker
                before = next((k for k in self.chunks if workers is not None
                               and self._held_on.get(self._index(k)) == workers[0]), None)
                if before is not None:
                    # its worker has a group to solve first: the read is submitted when
                    # that group's run is taken (the worker is then free).  Queued there
                    # behind the run, an idle worker took some of its pieces (work
                    # stealing; the preference is loose) and read them for it, or held
                    # one behind its own solve that the group then waited for (0.1-0.3 s
                    # a pass); and a fit's first solve waited for its worker's reads of
                    # the group after (0.1-0.2 s)
                    self._unread.setdefault(before, []).append(entry)
                else:
                    self._submit_read(entry)
                return entry
            data = self.client.compute(block, priority=priority)
            total = (None if self.checksums is None else
                     self.client.submit(chunk_checksum, data, pure=False, priority=priority))
            return [data, 0, total, False, laid]
        import dask

        if laid:
            both = self._pool.submit(_read_arranged, block, self.layout(c), key[1],
                                     self.prepare, lo, self.checksums is not None)
            return [both, 0, "with-data", False, laid]
        if self.checksums is None:
            return [self._pool.submit(lambda: dask.compute(block)[0]), 0, None, False, None]
        both = self._pool.submit(_read_with_checksum, block)
        return [both, 0, "with-data", False, None]

    def _reader(self, c):
        """The worker asked to read row group ``c`` and put it together (a preference,
        not a rule): not the worker of the group wanted just before it (read there, or
        held there for another use), so that consecutive groups of the stream are read
        on different workers, each where it is then solved, while the worker of the
        group before solves that one.  Left to the scheduler, a group's pieces were read
        on every worker and put together on any, two consecutive groups often on one
        worker: the second waited for the first's solve, and its reads queued behind
        it.  None (any worker) while the cluster has one worker.  The workers are asked
        for at every group read (a group's read is seconds of work): workers that join
        (an adaptive cluster, a job queue still starting) take their turns, workers that
        left do not."""
        workers = worker_addresses(self.client)
        if len(workers) < 2:
            return None
        last = self._last_worker
        # the worker after the last one in address order (it left: the first after it)
        i = next((i for i, w in enumerate(workers) if last is not None and w > last), 0)
        self._last_worker = self._held_on[c] = workers[i]
        return [self._last_worker]

    def _submit_read(self, entry):
        """Submit the read of a row group's :class:`_Unread` ``entry``: X's chunks' pieces
        read, then checked and put in order in one copy where the group is put together
        (:func:`_arranged_parts`), on its worker (a preference)."""
        unread = entry[0]
        c, workers, priority = unread.c, unread.workers, unread.priority
        lo, hi = int(self.bounds[c]), int(self.bounds[c + 1])
        edges = np.cumsum((0,) + tuple(self.X.chunks[0]))
        cuts = [lo] + [int(e) for e in edges if lo < e < hi] + [hi]
        where = {} if workers is None else {"workers": workers, "allow_other_workers": True}
        pieces = [self.X[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
        if unread.first and workers is not None:
            # the fit's first group, nothing else read or solved yet: its pieces read by
            # every worker in turn (then moved to the group's worker)
            every = worker_addresses(self.client)
            parts = [self.client.compute(piece, priority=priority,
                                         workers=[every[i % len(every)]],
                                         allow_other_workers=True)
                     for i, piece in enumerate(pieces)]
        else:
            parts = self.client.compute(pieces, priority=priority, **where)
        both = self.client.submit(_arranged_parts, parts, self.layout(c), unread.use,
                                  self.prepare, lo, self.checksums is not None,
                                  pure=False, priority=priority, **where)
        entry[0] = self.client.submit(operator.getitem, both, 0, pure=False,
                                      priority=priority)
        entry[2] = (None if self.checksums is None else self.client.submit(
            operator.getitem, both, 1, pure=False, priority=priority))

    def _rearranged(self, other, entry, c, use):
        """A chunk entry of block ``c`` for ``use``, put in its order from the data a
        held ``entry`` (key ``other``) keeps (where that data is).

        With a distributed Client the copy is made after the run that solves the held
        data, not before it: its worker then makes it while another worker solves the
        next run (a copy taken as soon as it was wanted, read ahead, had run on that
        worker just before the solve, and a pass's first solve and the state passed on at
        a pass's end waited for it, 0.1 s for a row group of 128 MiB).  Until such a run
        is submitted the copy is deferred (:class:`_Relay`); it is made at once if its
        data is asked for first (:meth:`_data`)."""
        held = entry[4][0]
        if self.client is not None:
            # the group wanted next is read on another worker than this one's (_reader)
            self._last_worker = self._held_on.get(c, self._last_worker)
            self._data(entry)           # a deferred copy as the source: made now
            new = [_Relay(entry[0], c, held, use), 0, entry[2], entry[3], (use,)]
            after = [run.future for run in self.runs if run.block == other]
            if after:
                self._submit_relay(new, after[-1])
            else:
                self._deferred.setdefault(other, []).append(new)
            return new
        # after the entry's read: the reader is one thread
        data = self._pool.submit(_relaid_from, entry[0], self.layout(c), held, use,
                                 entry[2] == "with-data")
        return [data, 0, entry[2], entry[3], (use,)]

    def _submit_relay(self, entry, after=None):
        """Submit the deferred copy of a chunk ``entry`` (a :class:`_Relay`), after the
        future ``after`` (the run solving its source) if given."""
        relay = entry[0]
        extra = () if after is None else (after,)
        # below the solves and the states passed between runs: the copy waits for them
        entry[0] = self.client.submit(_relaid, relay.data, self.layout(relay.c), relay.held,
                                      relay.use, *extra, pure=False, priority=5)

    def _positions(self, c, laid):
        """Where each stored row of block ``c`` is in data laid out as ``laid``
        (None: as stored); drawn on the client only when rows are asked for by their
        stored positions."""
        if laid is None:
            return None
        key = (c, laid[0])
        if key not in self._laid:
            order = self.layout(c)(laid[0])
            if len(self._laid) > 8:
                self._laid.clear()
            self._laid[key] = None if order is None else _inverse(np.asarray(order))
        return self._laid[key]

    def _data(self, entry):
        """A chunk entry's data (or future): a reading thread's (data, checksum) is
        unpacked into the entry."""
        if isinstance(entry[0], _Relay):  # a deferred copy, wanted now
            self._submit_relay(entry)
        elif isinstance(entry[0], _Unread):   # a read waiting for a run, wanted now
            self._submit_read(entry)
        data, total = entry[0], entry[2]
        if total == "with-data":          # a thread's (data, checksum)
            data, total = data.result()
            entry[0], entry[2] = data, total
        return data

    def _verify(self, key, total):
        """Check chunk ``key``'s checksum ``total`` (of this read) against the one
        recorded for its rows, and record it."""
        c = self._index(key)
        lo, hi = int(self.bounds[c]), int(self.bounds[c + 1])
        rows = f"{lo}:{hi}"
        old = self.checksums.get(rows)
        if old is not None and old != total:
            raise ValueError(f"X changed since {self.since}: rows {lo}..{hi - 1} differ from "
                             f"the rows read then (their SHA-256). {self.hint}")
        self.checksums[rows] = total
        entry = self.chunks[key]
        entry[2], entry[3] = total, True

    def _local_checksum(self, key):
        """Checksum of chunk ``key`` read in this process (NumPy X: once per feed)."""
        entry = self.chunks[key]
        self._data(entry)
        if entry[2] is not None:
            return entry[2]
        if self._numpy_checksum is None:
            self._numpy_checksum = chunk_checksum(self.X)
        return self._numpy_checksum

    def _where(self, entry, key, s, e, rows):
        """Where a piece's rows (global ``s:e``, or the global ``rows``) are in chunk
        ``key``'s data (``entry``): ``(lo, hi, None)``, a slice, or ``(lo, hi, local)``,
        the local rows to take."""
        base = int(self.bounds[self._index(key)])
        lo, hi = int(s - base), int(e - base)
        local = None if rows is None else np.asarray(rows) - base
        positions = self._positions(self._index(key), entry[4])
        if positions is None:
            return lo, hi, local
        local = positions[lo:hi] if local is None else positions[local]
        if local.size and local[-1] - local[0] == local.size - 1 and (
                local.size < 2 or bool(np.all(np.diff(local) == 1))):
            return int(local[0]), int(local[0]) + local.size, None   # a slice of it
        return lo, hi, local

    def want(self, b, use=None):
        """Start reading the chunks of batch ``b`` for its ``use`` (e.g. the stream's
        pass: a chunk wanted for a use is kept until that use has been solved, so a
        block the next pass starts with is not dropped and read again when this pass's
        last use of it is solved); no-op if it is already on its way for that use."""
        key = (use, b)
        if key in self.pending:
            return
        cs = [self._key(self._chunk_of(s), use) for s, _ in self.pieces[b]]
        for c in cs:
            if c not in self.chunks:
                self.chunks[c] = self._read(c)
            self.chunks[c][1] += 1
        self.pending[key] = cs

    def _release(self, key):
        for c in self.pending.pop(key):
            entry = self.chunks[c]
            entry[1] -= 1
            if entry[1] == 0:
                del self.chunks[c]

    def _run(self, b, fn, args, rows=None, use=None):
        self.want(b, use)
        # chunks read whose checksum is still to be checked (once per read)
        unchecked = ([] if self.checksums is None else
                     list(dict.fromkeys(c for c in self.pending[use, b]
                                        if not self.chunks[c][3])))
        if self.client is None:
            for c in unchecked:         # before the solve: the data is here
                self._verify(c, self._local_checksum(c))
        items = []
        for (s, e), c in zip(self.pieces[b], self.pending[use, b]):
            entry = self.chunks[c]
            lo, hi, local = self._where(entry, c, s, e, rows)
            items.append((self._data(entry), lo, hi, s, local))
        if self.client is not None:
            futures = [self.client.submit(_on_piece, f, lo, hi, s, fn, *args, rows=local,
                                          pure=False, priority=10)
                       for f, lo, hi, s, local in items]
            # the workers' checksums (computed as the chunks were read) are checked
            # before the results are used: with the results (no round trip of their
            # own), or, where a prepared block may carry a failure to raise (a
            # layout), before it (see take_run)
            totals = [self.chunks[c][2] for c in unchecked]
            if self.layout is None:
                parts, totals = self.client.gather([futures, totals])
            else:
                totals, parts = self.client.gather(totals), None
            for c, total in zip(unchecked, totals):
                self._verify(c, total)
            return self.client.gather(futures) if parts is None else parts
        if self._pool is not None:
            return [_on_piece(f.result() if hasattr(f, "result") else f, lo, hi, s, fn, *args,
                              rows=local)
                    for f, lo, hi, s, local in items]
        return [_on_piece(f, lo, hi, s, fn, *args, rows=local) for f, lo, hi, s, local in items]

    def mean(self, b, use=None):
        """Mean entry of batch ``b`` (its data stays where it is, and stays read)."""
        sums = self._run(b, piece_sum, (), use=use)
        return sum(s for s, _ in sums) / max(1, sum(c for _, c in sums))

    def solve(self, b, fn, combine, *args, rows=None, use=None):
        """``combine`` of ``fn(piece, start, *args)`` over batch ``b``'s pieces (in row
        order, tree-reduced), each run where the piece lives; the batch is consumed (for
        its ``use``, see :meth:`want`).  ``rows``: the batch's global rows (from
        :func:`batch_rows`; one piece) instead of its range."""
        parts = self._run(b, fn, args, rows, use)
        self._release((use, b))
        return tree_reduce(parts, combine, 8)

    def submit_run(self, bs, fn, *args, rows=None, use=None, laid_out=False):
        """``fn(pieces, *args)`` for the batches ``bs`` in one task, run where their block
        lives (each batch one piece, all in one block: the default batches of one row
        group); ``pieces`` iterates over (batch, first row) in the order of ``bs``.
        ``rows``: per batch, its global rows (:func:`batch_rows`) or None for its range;
        ``laid_out``: instead, each batch is the rows the ``layout`` put at its range
        (the batches' own rows, told by the layout, not computed again here).
        Submitted, not waited for: returns its handle for :meth:`take_run` (its result;
        the batches are then consumed; ``.future``, with a Client).  With a distributed
        Client the task is queued on the worker that holds the batches' block, and
        ``args`` may hold futures (e.g. the run before's, from whose results it starts:
        the runs are then solved one after the other on the workers, with no round trip
        to the client between them); otherwise it runs in :meth:`take_run`."""
        for b in bs:
            self.want(b, use)
        cs = {c for b in bs for c in self.pending[use, b]}
        if len(cs) != 1 or any(len(self.pieces[b]) != 1 for b in bs):
            raise ValueError("submit_run takes batches of one piece each, in one block.")
        c = cs.pop()
        entry = self.chunks[c]
        items = []
        for i, b in enumerate(bs):
            (s, e), = self.pieces[b]
            if laid_out and entry[4] is not None:       # a slice of the block kept
                base = int(self.bounds[self._index(c)])
                lo, hi, local = s - base, e - base, None
            else:
                lo, hi, local = self._where(entry, c, s, e,
                                            None if rows is None else rows[i])
            items.append((lo, hi, s, local))
        future = None
        if self.client is not None:
            # where its group was asked to be read (_reader), a preference: the
            # scheduler had moved a solve to the worker that had just solved the group
            # before (idle, where the group's worker was reading the next one), and the
            # group with it (128 MiB, 0.1 s)
            held = self._held_on.get(self._index(c))
            where = {} if held is None else {"workers": [held], "allow_other_workers": True}
            future = self.client.submit(_on_pieces, self._data(entry), items, fn, *args,
                                        pure=False, priority=10, **where)
            # copies of this block for later uses, deferred until now: after this run
            for relay in self._deferred.pop(c, []):
                if isinstance(relay[0], _Relay) and any(
                        e is relay for e in self.chunks.values()):
                    self._submit_relay(relay, future)
        run = _SubmittedRun(list(bs), c, items, fn, args, future, use)
        self.runs.append(run)
        return run

    def take_run(self, run):
        """The result of the submitted ``run`` (waiting for it); its batches are consumed
        and its block's checksum checked."""
        c, entry = run.block, self.chunks[run.block]
        unchecked = [] if self.checksums is None or entry[3] else [c]
        if run.future is not None:
            # the block's checksum (computed where it was read) checked before its result
            # is used, or its failure raised: a resumed fit's X that changed since its
            # checkpoint is named so, not by what its values now fail
            for total in self.client.gather([entry[2] for _ in unchecked]):
                self._verify(c, total)
            out = self.client.gather(run.future)
        else:
            for c_ in unchecked:
                self._verify(c_, self._local_checksum(c_))
            data = self._data(entry)
            out = _on_pieces(data.result() if hasattr(data, "result") else data, run.items,
                             run.fn, *run.args)
        self.runs.remove(run)
        for entry in self._unread.pop(run.block, []):   # its worker is free: read now
            if isinstance(entry[0], _Unread):
                self._submit_read(entry)
        for b in run.batches:
            self._release((run.use, b))
        return out

    def close(self, cancel=()):
        """Cancel the runs submitted and never taken (and the futures ``cancel``), release
        the chunks read ahead, wait until the workers run none of them, and stop the
        reader thread.

        The runs go first (a queued run's argument, the run before's future, is
        released with it); the chunks are then released (their futures dropped), not
        cancelled: a chunk a queued run still depends on, cancelled while no client wants that run,
        fails an assertion in the scheduler that cancels every future of the user's
        Client (distributed 2026.7).  A task already running when it is cancelled goes on
        running on its worker (a run stops at its next batch, :func:`_on_pieces`): the
        fit returns once none does (:func:`_settle`), so that a cluster closed right
        after it interrupts nothing (distributed then logged a WARNING, "Async
        instruction ... ended with CancelledError", at the end of a user's script)."""
        # a read, a copy or a run of it may still run (none: a partial_fit's batch)
        busy = bool(self.runs or self.chunks or self._unread or self._deferred or cancel)
        if self.client is not None:
            for run in self.runs:       # submitted, never taken (the fit stopped)
                run.future.cancel()
            for future in cancel:
                future.cancel()
        self.runs.clear()
        self._deferred.clear()
        self._unread.clear()
        self.pending.clear()
        self.chunks.clear()
        if self.client is not None and busy:
            _settle(self.client)        # the tasks cancelled or released here
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
