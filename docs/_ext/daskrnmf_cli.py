"""``.. daskrnmf-help:: [SUBCOMMAND ...]``: the ``daskrnmf`` command's ``--help`` text,
produced by the installed command's own parser when the documentation is built, so the
CLI reference cannot drift from the code."""

import contextlib
import io
import os

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def help_text(args):
    """What ``daskrnmf ARGS --help`` prints, at a fixed width of 88 columns."""
    from daskrnmf import cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            try:
                cli.main([*args, "--help"])
            except SystemExit as exc:
                if exc.code not in (0, None):
                    raise RuntimeError(f"daskrnmf {' '.join(args)} --help failed") from exc
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue().rstrip()


class DaskrnmfHelp(SphinxDirective):
    optional_arguments = 10
    has_content = False

    def run(self):
        text = help_text(self.arguments)
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("daskrnmf-help", DaskrnmfHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
