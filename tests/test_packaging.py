"""What a user gets besides the code: the license (one declaration, one file), type
information, the changelog and the citation file listing the models' papers."""

import os
import re

import pytest
import yaml

import daskrnmf

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def _read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def test_license_file_and_declaration_agree():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads(_read("pyproject.toml"))
    assert project["project"]["license"] == "BSD-3-Clause"
    assert project["project"]["license-files"] == ["LICENSE"]
    # an SPDX license string needs setuptools >= 77 to build
    assert "setuptools>=77" in project["build-system"]["requires"]
    text = _read("LICENSE")
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder" in text
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["daskrnmf"]
    assert os.path.exists(os.path.join(os.path.dirname(daskrnmf.__file__), "py.typed"))
    assert yaml.safe_load(_read("CITATION.cff"))["license"] == "BSD-3-Clause"


def test_version_is_defined_once():
    """One version: daskrnmf/_version.py; the build reads it (dynamic version), the
    package and the model files take it from there."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads(_read("pyproject.toml"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "daskrnmf._version.__version__"}
    from daskrnmf import _persist, _version

    assert daskrnmf.__version__ == _version.__version__
    assert _persist.__version__ is _version.__version__


def test_changelog_has_the_current_version():
    text = _read("CHANGELOG.md")
    assert re.search(rf"^## \[{re.escape(daskrnmf.__version__)}\]", text, re.M)


def test_citation_lists_the_software_and_the_models_papers():
    cff = yaml.safe_load(_read("CITATION.cff"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == daskrnmf.__version__
    refs = {(r["authors"][0]["family-names"], r["year"]): r for r in cff["references"]}
    for key, words in {("Wang", 2016): "Human Action", ("Wang", 2017): "Ordered Structure",
                       ("Kumar", 2011): "Max-Margin", ("Zhao", 2016): "Outliers",
                       ("Lee", 2001): "Non-negative Matrix", ("Ding", 2010): "Semi-Nonnegative",
                       ("Kong", 2011): "L21"}.items():
        assert words in refs[key]["title"], key
        assert refs[key].get("collection-title") or refs[key].get("journal"), key
    for ref in cff["references"]:
        assert ref["type"] in ("conference-paper", "article") and ref["authors"]
