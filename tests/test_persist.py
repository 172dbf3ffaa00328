"""model.save(path) and daskrnmf.load(path): every registered model comes back with the
same outputs; the file format runs no code and refuses what it does not define."""

import json
import os
import pickle
import warnings

import numpy as np
import pytest
import zarr

import daskrnmf
from daskrnmf import REGISTRY, _persist

METHODS = ("predict", "transform", "decompose", "decision_function", "inverse_transform")


def _small_model(name):
    spec = REGISTRY[name]
    params = spec.cls().get_params(deep=False)
    kw = {k: 2 for k in ("n_clusters", "n_components", "n_row_clusters", "n_column_clusters")
          if k in params}
    if "max_iter" in params:
        kw["max_iter"] = 4
    if "max_inner_iter" in params:
        kw["max_inner_iter"] = 20
    return spec.cls(**kw, random_state=0)


def _data(dtype=np.float64):
    rng = np.random.default_rng(0)
    X = rng.random((50, 6)).astype(dtype)
    y = np.where(X[:, 0] > 0.5, "yes", "no")        # string classes survive too
    return X, y


def _fit(name, X, y):
    model = _small_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, y) if REGISTRY[name].needs_y else model.fit(X)


def _outputs(model, X):
    out = {}
    for method in METHODS:
        if hasattr(model, method):
            arg = model.transform(X) if method == "inverse_transform" else X
            res = getattr(model, method)(arg)
            out[method] = res if isinstance(res, tuple) else (res,)
    return out


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape \
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and np.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", list(REGISTRY))
def test_round_trip_gives_identical_outputs(name, tmp_path):
    X, y = _data(np.float32)
    model = _fit(name, X, y)
    path = model.save(tmp_path / "model.zarr")
    assert path == str(tmp_path / "model.zarr")
    loaded = daskrnmf.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    state = _persist.saved_state(model)
    assert set(_persist.saved_state(loaded)) == set(state)
    for key, value in state.items():
        assert _same(value, getattr(loaded, key)), key
    before, after = _outputs(model, X), _outputs(loaded, X)
    assert before and set(before) == set(after)
    for method in before:
        for a, b in zip(before[method], after[method]):
            assert _same(np.asarray(a), np.asarray(b)), method
            assert np.asarray(b).dtype != np.float64 or np.asarray(a).dtype == np.float64
    assert os.listdir(tmp_path) == ["model.zarr"]      # no temporary left next to it



@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_attribute_a_fit_sets_is_one_load_accepts(name):
    """_persist.FITTED is kept by hand: every attribute a fit sets must be in it, the
    optional ones too (feature_names_in_ of a DataFrame, ORNMF's labels_ with
    n_clusters), or a saved model would not load."""
    pd = pytest.importorskip("pandas")
    X, y = _data()
    model = _fit(name, pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), y)
    private = set(getattr(type(model), "_saved_private", ()))
    fitted = set(_persist.saved_state(model)) - private
    assert "feature_names_in_" in fitted
    assert fitted <= set(_persist.FITTED[name]), sorted(fitted - set(_persist.FITTED[name]))

def test_an_unfitted_model_round_trips_its_parameters(tmp_path):
    from daskrnmf import RFNMF

    model = RFNMF(n_clusters=3, loss="l1", init=np.ones((3, 2)), random_state=7)
    loaded = daskrnmf.load(model.save(tmp_path / "m"))
    params, expected = loaded.get_params(), model.get_params()
    np.testing.assert_array_equal(params.pop("init"), expected.pop("init"))
    assert params == expected
    assert (loaded.n_clusters, loaded.loss, loaded.random_state) == (3, "l1", 7)
    assert not hasattr(loaded, "cluster_centers_")


def test_onmfo_continues_partial_fit_after_load(tmp_path):
    """ONMFO keeps its statistics A, B, C and W (``_saved_private``): a loaded model's
    partial_fit continues the stream, as the original's does."""
    from daskrnmf import ONMFO

    X, _ = _data()
    a = ONMFO(n_components=2, max_inner_iter=20, random_state=0)
    a.partial_fit(X[:25])
    b = daskrnmf.load(a.save(tmp_path / "onmfo"))
    a.partial_fit(X[25:])
    b.partial_fit(X[25:])
    np.testing.assert_array_equal(a.components_, b.components_)
    assert a.n_steps_ == b.n_steps_ == 2 and a.n_samples_seen_ == b.n_samples_seen_ == 50


def test_load_runs_no_pickle(tmp_path, monkeypatch):
    X, y = _data()
    path = _fit("MNMF", X, y).save(tmp_path / "m")

    def refuse(*args, **kwargs):
        raise AssertionError("load used pickle")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    assert daskrnmf.load(path).predict(X).shape == (50,)


def test_save_refuses_to_overwrite_unless_asked(tmp_path):
    X, _ = _data()
    first = _fit("NMF", X, None)
    path = first.save(tmp_path / "m")
    second = _fit("RNMF", X, None)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        second.save(path)
    assert type(daskrnmf.load(path)).__name__ == "NMF"
    second.save(path, overwrite=True)
    assert type(daskrnmf.load(path)).__name__ == "RNMF"
    assert os.listdir(tmp_path) == ["m"]


def test_a_callback_is_not_saved(tmp_path):
    from daskrnmf import NMF

    model = NMF(n_components=2, callback=lambda info: False)
    with pytest.warns(UserWarning, match="parameter 'callback' not saved"):
        path = model.save(tmp_path / "m")
    assert daskrnmf.load(path).callback is None
    assert zarr.open_group(path, mode="r").attrs["dropped_params"] == {"callback": "function"}


def _edit_attrs(path, **changes):
    meta_file = os.path.join(path, "zarr.json")
    with open(meta_file) as fh:
        meta = json.load(fh)
    for key, value in changes.items():
        if callable(value):
            value(meta["attributes"][key])
        else:
            meta["attributes"][key] = value
    with open(meta_file, "w") as fh:
        json.dump(meta, fh)


@pytest.fixture
def saved(tmp_path):
    X, _ = _data()
    return _fit("RFNMF", X, None).save(tmp_path / "saved"), X


def test_a_newer_format_is_a_clear_error(saved):
    path, _ = saved
    _edit_attrs(path, format_version=99)
    with pytest.raises(ValueError, match=r"saved\S* in daskrnmf-model format_version 99") as exc:
        daskrnmf.load(path)
    assert path in str(exc.value)
    assert f"format_version {_persist.FORMAT_VERSION} only" in str(exc.value)


@pytest.mark.parametrize("change, message", [
    ({"model": "Evil"}, "model 'Evil' that this daskrnmf does not know"),
    ({"model": "BaseModel"}, "does not know"),
    ({"format": "something-else"}, "is not a saved daskrnmf model"),
    ({"params": {"n_clusters": 2, "evil": 1}}, "has no parameter 'evil'"),
    ({"params": {"n_clusters": -1}}, "n_clusters"),
])
def test_unknown_models_formats_and_parameters_are_refused(saved, change, message):
    path, _ = saved
    _edit_attrs(path, **change)
    with pytest.raises(ValueError, match=message):
        daskrnmf.load(path)


@pytest.mark.parametrize("key, value", [
    ("_evil", 1),                          # private and not in the class's allow-list
    ("fit", 1),                            # not a fitted attribute name
    ("n_iter", 3),                         # no trailing underscore
    ("labels_", {"code": "import os"}),    # a value the format does not define
    ("labels_", {"array": "../../elsewhere"}),
    ("labels_", {"dtype": "O"}),
])
def test_unknown_attributes_and_values_are_refused(saved, key, value):
    path, _ = saved
    _edit_attrs(path, attributes=lambda attrs: attrs.__setitem__(key, value))
    with pytest.raises(ValueError, match=f"{key!r}|dtype|not define|missing"):
        daskrnmf.load(path)


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
@pytest.mark.parametrize("codec", [
    {"name": "numcodecs.zlib", "configuration": {"level": 1}},   # known to zarr, not allowed
    {"name": "numcodecs.pickle"},                                # code execution on decode
])
def test_an_array_with_a_codec_outside_the_allow_list_is_not_decoded(saved, codec):
    path, _ = saved
    meta_file = os.path.join(path, _persist.ARRAYS, "cluster_centers_", "zarr.json")
    with open(meta_file) as fh:
        meta = json.load(fh)
    meta["codecs"].append(codec)
    with open(meta_file, "w") as fh:
        json.dump(meta, fh)
    with pytest.raises(ValueError, match="refusing to decode"):
        daskrnmf.load(path)


def test_not_a_model(tmp_path):
    with pytest.raises(ValueError, match="is not a saved daskrnmf model"):
        daskrnmf.load(tmp_path / "missing")
    zarr.open_group(str(tmp_path / "g"), mode="w")
    with pytest.raises(ValueError, match="is not a saved daskrnmf model"):
        daskrnmf.load(tmp_path / "g")


def test_only_registered_models_are_saved(tmp_path):
    from daskrnmf import NMF

    class Mine(NMF):
        pass

    with pytest.raises(TypeError, match="only the registered daskrnmf models"):
        Mine().save(tmp_path / "m")
    Namesake = type("NMF", (NMF,), {})      # a registered name, but not daskrnmf's class
    with pytest.raises(TypeError, match="only the registered daskrnmf models"):
        Namesake().save(tmp_path / "m")
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------- issue 40: integrity
def _centres_file(path):
    return os.path.join(path, _persist.ARRAYS, "cluster_centers_")


def _delete_chunk(path):
    os.remove(os.path.join(_centres_file(path), "c", "0", "0"))


def _set_nan(path):
    z = zarr.open_array(_centres_file(path), mode="r+")
    z[0, 0] = np.nan


def _swap_shape(path):
    z = zarr.open_array(_centres_file(path), mode="r")
    value = z[...]
    zarr.create_array(_centres_file(path), shape=(3, value.shape[1]), dtype=value.dtype,
                      overwrite=True)[...] = np.vstack([value, value[:1]])


def _corrupt_chunk(path):
    with open(os.path.join(_centres_file(path), "c", "0", "0"), "r+b") as fh:
        fh.write(b"\xff" * 8)


@pytest.mark.parametrize("damage, message", [
    (_delete_chunk, r"cluster_centers_\S* differs from what was saved"),
    (_set_nan, r"cluster_centers_\S* differs from what was saved"),
    (_swap_shape, r"cluster_centers_\S* differs from what was saved"),
    (_corrupt_chunk, r"chunk c/0/0 of the array \S*cluster_centers_ cannot be read"),
    (lambda p: _edit_attrs(p, params={"n_clusters": 3}),
     r"cluster_centers_ has shape \(2, 6\).*n_clusters = 3"),
    (lambda p: _edit_attrs(p, attributes=lambda a: a.__setitem__("n_features_in_", 5)),
     r"cluster_centers_ has shape \(2, 6\).*n_features_in_ = 5"),
    (lambda p: _edit_attrs(p, attributes=lambda a: a.__setitem__("evil_", 1)),
     "RFNMF has no fitted attribute 'evil_'"),
])
def test_a_damaged_or_inconsistent_model_file_is_refused_naming_it(saved, damage, message):
    path, X = saved
    damage(path)
    with pytest.raises(ValueError, match=message) as err:
        daskrnmf.load(path)
    assert path in str(err.value)


def test_a_model_file_without_checksums_is_refused(saved):
    path, _ = saved
    _edit_attrs(path, format_version=1)
    with pytest.raises(ValueError, match="before model files carried checksums.*save it again"):
        daskrnmf.load(path)


@pytest.mark.parametrize("name", ["SemiNMF", "MNMF"])
def test_arrays_come_back_in_the_memory_order_they_were_saved_in(name, tmp_path):
    X, y = _data()
    model = _fit(name, X, y)
    assert model.components_.flags.f_contiguous and not model.components_.flags.c_contiguous
    loaded = daskrnmf.load(model.save(tmp_path / "m"))
    assert loaded.components_.flags.f_contiguous
    for key, value in _persist.saved_state(model).items():
        if isinstance(value, np.ndarray):
            got = getattr(loaded, key)
            assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
                (value.flags.c_contiguous, value.flags.f_contiguous), key


def test_an_edited_parameter_or_value_that_fits_the_arrays_is_refused(saved):
    path, X = saved
    _edit_attrs(path, params={**zarr.open_group(path, mode="r").attrs["params"], "loss": "l2"})
    with pytest.raises(ValueError, match=f"{path}: its attributes .* differ from what was saved"):
        daskrnmf.load(path)
