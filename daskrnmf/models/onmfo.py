"""ONMFO — online NMF with outliers (Zhao & Tan); its batch twin RobustNMF is
:mod:`daskrnmf.models.robustnmf`.

Samples are rows: X (n_samples, n_features) ~ H W + R with W >= 0 (n_components,
n_features) the components (the paper's W^T), H >= 0 the codes and R >= 0 a sparse matrix
of gross non-negative outliers:

    min_{W, H, R >= 0} 1/2 ||X - H W - R||_F^2 + alpha_R ||R||_{1,1}                (5)

**ONMFO** (Algorithm 1) streams X in batches (by default random rows of row groups,
:mod:`daskrnmf._stream`) in a seeded shuffled order, ``n_passes`` times.  State: W and
the statistics A = sum h^T x, B = sum h^T h, C = sum h^T r (eq. 12-14; k x d, k x k,
k x d; scaled down before each batch, ``forget_power``) and the position in the stream;
nothing of size n_samples.  Step (one batch): on the worker that holds it, the codes and
outliers of all its samples are found with W fixed (``max_inner_iter`` rounds of
(16)-(17)); then the statistics take the batch's A, B, C and W takes ``max_w_iter``
rounds of (18).  With the default batches a row group's batches are taken one after the
other in one task on the worker that read the group (one round trip a group), and the
driver's steps take their results one a batch.  The stream (batches, orders, read-ahead) is :mod:`daskrnmf._stream`; the per-batch
solve is :mod:`daskrnmf.models._outliers`; the loop is the one driver
(:mod:`daskrnmf._driver`), one step per batch; checkpoints are :mod:`daskrnmf._checkpoint`.

Choices the paper leaves open: the starting h and r of each solve
(:func:`daskrnmf.kernels.outliers.initial_codes`), the inner iteration counts, and whether
A, B, C start again at each pass (``reset_statistics``, measured to help).
"""

import hashlib
import time

import numpy as np

from .. import _checkpoint
from .. import _validation as v
from .._base import BaseModel
from .._driver import say
from .._stream import (RUN_STATE_BYTES, Feed, batch_order, batch_rows, group_rest,
                       make_batches, read_ahead, unit_bounds, upcoming)
from ._outliers import (UpdateSpec, add_statistics, feature_max, initial_components,
                        piece_feature_max, solve_batch_piece, solve_batches, take_batch,
                        update_W)
from .robustnmf import _OutlierFactorization


# ---------------------------------------------------------------- ONMFO
class ONMFO(_OutlierFactorization):
    """Online NMF with outliers (Zhao & Tan, Algorithm 1), streaming X's batches.

    Factorizes non-negative X (n_samples, n_features) as ``H W + R`` by minimising, over
    the stream, the surrogate of

        1/t sum_i  min_{h_i, r_i >= 0}  1/2 ||x_i - h_i W - r_i||^2 + alpha_R ||r_i||_1

    subject to W >= 0, keeping only W and the statistics A = sum h_i^T x_i,
    B = sum h_i^T h_i, C = sum h_i^T r_i: memory independent of n_samples.  W starts
    uniform random with entries of the size that reproduces the first batch's mean; each
    batch solves its codes and outliers with W fixed, adds its statistics and updates W.
    The stream makes passes over X until a pass lowers the mean per-sample objective by
    at most ``tol`` relative (or ``max_iter`` passes).

    Parameters
    ----------
    n_components : int, default=8
        Number of components k.
    alpha_R : float > 0 or "auto", default="auto"
        Weight of the L1 penalty on the outlier matrix R (the paper's lambda; it uses 1
        for pixels scaled to [0, 50]): a residual ``x - h W`` above it is called an
        outlier (r takes the excess).  Larger values find fewer outliers.  ``"auto"``:
        0.03 times the data's scale, the upper quartile over the features of their
        maximum in the stream's first batch (read anyway for W's start;
        :meth:`partial_fit`: the first call's X; features never above 0 left out),
        stored as ``alpha_R_``.  It is proportional to X, so the fit does not depend on X's units (``X * c`` gives
        ``alpha_R_ * c`` and the same fit, scaled).  Where X has gross values their
        size sets it: a residual above 3 % of it is an outlier.  On the paper's faces
        it is 1.5, which reconstructs better than 1 at 10 % outliers and within 3 % of
        it at 30 %; on clustered data with 1.25 % gross entries it flags 1.7 times that
        fraction, where alpha_R = 1 flagged 19 times (``benchmarks/results/onmfo.md``;
        more when the first batch is small and holds few of them).  On data without
        gross values the maximum is the clean data's, and more entries (small
        residuals) are then called outliers: give a float for a known noise level.  A
        float is used as it is.
    solver : {"cd", "mu"}, default="cd"
        ``"cd"``: per sample, the exact r = max(0, x - h W - alpha_R) alternated with the
        exact non-negative least-squares h (active set, warm-started), each sample
        stopping on ``inner_tol``; W by block coordinate descent over its rows (HALS) on
        the statistics.  ``"mu"``: the paper's multiplicative updates (16)-(18)
        literally.  Both minimise the same objective; "cd" reaches it in far fewer
        rounds (:mod:`daskrnmf.kernels.outliers`).
    max_iter : int, default=50
        Most passes over X (the paper makes two).
    tol : float >= 0, default=1e-2
        Stop when two passes in a row have not lowered the best mean per-sample objective
        of the earlier passes by more than ``tol`` relative (the pass objective varies by
        about 1 % with the batch order, hence two); 0 makes exactly ``max_iter`` passes.
        On the 400 ORL faces this takes 6 to 8 passes and reconstructs within 1.1x of
        the converged batch model (``benchmarks/results/onmfo.md``); on large data,
        whose first pass makes many updates (``batch_size``), three or four (400,000
        planted samples: four).
    batch_size : int or None, default=None
        Samples per batch (one W update per batch).  None chooses the batches from X's
        shape and ``random_state`` alone, never from its chunks:
        a pass makes ``max(8, n_samples / 4096)`` W updates: 8 batches of
        ``n_samples / 8`` rows on up to 32,768 samples, batches of 4,096 rows above (a
        4M-sample X: about 1,000 updates a pass).  The rows are read in groups of at most
        256 MiB (as float64; each read once per pass, its chunks concatenated where they
        are read), visited in a seeded random order; a batch takes its rows at random
        from its group, drawn again at every pass.  A ``batch_size`` you set is used
        exactly (contiguous rows, solved in parallel by X's chunks); with 1 it is the
        paper's per-sample algorithm.
    max_inner_iter : int, default=100
        Most rounds per sample of the (h, r) solve (``"cd"``: exact r then exact h;
        ``"mu"``: (16) then (17)); also used by :meth:`transform` and :meth:`decompose`.
    inner_tol : float >= 0, default=1e-2
        A sample's solve stops when a round lowers its objective (3) by at most this,
        relative (``"mu"``: the piece's summed objective); 0 runs ``max_inner_iter``
        rounds (the paper's fixed 300 rounds are ``solver="mu", max_inner_iter=300,
        inner_tol=0``).  On ORL faces 1e-2 reconstructs as well as 1e-3 (the codes are
        solved again at every pass) with 40 % fewer rounds.  :meth:`transform` and
        :meth:`decompose` stop at ``min(inner_tol, 1e-3)``: their codes are final (on 4M
        planted rows, 1e-2 there reconstructed 1.17x worse than 1e-3).
    max_w_iter : int, default=4
        Most sweeps (``"cd"``, stopping when a sweep moves W by at most ``inner_tol``
        relative) or rounds of (18) (``"mu"``) per batch.
    missing : {"raise", "mask"}, default="raise"
        ``"raise"``: NaN in X is an error.  ``"mask"``: NaN entries are missing values:
        objective (3) over each sample's observed entries (r is 0 at the missing ones),
        codes from each sample's own Gram matrix ``W diag(m) W^T``, and W from
        per-feature statistics ``B_j = sum_i m_ij h_i^T h_i`` (n_features x
        n_components^2 floats); ``inverse_transform`` fills the missing entries
        (:mod:`daskrnmf.kernels.missing`).
    reset_statistics : bool, default=True
        Start A, B, C again from zero at each pass after the first (W is kept), so that
        codes found with the early, poor W stop weighing on it; measured to lower the
        error.  False accumulates them over all passes (with ``forget_power=0``,
        Algorithm 1 read literally).
    forget_power : float >= 0, default=3.0
        Before the statistics take their t-th batch (counted from their last reset),
        they are scaled by ``(1 - 1/t) ** forget_power`` (Mairal et al., JMLR 2010,
        "scaling the past data"): a batch weighs about as ``t ** forget_power``, so the
        codes found with the early, poor W of a pass fade as W improves.  0 weighs every
        batch alike (the paper's sums).  Measured: on 400,000 planted samples (98
        batches a pass) the second half of the first pass is within 6 % of the
        converged objective at 3 (at 0: 6 times it); on 4,000,000 (984 batches a pass)
        within 0.2 %, and the fit stops after 3 passes (it made 8 before issue 38's
        schedule); on corrupted ORL faces (rho 10 % / 30 %) the defaults reconstruct
        at 1.081x / 1.059x the converged batch model's E_avg in 6-8 passes (before:
        1.080x / 1.088x in 8-10; ``benchmarks/results/onmfo.md``,
        ``onmfo_planted.md``).
    shuffle : bool, default=True
        Visit the batches in a seeded random order in every pass.
    prefetch : int, default=2
        Batches read ahead of the one being solved; with the default batches, the row
        groups read ahead of the one being solved.
    checkpoint : str, os.PathLike or None, default=None
        Directory receiving W, A, B, C, the position in the stream, the seed and a
        fingerprint of X, atomically, every ``checkpoint_every`` batches and at the end
        of every pass.  The library owns it (a marker file and its own subfolder; nothing
        else in the directory is touched).  ``fit(X, resume=True)`` continues from it.
    checkpoint_every : int, default=10
        Batches between checkpoints.
    random_state : int, RandomState instance, Generator or None, default=None
        Seeds W's start and the batch orders.
    verbose : int, default=0
        >= 1 writes one line per batch, one per pass and a last one (``daskrnmf`` logger,
        INFO, when logging is configured; else stderr).
    callback : callable or None, default=None
        ``callback(info) -> bool`` after each batch with the driver's dict (``iteration``
        = batches done, ``max_iter`` = ``max_iter * n_batches``, ``objective``) and
        ``pass``, ``batch`` (position in the pass), ``n_batches``, ``n_samples_seen``,
        ``loss`` (mean per-sample objective of the batch under the W it was solved
        with), ``inner_rounds`` (mean rounds of its (h, r) solve); True stops the fit (the attributes describe the W reached, and the
        checkpoint is saved).
    **renamed
        ``lam`` (the old name of ``alpha_R``) and ``n_passes`` (the old name of
        ``max_iter``) are accepted with a FutureWarning until daskrnmf 0.3.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        W, in X's float dtype.
    alpha_R_ : float
        The alpha_R of the fit (``"auto"``: the value computed from the first batch, kept
        by later :meth:`partial_fit` calls and by a resumed fit), also used by
        :meth:`transform` and :meth:`decompose`.
    objective_history_ : ndarray of shape (n_passes_,)
        Per pass, the mean per-sample objective of the batches of its second half (the
        last ``ceil(n_batches / 2)``), each evaluated under the W it was solved with
        (the online surrogate; no extra pass over X; the first half, with the W of
        the pass's start still moving, left out).
    n_iter_ : int
        Passes over X started.
    n_inner_iter_ : float
        Mean rounds of the (h, r) solve per sample in the last pass (how many inner
        rounds ``inner_tol`` needed).
    n_steps_ : int
        W updates (batches) since the model was created (fit and partial_fit).
    n_passes_ : int
        Complete passes of the stream over X in the last ``fit`` (the first pass that
        checks X's values is not counted).
    n_samples_seen_ : int
        Samples solved, counted once per pass.
    n_components_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names.

    See Also
    --------
    RobustNMF : the batch model with the same objective.
    sklearn.decomposition.MiniBatchNMF : online NMF without outliers.

    References
    ----------
    .. [1] R. Zhao and V. Y. F. Tan, "Online nonnegative matrix factorization with
       outliers", in Proc. IEEE International Conference on Acoustics, Speech and Signal
       Processing (ICASSP), 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from daskrnmf import ONMFO
    >>> X = np.random.default_rng(0).uniform(size=(200, 10))
    >>> model = ONMFO(n_components=3, random_state=0)
    >>> H = model.fit_transform(X)
    >>> H.shape, model.components_.shape
    ((200, 3), (3, 10))
    >>> H, R = model.decompose(X)
    """

    _first_pass = False     # every batch is checked as it is streamed
    _renamed_params = {"lam": "alpha_R", "n_passes": "max_iter"}
    # what save/load keeps beyond the public attributes: partial_fit continues after load
    _saved_private = BaseModel._saved_private + ("_W", "_A", "_B", "_C", "_Bm",
                                                 "_stream_seed",
                                                 "_n_observed", "_n_stat")

    _parameter_constraints = {
        **_OutlierFactorization._parameter_constraints,
        "max_iter": [v.Interval(int, 1, None)],
        "tol": [v.Interval(float, 0, None)],
        "batch_size": [v.Interval(int, 1, None), v.Kind((type(None),), "None")],
        "max_w_iter": [v.Interval(int, 1, None)],
        "reset_statistics": [v.Kind((bool,), "a bool")],
        "forget_power": [v.Interval(float, 0, None)],
        "shuffle": [v.Kind((bool,), "a bool")],
        "prefetch": [v.Interval(int, 0, None)],
        "checkpoint": [v.Location()],
        "checkpoint_every": [v.Interval(int, 1, None)],
    }

    def __init__(self, n_components=8, *, alpha_R="auto", solver="cd", max_iter=50, tol=1e-2,
                 batch_size=None, max_inner_iter=100, inner_tol=1e-2, max_w_iter=4,
                 missing="raise", reset_statistics=True, forget_power=3.0, shuffle=True,
                 prefetch=2, checkpoint=None, checkpoint_every=10, random_state=None,
                 verbose=0, callback=None, **renamed):
        self.n_components = n_components
        self.alpha_R = alpha_R
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.max_inner_iter = max_inner_iter
        self.inner_tol = inner_tol
        self.max_w_iter = max_w_iter
        self.missing = missing
        self.reset_statistics = reset_statistics
        self.forget_power = forget_power
        self.shuffle = shuffle
        self.prefetch = prefetch
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback
        self._take_renamed(renamed)

    # its checkpoints are of the stream's position (checkpoint_every batches), its own
    _driver_checkpoints = False

    # -- the stream
    def fit(self, X, y=None, *, resume=False, overwrite_checkpoint=False):
        """Stream X until the passes converge (``tol``) or ``max_iter`` passes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), non-negative
            NumPy array or array-like, Dask array chunked along rows, ``zarr.Array`` or
            Zarr path.
        y : None
            Ignored.
        resume : bool, default=False
            Continue from ``checkpoint`` if it holds a run of this model on this X (same
            data, batches, parameters and seed; ``max_iter`` may differ); the result is
            the W of an uninterrupted run.  Without a checkpoint the fit starts afresh.
            A damaged checkpoint, or one made from other data, is a ValueError.
        overwrite_checkpoint : bool, default=False
            Without ``resume``, a ``checkpoint`` directory that holds an earlier run's
            checkpoint is a ValueError unless this is True (the earlier run is then
            replaced at the first save).

        Returns
        -------
        self : ONMFO
        """
        if resume and self.checkpoint is None:
            raise ValueError(f"resume=True needs the 'checkpoint' parameter of {self._name} "
                             "to be set.")
        if resume and overwrite_checkpoint:
            raise ValueError("resume=True and overwrite_checkpoint=True contradict each other.")
        self._fit(X, y, resume=resume, overwrite_checkpoint=overwrite_checkpoint)
        return self

    def _fit_blocks(self, X, blocks, stats, seed, y, *, resume, overwrite_checkpoint):
        # one fit at a time on a checkpoint directory: the lock is held until the fit
        # returns (a second fit on it is a ValueError, not a race for its generations)
        lock = None if self.checkpoint is None else _checkpoint.Lock(self.checkpoint)
        try:
            self._fit_stream(X, seed, resume, overwrite_checkpoint, lock)
        finally:
            if lock is not None:
                lock.release()

    def _fit_stream(self, X, seed, resume, overwrite_checkpoint, lock):
        n, d = X.shape
        k = self.n_components
        batches, pieces, units = make_batches(X, self.batch_size)
        saved, data, claimed = None, None, None
        if self.checkpoint is not None:
            _checkpoint.check_location(self.checkpoint, X)    # never in or around X's store
            lock.acquire()              # the directory is read only under the lock
            saved = _checkpoint.load(self.checkpoint) if resume else None
            if saved is None:
                claimed = _checkpoint.claim(self.checkpoint, overwrite=overwrite_checkpoint)
                lock.acquire()          # the marker claim() made, if it was not there
            data = _checkpoint.data_fingerprint(X)
        if saved and self.random_state is None:
            seed = int(saved[1]["seed"])
        key = self._fingerprint(n, d, batches, units, seed)
        bounds = unit_bounds(batches, units) if self.batch_size is None else None
        feed = Feed(X, pieces, bounds=bounds, **self._chunk_checksums(saved))
        try:
            if saved:
                _checkpoint.check_same_data(saved[1].get("data", {}), data, saved[1]["_file"])
                run = self._restore(saved, key, len(batches))
                self.alpha_R_ = self._saved_alpha(saved[1])
            else:
                first = batch_order(seed, 0, units, self.shuffle)[0]
                self.alpha_R_ = self._fit_alpha(lambda: feature_max(
                    feed._run(first, piece_feature_max, ())))
                W = initial_components(seed, k, d, feed.mean(first))
                run = _Run(W=W, A=np.zeros((k, d)), B=np.zeros((k, k)), C=np.zeros((k, d)))
            run = self._stream(run, feed, batches, units, seed, key, data)
        except BaseException as exc:
            # bad data found while streaming (each batch is checked as it is read): a
            # fresh run leaves no checkpoint behind; any other failure (a callback that
            # raises, Ctrl-C) keeps what this run saved, to resume, and leaves no empty
            # checkpoint when it saved nothing.  An earlier run's checkpoint is never
            # removed here (see _checkpoint.release).
            if claimed is not None and (isinstance(exc, ValueError) or not
                                        _checkpoint.holds_run(self.checkpoint)):
                _checkpoint.release(self.checkpoint, claimed)
            raise
        finally:
            feed.close()
        self._W, self._A, self._B, self._C = run.W, run.A, run.B, run.C
        self._Bm = run.Bm
        self._n_observed = run.n_observed
        self._n_stat = (run.n_stat if run.n_stat is not None
                        else run.pos if self.reset_statistics else run.n_steps)
        self._stream_seed = seed
        self.components_ = run.W
        self.objective_history_ = np.array(run.history, dtype=np.float64)
        self.n_iter_ = run.pass_ + (1 if run.pos else 0)
        self.n_inner_iter_ = run.inner_rounds / max(run.inner_n, 1)
        if self.tol > 0 and not run.converged and not run.stopped:
            from .._driver import warn_if_not_converged

            warn_if_not_converged(self._name, False, self.max_iter)
        self.n_steps_ = run.n_steps
        self.n_passes_ = run.passes_done      # set here: the fit's final event shows it
        progress = getattr(self, "_progress", None)
        if progress is not None:
            # the last line: the bar full when the stream converged before max_iter passes
            progress.note(converged=bool(run.converged), stopped=bool(run.stopped),
                          n_batches=len(batches), iteration=int(run.n_steps),
                          max_iter=int(self.max_iter) * len(batches),
                          n_samples_seen=int(run.n_seen),
                          objective=float(run.history[-1]) if run.history else None)
        self.n_samples_seen_ = run.n_seen
        self.n_components_ = k

    def _past_weight(self, t):
        """The factor the statistics are scaled by before they take batch ``t`` (1, 2,
        ...; counted from their last reset): ``(1 - 1/t) ** forget_power`` (Mairal et
        al. 2010, scaling the past data), 1 when ``forget_power`` is 0."""
        p = float(self.forget_power)
        return 1.0 if p == 0 or t <= 1 else (1.0 - 1.0 / t) ** p

    def _update_W(self, W, A, B, C, Bm=None):
        return update_W(W, A, B, C, self.solver, self.max_w_iter, float(self.inner_tol), Bm)

    def _update_spec(self):
        return UpdateSpec(solver=self.solver, n_iter=int(self.max_w_iter),
                          tol=float(self.inner_tol), forget_power=float(self.forget_power))

    def _stream(self, run, feed, batches, units, seed, key, data):
        """One driver step per batch, from the run's position until the passes converge
        or ``max_iter`` passes."""
        nb = len(batches)
        spec = self._spec()
        orders = {}
        # default batches: the next ``prefetch`` row groups are read ahead (a group is
        # many batches); else the next ``prefetch`` batches
        unit_of = {b: u for u, unit in enumerate(units) for b in unit}
        span = max(len(u) for u in units) if self.batch_size is None else 1

        solved = {}     # (pass, position) -> a batch's figures and the state after it

        def order(p):
            if p not in orders:
                orders[p] = batch_order(seed, p, units, self.shuffle)
            return orders[p]

        def step(run, active):
            nonlocal spec
            p, j = run.pass_, run.pos
            if j == 0:
                run.tic_pass = time.perf_counter()
                run.loss_sum, run.pass_n = 0.0, 0
                run.inner_rounds, run.inner_n = 0, 0
                if p > 0 and self.reset_statistics:
                    run.A[:], run.B[:], run.C[:] = 0.0, 0.0, 0.0
                    run.Bm = None
                    run.n_stat = 0
            if run.n_stat is None:
                # a fresh or resumed run: its statistics hold the batches its position
                # says (exact unless a batch of only missing values came before a
                # checkpoint within the same statistics; checkpoints do not hold n_stat)
                run.n_stat = j if self.reset_statistics else run.n_steps
            ahead = upcoming(order, nb, self.max_iter, p, j, 1 + self.prefetch * span)
            for b in read_ahead(ahead, unit_of, self.prefetch):
                feed.want(b)
            b = int(order(p)[j])
            if run.n_observed == 0 and run.n_steps > 0:
                # every batch so far was all missing: W's start came from a 'mean' of
                # nothing; start it from this batch instead (as from a first batch)
                run.W = initial_components(seed, self.n_components, run.W.shape[1],
                                           feed.mean(b))
                if isinstance(self.alpha_R, str):       # alpha_R="auto" too
                    self.alpha_R_ = self._fit_alpha(lambda: feature_max(
                        feed._run(b, piece_feature_max, ())))
                    spec = self._spec()
            if self.batch_size is None:
                # default batches: the rest of b's row group in one task where it is read
                # (solve, statistics, W per batch; _outliers.solve_batches), its batches'
                # results then taken one a step
                if (p, j) not in solved:
                    k, d = run.W.shape      # the states a task returns: bounded
                    size = 8 * (3 * k * d + k * k + (d * k * k if self._allow_nan else 0))
                    group = group_rest(order(p), j, unit_of, RUN_STATE_BYTES // size)
                    rows = [batch_rows(seed, p, units, batches, c) if self.shuffle else None
                            for c in group]
                    done = feed.solve_run(group, solve_batches, run.state(), spec,
                                          self._update_spec(), rows=rows)
                    solved.clear()
                    solved.update(((p, j + i), r) for i, r in enumerate(done))
                st, state = solved.pop((p, j))
                run.set_state(state)
            else:
                st = feed.solve(b, solve_batch_piece, add_statistics, run.W, spec)
                run.set_state(take_batch(run.state(), st, self._update_spec()))
            run.inner_rounds += st["rounds"]
            run.inner_n += st["n"]
            if j >= nb // 2:        # the pass's objective: its second half of batches
                run.loss_sum += st["loss"]
                run.pass_n += st["n"]
            run.n_seen += st["n"]
            run.n_steps += 1
            run.pos += 1
            run.last = {"pass": p, "batch": j, "n_batches": nb, "n_samples_seen": run.n_seen,
                        "loss": st["loss"] / max(st["n"], 1),
                        "inner_rounds": st["rounds"] / max(st["n"], 1)}
            if run.pos == nb:
                if run.n_observed == 0:
                    # found in the pass that reads X anyway (a lazy X is not read before)
                    raise ValueError(f"X passed to {self._name} has no observed (non-NaN) "
                                     "value.")
                run.history.append(run.loss_sum / max(run.pass_n, 1))
                run.pass_, run.pos = p + 1, 0
                run.passes_done += 1
                h = run.history      # noisy (batch order): two passes without a new best
                run.converged = bool(self.tol > 0 and len(h) >= 3
                                     and min(h[-2:]) > (1 - self.tol) * min(h[:-2]))
                if self.verbose:
                    progress = getattr(self, "_progress", None)
                    say("%s pass %d: objective %.6g per sample, %d batches, %.3f s%s",
                        self._name, p + 1, run.history[-1], nb,
                        time.perf_counter() - getattr(run, "tic_pass", time.perf_counter()),
                        f", {progress.elapsed():.1f} s into the fit" if progress else "")
            return run, np.array([run.last["loss"]])

        def after_step(run, iteration, stopping):
            if self.checkpoint is not None and (
                    stopping or run.pos == 0 or iteration % self.checkpoint_every == 0):
                self._save(run, key, data, feed.checksums)

        # ``blocks=run``: the driver reports ``run.n_passes`` (complete passes) as n_passes
        if run.converged:       # a resumed run that had converged: nothing left to do
            return run
        run, log = self._run(step, run, max_iter=self.max_iter * nb, tol=0.0, rule="none",
                             blocks=run, start=run.n_steps, after_step=after_step,
                             step_info=lambda run: dict(run.last),
                             converged=lambda run: run.converged)
        run.stopped = log.stopped_by_callback
        return run

    # -- checkpoints
    def _fingerprint(self, n, d, batches, units, seed):
        bounds = (np.array(batches, dtype=np.int64).tobytes()
                  + np.array([len(u) for u in units], dtype=np.int64).tobytes())
        if self.batch_size is None:
            # the default batches are row groups read whole (before: X's chunks): a
            # checkpoint of the old default batches is of a different run
            bounds += b"row groups"
        extra = {"missing": "mask"} if self._allow_nan else {}
        return {**extra, "model": self._name, "n_samples": int(n), "n_features": int(d),
                "n_components": int(self.n_components),
                "alpha_R": (self.alpha_R if isinstance(self.alpha_R, str)
                            else float(self.alpha_R)),
                "solver": self.solver, "tol": float(self.tol),
                "inner_tol": float(self.inner_tol),
                "max_inner_iter": int(self.max_inner_iter), "max_w_iter": int(self.max_w_iter),
                "reset_statistics": bool(self.reset_statistics), "shuffle": bool(self.shuffle),
                "forget_power": float(self.forget_power),
                "batches": hashlib.sha256(bounds).hexdigest()[:16], "seed": str(seed)}

    def _chunk_checksums(self, saved):
        """The feed's checksum arguments: none without a checkpoint; a resumed run's
        X is checked against the checksums of the chunks the run read before."""
        if self.checkpoint is None:
            return {}
        if not saved:
            return {"checksums": {}}
        sums, where = saved[1].get("chunk_sha256", {}), saved[1]["_file"]
        if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in sums.items()):
            raise ValueError(f"The checkpoint {where} is damaged: its chunk checksums are "
                             "not a mapping of row ranges to checksums.")
        return {"checksums": sums, "since": f"the checkpoint {where} was made",
                "hint": "Resume with the X it was made from, or fit with "
                        "overwrite_checkpoint=True to start afresh."}

    def _save(self, run, key, data, checksums=None):
        arrays = {"W": run.W, "A": run.A, "B": run.B, "C": run.C,
                  "history": np.array(run.history, dtype=np.float64)}
        if run.Bm is not None:      # missing="mask": the per-feature Gram matrices
            arrays["Bm"] = run.Bm
        attrs = {"fingerprint": key, "data": data, "seed": key["seed"], "pass": run.pass_,
                 "position": run.pos, "n_steps": run.n_steps, "n_samples_seen": run.n_seen,
                 "passes_done": run.passes_done, "loss_sum": run.loss_sum,
                 "pass_n": run.pass_n, "inner_rounds": int(run.inner_rounds),
                 "inner_n": int(run.inner_n), "converged": bool(run.converged),
                 # the chunks of X read so far, checked when a resumed run reads them
                 "chunk_sha256": dict(checksums or {}),
                 "n_observed": int(run.n_observed), "alpha_R_": float(self.alpha_R_)}
        _checkpoint.save(self.checkpoint, arrays, attrs)

    def _saved_alpha(self, attrs):
        """The resumed run's alpha_R (``"auto"``: the one computed at its start)."""
        if not isinstance(self.alpha_R, str):
            return float(self.alpha_R)
        alpha = attrs.get("alpha_R_")
        if (isinstance(alpha, bool) or not isinstance(alpha, (int, float))
                or not np.isfinite(alpha) or alpha <= 0):
            raise ValueError(f"The checkpoint {attrs['_file']} is damaged: its alpha_R_ "
                             f"{alpha!r} is not a positive number.")
        return float(alpha)

    def _restore(self, saved, key, n_batches):
        arrays, attrs = saved
        where = attrs["_file"]
        old = dict(attrs.get("fingerprint", {}))
        # "missing" is in the fingerprint of missing="mask" runs only (older checkpoints,
        # and missing="raise" runs, have none): a difference either way counts
        fields = list(key) + [f for f in ("missing",) if f in old and f not in key]
        differ = sorted(f for f in fields if old.get(f) != key.get(f))
        if differ:
            raise ValueError(f"The checkpoint {where} is of a different run: "
                             + ", ".join(f"{f} {old.get(f)!r} there, {key.get(f)!r} here"
                                         for f in differ)
                             + ". Fit without resume=True to start afresh.")
        try:
            p, pos, steps = int(attrs["pass"]), int(attrs["position"]), int(attrs["n_steps"])
            run = _Run(W=arrays["W"], A=arrays["A"], B=arrays["B"], C=arrays["C"],
                       Bm=arrays.get("Bm"),
                       history=list(arrays["history"]), pass_=p, pos=pos, n_steps=steps,
                       n_seen=int(attrs["n_samples_seen"]),
                       passes_done=int(attrs["passes_done"]),
                       loss_sum=float(attrs["loss_sum"]), pass_n=int(attrs["pass_n"]),
                       inner_rounds=int(attrs.get("inner_rounds", 0)),
                       inner_n=int(attrs.get("inner_n", 0)),
                       converged=bool(attrs.get("converged", False)),
                       # older checkpoints: counted as observed (W updated as before)
                       n_observed=int(attrs.get("n_observed", 1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"The checkpoint {where} is damaged: {type(exc).__name__}: "
                             f"{exc}.") from exc
        k, d = key["n_components"], key["n_features"]
        shapes = {"W": (k, d), "A": (k, d), "B": (k, k), "C": (k, d)}
        if "Bm" in arrays:
            shapes["Bm"] = (d, k, k)
        bad = [f"{a} {arrays[a].shape} (expected {s})" for a, s in shapes.items()
               if arrays[a].shape != s]
        if bad:
            raise ValueError(f"The checkpoint {where} is damaged: " + ", ".join(bad) + ".")
        if not (0 <= pos < n_batches and p >= 0 and steps == p * n_batches + pos
                and 0 <= run.passes_done == len(run.history) == p):
            raise ValueError(f"The checkpoint {where} is damaged: its position (pass {p}, "
                             f"batch {pos}, {steps} steps) is not a position of a stream of "
                             f"{n_batches} batches per pass.")
        return run

    # -- data that arrives over time
    def partial_fit(self, X, y=None):
        """One step of Algorithm 1 with the samples of X as the batch.

        The first call starts W (as ``fit`` does, from X's mean and ``random_state``);
        every call solves X's codes and outliers under the current W, adds its statistics
        and updates W.  Repeated calls on the batches of ``fit``'s order give ``fit``'s W
        (with ``reset_statistics`` irrelevant for one pass).

        The parameters are checked at every call; ``n_components`` is fixed by the first
        call (or ``fit``): a later change is a ValueError, as W and the statistics have
        that many rows (a fresh estimator, ``sklearn.base.clone(model)``, takes another).
        A refused call leaves the model as it was.

        Parameters
        ----------
        X : array-like of shape (n_batch, n_features), non-negative
        y : None
            Ignored.

        Returns
        -------
        self : ONMFO
        """
        with self._unchanged_on_error():
            return self._partial_fit(X)

    def _partial_fit(self, X):
        first = not hasattr(self, "_W")
        # every call, as scikit-learn's partial_fit: set_params between calls is checked
        self._validate_params()
        if not first and self.n_components != self.n_components_:
            raise ValueError(f"The 'n_components' parameter of {self._name} was changed "
                             f"from {self.n_components_} to {self.n_components} after the "
                             "first partial_fit call; the components and statistics are "
                             f"of {self.n_components_} components. Fit a fresh estimator "
                             "(sklearn.base.clone(model)) for another number.")
        X = self._validate_data(X, reset=first, method="partial_fit")
        _, pieces, _ = make_batches(X, X.shape[0])
        feed = Feed(X, pieces)
        try:
            # alpha_R="auto": from the first call's X (or, while every call so far had
            # only missing values, from this one), kept by the calls after it
            keep = (not first and isinstance(self.alpha_R, str) and hasattr(self, "alpha_R_")
                    and getattr(self, "_n_observed", 1) > 0)
            self.alpha_R_ = self.alpha_R_ if keep else self._fit_alpha(
                lambda: feature_max(feed._run(0, piece_feature_max, ())))
            if first:
                seed = self._seed()
                k, d = self.n_components, X.shape[1]
                W = initial_components(seed, k, d, feed.mean(0))
                A, B, C = np.zeros((k, d)), np.zeros((k, k)), np.zeros((k, d))
                Bm = None
            else:
                W, A, B, C = self._W, self._A, self._B, self._C
                Bm = getattr(self, "_Bm", None)
                if getattr(self, "_n_observed", 1) == 0:
                    # the calls so far had only missing values: W starts from this batch
                    W = initial_components(self._stream_seed, self.n_components,
                                           X.shape[1], feed.mean(0))
            st = feed.solve(0, solve_batch_piece, add_statistics, W, self._spec())
        finally:
            feed.close()
        n_stat = (0 if first else getattr(self, "_n_stat", self.n_steps_)) + bool(st["observed"])
        # as in fit: the statistics scaled before a batch with observed values is added
        if st["observed"]:      # an all-missing batch adds nothing
            w = self._past_weight(n_stat)
            A, B, C = A * w + st["A"], B * w + st["B"], C * w + st["C"]
            if Bm is not None:
                Bm = Bm * w
            if "Bm" in st:
                Bm = st["Bm"] if Bm is None else Bm + st["Bm"]
        # a batch of all-missing rows adds nothing and leaves W as it is
        self._W = self._update_W(W, A, B, C, Bm) if st["observed"] else W
        self._n_observed = (0 if first else getattr(self, "_n_observed", 1)) + st["observed"]
        self._A, self._B, self._C, self._Bm = A, B, C, Bm
        self._n_stat = n_stat
        if first:
            self._stream_seed = seed
            self._fit_dtype = self._output_dtype(X)
            self.n_components_ = self.n_components
            self.n_steps_, self.n_samples_seen_, self.n_passes_, self.n_iter_ = 0, 0, 0, 0
            self.objective_history_ = np.array([])
        self.n_inner_iter_ = st["rounds"] / max(st["n"], 1)
        self.components_ = self._W
        self._cast_fitted()
        self.n_steps_ += 1
        self.n_samples_seen_ += int(st["n"])
        return self


class _Run:
    """State of a streaming fit (everything a checkpoint holds)."""

    def __init__(self, *, W, A, B, C, Bm=None, history=None, pass_=0, pos=0, n_steps=0,
                 n_seen=0, passes_done=0, loss_sum=0.0, pass_n=0, inner_rounds=0, inner_n=0,
                 converged=False, n_observed=0):
        self.W = np.array(W, dtype=np.float64)
        self.A, self.B, self.C = (np.array(M, dtype=np.float64) for M in (A, B, C))
        # missing="mask": per-feature Gram matrices of the rows with missing values
        self.Bm = None if Bm is None else np.array(Bm, dtype=np.float64)
        self.history = [float(h) for h in (history or [])]
        self.pass_, self.pos, self.n_steps, self.n_seen = pass_, pos, n_steps, n_seen
        self.passes_done, self.loss_sum, self.pass_n = passes_done, loss_sum, pass_n
        self.inner_rounds, self.inner_n = inner_rounds, inner_n
        self.converged, self.stopped = converged, False
        # batches with observed values in the statistics since their last reset (None:
        # as many as the position says, see ONMFO._stream)
        self.n_stat = None
        # observed (non-NaN) entries solved so far; 0: W is still its placeholder start
        self.n_observed = n_observed
        self.last = {}

    @property
    def n_passes(self):
        return self.passes_done

    def scale(self, weight):
        """Scale the statistics A, B, C (and Bm) by ``weight`` (1: unchanged)."""
        if weight != 1.0:
            for M in (self.A, self.B, self.C) + (() if self.Bm is None else (self.Bm,)):
                M *= weight

    def state(self):
        """What a batch changes (:func:`daskrnmf.models._outliers.take_batch`)."""
        return {"W": self.W, "A": self.A, "B": self.B, "C": self.C, "Bm": self.Bm,
                "n_stat": self.n_stat, "n_observed": self.n_observed}

    def set_state(self, state):
        self.W, self.A, self.B, self.C = (state[key] for key in "WABC")
        self.Bm = state["Bm"]
        self.n_stat, self.n_observed = state["n_stat"], state["n_observed"]

    def add_Bm(self, Bm):
        """Add a batch's per-feature statistics (None: it had no missing value)."""
        if Bm is not None:
            self.Bm = np.array(Bm, dtype=np.float64) if self.Bm is None else self.Bm + Bm
