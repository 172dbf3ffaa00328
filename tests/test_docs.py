"""The Examples sections of the public API run (doctest), and every registered model's
docstring documents its parameters and cites its paper."""

import doctest
import importlib
import inspect
import warnings

import pytest

from daskrnmf import REGISTRY

MODULES = sorted({spec.module for spec in REGISTRY.values()}) + [
    "daskrnmf", "daskrnmf.datasets", "daskrnmf.metrics", "daskrnmf.io", "daskrnmf.plotting",
    "daskrnmf._persist"]


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


def test_sources_cite_papers_by_authors_and_venue():
    """No reference to the papers' file numbers ("paper 004") or to notes outside the
    package ("ERRATA"): a reader of the installed package has neither."""
    import os
    import re

    import daskrnmf

    root = os.path.dirname(daskrnmf.__file__)
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    for number, line in enumerate(fh, 1):
                        if re.search(r"paper \d{3}|ERRATA", line):
                            found.append(f"{os.path.relpath(path, root)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
