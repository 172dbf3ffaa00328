"""ONMFO's stream on the client: the fit-state object the driver steps (:class:`_Stream`,
one step per batch, the row groups' solves queued on the workers), the run's state
(:class:`_Run`: W, the statistics, the position) and the functions its tasks run
(:func:`solve_batches_sent`, :func:`stream_step`).  The estimator is
:mod:`daskrnmf.models.onmfo`; the batches, orders and read-ahead :mod:`daskrnmf._stream`;
the per-batch solve :mod:`daskrnmf.models._outliers`.
"""

import dataclasses
import functools
import numbers

import numpy as np

from .._stream import (RUN_STATE_BYTES, _unit_permutation, batch_order, batch_rows,
                       group_rest, process_threads, read_ahead, upcoming)
from .._blocks import worker_addresses
from ._outliers import (checked_block, feature_max, initial_components,
                        piece_feature_max, solve_batches, take_batch)

#: a task's priority below every read's and solve's (:meth:`_Stream.warm`)
IDLE_PRIORITY = -2 ** 30


class _Stream:
    """ONMFO's fit-state object: X's batches, their order and the step the driver makes
    per batch; ``alpha_R_`` and the chunk checksums of X's blocks read so far
    (``checkpoint_attributes``) are saved with the :class:`_Run`."""

    checkpoint_attributes = ("alpha_R_", "chunk_sha256")

    def __init__(self, model, feed, batches, units, seed):
        self.model, self.feed, self.batches, self.units, self.seed = (model, feed, batches,
                                                                      units, seed)
        self.nb = len(batches)
        self.n_passes = 0           # complete passes (the driver's count)
        self.orders = {}
        # default batches: the next ``prefetch`` row groups are read ahead (a group is
        # many batches); else the next ``prefetch`` batches
        self.unit_of = {b: u for u, unit in enumerate(units) for b in unit}
        self.span = max(len(u) for u in units) if model.batch_size is None else 1
        self.solved = {}    # (pass, position) -> a batch's figures and the state after it
        # ((pass, position), the submitted run of batches from there): the next run of
        # default batches, queued on the workers behind the one being solved
        self.queued = None
        # default batches of more than one row group: the first pass's second group's
        # first batch, where the statistics start again (:meth:`restarts`)
        self.restart = None
        if model.batch_size is None and len(units) > 1:
            self.restart = len(group_rest(self.order(0), 0, self.unit_of))
        self.ahead_from = None      # the (pass, position) read ahead from last
        self.warming = None         # the workers' loading of the solve (:meth:`warm`)

    @property
    def alpha_R_(self):
        return getattr(self.model, "alpha_R_", None)

    @alpha_R_.setter
    def alpha_R_(self, value):
        self.model.alpha_R_ = value

    @property
    def chunk_sha256(self):
        return dict(self.feed.checksums or {})

    @chunk_sha256.setter
    def chunk_sha256(self, sums):
        if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in sums.items()):
            raise ValueError("its chunk checksums are not a mapping of row ranges to "
                             "checksums")
        self.feed.checksums = dict(sums)

    def order(self, p):
        if p not in self.orders:
            self.orders[p] = batch_order(self.seed, p, self.units, self.model.shuffle)
        return self.orders[p]

    def restarts(self, p, j):
        """Whether A, B, C start again from zero before batch ``j`` of pass ``p``
        (``reset_statistics``): at each pass after the first, and in the first where its
        second row group starts (default batches of an X of more than one group).  The
        codes of the first group were found with a W that started at random, and summed
        in they keep W behind the data for the rest of the pass: on 4M x 64 planted rows
        (8 groups, 984 batches a pass) the rows' (h, r) solves took 2.12 rounds on
        average in the first pass and 1.77 in the later ones; starting again after the
        first group, 1.87 in the first pass (1.78-1.85 from its second group on), the first
        pass's objective 6.553 against 6.560 and the later passes' the same; on 500,000 x
        256 rows the first pass's objective 31.8 -> 28.6, and the fit stops a pass sooner
        (``benchmarks/results/onmfo_pass.md``, ``onmfo_planted.md``).  Where X is one
        group (up to 524,288 rows at 64 features) nothing changes."""
        if not self.model.reset_statistics:
            return False
        return p > 0 if j == 0 else (p == 0 and j == self.restart)

    def check_restored(self, run):
        """A resumed run's state is one this stream can continue (see
        :meth:`daskrnmf._resume.RunCheckpoint.restore`)."""
        k, d = self.model.n_components, self.feed.X.shape[1]
        shapes = {"W": (k, d), "A": (k, d), "B": (k, k), "C": (k, d), "Bm": (d, k, k)}
        for name, shape in shapes.items():
            M = getattr(run, name)
            if name == "Bm" and M is None:
                continue
            if not isinstance(M, np.ndarray) or M.shape != shape:
                raise ValueError(f"{name} {getattr(M, 'shape', M)} (expected {shape}).")
            if not np.isfinite(M).all():
                raise ValueError(f"{name} holds NaN or infinite values.")
        p, pos, steps, nb = run.pass_, run.pos, run.n_steps, self.nb
        if not all(isinstance(i, int) for i in (p, pos, steps)) or not (
                0 <= pos < nb and p >= 0 and steps == p * nb + pos
                and len(run.history) == p):
            raise ValueError(f"its position (pass {p}, batch {pos}, {steps} steps) is not a "
                             f"position of a stream of {nb} batches per pass.")
        # its counts and sums (a damaged one is named here, not a TypeError mid-stream)
        for name in ("n_seen", "pass_n", "inner_rounds", "inner_n", "n_stat", "n_observed"):
            value = getattr(run, name)
            if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                    or value < 0 or (name == "n_stat" and value > steps)):
                raise ValueError(f"its count {name} {value!r} is not one of a stream after "
                                 f"{steps} steps.")
        if not isinstance(run.history_se, list) or len(run.history_se) > len(run.history):
            raise ValueError(f"its pass errors {run.history_se!r} are not one a pass.")
        # an older checkpoint has none: unknown (the three-pass rule for its passes)
        run.history_se = ([np.nan] * (len(run.history) - len(run.history_se))
                          + list(run.history_se))
        for value in run.history_se:
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not (np.isnan(value) or 0 <= value < np.inf)):
                raise ValueError(f"its pass error {value!r} is not a number >= 0 or NaN.")
        if run.half is not None and not (
                isinstance(run.half, list) and len(run.half) == 3
                and isinstance(run.half[0], numbers.Integral) and run.half[0] >= 0
                and all(isinstance(x, numbers.Real) and np.isfinite(x) for x in run.half)):
            raise ValueError(f"its batch losses' sums {run.half!r} are not three numbers.")
        for name, value in [("loss_sum", run.loss_sum)] + [("history", h) for h in run.history]:
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not np.isfinite(value)):
                raise ValueError(f"its {name} holds {value!r}, not a finite number.")
        if not isinstance(run.last, dict):
            raise ValueError(f"its last batch's report {run.last!r} is not a mapping.")
        a = self.alpha_R_
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not a > 0 or a == np.inf:
            raise ValueError(f"its alpha_R_ {a!r} is not a positive number.")
        if not isinstance(self.model.alpha_R, str) and a != float(self.model.alpha_R):
            # a float alpha_R is the parameter (fingerprinted): the saved one is a copy
            raise ValueError(f"its alpha_R_ {a!r} is not the parameter alpha_R="
                             f"{self.model.alpha_R!r}.")

    def warm(self):
        """With a distributed Client, each worker loads the compiled solve and W's update
        (:func:`warm_solve`) when it has nothing else to run: a fresh worker's first
        solve had loaded them itself, 0.2-0.3 s on the path of every batch after it,
        while it waited for the rows of its first group or the state of the run before.
        Submitted after the first reads, below every read and solve."""
        self.warming = []
        client = self.feed.client
        if client is None:
            return
        m, X = self.model, self.feed.X
        # alpha_R, not known before the first batch, is 1: its value loads nothing else
        spec = dataclasses.replace(m._spec(alpha_R=1.0), checked=self.feed.prepare is not None)
        self.warming = [client.submit(warm_solve, spec, m._update_spec(), m.n_components,
                                      X.shape[1], X.dtype, workers=[w],
                                      allow_other_workers=False, pure=False,
                                      priority=IDLE_PRIORITY)
                        for w in worker_addresses(client)]

    def close(self):
        """Close the feed (:meth:`~daskrnmf._stream.Feed.close`), cancelling with its runs
        the loading of the solve on workers that have not run it (:meth:`warm`)."""
        warming, self.warming = self.warming or [], None
        self.feed.close(cancel=warming)

    def submit_run(self, p, j, state, reset=None):
        """Submit the task of default batches from position ``j`` of pass ``p`` to the
        end of their row group (at most as many as bound the states it returns), from
        ``state`` (a dict, or the future of the run before's results: the state after
        them, ``reset`` as :func:`state_after`'s); returns its handle."""
        m = self.model
        k, d = m.n_components, self.feed.X.shape[1]     # the states a task returns: bounded
        size = 8 * (3 * k * d + k * k + (d * k * k if m._allow_nan else 0))
        group = group_rest(self.order(p), j, self.unit_of, RUN_STATE_BYTES // size)
        spec, laid_out = m._spec(), self.feed.layout is not None
        if self.feed.prepare is not None:       # its block was checked where it was read
            spec = dataclasses.replace(spec, checked=True)
        # the block in this pass's batch order (GroupLayout): each batch the slice of
        # its range; else each batch's rows
        rows = None if laid_out else [
            batch_rows(self.seed, p, self.units, self.batches, c) if m.shuffle else None
            for c in group]
        return self.feed.submit_run(group, solve_batches_sent, state, spec,
                                    m._update_spec(), reset, rows=rows, use=p,
                                    laid_out=laid_out)

    def step(self, run, active):
        """One batch: its codes and outliers solved where it is read, its statistics
        added, W updated (:func:`stream_step`)."""
        m, feed, seed, nb = self.model, self.feed, self.seed, self.nb
        p, j = run.pass_, run.pos
        if j == 0:
            run.loss_sum, run.pass_n = 0.0, 0
            run.half = [0, 0.0, 0.0]
            run.inner_rounds, run.inner_n = 0, 0
        if self.restarts(p, j):
            run.A[:], run.B[:], run.C[:] = 0.0, 0.0, 0.0
            run.Bm = None
            run.n_stat = 0
        # read ahead from the first batch not yet solved: the batches a task has solved
        # were consumed from the feed (wanting them again would read their group again
        # and keep it, never consumed, on a worker)
        skip = 0
        while (p, j + skip) in self.solved:
            skip += 1
        if (p, j + skip) != self.ahead_from:
            # (the batches of a run taken from a task all read ahead from the same
            # first batch not yet solved: once, not once a batch)
            self.ahead_from = (p, j + skip)
            ahead = upcoming(self.order, nb, m.max_iter, p, j + skip,
                             1 + m.prefetch * self.span)
            for q, c in read_ahead(ahead, self.unit_of, m.prefetch):
                feed.want(c, q)
            if self.warming is None:
                self.warm()
        b = int(self.order(p)[j])
        if run.n_observed == 0:
            # the stream's start, or every batch so far was all missing (W started from
            # a 'mean' of nothing): W and alpha_R="auto" from this batch
            if run.n_steps == 0 or isinstance(m.alpha_R, str):
                self.alpha_R_ = m._fit_alpha(lambda: feature_max(
                    feed._run(b, piece_feature_max, (), use=p)))
            run.W = initial_components(seed, m.n_components, feed.X.shape[1],
                                       feed.mean(b, use=p))
        if m.batch_size is None:
            # default batches: the rest of b's row group in one task where it is read
            # (solve, statistics, W per batch: _outliers.solve_batches); its batches'
            # results are then taken one a step, so the driver, the callback and the
            # checkpoints still see every batch
            if (p, j) not in self.solved:
                if self.queued is not None and self.queued[0] == (p, j):
                    task = self.queued[1]       # submitted behind the run before
                else:
                    task = self.submit_run(p, j, run.state())
                self.queued = None
                if feed.client is not None and m.prefetch and (run.n_observed > 0
                                                               or not m._allow_nan):
                    # the pass's next run queued behind this one, from the state after
                    # it, on the workers: no round trip between the two (the result of
                    # this one then comes while the next is solved; its group is one of
                    # those read ahead).  Not while W may still start from a later
                    # batch: a run of all-missing batches ends early (solve_batches)
                    # It is given this one's future and takes its start from its
                    # results itself (:func:`solve_batches_sent`): a task of its own
                    # for the state (where this one ran) waited there behind the read
                    # that worker started next, 0.03-0.06 s a group
                    nxt = j + len(task.batches)
                    if nxt < nb:
                        self.queued = ((p, nxt), self.submit_run(
                            p, nxt, task.future, reset=self.restarts(p, nxt)))
                    elif p + 1 < m.max_iter:
                        # the next pass's first run, from the state that pass starts
                        # with (the driver may stop at this pass's end: it is cancelled)
                        self.queued = ((p + 1, 0), self.submit_run(
                            p + 1, 0, task.future, reset=self.restarts(p + 1, 0)))
                done = feed.take_run(task)
                self.solved.clear()
                self.solved.update(((p, j + i), r) for i, r in enumerate(done))
            st, state = self.solved.pop((p, j))
            run.set_state(state)
        else:
            st = m._solve_batch(feed, b, run.W, use=p)
            stream_step(run, st, m._update_spec())
        run.inner_rounds += st["rounds"]
        run.inner_n += st["n"]
        if j >= nb // 2:        # the pass's objective: its second half of batches
            run.loss_sum += st["loss"]
            run.pass_n += st["n"]
            if run.half is not None and st["n"]:    # the spread of its batches' losses
                loss = float(st["loss"]) / st["n"]
                run.half = [run.half[0] + 1, run.half[1] + loss, run.half[2] + loss * loss]
        run.n_seen += st["n"]
        run.n_steps += 1
        run.pos += 1
        run.last = {"pass": p, "batch": j, "n_batches": nb, "n_samples_seen": run.n_seen,
                    "loss": st["loss"] / max(st["n"], 1),
                    "inner_rounds": st["rounds"] / max(st["n"], 1)}
        if run.pos == nb:
            if run.n_observed == 0:
                # found in the pass that reads X anyway (a lazy X is not read before)
                raise ValueError(f"X passed to {m._name} has no observed (non-NaN) value.")
            run.history.append(run.loss_sum / max(run.pass_n, 1))
            run.history_se.append(pass_error(run.half))
            run.pass_, run.pos = p + 1, 0
        self.n_passes = run.pass_
        return run, np.array([run.last["loss"]])


class GroupLayout:
    """The default batches' row groups as a pass uses them (a :class:`~daskrnmf._stream.Feed`'s
    ``layout``): ``layout(c)`` is group ``c``'s :class:`GroupOrder`, which the worker
    reading the group calls for a pass (sent with the group's read: its size is the
    group's batch count, whatever n_samples)."""

    def __init__(self, seed, units, batches, shuffle):
        self.seed, self.units, self.batches, self.shuffle = seed, units, batches, shuffle

    def __call__(self, c):
        unit = self.units[c]
        lo = self.batches[unit[0]][0]
        slots = [(self.batches[b][0] - lo, self.batches[b][1] - lo) for b in unit]
        return GroupOrder(self.seed, c, slots, self.shuffle)


class GroupOrder:
    """Group ``c``'s rows in pass ``p``'s order (``order(p)``, local rows): its batches'
    rows one batch after the other, each batch's those of
    :func:`~daskrnmf._stream.batch_rows` (its slot of the group's permutation, sorted),
    so that a batch is a slice of the group (no copy of its rows when it is solved: the
    group is put in order once, by the worker that read it).  None for a group of one
    batch or without ``shuffle`` (the stored order is the batches' order)."""

    def __init__(self, seed, c, slots, shuffle):
        self.seed, self.c, self.slots, self.shuffle = seed, c, slots, shuffle

    def __call__(self, p):
        if not self.shuffle or len(self.slots) < 2:
            return None
        perm = _unit_permutation(self.seed, p, self.c, self.slots[-1][1])
        return np.concatenate([np.sort(perm[a:z]) for a, z in self.slots])


def group_prepare(where, missing):
    """A :class:`~daskrnmf._stream.Feed`'s ``prepare`` for ONMFO's row groups: each block
    checked where it is read (:func:`~daskrnmf.models._outliers.checked_block`) and
    kept in its stored dtype, so the solve of its batches, one after another on one
    worker, does not check them; each batch still takes its own work dtype there (a
    float32 batch with values above 1e15 is solved in float64, as in any solve)."""
    return functools.partial(checked_block, where=where, missing=missing, convert=False)


#: Fewest batches whose losses' spread estimates a pass objective's error (:func:`pass_error`)
ERROR_BATCHES = 16


def pass_error(half):
    """The relative standard error of a pass objective from its second half's batches
    (``half``: their count, and the sum and sum of squares of their per-sample losses):
    ``sd / sqrt(count) / mean``; NaN when unknown (None) or from fewer than
    :data:`ERROR_BATCHES` batches, whose spread says little (the driver's three-pass
    rule then, :func:`daskrnmf._driver.passes_converged`).  A W still improving in the
    half spreads the losses too, so a small error also says the pass was flat."""
    if half is None or half[0] < ERROR_BATCHES:
        return float("nan")
    m, total, squares = half
    mean = total / m
    var = max(squares - m * mean * mean, 0.0) / (m - 1)
    return float(np.sqrt(var / m) / mean) if mean > 0 else float("nan")


def solve_batches_sent(pieces, state, spec, upd, reset=None):
    """:func:`~daskrnmf.models._outliers.solve_batches` from a ``state`` sent to this
    worker by the client, or from the results of the run before (a list: its
    :func:`state_after`, ``reset`` as there) sent by its worker, the arrays copied first:
    an array unpickled from a message may lie at any byte offset (a float64 W at an
    offset of 4 bytes was seen), where the compiled solves round otherwise; copies are
    allocated as any array is, so the same batches give the same bits wherever the run
    before was solved.  Each batch is solved with the threads this process may use
    (:func:`daskrnmf._stream.process_threads`: a worker's own thread count, the task
    running alone there; the same bits whatever their number)."""
    if isinstance(state, list):
        state = state_after(state, reset)
    state = {key: np.array(value) if isinstance(value, np.ndarray) else value
             for key, value in state.items()}
    spec = dataclasses.replace(spec, threads=process_threads())
    return solve_batches(pieces, state, spec, upd)


def warm_solve(spec, upd, k, d, dtype):
    """A batch of two rows solved and W updated as :func:`solve_batches_sent` solves
    them, in ``dtype``: loads this process's compiled kernels of both (the first call's
    load, 0.2-0.3 s on a fresh worker); the result is dropped."""
    state = _Run(initial_components(0, k, d, 1.0), np.zeros((k, d)), np.zeros((k, k)),
                 np.zeros((k, d)), n_observed=1).state()
    x = np.ones((2, d), dtype=dtype)
    if spec.missing and x.dtype.kind == "f":
        x[0, 0] = np.nan        # missing="mask": the solve of batches with missing values
    solve_batches_sent([(x, 0)], state, spec, upd)


def state_after(done, reset=None):
    """The state after the last batch of a run's results (:func:`solve_batches`), where
    the run was solved: the start of the run after it.  ``reset``: whether A, B, C start
    again from zero there (:meth:`_Stream.restarts`: a pass after the first starts, or
    the first pass's second row group; as :meth:`_Stream.step` resets them)."""
    state = dict(done[-1][1])
    if reset:
        state.update(A=np.zeros_like(state["A"]), B=np.zeros_like(state["B"]),
                     C=np.zeros_like(state["C"]), Bm=None, n_stat=0)
    return state


def stream_step(run, st, upd):
    """Algorithm 1's arithmetic for one solved batch, shared by ``fit`` and
    ``partial_fit`` (and, for the default batches, run where a row group is read:
    :func:`~daskrnmf.models._outliers.solve_batches`): a batch with observed values
    counts (``run.n_stat``), the statistics are scaled by the past weight and take its
    A, B, C (and the per-feature Bm of ``missing="mask"``), then W is updated; a batch of
    all-missing rows adds nothing and leaves W as it is
    (:func:`~daskrnmf.models._outliers.take_batch`, ``upd`` its
    :class:`~daskrnmf.models._outliers.UpdateSpec`).  ``st`` is the batch's combined
    :func:`~daskrnmf.models._outliers.add_statistics`; ``run`` a :class:`_Run`."""
    run.set_state(take_batch(run.state(), st, upd))


class _Run:
    """State of a streaming fit (the driver's state, saved by its checkpoints): W, the
    statistics and the position in the stream."""

    def __init__(self, W, A, B, C, Bm=None, *, n_stat=0, n_observed=0):
        self.W = None if W is None else np.array(W, dtype=np.float64)
        self.A, self.B, self.C = (np.array(M, dtype=np.float64) for M in (A, B, C))
        # missing="mask": per-feature Gram matrices of the rows with missing values
        self.Bm = None if Bm is None else np.array(Bm, dtype=np.float64)
        self.history = []           # per pass: the objective of its second half
        # per pass: its objective's relative standard error (pass_error; NaN: unknown)
        self.history_se = []
        # this pass's second half so far: batches, sum and sum of squares of their
        # per-sample losses (None: unknown, a run resumed from an older checkpoint)
        self.half = None
        self.pass_, self.pos, self.n_steps, self.n_seen = 0, 0, 0, 0
        self.loss_sum, self.pass_n, self.inner_rounds, self.inner_n = 0.0, 0, 0, 0
        # batches with observed values in the statistics since their last reset
        self.n_stat = n_stat
        # observed (non-NaN) entries solved so far; 0: W is still its placeholder start
        self.n_observed = n_observed
        self.last = {}

    def state(self):
        """What a batch changes (:func:`daskrnmf.models._outliers.take_batch`)."""
        return {"W": self.W, "A": self.A, "B": self.B, "C": self.C, "Bm": self.Bm,
                "n_stat": self.n_stat, "n_observed": self.n_observed}

    def set_state(self, state):
        self.W, self.A, self.B, self.C = (state[key] for key in "WABC")
        self.Bm = state["Bm"]
        self.n_stat, self.n_observed = state["n_stat"], state["n_observed"]
