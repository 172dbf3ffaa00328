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
(16)-(17)); only the batch's A, B, C come back; then W takes ``max_w_iter`` rounds of
(18).  The stream (batches, orders, read-ahead) is :mod:`daskrnmf._stream`; the per-batch
solve is :mod:`daskrnmf.models._outliers`; the loop is the one driver
(:mod:`daskrnmf._driver`), one step per batch, converging by its passes
(``rule="passes"``) and checkpointing W, the statistics and the position as every model
does (:mod:`daskrnmf._resume`).

Choices the paper leaves open: the starting h and r of each solve
(:func:`daskrnmf.kernels.outliers.initial_codes`), the inner iteration counts, and whether
A, B, C start again at each pass and after the first pass's first row group
(``reset_statistics``, measured to help).
"""

import dataclasses
import hashlib

import numpy as np

from .. import _validation as v
from .._base import BaseModel
from .._stream import Feed, make_batches, process_threads, unit_bounds
from ._onmfo_stream import GroupLayout, _Run, _Stream, group_prepare, stream_step
from ._outliers import (UpdateSpec, add_statistics, feature_max, initial_components,
                        piece_feature_max, solve_batch_piece)
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
        of the earlier passes by more than ``tol`` relative (the pass objective of few
        batches varies by about 1 % with the batch order, hence two), or when one pass has
        not and the objectives of it and the pass before are precise: each one's
        relative standard error, estimated from the spread of the losses of the (at least
        16) batches it averages, at most ``tol / 4``.  Such a pass was flat (W still
        improving in it would spread its batches' losses), so a large X whose first
        pass makes hundreds of W updates stops after its second pass
        (:func:`daskrnmf._driver.passes_converged`).  0 makes exactly ``max_iter``
        passes.  On the 400 ORL faces (8 batches a pass) this takes 6 to 8 passes and
        reconstructs within 1.1x of the converged batch model
        (``benchmarks/results/onmfo.md``; too few batches to estimate an error: always the
        two passes in a row); on 400,000 planted samples (98 batches a pass, errors of
        0.2-0.35 %, mostly above ``tol / 4``) four or five; on 1,000,000 (246 batches,
        0.16-0.2 %) two or three, reconstructing within 0.6 % of a fit of four passes.
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
        solved again at every pass) with 40 % fewer rounds.
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
        error.  With the default batches of an X of more than one row group (more than
        524,288 rows at 64 features) also once in the first pass, where its second
        group starts: the first group's codes were found with the random start's W
        (measured on planted rows: the first pass's objective 31.8 -> 28.6 on 500,000 x
        256, whose fit then stops after 2 passes instead of 3; on 4,000,000 x 64 its
        (h, r) solves 2.12 -> 1.87 rounds a row and the fit's E_avg 1.005x -> 1.003x the
        converged batch model's, one seed; ``benchmarks/results/onmfo_planted.md``).  False
        accumulates them over all passes (with ``forget_power=0``, Algorithm 1 read
        literally).
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
        W updates (batches): those of the last ``fit`` (a fit starts the count afresh)
        and of the ``partial_fit`` calls after it.
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

    Notes
    -----
    The batches depend on each other through W and are solved one after the other;
    on a Dask worker a batch's rows are solved in slices of 2,048 by as many threads
    as the worker has (``threads_per_worker``; the task solving the batches runs alone
    there).  The slices' statistics are added in their order, so the fit is the same
    whatever the number of threads; a batch of one slice (2,048 rows or fewer) is solved
    by one.  Outside a worker (NumPy X, Dask's local schedulers) the batches are solved
    by one thread: more would compete with BLAS's own threads in the user's process
    (on 2 cores a 300,000 x 64 fit took 0.62 s on one thread and 0.65 s on two), and
    limiting BLAS there would change the user's process for everything else it runs.

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

    @property
    def _state_follows_chunks(self):
        """The default batches are X's rows (a resume may read X chunked otherwise);
        ``batch_size=`` batches are read by X's chunks, whose checksums a resume checks:
        X chunked otherwise is refused, as for the batch models."""
        return self.batch_size is not None
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

    # -- the stream
    def _fit_blocks(self, X, blocks, stats, seed, y):
        k = self.n_components
        batches, pieces, units = make_batches(X, self.batch_size)
        ckpt = getattr(self, "_fit_checkpoint", None)
        checks = {}
        if ckpt is not None:
            # the stream's batches decide its saved position; the chunks of X read so
            # far are checksummed (a resumed run checks them as it reads them again)
            layout = (np.array(batches, dtype=np.int64).tobytes()
                      + np.array([len(u) for u in units], dtype=np.int64).tobytes())
            ckpt.add_fingerprint(batches=hashlib.sha256(layout).hexdigest()[:16])
            checks["checksums"] = {}
            if ckpt.saved is not None:
                checks.update(since=f"the checkpoint {ckpt.saved[1]['_file']} was made",
                              hint="Resume with the X it was made from, or fit with "
                                   "overwrite_checkpoint=True to start afresh.")
        if self.batch_size is None:
            # row groups: each checked and put in its pass's batch order where it is read
            checks.update(bounds=unit_bounds(batches, units),
                          layout=GroupLayout(seed, units, batches, self.shuffle),
                          prepare=group_prepare(self._name, self._allow_nan))
        feed = Feed(X, pieces, **checks)
        vars(self).pop("alpha_R_", None)        # a refit's: from this fit's stream
        stream = _Stream(self, feed, batches, units, seed)
        d, nb = X.shape[1], len(batches)

        def step(run, active):
            try:
                return stream.step(run, active)
            except ValueError:
                # bad data found while streaming (not the callback's ValueError): a
                # fresh run's checkpoint is removed (BaseModel._checkpointing)
                if ckpt is not None:
                    ckpt.bad_data = True
                raise

        start = _Run(None, np.zeros((k, d)), np.zeros((k, k)), np.zeros((k, d)))
        try:
            # one driver step per batch until the passes converge (the driver's
            # rule="passes") or max_iter passes; a run its callback stopped continues
            # when resumed
            run, log = self._run(
                step, start, max_iter=self.max_iter * nb, rule="passes",
                blocks=stream, problem=stream, step_info=lambda run: dict(run.last),
                pass_objectives=lambda run: run.history,
                pass_errors=lambda run: run.history_se, resume_stopped=True,
                checkpoint_when=lambda run, it, last: (run.pos == 0 or
                                                       it % self.checkpoint_every == 0))
        finally:
            stream.close()          # (the feed's too)
        self._W, self._A, self._B, self._C, self._Bm = run.W, run.A, run.B, run.C, run.Bm
        self._n_observed, self._n_stat = run.n_observed, run.n_stat
        self._stream_seed = seed
        self.components_ = run.W
        self.objective_history_ = np.array(run.history, dtype=np.float64)
        self.n_iter_ = run.pass_ + (1 if run.pos else 0)
        self.n_inner_iter_ = run.inner_rounds / max(run.inner_n, 1)
        self._warn_unless_converged(log)
        self.n_steps_ = run.n_steps
        self.n_passes_ = run.pass_      # set here: the fit's final event shows it
        progress = getattr(self, "_progress", None)
        if progress is not None:
            # the last line: the bar full when the stream converged before max_iter passes
            progress.note(converged=bool(log.converged[0]),
                          stopped=bool(log.stopped_by_callback), n_batches=nb,
                          iteration=int(run.n_steps), max_iter=int(self.max_iter) * nb,
                          n_samples_seen=int(run.n_seen),
                          objective=float(run.history[-1]) if run.history else None)
        self.n_samples_seen_ = run.n_seen
        self.n_components_ = k

    def _solve_batch(self, feed, b, W, use=None):
        """Batch ``b``'s statistics under W (``feed.solve``).  In this process (no
        distributed Client), one batch after the other, with the threads it may use
        (:func:`daskrnmf._stream.process_threads`); on a cluster a batch's pieces are
        parallel tasks, one thread each (the default batches' row-group tasks take their
        workers' threads, :func:`~daskrnmf.models._onmfo_stream.solve_batches_sent`)."""
        spec = self._spec()
        if feed.client is not None:
            return feed.solve(b, solve_batch_piece, add_statistics, W, spec, use=use)
        return feed.solve(b, solve_batch_piece, add_statistics, W,
                          dataclasses.replace(spec, threads=process_threads()), use=use)

    def _update_spec(self):
        """W's update after a batch (:func:`~daskrnmf.models._outliers.take_batch`)."""
        return UpdateSpec(solver=self.solver, n_iter=int(self.max_w_iter),
                          tol=float(self.inner_tol), forget_power=float(self.forget_power))

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
            st = self._solve_batch(feed, 0, W)
        finally:
            feed.close()
        run = _Run(W, A, B, C, Bm,
                   n_stat=0 if first else getattr(self, "_n_stat", self.n_steps_),
                   n_observed=0 if first else getattr(self, "_n_observed", 1))
        stream_step(run, st, self._update_spec())     # as fit's step
        self._W, self._A, self._B, self._C, self._Bm = run.W, run.A, run.B, run.C, run.Bm
        self._n_observed, self._n_stat = run.n_observed, run.n_stat
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
