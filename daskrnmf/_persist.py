"""Save a fitted model to a Zarr group and load it back, without pickle.

The format (``format_version`` 2) is a Zarr v3 group:

* attributes (JSON): ``format`` (``"daskrnmf-model"``), ``format_version``,
  ``daskrnmf_version``, ``model`` (a class name of :data:`daskrnmf.models.REGISTRY`),
  ``params`` (``get_params()``; values JSON cannot hold are left out and listed in
  ``dropped_params``), ``attributes`` (the fitted state, see below), ``arrays`` (for
  each array: its SHA-256 and memory order, ``{"sha256": ..., "order": "C" | "F"}``),
  ``sha256`` (of all the other attributes, as canonical JSON: :func:`_meta_digest`);
* ``arrays/``: one Zarr array per NumPy array of the fitted state (numbers and booleans
  only), chunked along its first axis, stored in C order.

Integrity: :func:`load` reads an array only if its SHA-256 (of dtype, shape and values)
is the one recorded, and gives it back in the memory order it had when saved (BLAS
results depend on it in their last bits).  It then checks that the fitted arrays agree
with the parameters and with each other (``cluster_centers_`` has ``n_clusters`` rows
and ``n_features_in_`` columns, labels lie in ``range(n_clusters)``, ...: see
:data:`_SHAPES`) and that every attribute is one the model's fit sets (:data:`FITTED`).
A deleted, corrupt or changed chunk, an array swapped for another, NaN written into
one, a parameter edited so that it no longer matches the arrays, or an unknown
attribute is a ValueError naming the file and the array; any other edit of the
attributes (a parameter or a fitted value that still fits the arrays) is caught by
their own SHA-256, checked last so that the errors above keep their clearer message.
``format_version`` 1 files (written before the checksums, by unreleased development
versions) are refused: their arrays cannot be verified.

The fitted state is every public attribute ending in ``_`` plus the private attributes a
class lists in ``_saved_private`` (what it needs to continue, e.g. ONMFO's statistics for
``partial_fit``).  Values are encoded as JSON: numbers, strings, booleans, None, lists,
``{"tuple": [...]}``, ``{"dtype": "float32"}``, ``{"array": "name"}`` (a Zarr array under
``arrays/``) and ``{"strings": [...], "kind": "O" | "U"}`` (arrays of strings, e.g.
``feature_names_in_``).

Where it is written: a local path is written under a temporary name and renamed into
place (:func:`daskrnmf._stores.replace_with`); ``overwrite`` replaces only a store
daskrnmf wrote (:func:`daskrnmf._stores.check_replaceable`).  An object store (an fsspec URL: ``s3://``, ``gs://``,
``memory://``) has no atomic rename: the group is written under a fresh prefix
``URL/v-<id>/`` and committed by the pointer ``URL/daskrnmf-commit.json``, written last
in one PUT; :func:`load` reads only the prefix the pointer names, so an interrupted save
leaves no readable half-model and the previous one intact (the commit-marker rule of
:mod:`daskrnmf.io`).

Loading runs no code from the file: the class comes from the registry, its parameters
and attributes are set from JSON and from numeric Zarr arrays whose codecs are on an
allow-list (no pickle or object codecs), and unknown models, formats, parameter or
attribute names are refused with a ValueError.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from typing import Any

import numpy as np

from . import _stores, io
from ._version import __version__

FORMAT = "daskrnmf-model"
FORMAT_VERSION = 2
#: format versions whose arrays carry no checksum: refused (see the module's docstring)
_UNCHECKED_VERSIONS = (1,)
ARRAYS = "arrays"

# codecs a loaded array may use: serialisation, compression and checksums only
_SAFE_CODECS = frozenset({"bytes", "zstd", "gzip", "blosc", "crc32c", "transpose",
                          "sharding_indexed", "endian"})
_ARRAY_KINDS = "biufc"          # numbers and booleans: nothing that decodes to objects
_CHUNK_BYTES = 16 * 2**20

# The fitted attributes each model's fit may set (beyond its ``_saved_private``): a file
# naming any other is refused, since a model's methods may read an attribute it does not
# expect to have.  Kept here by hand: this module sits below the models and does not read
# the registry (tests/test_structure.py), and the estimators declare their attributes
# only in their docstrings.  tests/test_persist.py fits every registered model (with
# feature names and its optional outputs) and fails on an attribute missing here.
_COMMON = ("n_features_in_", "feature_names_in_", "n_iter_", "n_passes_",
           "objective_history_", "objective_")
_FACTORS = _COMMON + ("components_", "n_components_", "reconstruction_err_")
FITTED = {
    "RFNMF": _COMMON + ("cluster_centers_", "labels_", "median_rounds_"),
    "RFNMTF": _COMMON + ("block_medians_", "row_labels_", "column_labels_", "median_rounds_"),
    "NMF": _FACTORS,
    "RNMF": _FACTORS,
    "ORNMF": _FACTORS + ("jumps_", "boundaries_", "labels_"),
    "SemiNMF": _FACTORS,
    "MNMF": _FACTORS + ("classes_", "pairs_", "coef_", "intercept_", "inner_passes_",
                        "inner_gaps_"),
    "ONMFO": _FACTORS + ("n_inner_iter_", "n_steps_", "n_samples_seen_", "alpha_R_"),
    "RobustNMF": _FACTORS + ("alpha_R_",),
}
_MODELS = "daskrnmf.models."        # where the registered models' classes are defined
# Shapes of fitted arrays, per axis the name of the attribute (else parameter) that sets
# it: an int, or the length of a list/array (``pairs_``).  Per attribute name, the same
# for every model (a name a model does not have is skipped, as is a rule whose sizes it
# does not have).
_K = "n_components_"
_SHAPES = {
    "cluster_centers_": ("n_clusters", "n_features_in_"),
    "components_": (_K, "n_features_in_"),
    "block_medians_": ("n_row_clusters", "n_column_clusters"),
    "column_labels_": ("n_features_in_",),
    "feature_names_in_": ("n_features_in_",),
    "coef_": ("pairs_", _K),
    "intercept_": ("pairs_",),
    "_W": (_K, "n_features_in_"),
    "_A": (_K, "n_features_in_"),
    "_B": (_K, _K),
    "_C": (_K, "n_features_in_"),
    "_Bm": ("n_features_in_", _K, _K),
}
# labels: integers in range(the size named)
_LABELS = {"labels_": "n_clusters", "row_labels_": "n_row_clusters",
           "column_labels_": "n_column_clusters"}


# ---------------------------------------------------------------- save
def saved_state(model) -> dict[str, Any]:
    """The attributes :func:`save` writes: public fitted ones (``name_``) and the
    class's ``_saved_private``."""
    private = tuple(getattr(type(model), "_saved_private", ()))
    out = {}
    for key, value in vars(model).items():
        if _is_fitted_name(key) or key in private:
            out[key] = value
    return out


def _is_fitted_name(key: str) -> bool:
    return key.endswith("_") and not key.startswith("_") and key.isidentifier()


class _Encoder:
    """JSON for the fitted state; NumPy arrays collected to be written as Zarr arrays."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def encode(self, value, where):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, np.generic) and np.dtype(value.dtype).kind in "biuf":
            return value.item()
        if isinstance(value, np.dtype) and value.kind in _ARRAY_KINDS:
            return {"dtype": value.str}
        if isinstance(value, tuple):
            return {"tuple": [self.encode(v, f"{where}.{i}") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{where}.{i}") for i, v in enumerate(value)]
        if isinstance(value, np.ndarray):
            if value.dtype.kind in _ARRAY_KINDS:
                self.arrays[where] = value
                return {"array": where}
            if value.dtype.kind in "OU" and all(isinstance(v, str) for v in value.ravel()):
                return {"strings": value.tolist(), "kind": value.dtype.kind}
        raise TypeError(f"cannot save {where} of type {type(value).__name__}: daskrnmf saves "
                        "numbers, strings, lists and numeric or string arrays, without pickle.")


def save(model, path: str | os.PathLike, *, overwrite: bool = False,
         storage_options: dict | None = None) -> str:
    """Save ``model`` (a registered daskrnmf estimator, fitted or not) to a Zarr group.

    See :meth:`daskrnmf._base.BaseModel.save`.
    """
    path = os.fspath(path)
    _check_registered(model)
    what = "the model's location" if io.is_url(path) else "the model's path"
    io.check_destination(path, what, overwrite=overwrite, storage_options=storage_options)
    return io.write_whole(path, lambda tmp: write_group(model, tmp, storage_options), what,
                          overwrite=overwrite, storage_options=storage_options)


def write_group(model, path: str, storage_options: dict | None = None) -> None:
    """Write ``model`` as a new Zarr group at ``path`` (a local path or a URL; no
    atomicity: :func:`save` and the CLI write under a temporary name and rename, or
    under a fresh prefix and commit it)."""
    import zarr

    name = _check_registered(model)
    params, dropped = _json_params(model)
    enc = _Encoder()
    attributes = {key: enc.encode(value, key) for key, value in saved_state(model).items()}
    group = zarr.open_group(io.zarr_target(path, storage_options, read_only=False), mode="w-",
                            zarr_format=3)
    checks = {}
    if enc.arrays:
        arrays = group.create_group(ARRAYS)
        for key, value in enc.arrays.items():
            # stored in C order; the order it had is restored at load (SemiNMF's
            # components_ are Fortran-ordered, and BLAS results differ in the last bits)
            order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
            value = np.ascontiguousarray(value)
            checks[key] = {"sha256": _stores.digest(value), "order": order}
            shape = tuple(max(s, 1) for s in value.shape)
            if value.ndim:
                row = max(1, value.itemsize * int(np.prod(shape[1:])))
                shape = (min(shape[0], max(1, _CHUNK_BYTES // row)),) + shape[1:]
            arr = arrays.create_array(key, shape=value.shape, dtype=value.dtype,
                                      chunks=shape or None)
            arr[...] = value
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "daskrnmf_version": __version__,
            "model": name, "params": params, "attributes": attributes, "arrays": checks}
    if dropped:
        meta["dropped_params"] = dropped
    meta = json.loads(json.dumps(meta))     # as it reads back (float subclasses, ...)
    meta["sha256"] = _meta_digest(meta)
    group.attrs.update(meta)


def _meta_digest(attrs):
    """SHA-256 of a model group's attributes but ``sha256`` itself, as canonical JSON
    (sorted keys; floats as Python writes them, which reads back to the same float)."""
    body = {k: v for k, v in attrs.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_registered(model) -> str:
    """The model's name, when it is one of the registered models (a name of
    :data:`FITTED`, a class of :mod:`daskrnmf.models`): a subclass, or another class of
    the same name, would be loaded back as the registered class, not as itself.  (The
    registry itself is read where a model is loaded, :func:`daskrnmf.load`; this module
    sits below the models.)"""
    cls = type(model)
    name = cls.__name__
    if name not in FITTED or not cls.__module__.startswith(_MODELS):
        raise TypeError(f"only the registered daskrnmf models can be saved "
                        f"({', '.join(FITTED)}); got {cls.__module__}.{name}.")
    return name


def _json_params(model):
    """``get_params()`` as JSON, and the parameters left out (name -> why)."""
    params, dropped = {}, {}
    for key, value in model.get_params(deep=False).items():
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            value = value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            params[key] = value
        elif isinstance(value, np.ndarray) and value.dtype.kind in _ARRAY_KINDS \
                and value.dtype.kind != "c":
            params[key] = {"array": value.tolist(), "dtype": value.dtype.str}
        else:
            dropped[key] = type(value).__name__
    for key, kind in dropped.items():
        if key == "callback" and _display_only(model.get_params(deep=False)[key]):
            continue        # recorded in dropped_params; nothing a user would miss
        note = ("a callback is code, which the file does not hold; the loaded model has "
                "callback=None" if key == "callback" else
                f"a {kind} cannot be saved as JSON; the loaded model has the default")
        warnings.warn(f"{type(model).__name__}.save: parameter {key!r} not saved ({note}).",
                      UserWarning, stacklevel=4)
    return params, dropped


def _display_only(callback) -> bool:
    """Whether ``callback`` only shows progress (daskrnmf's own ProgressBar): a loaded
    model without it computes and stops exactly as with it, so its not being saved is
    not worth a warning at every save, unlike a user's callback, which may stop a fit."""
    return bool(getattr(callback, "progress_events", False))   # the driver's own mark


# ---------------------------------------------------------------- load
def load(path: str | os.PathLike, registry, *, storage_options: dict | None = None):
    """The model saved at ``path``, its class taken from ``registry``: what
    :func:`daskrnmf.load` does with :data:`daskrnmf.models.REGISTRY` (documented there).

    Parameters
    ----------
    path : str or os.PathLike
        A saved model's directory or fsspec URL, or a CLI output store.
    registry : mapping
        Model name -> its :class:`~daskrnmf.models.ModelSpec` (``.cls``): the only
        classes a file may name.
    storage_options : dict, optional
        Options of the URL's fsspec file system.

    Returns
    -------
    model : estimator
        The fitted estimator (``callback=None``).

    Raises
    ------
    ValueError
        If ``path`` holds no saved model, a newer format, a model ``registry`` does not
        hold, or a parameter or attribute the model does not have.
    """
    where = os.fspath(path)
    try:
        group = _open_saved(where, storage_options)
    except (PermissionError, ImportError, ConnectionError):
        raise
    except Exception as exc:   # missing, not Zarr, an array
        raise ValueError(f"{where} is not a saved daskrnmf model ({type(exc).__name__}: "
                         f"{exc}).") from None
    attrs = dict(group.attrs)
    if attrs.get("format") != FORMAT:
        sub = _member(group, "model")
        if sub is not None and dict(sub.attrs).get("format") == FORMAT:
            group, attrs, where = sub, dict(sub.attrs), where.rstrip("/") + "/model"
        else:
            raise ValueError(f"{where} is not a saved daskrnmf model (no 'format': "
                             f"{FORMAT!r} in its attributes, nor in a 'model' subgroup).")
    version = attrs.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: format_version {version!r} is not a version of the "
                         f"{FORMAT} format.")
    if version > FORMAT_VERSION:
        raise ValueError(f"{where} was saved in {FORMAT} format_version {version} (by daskrnmf "
                         f"{attrs.get('daskrnmf_version', '?')}); this daskrnmf reads "
                         f"format_version {FORMAT_VERSION} only: upgrade daskrnmf to load it.")
    if version in _UNCHECKED_VERSIONS:
        raise ValueError(f"{where} was saved in {FORMAT} format_version {version} (by daskrnmf "
                         f"{attrs.get('daskrnmf_version', '?')}), before model files carried "
                         "checksums: its arrays cannot be verified, so it is not loaded. Load "
                         "it with the daskrnmf that saved it and save it again, or refit.")
    cls = _registered_class(attrs.get("model"), where, registry)
    model = cls(**_decode_params(cls, attrs.get("params"), where))
    model._validate_params()
    decoder = _Decoder(group, where, attrs.get("arrays"))
    saved = attrs.get("attributes") or {}
    if not isinstance(saved, dict):
        raise ValueError(f"{where}: 'attributes' must be a mapping.")
    private = frozenset(getattr(cls, "_saved_private", ()))
    known = frozenset(FITTED.get(cls.__name__, ())) | private
    for key, value in saved.items():
        if not isinstance(key, str) or not (_is_fitted_name(key) or key in private) \
                or hasattr(cls, key) or key not in known:
            raise ValueError(f"{where}: {cls.__name__} has no fitted attribute {key!r}.")
        setattr(model, key, decoder.decode(value, key))
    decoder.check_all_read()
    _check_consistent(model, where)
    if attrs.get("sha256") != _meta_digest(attrs):
        raise ValueError(f"{where}: its attributes (parameters or fitted values) differ from "
                         "what was saved (their SHA-256): the file was edited after it was "
                         "saved. Refit and save the model again.")
    return model


def _size(model, name):
    """The size ``name`` (an attribute, else a parameter) gives an axis: an int, the
    length of a list or 1-D array, or None (the model has no such size)."""
    value = getattr(model, name, None)
    if isinstance(value, (list, tuple, np.ndarray)):
        return len(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def _check_consistent(model, where):
    """ValueError unless the fitted arrays have the shapes the parameters and the other
    attributes give them (:data:`_SHAPES`), the labels lie in their ranges
    (:data:`_LABELS`) and every ``name_`` size equals the parameter ``name``."""
    cls = type(model).__name__
    params = model.get_params(deep=False)
    state = saved_state(model)
    n_features = state.get("n_features_in_")
    if "n_features_in_" in state and (not isinstance(n_features, int)
                                      or isinstance(n_features, bool) or n_features < 1):
        raise ValueError(f"{where}: n_features_in_ is {n_features!r}, not a positive int.")
    for key, value in state.items():
        plain = key.rstrip("_")
        if key.endswith("_") and plain in params and isinstance(params[plain], int) \
                and isinstance(value, int) and value != params[plain]:
            raise ValueError(f"{where}: {key} is {value} but the parameter {plain} is "
                             f"{params[plain]}: the file's parameters and fitted state do "
                             "not agree (edited, or put together from two models). Refit "
                             "and save the model again.")
    for key, axes in _SHAPES.items():
        value = state.get(key)
        if not isinstance(value, np.ndarray):
            continue
        sizes = [_size(model, a) for a in axes]
        wrong = value.ndim != len(axes) or any(
            s is not None and s != n for s, n in zip(sizes, value.shape))
        if wrong:
            given = ", ".join(f"{a} = {s}" for a, s in zip(axes, sizes) if s is not None)
            raise ValueError(f"{where}: {cls}'s {key} has shape {value.shape}, but {given} "
                             f"make it ({', '.join(map(str, sizes))}) (array "
                             f"{ARRAYS}/{key}): the file's parameters and arrays do not agree "
                             "(edited, or put together from two models). Refit and save the "
                             "model again.")
    for key, bound in _LABELS.items():
        value, k = state.get(key), _size(model, bound)
        if isinstance(value, np.ndarray) and k is not None and value.size and (
                value.dtype.kind not in "iu" or value.ndim != 1
                or int(value.min()) < 0 or int(value.max()) >= k):
            raise ValueError(f"{where}: {cls}'s {key} holds labels outside range({bound} = "
                             f"{k}) (array {ARRAYS}/{key}): the file's parameters and arrays "
                             "do not agree. Refit and save the model again.")


def _open_saved(where, storage_options):
    """The group at ``where``: a local path, or for a URL the version its (or a
    parent's) commit pointer names (:func:`daskrnmf.io._open_node`)."""
    return io._open_node(where, None, storage_options, group=True)


def _member(group, name):
    import zarr

    try:
        node = group[name]
    except KeyError:
        return None
    return node if isinstance(node, zarr.Group) else None


def _registered_class(name, where, registry):
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"{where} holds a model {name!r} that this daskrnmf does not know; "
                         f"it knows {', '.join(registry)}.")
    return registry[name].cls


def _decode_params(cls, params, where):
    if not isinstance(params, dict):
        raise ValueError(f"{where}: 'params' must be a mapping.")
    known = cls().get_params(deep=False)
    out = {}
    for key, value in params.items():
        if key not in known:
            raise ValueError(f"{where}: {cls.__name__} has no parameter {key!r}.")
        if isinstance(value, dict):
            if set(value) != {"array", "dtype"}:
                raise ValueError(f"{where}: parameter {key!r} is not a saved value.")
            value = np.asarray(value["array"], dtype=_safe_dtype(value["dtype"], where))
        elif isinstance(value, list):
            raise ValueError(f"{where}: parameter {key!r} is not a saved value.")
        out[key] = value
    return out


def _safe_dtype(text, where):
    try:
        dt = np.dtype(str(text))
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _ARRAY_KINDS:
        raise ValueError(f"{where}: dtype {text!r} is not a numeric dtype.")
    return dt


class _Decoder:
    """Values of the format, arrays verified against the file's ``checks`` (name ->
    ``{"sha256", "order"}``)."""

    def __init__(self, group, where, checks):
        self.group, self.where = group, where
        if not isinstance(checks, dict) or not all(
                isinstance(c, dict) and isinstance(c.get("sha256"), str)
                and c.get("order") in ("C", "F") for c in checks.values()):
            raise ValueError(f"{where}: the attribute 'arrays' (each array's SHA-256 and "
                             "memory order) is missing or damaged; the file cannot be "
                             "verified.")
        self.checks, self.read = checks, set()

    def check_all_read(self):
        """ValueError when the file lists, or holds, an array no attribute uses."""
        arrays = _member(self.group, ARRAYS)
        stored = set() if arrays is None else {n for n, _ in arrays.arrays()}
        extra = sorted((set(self.checks) | stored) - self.read)
        if extra:
            raise ValueError(f"{self.where}: the array(s) {extra} belong to no attribute of "
                             "the model: the file was changed after it was saved.")

    def decode(self, value, key):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v, key) for v in value]
        if isinstance(value, dict) and len(value) in (1, 2):
            if set(value) == {"tuple"} and isinstance(value["tuple"], list):
                return tuple(self.decode(v, key) for v in value["tuple"])
            if set(value) == {"dtype"}:
                return _safe_dtype(value["dtype"], self.where)
            if set(value) == {"array"} and isinstance(value["array"], str):
                return self.array(value["array"], key)
            if set(value) == {"strings", "kind"} and value["kind"] in ("O", "U") \
                    and isinstance(value["strings"], list):
                return np.asarray(value["strings"], dtype=object if value["kind"] == "O" else str)
        raise ValueError(f"{self.where}: attribute {key!r} holds a value this format does "
                         f"not define: {json.dumps(value)[:80]}")

    def array(self, name, key):
        import zarr

        arrays, node = _member(self.group, ARRAYS), None
        try:
            if arrays is not None and "/" not in name:
                node = arrays[name]
        except KeyError:
            pass
        except Exception as exc:   # metadata zarr cannot read: unknown codecs, ...
            raise ValueError(f"{self.where}: the array {name!r} cannot be opened "
                             f"({type(exc).__name__}: {exc}); refusing to decode it.") from None
        if not isinstance(node, zarr.Array):
            raise ValueError(f"{self.where}: the array {name!r} of attribute {key!r} is "
                             "missing.")
        meta = node.metadata.to_dict()
        codecs = set(_codec_names(meta.get("codecs", ())))
        if meta.get("zarr_format") != 3 or not codecs <= _SAFE_CODECS \
                or np.dtype(node.dtype).kind not in _ARRAY_KINDS:
            raise ValueError(f"{self.where}: the array {name!r} is not a numeric Zarr v3 array "
                             f"with the codecs daskrnmf writes (dtype {node.dtype}, codecs "
                             f"{sorted(codecs)}); refusing to decode it.")
        check = self.checks.get(name)
        path = f"{self.where.rstrip('/')}/{ARRAYS}/{name}"
        if check is None:
            raise ValueError(f"{self.where}: the array {name!r} has no checksum in the file's "
                             "attributes: it was added after the model was saved.")
        value = self._read(node, path)
        if _stores.digest(value) != check["sha256"]:
            raise ValueError(f"The array {path} differs from what was saved (its SHA-256): "
                             "a deleted or changed chunk, values written into it, or an array "
                             "put in its place. The model file is damaged; save or fit the "
                             "model again.")
        self.read.add(name)
        return np.asfortranarray(value) if check["order"] == "F" else value

    @staticmethod
    def _read(node, path):
        """The array's values, read chunk by chunk (along the first axis, as written) so
        that a chunk that cannot be decoded is named."""
        out = np.empty(node.shape, dtype=node.dtype)
        step = int(node.chunks[0]) if node.ndim else 1
        starts = range(0, node.shape[0], step) if node.ndim else [None]
        for i, start in enumerate(starts):
            sel = Ellipsis if start is None else slice(start, start + step)
            try:
                out[sel] = node[sel]
            except Exception as exc:   # a codec's error: corrupt or truncated bytes
                key = node.metadata.encode_chunk_key((i,) + (0,) * max(node.ndim - 1, 0))
                raise ValueError(f"The chunk {key} of the array {path} cannot be read "
                                 f"({type(exc).__name__}: {exc}): the model file is damaged; "
                                 "save or fit the model again.") from None
        return out


def _codec_names(codecs):
    for codec in codecs or ():
        if isinstance(codec, dict):
            yield codec.get("name")
            yield from _codec_names((codec.get("configuration") or {}).get("codecs"))
            yield from _codec_names((codec.get("configuration") or {}).get("index_codecs"))
        else:
            yield str(codec)
