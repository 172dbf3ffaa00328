"""The Examples sections of the public API run (doctest), every registered model's
docstring documents its parameters and cites its paper, the documentation site builds
without a warning, and the README stays a short entry with the two first-run commands."""

import doctest
import importlib
import inspect
import os
import re
import subprocess
import sys
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


ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
DOCS = os.path.join(ROOT, "docs")


def test_documentation_builds_without_warnings(tmp_path):
    """The Sphinx site (docs/) builds with warnings as errors, and its reference has every
    registered model and every subcommand's --help (produced by the command itself)."""
    pytest.importorskip("sphinx", reason="the documentation needs the docs extra (sphinx)")
    out = tmp_path / "html"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.abspath(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), DOCS, str(out)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr[-5000:]
    models = (out / "api" / "models.html").read_text(encoding="utf-8")
    cli = (out / "api" / "cli.html").read_text(encoding="utf-8")
    for name in REGISTRY:
        assert f'id="daskrnmf.{name}"' in models, f"{name} missing from the API reference"
        # fitted attributes keep their names (napoleon's ivar fields dropped the "_")
        assert f'id="daskrnmf.{name}.n_features_in_"' in models, name
        assert f"usage: daskrnmf fit {name} " in cli, f"'daskrnmf fit {name} --help' missing"
    for command in ("evaluate", "make-data", "convert", "info", "choose-k", "shutdown"):
        assert f"usage: daskrnmf {command} " in cli, f"'daskrnmf {command} --help' missing"
    for module in ("io", "metrics", "datasets", "plotting", "selection"):
        assert f'id="daskrnmf.{module}.' in (out / "api" / f"{module}.html").read_text(
            encoding="utf-8")


def _readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        return fh.read()


def test_readme_is_a_short_entry_with_the_first_run_commands():
    """The two commands a newcomer runs first, exactly as CI runs the second (.ci/run),
    under about 2,000 words, and every documentation page it points to exists."""
    readme = _readme()
    assert "pip install . && python examples/quickstart.py" in readme
    assert 'pip install ".[test]" && python -m pytest -q -n 2 --dist loadfile tests' in readme
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        assert 'pip install ".[test]" && python -m pytest -q -n 2 --dist loadfile tests' in fh.read()
    words = len(readme.split())
    assert words < 2000, f"README has {words} words"
    pages = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(pages) >= 5
    for page in pages:
        assert os.path.isfile(os.path.join(ROOT, page)), f"README points to missing {page}"
    for name in REGISTRY:
        assert f"`{name}" in readme, f"{name} missing from the README's model table"
