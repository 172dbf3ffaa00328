"""X as a stream of batches for the online models: batch bounds, seeded visiting orders,
and a feed that reads X's chunks ahead of their use and solves each batch where its data
lives.

Nothing here knows a model's maths: the feed runs whatever ``solve(piece, start, *args)``
the model gives it and sums the pieces' partial results with the model's ``combine``.

**The default batches** (``batch_size=None``) adapt to the data (:func:`make_batches`):

* the target is ``ceil(n_samples / UPDATES_PER_PASS)`` rows, so that even a small X gives
  :data:`UPDATES_PER_PASS` dictionary updates per pass, and at most
  :data:`MAX_BATCH_BYTES` (as float64) so that a large X gives large, GEMM-friendly
  batches of bounded memory (for 256 features: 262,144 rows);
* for Dask/Zarr input a batch is made of X's chunks: consecutive chunks up to the target
  (their pieces are solved in parallel on the workers that hold them); a chunk larger
  than the target is cut into sub-batches, solved one after the other from one read of
  the chunk.  The default batches therefore depend on X's chunks (not on the workers).
* Batches of the same chunk group form a *unit*: a pass visits the units in a seeded
  random order and the batches of a unit consecutively, so every chunk is read once per
  pass.  The sub-batches of a unit take its rows in a random order drawn anew at every
  pass (:func:`batch_rows`): data stored sorted (by class, by time) does not give
  batches of one kind.

A ``batch_size`` set by the user is taken exactly: batches of that many rows, visited in
a seeded random order of their own, which does not depend on the chunking (a chunk may
then be read once per batch that needs it).

**Chunk checksums** (``Feed(..., checksums=...)``, for checkpointed fits): the feed
records a SHA-256 of every chunk it reads (computed where the chunk is read, as it is
read: no pass of its own) under the chunk's row range, and a chunk read again whose
checksum differs from the one recorded is a ValueError.  A fit resumed from a
checkpoint gives the feed the checksums recorded before it stopped, so X changed
anywhere in the rows the first run read is refused when they are read again, not mixed
with the rows read before.  NumPy X is one chunk, checksummed once per feed.
"""

import math

import numpy as np

from ._blocks import active_client, tree_reduce
from ._stores import digest
from .kernels.blocks import as_float_block

UPDATES_PER_PASS = 8        # default batches: at least this many W updates per pass
MAX_BATCH_BYTES = 2 ** 29    # default batches: at most this many bytes (as float64)


def make_batches(X, batch_size):
    """Row ranges of the batches, of each batch's pieces, and the units of the order.

    Parameters
    ----------
    X : ndarray or dask.array.Array of shape (n_samples, n_features)
    batch_size : int or None
        Rows per batch; None chooses them (see the module's docstring).

    Returns
    -------
    batches : list of (start, stop)
    pieces : list of list of (start, stop)
        Each batch cut at X's chunk boundaries (its pieces are solved in parallel).
    units : list of list of int
        Batches visited consecutively (a chunk group); one unit per batch when
        ``batch_size`` is given.
    """
    n = X.shape[0]
    bounds = (np.array([0, n]) if isinstance(X, np.ndarray)
              else np.cumsum((0,) + tuple(X.chunks[0])))
    bounds = [int(b) for b in bounds]
    if batch_size is not None:
        edges = list(range(0, n, batch_size)) + [n]
        batches = list(zip(edges[:-1], edges[1:]))
        units = [[b] for b in range(len(batches))]
    else:
        target = max(1, min(math.ceil(n / UPDATES_PER_PASS),
                            MAX_BATCH_BYTES // (8 * max(1, X.shape[1]))))
        batches, units = [], []
        c = 0
        n_chunks = len(bounds) - 1
        while c < n_chunks:
            lo = bounds[c]
            size = bounds[c + 1] - lo
            if size > target:                      # sub-batches of one chunk
                parts = math.ceil(size / target)
                cuts = [lo + (size * i) // parts for i in range(parts + 1)]
                c += 1
            else:                                  # a group of consecutive chunks
                g = c + 1
                while g < n_chunks and bounds[g + 1] - lo <= target:
                    g += 1
                cuts = [lo, bounds[g]]
                c = g
            first = len(batches)
            batches += list(zip(cuts[:-1], cuts[1:]))
            units.append(list(range(first, len(batches))))
    batches = [(int(a), int(b)) for a, b in batches if b > a]
    pieces = []
    for a, b in batches:
        cuts = [c for c in bounds if a < c < b]
        pts = [a] + cuts + [b]
        pieces.append(list(zip(pts[:-1], pts[1:])))
    return batches, pieces, units


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

    A batch that shares its unit (a chunk, or a NumPy X, cut into sub-batches) takes the
    rows of its slot in a seeded random permutation of the unit's rows (sorted, for
    locality); the sub-batches of a unit still cover its rows exactly once per pass."""
    unit = next((u for u in units if u[0] <= b <= u[-1]), None)
    if unit is None or len(unit) < 2:
        return None
    lo, hi = batches[unit[0]][0], batches[unit[-1]][1]
    u = units.index(unit)
    perm = np.random.default_rng([seed, pass_index, u, 7]).permutation(hi - lo)
    a, z = batches[b][0] - lo, batches[b][1] - lo
    return np.sort(perm[a:z]) + lo


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


def _on_piece(chunk, lo, hi, start, fn, *args, rows=None):
    """``fn`` on rows ``lo:hi`` (or the local ``rows``) of a chunk read once (run where
    the chunk lives)."""
    return fn(chunk[lo:hi] if rows is None else chunk[rows], start, *args)


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
    checksums : dict or None, default=None
        None: no checksums.  Else the checksums of chunks read before (``"start:stop"``
        -> hex, e.g. from a checkpoint; empty for a new run): every chunk read is
        checked against it and recorded in :attr:`checksums` (see the module's
        docstring).
    since : str, default="it was read before"
        Where the checksums come from, for the message of a mismatch.
    hint : str, default="X must not change while it is fitted."
        What the message of a mismatch advises.
    """

    def __init__(self, X, pieces, checksums=None, since="it was read before",
                 hint="X must not change while it is fitted."):
        self.X, self.pieces = X, pieces
        self.checksums = None if checksums is None else dict(checksums)
        self.since, self.hint = since, hint
        self._numpy_checksum = None     # NumPy X: checksummed once per feed
        self.is_dask = not isinstance(X, np.ndarray)
        self.client = active_client() if self.is_dask else None
        self.bounds = (np.array([0, X.shape[0]]) if not self.is_dask
                       else np.cumsum((0,) + tuple(X.chunks[0])))
        self.pending = {}          # batch -> its pieces' chunk indices (wanted, unsolved)
        self.chunks = {}           # chunk index -> [data or future, pending uses]
        self._pool = None
        if self.is_dask and self.client is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskrnmf-prefetch")

    def _chunk_of(self, s):
        return int(np.searchsorted(self.bounds, s, side="right") - 1)

    def _read(self, c):
        """``[data or future, pending uses, checksum (or its future, or None),
        checked]``."""
        if not self.is_dask:
            return [self.X, 0, None, False]
        block = self.X.blocks[c]
        if self.client is not None:
            data = self.client.compute(block, priority=-1)
            total = (None if self.checksums is None else
                     self.client.submit(chunk_checksum, data, pure=False, priority=-1))
            return [data, 0, total, False]
        import dask

        if self.checksums is None:
            return [self._pool.submit(lambda: dask.compute(block)[0]), 0, None, False]
        both = self._pool.submit(_read_with_checksum, block)
        return [both, 0, "with-data", False]

    def _data(self, entry):
        """A chunk entry's data (or future): a reading thread's (data, checksum) is
        unpacked into the entry."""
        data, total = entry[0], entry[2]
        if total == "with-data":          # a thread's (data, checksum)
            data, total = data.result()
            entry[0], entry[2] = data, total
        return data

    def _verify(self, c, total):
        """Check chunk ``c``'s checksum ``total`` (of this read) against the one recorded
        for its rows, and record it."""
        lo, hi = int(self.bounds[c]), int(self.bounds[c + 1])
        key = f"{lo}:{hi}"
        old = self.checksums.get(key)
        if old is not None and old != total:
            raise ValueError(f"X changed since {self.since}: rows {lo}..{hi - 1} differ from "
                             f"the rows read then (their SHA-256). {self.hint}")
        self.checksums[key] = total
        entry = self.chunks[c]
        entry[2], entry[3] = total, True

    def _local_checksum(self, c):
        """Checksum of chunk ``c`` read in this process (NumPy X: once per feed)."""
        entry = self.chunks[c]
        self._data(entry)
        if entry[2] is not None:
            return entry[2]
        if self._numpy_checksum is None:
            self._numpy_checksum = chunk_checksum(self.X)
        return self._numpy_checksum

    def want(self, b):
        """Start reading the chunks of batch ``b`` (no-op if it is already on its way)."""
        if b in self.pending:
            return
        cs = [self._chunk_of(s) for s, _ in self.pieces[b]]
        for c in cs:
            if c not in self.chunks:
                self.chunks[c] = self._read(c)
            self.chunks[c][1] += 1
        self.pending[b] = cs

    def _release(self, b):
        for c in self.pending.pop(b):
            entry = self.chunks[c]
            entry[1] -= 1
            if entry[1] == 0:
                del self.chunks[c]

    def _run(self, b, fn, args, rows=None):
        self.want(b)
        # chunks read whose checksum is still to be checked (once per read)
        unchecked = ([] if self.checksums is None else
                     list(dict.fromkeys(c for c in self.pending[b] if not self.chunks[c][3])))
        if self.client is None:
            for c in unchecked:         # before the solve: the data is here
                self._verify(c, self._local_checksum(c))
        items = []
        for (s, e), c in zip(self.pieces[b], self.pending[b]):
            lo = int(s - self.bounds[c])
            local = None if rows is None else rows - int(self.bounds[c])
            items.append((self._data(self.chunks[c]), lo, lo + (e - s), s, local))
        if self.client is not None:
            futures = [self.client.submit(_on_piece, f, lo, hi, s, fn, *args, rows=local,
                                          pure=False, priority=10)
                       for f, lo, hi, s, local in items]
            # the workers' checksums come with the pieces' results, and are checked
            # before the results are used (no round trip of their own)
            parts, totals = self.client.gather([futures, [self.chunks[c][2] for c in unchecked]])
            for c, total in zip(unchecked, totals):
                self._verify(c, total)
            return parts
        if self._pool is not None:
            return [_on_piece(f.result() if hasattr(f, "result") else f, lo, hi, s, fn, *args,
                              rows=local)
                    for f, lo, hi, s, local in items]
        return [_on_piece(f, lo, hi, s, fn, *args, rows=local) for f, lo, hi, s, local in items]

    def mean(self, b):
        """Mean entry of batch ``b`` (its data stays where it is, and stays read)."""
        sums = self._run(b, piece_sum, ())
        return sum(s for s, _ in sums) / max(1, sum(c for _, c in sums))

    def solve(self, b, fn, combine, *args, rows=None):
        """``combine`` of ``fn(piece, start, *args)`` over batch ``b``'s pieces (in row
        order, tree-reduced), each run where the piece lives; the batch is consumed.
        ``rows``: the batch's global rows (from :func:`batch_rows`; one piece) instead of
        its range."""
        parts = self._run(b, fn, args, rows)
        self._release(b)
        return tree_reduce(parts, combine, 8)

    def close(self):
        """Cancel the chunks read ahead and stop the reader thread."""
        if self.client is not None:
            for data, _, total, _ in self.chunks.values():
                data.cancel()
                if total is not None and not isinstance(total, str):
                    total.cancel()
        self.pending.clear()
        self.chunks.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
