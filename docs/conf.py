"""Sphinx configuration of daskrnmf's documentation.

Build it with ``python -m sphinx -b html docs docs/_build/html`` (``pip install
".[docs]"``); the test suite builds it with warnings as errors (tests/test_docs.py).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
# the package of this checkout, before any installed copy
sys.path.insert(0, os.path.dirname(HERE))

import daskrnmf  # noqa: E402

project = "daskrnmf"
author = "the daskrnmf developers"
copyright = "the daskrnmf developers; BSD 3-Clause"
version = release = daskrnmf.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "daskrnmf_cli",
]

# numpydoc-style docstrings through napoleon (no dependency beyond Sphinx)
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = False

autodoc_default_options = {"member-order": "bysource"}
# signatures show names and defaults; the docstrings give the types
autodoc_typehints = "none"
autoclass_content = "class"

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
html_title = f"daskrnmf {release}"
# types such as "ndarray of shape (n_iter_,)" read as types, not as RST references
napoleon_preprocess_types = True


# ----------------------------------------------------------------------------------------
# What numpydoc does and napoleon does not: footnotes of a docstring's References
# section are numbered per docstring ("[1]"), so two docstrings on one page would define
# the same target twice.  Each docstring's labels get a prefix of their own.

import re  # noqa: E402

_FOOTNOTE = re.compile(r"\[(\d+)\]_")
_FOOTNOTE_DEF = re.compile(r"^(\s*\.\. )\[(\d+)\]")


def _unique_footnotes(app, what, name, obj, options, lines):
    prefix = "R" + re.sub(r"\W", "", name.rsplit(".", 1)[-1]) + "-"
    for i, line in enumerate(lines):
        line = _FOOTNOTE_DEF.sub(lambda m: f"{m.group(1)}[{prefix}{m.group(2)}]", line)
        lines[i] = _FOOTNOTE.sub(lambda m: f"[{prefix}{m.group(1)}]_", line)


# scikit-learn's own methods (set_output, get_metadata_routing, set_*_request,
# get_params, ...) are documented by scikit-learn, in its own cross-references
def _skip_sklearn(app, what, name, obj, skip, options):
    func = getattr(obj, "__func__", obj)
    if (getattr(func, "__module__", None) or "").startswith("sklearn."):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _unique_footnotes)
    app.connect("autodoc-skip-member", _skip_sklearn)


# A References section lists works that its text need not cite: a citation no text refers
# to is no mistake (numpydoc's convention).
suppress_warnings = ["ref.citation"]
