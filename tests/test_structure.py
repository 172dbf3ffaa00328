"""The package's layers, read from its imports (all of them, inside functions too): the
checks and messages at the bottom, kernels that reach no layer above them, the model
file format below the models."""

import ast
import os

import pytest

import daskrnmf

ROOT = os.path.dirname(daskrnmf.__file__)


def _imports(relpath):
    """Every daskrnmf module that the file ``relpath`` (under the package) imports, by
    its dotted name; ``daskrnmf`` itself for a name taken from the package's face."""
    package = ["daskrnmf"] + [p for p in os.path.dirname(relpath).split(os.sep) if p]
    with open(os.path.join(ROOT, relpath), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "daskrnmf")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "daskrnmf":
                continue
            for alias in node.names:        # a submodule taken by name, else the module
                sub = f"{module}.{alias.name}"
                is_module = os.path.exists(os.path.join(ROOT, *sub.split(".")[1:]) + ".py") \
                    or os.path.isdir(os.path.join(ROOT, *sub.split(".")[1:]))
                found.add(sub if is_module else module)
    return found


def _files(folder=""):
    for name in sorted(os.listdir(os.path.join(ROOT, folder))):
        if name.endswith(".py"):
            yield os.path.join(folder, name)


def test_validation_imports_nothing_of_the_package():
    """Constraints and messages are the bottom layer: everything may use them."""
    assert _imports("_validation.py") == set()


@pytest.mark.parametrize("path", list(_files("kernels")))
def test_kernels_import_only_kernels(path):
    """A kernel reaches no layer above it (the reductions, the validation, the blocks)."""
    above = {m for m in _imports(path) if not m.startswith("daskrnmf.kernels")}
    assert not above, f"{path} imports {sorted(above)}"


def test_model_format_sits_below_the_models():
    """``_persist`` reads neither the registry nor the package's face: the registry is
    read where a model is loaded (:func:`daskrnmf.load`), and the version comes from
    ``_version``; so the base (``save``) can use it."""
    taken = _imports("_persist.py")
    assert not {m for m in taken if m == "daskrnmf" or m.startswith("daskrnmf.models")}, taken
    assert "daskrnmf._version" in taken


def test_the_input_is_normalised_in_io():
    """``io`` turns what the user passed into the array a fit reads, with the messages of
    ``_validation``; ``_validation`` opens no file."""
    assert "daskrnmf._validation" in _imports("io.py")
    from daskrnmf import _validation, io

    assert hasattr(io, "check_array") and not hasattr(_validation, "check_array")
