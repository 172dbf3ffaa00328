"""ONMFO's pass at the speed of a read (issue 38): a row group's batches solved in one task
with the arithmetic of one batch at a time, and final codes solved tighter than the fit's."""

import numpy as np
import pytest

from daskrnmf import ONMFO, RobustNMF
from daskrnmf import _stream
from daskrnmf._stream import Feed, batch_order, batch_rows, make_batches
from daskrnmf.kernels.outliers import update_components_cd
from daskrnmf.models._outliers import (add_statistics, codes_block, initial_components,
                                       solve_batch_piece)

from .reference import planted_outliers as planted


@pytest.fixture(scope="module")
def data():
    return planted()


@pytest.fixture
def groups(monkeypatch):
    """Three row groups of 100 rows (300 x 40 X), three batches each."""
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 40 * 100)


def per_batch(X, model, passes, stop=None):
    """W and the pass objectives of ``model``'s default stream, one batch at a time as
    ONMFO took them before issue 38 (statistics scaled and added in place, W updated on
    the client after every batch); ``stop``: W after that many batches.  With
    ``reset_statistics`` the statistics start again at each pass and, in the first, where
    its second row group starts."""
    k, d = model.n_components, X.shape[1]
    seed, spec = model._stream_seed, model._spec()
    batches, pieces, units = make_batches(X, None)
    feed = Feed(X, pieces)
    W = initial_components(seed, k, d, feed.mean(batch_order(seed, 0, units)[0]))
    A, B, C = np.zeros((k, d)), np.zeros((k, k)), np.zeros((k, d))
    history = []
    t = 0                           # batches in the statistics
    for p in range(passes):
        order = batch_order(seed, p, units)
        starts = {0} if p else {next(len(u) for u in units if order[0] in u)}
        loss, count = 0.0, 0
        for j, b in enumerate(order):
            if model.reset_statistics and j in starts:
                A[:], B[:], C[:] = 0.0, 0.0, 0.0
                t = 0
            st = feed.solve(b, solve_batch_piece, add_statistics, W, spec,
                            rows=batch_rows(seed, p, units, batches, b))
            w = (1.0 - 1.0 / (t + 1)) ** model.forget_power if t else 1.0
            t += 1
            for M, key in ((A, "A"), (B, "B"), (C, "C")):
                M *= w
                M += st[key]
            W = update_components_cd(W, A, B, C, model.max_w_iter, model.inner_tol)[0]
            if stop is not None and p * len(batches) + j + 1 == stop:
                return W, None
            if j >= len(batches) // 2:
                loss, count = loss + st["loss"], count + st["n"]
        history.append(loss / count)
    return W, np.array(history)


@pytest.mark.parametrize("per_task", [None, 2])
def test_a_row_group_is_one_round_trip_with_the_arithmetic_of_one_batch_at_a_time(
        data, groups, monkeypatch, per_task):
    from daskrnmf.models import _onmfo_stream

    X = data[0]
    if per_task:        # states of at most two batches a task (4 x 40: 3,968 bytes each)
        monkeypatch.setattr(_onmfo_stream, "RUN_STATE_BYTES", per_task * 8 * (3 * 4 * 40 + 4 * 4))
    calls = []
    for name in ("_run", "submit_run"):
        method = getattr(Feed, name, None)
        if method is not None:
            def counted(self, *args, _method=method, _name=name, **kwargs):
                calls.append(_name)
                return _method(self, *args, **kwargs)
            monkeypatch.setattr(Feed, name, counted)
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=1).fit(X)
    assert model.n_steps_ == 2 * 9
    # the first batch's maxima and mean (W's start), then one task per group and pass
    # (before: one per batch); groups of 3 batches in tasks of at most 2: 2 per group
    assert len(calls) == 2 + 2 * 3 * (2 if per_task else 1)
    calls.clear()
    W, history = per_batch(X, model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)


def test_a_callback_stop_inside_a_group_keeps_the_w_of_that_batch(data, groups):
    X = data[0]
    kw = {"n_components": 4, "max_iter": 1, "tol": 0, "max_inner_iter": 30,
          "random_state": 1}
    # stopped after the 5th batch, in the middle of the second group's task
    stopped = ONMFO(**kw, callback=lambda info: info["iteration"] == 5).fit(X)
    assert stopped.n_steps_ == 5
    W, _ = per_batch(X, stopped, 1, stop=5)
    np.testing.assert_array_equal(stopped.components_, W)
    assert not np.array_equal(W, per_batch(X, stopped, 1, stop=6)[0])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_final_codes_are_solved_to_at_most_1e_3(data):
    X = data[0]
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    assert model.inner_tol == 1e-2
    W = np.asarray(model.components_, dtype=np.float64)

    def codes(tol):
        spec = model._spec()
        return codes_block(X, W, type(spec)(**{**spec.__dict__, "tol": tol}), "h")

    tight, loose = codes(1e-3), codes(1e-2)
    assert not np.allclose(tight, loose)        # the tolerance matters on this data
    np.testing.assert_array_equal(model.transform(X), tight)
    np.testing.assert_array_equal(model.decompose(X)[0], tight)
    # a tighter inner_tol is kept; RobustNMF (inner_tol=1e-3) is unchanged
    model.set_params(inner_tol=1e-4)
    np.testing.assert_array_equal(model.transform(X), codes(1e-4))
    batch = RobustNMF(4, max_iter=5, random_state=0).fit(X)
    spec = batch._spec()
    assert spec.tol == 1e-3
    np.testing.assert_array_equal(batch.transform(X), codes_block(
        X, np.asarray(batch.components_, dtype=np.float64), spec, "h"))


def test_each_row_group_is_read_once_a_pass(data, groups, monkeypatch):
    """The steps that take a task's solved batches read ahead from the first batch not
    yet solved: wanting the solved ones again read their group again and kept it on a
    worker, never consumed (10M x 256 on 2 GiB workers: killed in the first pass)."""
    import dask.array as da

    reads, held = [], []
    real, rearranged = Feed._read, Feed._rearranged

    def counted(self, key):
        reads.append(key[0] if isinstance(key, tuple) else key)   # (group, pass)
        return real(self, key)

    def from_held(self, other, entry, c, use):
        held.append(reads.pop())        # not read: put in order from the block held
        return rearranged(self, other, entry, c, use)

    monkeypatch.setattr(Feed, "_read", counted)
    monkeypatch.setattr(Feed, "_rearranged", from_held)
    X = da.from_array(data[0], chunks=(50, -1))
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=1).fit(X)
    assert model.n_steps_ == 2 * 9
    # three groups a pass, each read once (the first also for W's start, then kept);
    # the first pass ends with group 2 and the second starts with it: kept, not read
    # again (it was, when the feed counted a batch's uses but not their passes), but
    # put in the second pass's order from the block held
    assert sorted(reads) == [0, 0, 1, 1, 2] and held == [2]


@pytest.mark.parametrize("seed", [0, 1])     # pass 1 ends, pass 2 starts: other groups / one
def test_with_a_cluster_each_group_s_task_is_queued_behind_the_one_before(
        data, groups, client, monkeypatch, seed):
    """With a distributed Client, the stream's next run of batches is submitted (given the
    run before's future, from whose results it starts) before the result of the run
    before is taken: the workers solve the groups back to back, across passes too, no round trip to
    the client between them.  W and the pass objectives are those of one batch at a time;
    each group is read once a pass."""
    import dask.array as da

    queued, reads = [], []
    take, read, rearranged = Feed.take_run, Feed._read, Feed._rearranged

    def counted_take(self, run):
        queued.append(len(self.runs))
        return take(self, run)

    def counted_read(self, key):
        reads.append(key[0] if isinstance(key, tuple) else key)   # (group, pass)
        return read(self, key)

    def from_held(self, other, entry, c, use):
        reads.pop()                     # not read: put in order from the block held
        return rearranged(self, other, entry, c, use)

    monkeypatch.setattr(Feed, "take_run", counted_take)
    monkeypatch.setattr(Feed, "_read", counted_read)
    monkeypatch.setattr(Feed, "_rearranged", from_held)
    X = da.from_array(data[0], chunks=(50, -1))
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=seed).fit(X)
    # three groups a pass: the next run queued behind each but the fit's last, the
    # second pass's first behind the first pass's last (from the statistics reset)
    assert queued == [2, 2, 2, 2, 2, 1]
    # each group read once a pass; the group that ends the first pass and starts the
    # second (seed 1) is kept for it
    _, _, units = make_batches(X, None)
    unit = {b: u for u, batches in enumerate(units) for b in batches}
    assert model._stream_seed == seed
    last, first = unit[batch_order(seed, 0, units)[-1]], unit[batch_order(seed, 1, units)[0]]
    assert sorted(reads) == sorted([0, 1, 2] + [u for u in (0, 1, 2) if (u, u) != (last, first)])
    W, history = per_batch(data[0], model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)


@pytest.fixture
def no_stealing(client):
    """The session's scheduler without work stealing for this test: a test of where the
    fit asks its tasks to run (a preference, ``allow_other_workers=True``) sees that,
    not a move by the scheduler of a task queued on a busy worker (a loaded machine)."""
    async def stop(dask_scheduler):
        await dask_scheduler.extensions["stealing"].stop()

    async def start(dask_scheduler):
        await dask_scheduler.extensions["stealing"].start()

    client.run_on_scheduler(stop)
    try:
        yield
    finally:
        client.run_on_scheduler(start)


def _computed(ts, name):
    """(start, stop, worker) of every run of the tasks whose key starts with ``name`` in a
    task stream ``ts`` (distributed's ``get_task_stream``)."""
    out = []
    for t in ts.data:
        key = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
        if str(key).startswith(name):
            out += [(s["start"], s["stop"], t["worker"]) for s in t["startstops"]
                    if s["action"] == "compute"]
    return out


def test_with_a_cluster_a_group_held_for_a_later_pass_is_put_in_its_order_after_its_solve(
        data, client, monkeypatch, no_stealing):
    """With a distributed Client, a row group held for the next pass is put in that
    pass's order on its worker after the run that solves it there, not as soon as it is
    wanted (read ahead): the copy had run just before the fit's first solve and before
    the state passed on at a pass's end, on the worker that was to solve next."""
    import dask.array as da
    from distributed import get_task_stream

    from daskrnmf import _stream

    # two row groups of 150 rows: each is wanted for the second pass while held
    monkeypatch.setattr(_stream, "UNIT_BYTES", 8 * 40 * 150)
    monkeypatch.setattr(_stream, "BATCH_ROWS", 50)
    X = da.from_array(data[0], chunks=(50, -1))
    with get_task_stream(client) as ts:
        ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    relays, solves = _computed(ts, "_relaid"), sorted(_computed(ts, "_on_pieces"))
    assert len(relays) == 2 and len(solves) == 4
    for start, _, worker in relays:     # after a solve of the group, where it is held
        assert any(w == worker and stop <= start for _, stop, w in solves)
    # the fit's first solve and the second pass's first solve wait for no copy
    assert min(start for start, _, _ in relays) >= solves[0][1]


def test_with_a_cluster_consecutive_groups_are_read_and_solved_on_different_workers(
        data, groups, client, no_stealing):
    """With a distributed Client each row group is read, put together and solved on one
    worker, and the next group of the stream on another (a preference the scheduler is
    given): left to the scheduler, consecutive groups were often put together on one
    worker, whose solves then ran one after the other while the other worker waited."""
    import dask.array as da
    from distributed import get_task_stream

    X = da.from_array(data[0], chunks=(50, -1))
    with get_task_stream(client) as ts:
        ONMFO(4, max_iter=1, tol=0, max_inner_iter=30, random_state=0).fit(X)
    put, solved = (sorted((start, w) for start, _, w in _computed(ts, name))
                   for name in ("_arranged_parts", "_on_pieces"))
    assert len(put) == len(solved) == 3           # three groups, each read and solved once
    workers = [w for _, w in solved]
    assert workers[0] != workers[1] != workers[2]
    assert sorted(w for _, w in put) == sorted(workers)


def test_with_a_cluster_each_worker_loads_the_solve_when_idle_and_the_fit_is_unchanged(
        data, groups, client, monkeypatch):
    """With a distributed Client every worker runs one :func:`warm_solve` (submitted
    below every read and solve, so it runs when that worker has nothing else to do); a
    fresh worker's first solve had loaded the compiled kernels itself, on the path of
    every batch after it.  The fit is the same, bit for bit, as one without it."""
    import dask.array as da
    from distributed import get_task_stream

    from daskrnmf._blocks import worker_addresses
    from daskrnmf.models import _onmfo_stream

    X = da.from_array(data[0], chunks=(50, -1))
    with get_task_stream(client) as ts:
        warmed = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    runs = _computed(ts, "warm_solve")
    assert sorted(w for _, _, w in runs) == worker_addresses(client)
    monkeypatch.setattr(_onmfo_stream._Stream, "warm", lambda self: setattr(self, "warming", []))
    cold = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    np.testing.assert_array_equal(warmed.components_, cold.components_)
    np.testing.assert_array_equal(warmed.objective_history_, cold.objective_history_)


_SIGNATURES = """
import sys
import numpy as np
from numba.core.registry import CPUDispatcher
{body}
out = set()
for name, mod in list(sys.modules.items()):
    if name.startswith("daskrnmf"):
        for attr, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher):
                out |= {{(name, attr, str(s)) for s in obj.signatures}}
print(repr(sorted(out)))
"""


def test_warm_solve_loads_only_kernels_the_fit_s_solve_uses():
    """:func:`warm_solve` (a fresh process) takes the kernels, and the signatures, that a
    fit of the same settings takes: a kernel it alone used would be loaded, or compiled
    on an empty cache, for nothing.  The fits run first, so the kernels are cached when
    the warm-up asks for them."""
    import ast
    import subprocess
    import sys

    cases = [("float32", "raise"), ("float64", "mask")]
    fit = "\n".join(
        "import dask.array as da\nfrom daskrnmf import ONMFO\n"
        f"X = np.random.default_rng(0).random((3000, 12)).astype('{dt}')\n"
        + ("X[::7, 3] = np.nan\n" if missing == "mask" else "")
        + f"ONMFO(4, max_iter=1, tol=0, random_state=0, missing='{missing}')"
          ".fit(da.from_array(X, chunks=(1000, 12)))"
        for dt, missing in cases)
    warm = ("import dataclasses\nfrom daskrnmf import ONMFO\n"
            "from daskrnmf.models._onmfo_stream import warm_solve\n") + "\n".join(
        f"m = ONMFO(4, missing='{missing}')\n"
        "spec = dataclasses.replace(m._spec(alpha_R=1.0), checked=True)\n"
        f"warm_solve(spec, m._update_spec(), 4, 12, np.dtype('{dt}'))"
        for dt, missing in cases)
    found = []
    for body in (fit, warm):
        run = subprocess.run([sys.executable, "-c", _SIGNATURES.format(body=body)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        found.append(set(ast.literal_eval(run.stdout.strip().splitlines()[-1])))
    fitted, warmed = found
    assert warmed <= fitted, warmed - fitted
    assert {(mod, name) for mod, name, _ in warmed} >= {
        ("daskrnmf.kernels.cd_rows", "_cd_rows"), ("daskrnmf.kernels.nnls", "_nnls_gram_rows_each")}


def test_with_a_cluster_a_group_is_read_once_its_worker_has_solved_the_group_before(
        data, groups, client, monkeypatch):
    """With a distributed Client a row group's read is submitted only when the run of the
    group its worker solves before it has been taken (the worker is then free), but for
    the first group of each worker.  Submitted as soon as it was wanted (two groups
    ahead), it was queued behind that run, where the idle worker took some of its pieces
    (work stealing) or one waited behind the solve, and the fit's first solve waited for
    the reads of its worker's next group.  W is the same as one batch at a time."""
    import dask.array as da

    events = []
    submit, take = Feed._submit_read, Feed.take_run

    def recorded_submit(self, entry):
        events.append(("read", entry[0].c, entry[0].workers[0]))
        return submit(self, entry)

    def recorded_take(self, run):
        events.append(("taken", self._index(run.block), None))
        return take(self, run)

    monkeypatch.setattr(Feed, "_submit_read", recorded_submit)
    monkeypatch.setattr(Feed, "take_run", recorded_take)
    X = da.from_array(data[0], chunks=(50, -1))
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    reads = [(i, c, w) for i, (what, c, w) in enumerate(events) if what == "read"]
    assert len(reads) >= 4 and len({w for _, _, w in reads}) == 2
    for i, c, w in reads:
        before = [g for j, g, v in reads if j < i and v == w]
        if before:      # the group read there before it was taken first
            assert ("taken", before[-1], None) in events[:i], (c, w, events)
    # the third group of the fit is read after the first group's run is taken
    assert events.index(("taken", reads[0][1], None)) < reads[2][0]
    W, history = per_batch(data[0], model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)


def test_a_run_s_results_travel_as_a_few_arrays_and_come_back_equal():
    # a run's results go to the next run's worker and to the client: a list of 128
    # batches' dicts of small arrays was about 640 frames (6 ms to serialize on a busy
    # worker), stacked they are a few; each state's arrays come back its own and writeable
    from distributed.protocol import dumps, loads, to_serialize

    from daskrnmf.models._outliers import RunResults

    rng = np.random.default_rng(0)
    k, d = 3, 5

    def state(i):
        return {"W": rng.random((k, d)), "A": rng.random((k, d)), "B": rng.random((k, k)),
                "C": rng.random((k, d)), "Bm": None if i < 50 else rng.random((d, k, k)),
                "n_stat": i, "n_observed": 10 * i}

    out = RunResults(({"loss": float(i), "n": 7, "rounds": 9, "observed": 35}, state(i))
                     for i in range(128))
    frames = dumps({"data": to_serialize(out)})
    assert len(frames) < 20
    back = loads(frames)["data"]
    assert type(back) is RunResults and len(back) == 128
    for (f0, s0), (f1, s1) in zip(out, back):
        assert f0 == f1 and s0.keys() == s1.keys()
        for key, value in s0.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(s1[key], value)
                assert s1[key].flags.writeable and s1[key].dtype == value.dtype
            else:
                assert s1[key] == value
    back[0][1]["A"][:] = 0.0            # one state's array written: no other's changes
    np.testing.assert_array_equal(back[1][1]["A"], out[1][1]["A"])
    assert loads(dumps({"data": to_serialize(RunResults())}))["data"] == []


def test_the_next_group_is_asked_of_another_worker_as_workers_come_and_go():
    # the preferred reader of each row group (Feed._reader) follows the workers the
    # scheduler has at that read: one that joins takes its turn, one that left does not
    import dask.array as da

    class Scheduler:
        workers = ["tcp://a:1", "tcp://b:1"]

        def scheduler_info(self, n_workers=-1):
            return {"workers": {w: {} for w in self.workers}}

    X = da.zeros((40, 2), chunks=(10, -1))
    feed = Feed(X, [[(0, 10)]], bounds=[0, 10, 20, 30, 40])
    feed.client = Scheduler()
    asked = [feed._reader(c) for c in range(3)]
    Scheduler.workers = ["tcp://a:1", "tcp://b:1", "tcp://c:1"]           # c joins
    asked += [feed._reader(c) for c in range(3, 6)]
    Scheduler.workers = ["tcp://a:1", "tcp://c:1"]                         # b leaves
    asked += [feed._reader(6)]
    Scheduler.workers = ["tcp://c:1"]                                      # one left
    asked += [feed._reader(7)]
    assert asked == [["tcp://a:1"], ["tcp://b:1"], ["tcp://a:1"], ["tcp://b:1"],
                     ["tcp://c:1"], ["tcp://a:1"], ["tcp://c:1"], None]


def test_on_a_cluster_of_one_worker_the_groups_are_read_there(data, groups):
    # no other worker to prefer for the next group's read: the scheduler's choice (a
    # preference of none had raised in Client.submit)
    import dask.array as da
    from distributed import Client, LocalCluster

    X = da.from_array(data[0], chunks=(50, -1))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=0).fit(X)
    W, history = per_batch(data[0], model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)


@pytest.mark.parametrize("stop", ["callback", "converged"])
def test_a_fit_stopped_with_runs_queued_leaves_the_clients_futures(client, stop):
    # the row groups' runs are queued on the workers; a fit that stops (its callback, or
    # convergence at a pass's end) with one still queued must not break the user's
    # Client: cancelling a chunk that queued run depends on failed the scheduler's
    # stimulus_cancel, which cancelled every future of the Client (a persisted X too)
    import time

    import dask.array as da

    rng = np.random.default_rng(0)
    X = da.from_array(rng.random((20_000, 8)) @ rng.random((8, 12)),
                      chunks=(2_500, 12)).persist()
    mine = client.scatter(np.arange(10))
    calls = []
    kw = ({"callback": lambda info: calls.append(1) or len(calls) >= 5, "max_iter": 5}
          if stop == "callback" else {"max_iter": 50})
    ONMFO(3, random_state=0, **kw).fit(X)
    time.sleep(0.5)                     # (the scheduler's cancel is asynchronous)
    assert client.submit(np.sum, mine).result(timeout=30) == 45
    assert ONMFO(3, max_iter=1, tol=0, random_state=0).fit(X).n_passes_ == 1


def test_a_run_s_states_come_back_each_its_own_array_not_a_view_of_the_stack():
    # the last batch's W of a run becomes the fitted components_: a row of the stacked
    # W of the run held every batch's W with it (RUN_STATE_BYTES / 3 for k x d)
    from distributed.protocol import dumps, loads, to_serialize

    from daskrnmf.models._outliers import RunResults

    rng = np.random.default_rng(0)
    out = RunResults(({"loss": 0.0, "n": 1, "rounds": 1, "observed": 6},
                      {"W": rng.random((2, 3)), "A": rng.random((2, 3)), "B": rng.random((2, 2)),
                       "C": rng.random((2, 3)), "Bm": None, "n_stat": i, "n_observed": i})
                     for i in range(8))
    back = loads(dumps({"data": to_serialize(out)}))["data"]
    for (_, s0), (_, s1) in zip(out, back):
        for key in "WABC":
            np.testing.assert_array_equal(s1[key], s0[key])
            assert s1[key].base is None or s1[key].base.nbytes == s1[key].nbytes
            assert s1[key].flags.writeable and s1[key].flags.owndata


def test_a_thread_s_solve_buffers_and_table_are_reused_and_refilled_for_each_w():
    """One thread's batches solve into the same buffers and the same NNLS table, refilled
    for each W (ONMFO's thousands of batches a pass had each new pages on a worker), with
    the codes of fresh ones whatever W came before (a W of another support in between);
    other threads have their own; the end of a fit drops them."""
    import threading

    from daskrnmf import _reader
    from daskrnmf.kernels import blocks
    from daskrnmf.models._outliers import SolveSpec, _solve_buffers, solve_rows

    rng = np.random.default_rng(0)
    x = rng.random((300, 12)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] += 4
    Ws = [rng.random((5, 12)), rng.random((5, 12)) * np.array([[1], [0], [1], [0], [1]]) + 1e-3,
          rng.random((5, 12)) + 2 * np.eye(5, 12)]    # tabled, factored, tabled
    spec = SolveSpec(alpha_R=0.3, n_iter=20, where="ONMFO", tol=1e-6)
    _reader.release()
    bufs = [_solve_buffers(x, W, spec) for W in Ws]
    assert all(np.shares_memory(b["out"][1], bufs[0]["out"][1]) for b in bufs)
    tables = [b["prepared"].table for b in bufs]
    # the second W is near-singular (two rows alike): its NNLS is factored, no table
    assert tables[1] is None and tables[0] is tables[2] is not None
    for W in Ws + Ws[::-1]:
        reused = solve_rows(x, W, spec, **_solve_buffers(x, W, spec))
        blocks.release_thread_scratch()
        fresh = solve_rows(x, W, spec, **_solve_buffers(x, W, spec))
        for a, b in zip(reused, fresh):
            np.testing.assert_array_equal(a, b)
    other = []
    t = threading.Thread(target=lambda: other.append(_solve_buffers(x, Ws[0], spec)))
    t.start()
    t.join()
    assert not np.shares_memory(other[0]["out"][1], _solve_buffers(x, Ws[0], spec)["out"][1])
    held = _solve_buffers(x, Ws[0], spec)["out"][1]
    _reader.release()
    assert not np.shares_memory(held, _solve_buffers(x, Ws[0], spec)["out"][1])
    # wide rows: a few rows take buffers of those rows, not of 2,048
    wide = np.ones((3, 5000), dtype=np.float32)
    r = _solve_buffers(wide, rng.random((2, 5000)), spec)["out"][1]
    assert r.shape == (3, 5000) and (r.base is None or r.base.shape[0] == 3)


def test_a_run_cancelled_while_it_runs_stops_before_its_next_batch(monkeypatch):
    """A run's task cancelled on its worker (the fit stopped while the next pass's run,
    queued behind the last one, had started) stops before its next batch with
    distributed's ``Reschedule`` (dropped silently, or computed again whole if still
    wanted), not after solving its whole row group."""
    from distributed import Reschedule

    from daskrnmf import _stream

    seen = []
    monkeypatch.setattr(_stream, "_cancelled_here", lambda: len(seen) >= 2)

    def fn(pieces):
        for piece, start in pieces:
            seen.append(start)
        return seen

    items = [(0, 2, 0, None), (2, 4, 2, None), (4, 6, 4, None)]
    with pytest.raises(Reschedule):
        _stream._on_pieces(np.arange(12.0).reshape(6, 2), items, fn)
    assert seen == [0, 2]
    monkeypatch.setattr(_stream, "_cancelled_here", lambda: False)
    seen.clear()
    assert _stream._on_pieces(np.arange(12.0).reshape(6, 2), items, fn) == [0, 2, 4]


def test_outside_a_worker_no_task_is_cancelled():
    from daskrnmf._stream import _cancelled_here

    assert _cancelled_here() is False


def test_a_fit_returns_when_no_task_of_it_runs_on_the_workers(caplog):
    """A user's script that closes its cluster right after ``fit`` logs nothing: the
    fit's tasks still running when it stopped (the next pass's first run, a group's copy
    for that pass) are waited for, and distributed's WARNING "Async instruction ...
    ended with CancelledError", logged when a worker closes under a running task, is
    not shown (it was at the end of every such script)."""
    import logging

    import dask.array as da
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    X = rng.random((60_000, 16)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="distributed"):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            ONMFO(5, random_state=0).fit(da.from_array(X, chunks=(6_000, 16)))
            running = client.run(lambda dask_worker: len(dask_worker.state.executing))
    assert not any(running.values()), running
    assert not [r for r in caplog.records if "CancelledError" in r.getMessage()]


def _sleeping(client, feed, seconds, held=True):
    """A task sleeping ``seconds`` started on each worker (pinned there) and kept in
    ``feed`` as a chunk (``held``), or needed by one kept there (never held by the
    client, as a group's piece reads); their keys."""
    import time

    from daskrnmf._blocks import worker_addresses

    slow = [client.submit(time.sleep, seconds, pure=False, workers=[w],
                          allow_other_workers=False) for w in worker_addresses(client)]
    keys = {f.key for f in slow}
    for i, f in enumerate(slow):
        feed.chunks[i] = [f if held else client.submit(lambda _: None, f, pure=False),
                          1, None, False, None]
    del f, slow
    deadline = time.monotonic() + 30
    while sum(map(len, client.run(_executing, keys).values())) < len(keys):   # started
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return keys


def _executing(keys, dask_worker=None):
    return [ts.key for ts in dask_worker.state.executing if ts.key in keys]


def test_close_waits_for_the_tasks_of_the_futures_it_dropped(client):
    """Feed.close waits until no worker runs a task of the futures it dropped: on a
    loaded machine a fit had returned while a copy of a group ran (CI)."""
    import dask.array as da

    from daskrnmf._stream import Feed

    feed = Feed(da.zeros((10, 2), chunks=5), pieces=None)
    keys = _sleeping(client, feed, 1.0)
    feed.close()
    running = client.run(_executing, keys)
    assert not any(running.values()), running


def test_close_waits_for_the_tasks_the_client_never_held(client, local_cluster):
    """Feed.close waits for a running task of the fit that the client never held (a
    group's piece reads, dropped once the group's copy is submitted on them): released
    with the future that needs it, it is marked cancelled on its worker only when the
    scheduler's message reaches it, which may be later than a Client.run sent straight
    after (another connection).  The workers here take the scheduler's messages 0.3 s
    late: asked at once, they knew of no cancelled task."""
    import asyncio

    import dask.array as da

    from daskrnmf._stream import Feed

    workers = list(local_cluster.workers.values())
    handlers = [w.stream_handlers["free-keys"] for w in workers]

    def late(handler):
        async def free_keys(**msg):
            await asyncio.sleep(0.3)    # the worker's stream waits: what follows too
            handler(**msg)
        return free_keys

    feed = Feed(da.zeros((10, 2), chunks=5), pieces=None)
    keys = _sleeping(client, feed, 1.0, held=False)
    try:
        for w, handler in zip(workers, handlers):
            w.stream_handlers["free-keys"] = late(handler)
        feed.close()
        running = client.run(_executing, keys)
    finally:
        for w, handler in zip(workers, handlers):
            w.stream_handlers["free-keys"] = handler
    assert not any(running.values()), running


def test_close_does_not_wait_for_a_worker_busy_with_other_work(client, monkeypatch):
    """A worker busy with work that is not the fit's (a task the user still wants) does
    not hold Feed.close until it is free: the task close sends each worker is waited for
    until it arrives there, not until it runs (close waited for it to run: 10 s, its
    limit, beside a user's long task)."""
    import time

    import dask.array as da

    from daskrnmf import _stream
    from daskrnmf._blocks import worker_addresses

    monkeypatch.setattr(_stream, "SETTLE_SECONDS", 60.0)
    feed = _stream.Feed(da.zeros((10, 2), chunks=5), pieces=None)
    feed.chunks[0] = [client.submit(lambda: 1, pure=False), 1, None, False, None]
    theirs = client.submit(time.sleep, 6.0, pure=False,
                           workers=worker_addresses(client)[:1], allow_other_workers=False)
    deadline = time.monotonic() + 30
    while not any(client.run(_executing, {theirs.key}).values()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    feed.close()
    # the user's task still runs: close did not wait for its worker to be free
    assert any(client.run(_executing, {theirs.key}).values())
    theirs.result()


def test_without_reset_statistics_the_statistics_never_start_again(data, groups):
    # reset_statistics=False: summed over every batch of every pass, the first pass's
    # second row group included (per_batch honours the parameter)
    X = data[0]
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, reset_statistics=False,
                  random_state=1).fit(X)
    W, history = per_batch(X, model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)


def test_with_a_cluster_runs_shorter_than_a_group_restart_where_the_group_does(
        data, groups, client, monkeypatch):
    """Runs of at most two batches (groups of three): the queued run that starts the first
    pass's second group starts the statistics again on its worker, the one that ends the
    first group does not; W and the pass objectives are those of one batch at a time."""
    import dask.array as da

    from daskrnmf.models import _onmfo_stream

    monkeypatch.setattr(_onmfo_stream, "RUN_STATE_BYTES", 2 * 8 * (3 * 4 * 40 + 4 * 4))
    X = da.from_array(data[0], chunks=(50, -1))
    model = ONMFO(4, max_iter=2, tol=0, max_inner_iter=30, random_state=1).fit(X)
    W, history = per_batch(data[0], model, 2)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.objective_history_, history)



def test_with_missing_values_a_cluster_restarts_the_first_pass_as_one_process_does(
        data, groups, local_cluster, monkeypatch):
    """missing="mask": the per-feature statistics Bm start again with A, B, C where the
    first pass's second group starts, on the workers' queued runs (runs of at most two
    batches) as in one process: the same W, bit for bit."""
    import dask.array as da
    from distributed import Client

    from daskrnmf.models import _onmfo_stream

    monkeypatch.setattr(_onmfo_stream, "RUN_STATE_BYTES", 2 * 8 * (3 * 4 * 40 + 4 * 4))
    X = data[0].copy()
    X[np.random.default_rng(5).random(X.shape) < 0.05] = np.nan
    kw = dict(n_components=4, max_iter=2, tol=0, max_inner_iter=30, missing="mask",
              random_state=1)
    alone = ONMFO(**kw).fit(X)                  # no Client: the steps in this process
    with Client(local_cluster):
        spread = ONMFO(**kw).fit(da.from_array(X, chunks=(50, -1)))
    np.testing.assert_array_equal(spread.components_, alone.components_)
    np.testing.assert_array_equal(spread.objective_history_, alone.objective_history_)
