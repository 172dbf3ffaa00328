"""The Examples sections of the public API run (doctest), and every registered model's
docstring documents its parameters and cites its paper."""

import doctest
import importlib
import inspect
import warnings

import pytest

from daskrnmf import REGISTRY

MODULES = sorted({spec.module for spec in REGISTRY.values()}) + [
    "daskrnmf.datasets", "daskrnmf.metrics", "daskrnmf.io", "daskrnmf.plotting"]


@pytest.mark.parametrize("module", MODULES)
def test_examples_run(module):
    mod = importlib.import_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", list(REGISTRY))
def test_model_docstring_documents_every_parameter(name):
    cls = REGISTRY[name].cls
    doc = inspect.getdoc(cls)
    assert "References\n----------" in doc and "Examples\n--------" in doc
    assert "paper 00" not in doc and "ERRATA" not in doc
    params = doc.split("Parameters\n----------", 1)[1].split("Attributes\n----------", 1)[0]
    for p in cls().get_params(deep=False):
        assert p in params, f"{name}: parameter {p!r} undocumented"
