"""The estimator base every daskrnmf model stands on.

It owns, once, what every ``fit`` / ``predict`` / ``transform`` does before and after the
model's own maths:

* parameters: one constraint table per estimator (``_parameter_constraints``, extended
  by subclasses), one error form, renamed parameters that keep working with a
  :class:`FutureWarning`;
* input: NumPy arrays, lists and other array-likes, pandas DataFrames (through
  scikit-learn's ``validate_data``: the standard messages, ``n_features_in_`` and
  ``feature_names_in_``), and Dask arrays, ``zarr.Array`` and Zarr paths (kept lazy and
  checked on the workers, never gathered); the same NaN/inf, non-negativity and
  feature-count checks on both paths;
* the fit template: validate → first pass (finiteness, per-feature range) → seed →
  the model's problem → the one iteration driver (:mod:`daskrnmf._driver`) → fitted
  attributes, cast to X's float dtype;
* tags (non-negative input, no NaN unless ``missing="mask"``, no sparse input, float32
  preserved);
* missing values: a model whose maths allows them sets ``_supports_missing = True`` and
  adds the parameter ``missing`` (``"raise"``, the default, or ``"mask"``; constraint
  :data:`daskrnmf._validation.MISSING`).  With ``"mask"`` the checks here let NaN through
  (inf stays an error), the first pass counts each feature's observed entries
  (``stats["observed"]``, ``stats["nan"]``) and the model's kernels mask each block as
  they read it (:mod:`daskrnmf.kernels.missing`, which documents what every model does).

A model supplies its constraint additions, ``_fit_blocks`` (its initial state and
``step``, run through :meth:`BaseModel._run`) and its fitted attributes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import _checkpoint
from . import _validation as v
from . import io
from ._driver import Progress, iterate, warn_if_not_converged
from ._files import is_file_memmap, is_h5py_dataset
from ._reader import release_after
from ._resume import FitCheckpoint, model_fingerprint
from ._typing import Data, Labels, PathLike
from .kernels.blocks import MAX_ABS, checked_apply

FLOAT_DTYPES = (np.float64, np.float32)


class BaseModel(BaseEstimator):
    """Parameters, input checks, seeding, the fit template and tags shared by all models.

    Class attributes a model sets
    -----------------------------
    _parameter_constraints : dict
        name -> list of constraints (:mod:`daskrnmf._validation`); extend the base's.
    _renamed_params : dict
        old name -> new name; the old name is accepted (with a FutureWarning) for one
        release, in ``__init__`` and ``set_params``.
    _non_negative : bool
        The model factorizes non-negative data only (scikit-learn's ``positive_only`` tag).
    _fitted_attribute : str
        An attribute that exists once fitted (for ``check_is_fitted``).
    _saved_private : tuple of str
        Private attributes :meth:`save` keeps besides the public fitted ones (``name_``):
        what the model needs to continue (e.g. ``partial_fit``'s statistics).
    """

    _parameter_constraints = {
        "random_state": [v.RANDOM_STATE],
        "verbose": [v.Interval(int, 0, None)],
        "callback": [v.CallableOrNone()],
    }
    _renamed_params = {}
    _non_negative = False
    # False for a model that checks every block as it streams it (ONMFO): the template's
    # first pass would read all of X once more before the one pass the user asked for
    _first_pass = True
    _fitted_attribute = "components_"
    _saved_private = ("_fit_dtype",)
    # the model has the parameter ``missing`` ("raise" | "mask"): NaN entries may be
    # treated as missing values (see daskrnmf.kernels.missing)
    _supports_missing = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls._renamed_params:
            cls.__signature__ = _call_signature(cls)
        # every fit takes storage_options and component, also where a model defines its
        # own fit, and fit_transform/fit_predict inherited from scikit-learn's mixins
        # (which call fit, then transform(X): both must see the same input)
        for name in ("fit", "fit_transform", "partial_fit", "fit_predict"):
            method = getattr(cls, name, None)
            if callable(method) and "storage_options" not in \
                    inspect.signature(method).parameters:
                setattr(cls, name, _with_storage_options(method))

    # ------------------------------------------------------------ parameters
    def _take_renamed(self, renamed):
        """Apply parameters passed under their old names (``__init__``'s ``**renamed``)."""
        for old, value in renamed.items():
            new = self._renamed_params.get(old)
            if new is None:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                                f"argument {old!r}")
            warnings.warn(f"The parameter {old!r} of {type(self).__name__} was renamed to "
                          f"{new!r}; {old!r} will be removed in daskrnmf 0.3.",
                          FutureWarning, stacklevel=3)
            setattr(self, new, value)

    def set_params(self, **params):
        renamed = {old: params.pop(old) for old in list(params) if old in self._renamed_params}
        self._take_renamed(renamed)
        return super().set_params(**params)

    def _validate_params(self):
        v.validate_params(self, self._parameter_constraints)

    @property
    def _name(self):
        return type(self).__name__

    @property
    def _allow_nan(self):
        """NaN entries of X are missing values (``missing="mask"``), not an error."""
        return self._supports_missing and getattr(self, "missing", "raise") == "mask"

    def _nan_hint(self):
        """What a NaN error adds for a model that could mask them instead."""
        return v.MASK_HINT if self._supports_missing else ""

    # ------------------------------------------------------------ input
    def _validate_data(self, X, *, reset, method="fit"):
        """X as a float NumPy array or a row-chunked Dask array, checked and counted.

        NumPy and array-likes go through scikit-learn's ``validate_data`` (lists,
        DataFrames, memmaps; the standard messages; float32 kept, integers to float64);
        NaN/inf and negative values are refused here.  Dask, Zarr and paths stay lazy:
        their values are checked on the workers during the first pass (``fit``) or in
        every block (``predict``/``transform``).  ``reset`` sets ``n_features_in_`` (and
        ``feature_names_in_``); otherwise the feature count must match the fit's.
        """
        if _is_lazy(X):
            X = io.check_array(X, estimator_name=self._name, allow_nan=self._allow_nan)
            if reset:
                self.n_features_in_ = int(X.shape[1])
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            elif X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {self._name} is expecting "
                                 f"{self.n_features_in_} features as input.")
            return X
        X = validate_data(self, X, reset=reset, dtype=list(FLOAT_DTYPES), accept_sparse=False,
                          ensure_all_finite=False)
        where = f"X passed to {self._name}" + ("" if method == "fit" else f".{method}")
        n_nan, n_inf = v.count_nonfinite(X)
        v.check_missing_count(n_nan, n_inf, where, allow_nan=self._allow_nan,
                              hint=self._nan_hint())
        if method == "fit" and X.size and n_nan == X.size:
            raise ValueError(f"{where} has no observed (non-NaN) value.")
        if X.size and n_nan < X.size:
            # every method, not only fit: predict/transform form the same products, and
            # 1e300 would give non-finite distances or codes without an error.
            # the largest and smallest value, no |X| copy; fmax/fmin skip the NaN entries
            # of missing="mask"
            hi, lo = ((np.fmax.reduce(X, axis=None), np.fmin.reduce(X, axis=None)) if n_nan
                      else (X.max(), X.min()))
            _check_magnitude(max(float(hi), -float(lo)), where)
        if self._non_negative:
            if n_nan:
                low = 0.0 if n_nan == X.size else min(float(np.fmin.reduce(X, axis=None)), 0.0)
            else:
                low = float(X.min(initial=0.0))
            if low < 0:
                raise ValueError(f"Negative values in data passed to {self._name} (input X, "
                                 f"min {low:g}); it factorizes non-negative data only.")
        return X

    def _check_blocks(self, X, sample_size=None, digest=False):
        """Row blocks of X and its first-pass statistics, with the value checks that Dask
        input could not have before (NaN/inf; negatives for non-negative models), and a
        row sample of ``sample_size`` rows (default: the model's); ``digest``: the
        SHA-256 of every block too (a checkpointed fit's fingerprint of X)."""
        from .reductions import checked_blocks

        where = f"X passed to {self._name}"
        progress = getattr(self, "_progress", None)
        size = self._sample_size(X) if sample_size is None else sample_size
        blocks, stats = checked_blocks(X, where, sample_size=size,
                                       allow_nan=self._allow_nan, hint=self._nan_hint(),
                                       on_pass=progress.passed if progress else None,
                                       digest=digest)
        if not np.isfinite(stats["min"]).any():     # every entry missing
            raise ValueError(f"{where} has no observed (non-NaN) value.")
        low = float(np.min(stats["min"]))
        _check_magnitude(max(abs(low), abs(float(np.max(stats["max"])))), where)
        if self._non_negative and low < 0:
            raise ValueError(f"Negative values in data passed to {self._name} (input X, min "
                             f"{low:g}); it factorizes non-negative data only.")
        return blocks, stats

    def _sample_size(self, X):
        """Rows of X the first pass also samples for the model (``stats["sample"]``)."""
        return 0

    def _checked_input(self, X, method):
        """``predict``/``transform`` input: fitted, validated, feature count matching."""
        check_is_fitted(self, self._fitted_attribute)
        return self._validate_data(X, reset=False, method=method)

    def _inverse_transform(self, H):
        """``H @ components_`` for codes H of shape (n_samples, n_components_), checked
        as X is checked (fitted; 2-D, real, finite, below ``MAX_ABS``; the column count
        matching the fit's), so that no NaN, 1-D or mis-shaped H gives a result
        without an error.  NumPy in, NumPy out; Dask/Zarr in, lazy out (every block
        checked before its product)."""
        check_is_fitted(self, "components_")
        k = int(self.n_components_)
        where = f"H passed to {self._name}.inverse_transform"
        W = self.components_
        lazy = _is_lazy(H)
        if lazy:
            H = io.check_array(H, estimator_name=f"{self._name}.inverse_transform",
                               input_name="H")
        else:
            H = check_array(H, dtype=list(FLOAT_DTYPES), ensure_all_finite=False,
                            input_name="H", estimator=self)
        if H.shape[1] != k:
            raise ValueError(f"{where} has {H.shape[1]} columns, but {self._name} has "
                             f"n_components_={k}: H must be codes of shape (n_samples, {k}), "
                             "as transform() gives.")
        if lazy:
            dtype = np.result_type(H.dtype, W.dtype, np.float32)
            return H.map_blocks(checked_apply, np.matmul, (where, False), dtype, W,
                                chunks=(H.chunks[0], (W.shape[1],)), dtype=dtype,
                                meta=np.empty((0, 0), dtype))
        n_nan, n_inf = v.count_nonfinite(H)
        v.check_finite_count(n_nan + n_inf, where)
        _check_magnitude(float(np.max(np.abs(H))), where)
        return H @ W

    def _map_rows(self, X, fn, width, dtype, *args, **kwargs):
        """``fn(block, *args, **kwargs)`` on every row block: NumPy in, NumPy out (in
        blocks of 65536 rows); Dask in, a lazy Dask array chunked like X's rows (``width``
        columns, or 1-D when ``width`` is None).  Every Dask block is checked as NumPy
        input is (NaN/inf, negatives) before ``fn`` sees it."""
        if isinstance(X, np.ndarray):
            out = [fn(X[s:s + 65536], *args, **kwargs) for s in range(0, X.shape[0], 65536)]
            return np.concatenate(out).astype(dtype, copy=False)
        check = (f"X passed to {self._name}", self._non_negative, self._allow_nan)
        if width is None:
            return X.map_blocks(checked_apply, fn, check, dtype, *args, drop_axis=1,
                                dtype=dtype, meta=np.empty((0,), dtype), **kwargs)
        return X.map_blocks(checked_apply, fn, check, dtype, *args,
                            chunks=(X.chunks[0], (width,)), dtype=dtype,
                            meta=np.empty((0, 0), dtype), **kwargs)

    def _output_dtype(self, X):
        """The float dtype results take: X's own when it is float32/float64."""
        dt = np.dtype(X.dtype)
        return dt if dt in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float64)

    # ------------------------------------------------------------ the fit template
    def _seed(self):
        return v.seed_from(self.random_state)

    def fit(self, X: Data, y: Labels | None = None, *, resume: bool = False,
            overwrite_checkpoint: bool = False, storage_options: dict | None = None,
            component: str | None = None, **fit_params: Any) -> BaseModel:
        """Fit the model to X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            NumPy array, list, DataFrame, Dask array chunked along rows, ``zarr.Array`` or
            Zarr path or fsspec URL (``s3://bucket/data.zarr/X``; opened read-only, its
            chunks read by the workers in parallel, never through the client); the path
            of a ``.npy`` file or of an HDF5/NetCDF-4 dataset (``data.h5/X``), an
            ``np.memmap`` or an ``h5py.Dataset`` (read by the workers in row blocks, see
            :mod:`daskrnmf.io`).
        y : array-like of shape (n_samples,), optional
            Class labels for classifiers; ignored by the other models.
        resume : bool, default=False
            Continue from the ``checkpoint`` directory if it holds a run of this model on
            this X (same data, chunking, parameters and seed; ``max_iter`` may differ):
            the result is exactly the uninterrupted fit's.  Without a checkpoint there
            the fit starts afresh.  A damaged checkpoint, or one made from other data or
            parameters, is a ValueError.  Needs the parameter ``checkpoint``.
        overwrite_checkpoint : bool, default=False
            Without ``resume``, a ``checkpoint`` directory that holds an earlier run's
            checkpoint is a ValueError unless this is True (the earlier run is then
            replaced at the first save).
        storage_options : dict, optional
            Options of the fsspec file system of every URL the fit opens (X, a
            ``checkpoint`` URL): credentials, ``client_kwargs={"endpoint_url":
            ...}``, ... (e.g. ``{"key": ..., "secret": ...}`` for S3).  Wrong
            credentials or a missing bucket fail before any work, naming the URL.
        component : str, optional
            With X a path: the array inside the Zarr group, or the dataset of the HDF5
            file, at X (``fit("store.zarr", component="X")`` reads ``store.zarr/X``).
        **fit_params
            Model-specific options of the fit.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X = v.with_component(X, component, f"{self._name}.fit")
        if resume or overwrite_checkpoint:
            fit_params.update(resume=resume, overwrite_checkpoint=overwrite_checkpoint)
        with v.using_storage_options(storage_options):
            self._fit(X, y, **fit_params)
        return self

    def _fit(self, X, y=None, **fit_params):
        """validate → first pass → seed → the model's ``_fit_blocks`` → cast results
        (all or nothing: see :meth:`_unchanged_on_error`) → the final progress event."""
        with self._unchanged_on_error(), self._reporting() as progress:
            out = self._fit_once(X, y, **fit_params)
            progress.final(self)        # the last line: the fitted attributes as stored
            return out

    @contextlib.contextmanager
    def _reporting(self):
        """The fit's :class:`~daskrnmf._driver.Progress` (its clock, pass and final
        events) as ``self._progress`` while the fit runs only: a fitted model keeps no
        reference to it."""
        self._progress = Progress(self._name, getattr(self, "callback", None),
                                  getattr(self, "verbose", 0))
        try:
            yield self._progress
        finally:
            vars(self).pop("_progress", None)

    @contextlib.contextmanager
    def _unchanged_on_error(self):
        """The estimator's attributes as they were when the body raises: a refused or
        failed (re)fit — bad values found in the first pass, Ctrl-C — leaves a fitted
        model as it was, never a new ``n_features_in_`` beside the old
        ``components_``.  Fits assign new arrays (no attribute is changed in place), so
        a shallow copy of the attributes is enough."""
        saved = dict(vars(self))
        try:
            yield
        except BaseException:
            vars(self).clear()
            vars(self).update(saved)
            raise

    def _fit_once(self, X, y=None, *, resume=False, overwrite_checkpoint=False, **fit_params):
        self._validate_params()
        X = self._validate_data(X, reset=True)
        y = self._validate_target(X, y)
        if not isinstance(X, np.ndarray):
            from ._blocks import check_block_fits

            rows = max(X.chunks[0]) if X.chunks[0] else 0
            check_block_fits(rows * X.shape[1] * 8, f"X passed to {self._name}")
        with self._checkpointing(X, resume, overwrite_checkpoint) as ckpt:
            return self._fit_checked(X, y, ckpt, **fit_params)

    def _fit_checked(self, X, y, ckpt, **fit_params):
        blocks = None
        try:
            blocks, stats = (self._check_blocks(X, digest=ckpt is not None)
                             if self._first_pass else (None, None))
            seed = self._seed()
            if ckpt is not None:
                ckpt.row_blocks = blocks
                seed = ckpt.start(seed, stats, y)
                self._fit_checkpoint = ckpt
            self._fit_dtype = self._output_dtype(X)
            out = self._fit_blocks(X, blocks, stats, seed, y, **fit_params)
            if blocks is not None:
                self.n_passes_ = blocks.n_passes
        finally:
            vars(self).pop("_fit_checkpoint", None)
            if blocks is not None:   # spilled state: removed on success, error and Ctrl-C
                blocks.close()
            release_after(X)        # the workers' buffers of X's blocks
        self._cast_fitted()
        return out

    # the model's saved state follows X's row chunks (per-block state, sums in chunk
    # order): a resumed fit needs X chunked as it was; False for a stream whose batches
    # are fixed by rows (ONMFO), which resumes on X chunked otherwise
    _state_follows_chunks = True

    @contextlib.contextmanager
    def _checkpointing(self, X, resume, overwrite_checkpoint):
        """The fit's :class:`~daskrnmf._resume.FitCheckpoint` (None without the parameter
        ``checkpoint``): the directory locked for the whole fit, read (``resume``) or
        claimed; a fresh run that fails on bad data, or before it saved anything, leaves
        no checkpoint behind, nor does a stream without the first pass whose step found
        bad data (``FitCheckpoint.bad_data``: it checks X's blocks as it reads them,
        after it may have saved); an earlier run's checkpoint is never removed here."""
        path = getattr(self, "checkpoint", None)
        if resume and path is None:
            raise ValueError(f"resume=True needs the 'checkpoint' parameter of {self._name} "
                             "to be set.")
        if resume and overwrite_checkpoint:
            raise ValueError("resume=True and overwrite_checkpoint=True contradict each other.")
        if path is None:
            yield None
            return
        options = v.current_storage_options()
        _checkpoint.check_location(path, X)        # never in or around X's store
        lock = _checkpoint.Lock(path)
        claimed = None
        try:
            lock.acquire()              # the directory is read only under the lock
            saved = _checkpoint.load(path, options, finite=False) if resume else None
            if saved is None:
                claimed = _checkpoint.claim(path, overwrite=overwrite_checkpoint,
                                            storage_options=options)
                lock.acquire()          # the marker claim() made, if it was not there
            ckpt = None
            try:
                ckpt = FitCheckpoint(path, model_fingerprint(self),
                                     _checkpoint.data_fingerprint(X), saved, options,
                                     chunked=self._state_follows_chunks)
                ckpt.check_early()  # model, parameters, seed, sampled rows: before any pass
                yield ckpt
            except BaseException:
                # a fresh run that saved nothing, or found bad data while streaming,
                # leaves nothing; one that saved keeps it, to resume (Ctrl-C, an error
                # of the callback, a ValueError of the callback included)
                streamed_bad = ckpt is not None and ckpt.bad_data
                if claimed is not None and (streamed_bad or not (
                        ckpt is not None and ckpt.saved_once)):
                    _checkpoint.release(path, claimed, options)
                raise
            ckpt.close()
        finally:
            lock.release()

    def _validate_target(self, X, y):
        return None

    def _fit_blocks(self, X, blocks, stats, seed, y, **fit_params):  # pragma: no cover
        """The model's fit on checked X (``blocks``, ``stats``: the first pass's row blocks
        and statistics; None for a model without that pass): sets the fitted attributes
        and returns None — or, for a model whose final pass already gives them (SemiNMF),
        the codes ``fit_transform`` returns."""
        raise NotImplementedError

    def _run(self, step, state, *, n_restarts=1, max_iter=None, tol=None, blocks=None,
             rule="decrease", name=None, quiet=False, problem=None, **driver):
        """The one iteration loop (:func:`daskrnmf._driver.iterate`) with this model's
        ``max_iter``, ``tol``, callback and verbosity.  ``quiet`` runs an inner loop (no
        callback, no logs, no checkpoint: it is done again on resume).
        :meth:`_set_iterations` then records the kept restart.  With the parameter
        ``checkpoint``, every other run is saved after each iteration and a resumed fit
        takes it from there (:mod:`daskrnmf._resume`): ``problem`` is the fit-state
        object whose ``checkpoint_attributes`` are saved with ``state``.

        Returns ``state, log``.
        """
        max_iter = self.max_iter if max_iter is None else max_iter
        tol = self.tol if tol is None else tol
        name = name or self._name
        ckpt = getattr(self, "_fit_checkpoint", None)
        if ckpt is not None and not quiet:
            driver.update(checkpoint=ckpt.next_run(name), problem=problem)
        state, log = iterate(step, state, n_restarts=n_restarts, max_iter=max_iter, tol=tol,
                             callback=None if quiet else self.callback,
                             verbose=0 if quiet else self.verbose, name=name,
                             passes=(lambda: blocks.n_passes) if blocks is not None else None,
                             rule=rule, progress=None if quiet else getattr(self, "_progress",
                                                                            None), **driver)
        return state, log

    def _set_iterations(self, log, restart=0, *, max_iter=None, name=None, warn=True):
        """``n_iter_`` and ``objective_history_`` of the kept restart, and the
        ConvergenceWarning when it used all ``max_iter`` iterations without converging."""
        self.objective_history_ = log.restart_history(restart)
        self.n_iter_ = int(log.n_iter[restart])
        if warn:
            self._warn_unless_converged(log, restart, max_iter=max_iter, name=name)

    def _warn_unless_converged(self, log, restart=0, *, max_iter=None, name=None):
        """The ConvergenceWarning when the driver's run ended at ``max_iter`` without
        converging (not for a run of fixed length or stopped by its callback)."""
        if log.can_converge and not log.stopped_by_callback:
            # points at the user's line, however deep the fit's call chain
            warn_if_not_converged(name or self._name, log.converged[restart],
                                  self.max_iter if max_iter is None else max_iter,
                                  unit="passes" if log.rule == "passes" else "iterations")

    _cast_attributes = ("components_", "cluster_centers_", "block_medians_")

    def _cast_fitted(self):
        """Fitted arrays in X's float dtype (float32 in, float32 out)."""
        dt = getattr(self, "_fit_dtype", np.dtype(np.float64))
        for key in self._cast_attributes:
            value = getattr(self, key, None)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                setattr(self, key, value.astype(dt, copy=False))

    # ------------------------------------------------------------ saving
    def save(self, path: PathLike, *, overwrite: bool = False,
             storage_options: dict | None = None) -> str:
        """Save the model (parameters and fitted state) to a Zarr group at ``path``.

        A local group is written under a temporary name next to ``path`` and renamed
        into place when complete.  On an object store (an fsspec URL, which has no atomic
        rename) it is written under a fresh prefix ``path/v-<id>/`` and committed by
        writing the pointer ``path/daskrnmf-commit.json`` last, in one PUT; readers trust
        only the prefix the pointer names, so an interrupted save leaves no readable
        half-model and an earlier one intact (see :mod:`daskrnmf.io`).  It holds JSON
        attributes and numeric Zarr arrays only — no pickle: :func:`daskrnmf.load` runs
        no code from the file.  A ``callback`` (code) is not saved; the loaded model has
        ``callback=None`` (a UserWarning says so, except for a
        :class:`~daskrnmf.ProgressBar`, which only displays progress).

        Parameters
        ----------
        path : str or os.PathLike
            Local directory to create, or fsspec URL (``s3://bucket/model.zarr``).
        overwrite : bool, default=False
            Replace an existing ``path``; otherwise an existing path is a
            FileExistsError.
        storage_options : dict, optional
            Options of the URL's fsspec file system (credentials, endpoint, ...).

        Returns
        -------
        path : str
            The absolute path (or the URL) written.

        See Also
        --------
        daskrnmf.load : the model back, fitted.
        """
        from ._persist import save

        return save(self, path, overwrite=overwrite, storage_options=storage_options)

    # ------------------------------------------------------------ results for the CLI
    def _outputs(self, X):
        """Per-sample results for X, named as the registry's ``ModelSpec.outputs``
        (``"labels"``, ``"H"``, ``"R"``, ``"predictions"``): lazy Dask arrays chunked like
        X's rows for Dask/Zarr input, NumPy for NumPy input."""
        raise NotImplementedError

    # ------------------------------------------------------------ tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = self._non_negative
        tags.input_tags.allow_nan = self._allow_nan
        tags.input_tags.sparse = False
        return float_tags(tags)


def float_tags(tags):
    """Transformer tags: float32 and float64 preserved.  A mixin that follows
    TransformerMixin in a class's bases calls this after ``super().__sklearn_tags__()``
    (TransformerMixin builds fresh transformer tags)."""
    if tags.transformer_tags is not None:
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
    return tags


def _with_storage_options(method):
    """``method`` (a model's own ``fit``, ``fit_transform`` or ``partial_fit``) with the
    keyword ``storage_options`` of :meth:`BaseModel.fit`: the options every URL the call
    opens uses."""

    @functools.wraps(method)
    def with_options(self, *args, storage_options=None, component=None, **kwargs):
        if component is not None:     # X becomes (path, component), for every call inside
            if args:
                args = (v.with_component(args[0], component,
                                         f"{type(self).__name__}.{method.__name__}"),) + args[1:]
            elif "X" in kwargs:
                kwargs["X"] = v.with_component(kwargs["X"], component,
                                               f"{type(self).__name__}.{method.__name__}")
        with v.using_storage_options(storage_options):
            return method(self, *args, **kwargs)

    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    params[at:at] = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
                     for name in ("storage_options", "component")]
    with_options.__signature__ = sig.replace(parameters=params)
    doc = method.__doc__ or ""
    note = ("storage_options : dict, optional\n"
            "    Options of the fsspec file system of every URL this call opens (X, a\n"
            "    ``checkpoint`` URL): credentials, endpoint, ... See :meth:`BaseModel.fit`.\n"
            "component : str, optional\n"
            "    With X a path: the array inside its Zarr group or HDF5 file.\n")
    head, sep, tail = doc.partition("\n        Returns\n")
    if sep:
        indent = " " * 8
        doc = head.rstrip() + "\n" + "".join(indent + line + "\n"
                                              for line in note.splitlines()) + sep + tail
    with_options.__doc__ = doc
    return with_options


def _call_signature(cls):
    """The signature users call ``cls`` with: ``__init__``'s parameters, then the old names
    of renamed parameters (``_renamed_params``, taken through ``**renamed``) as
    keyword-only parameters, instead of ``**renamed`` itself, which is no parameter.

    ``inspect.signature(cls)`` reads it (help(), IDEs and scikit-learn's
    ``check_do_not_raise_errors_in_init_or_set_params``, which passes every name of the
    signature); ``get_params`` reads ``__init__`` and lists the current names only.
    """
    init = inspect.signature(cls.__init__)
    params = [p for name, p in init.parameters.items()
              if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(old, inspect.Parameter.KEYWORD_ONLY, default="deprecated")
               for old in cls._renamed_params]
    return init.replace(parameters=params)


class FactorizationMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """``get_feature_names_out`` (``nmf0, nmf1, ...`` style: ``<classname>0, ...``) and with
    it ``set_output``, for models whose ``transform`` gives ``n_components_`` columns."""

    @property
    def _n_features_out(self):
        return self.n_components_

    def __sklearn_tags__(self):
        return float_tags(super().__sklearn_tags__())


def _check_magnitude(top, where):
    """A clear error for data so large that the models' products overflow float64
    (``where`` names the input, e.g. ``"X passed to NMF.transform"``)."""
    if top > MAX_ABS:
        name = "H" if where.startswith("H ") else "X"    # H: inverse_transform's codes
        raise ValueError(f"{where} has values up to {top:.3g} in magnitude; above "
                         f"{MAX_ABS:g} the squared distances and products the models form "
                         f"overflow float64. Rescale {name} (e.g. {name} / {name}.max()).")


def _is_lazy(X):
    """Dask arrays, zarr arrays, paths/URLs (and (path, component) pairs) and a user's
    files (an ``np.memmap``, an ``h5py.Dataset``, read by the workers) take the
    out-of-core path."""
    if v.is_path(X) or v.is_path_pair(X) or is_file_memmap(X) or is_h5py_dataset(X):
        return True
    module = type(X).__module__ or ""
    return module.startswith("dask.") or module.startswith("zarr.")
