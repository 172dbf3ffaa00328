"""A model's parameters as command-line options, read from the estimator itself: its
``__init__`` signature (names, defaults), its numpydoc "Parameters" section (types,
help) and its constraint table (what a command line cannot give: callables, arrays).

Nothing here names a model: ``daskrnmf fit MODEL --help`` shows what this module finds
in the class the registry names.
"""

import argparse
import inspect
import re

import numpy as np

#: the parameter of a resumable model (``ModelSpec.resumable``) that the command sets
#: from its own ``--checkpoint DIR`` (beside ``--resume``), never a model option
CHECKPOINT = "checkpoint"


def _clean(text):
    """Docstring text as plain help: no RST roles or literal markup, one line."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    return " ".join(text.split())


def parse_parameters_section(doc):
    """``name -> (type text, description)`` from a numpydoc "Parameters" section.

    A small parser of the block that starts with ``Parameters`` underlined by dashes and
    ends at the next underlined section: ``name : type`` lines at the section's
    indentation (``a, b : type`` names several), the indented lines below them the
    description.
    """
    lines = inspect.cleandoc(doc or "").splitlines()

    def underline(i):
        return i + 1 < len(lines) and lines[i + 1].strip() and set(lines[i + 1].strip()) == {"-"}

    def indent(line):
        return len(line) - len(line.lstrip())

    start = next((i for i, line in enumerate(lines)
                  if line.strip() == "Parameters" and underline(i)), None)
    if start is None:
        return {}
    base, out, current = indent(lines[start]), {}, []
    for i in range(start + 2, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        if indent(line) <= base and underline(i):
            break                                    # the next section
        if indent(line) <= base:
            names, _, kind = line.strip().partition(":")
            current = [n.strip() for n in names.split(",") if n.strip()]
            for n in current:
                out[n] = [kind.strip(), []]
        else:
            for n in current:
                out[n][1].append(line.strip())
    return {n: (_clean(kind), _clean(" ".join(desc))) for n, (kind, desc) in out.items()}


def parameter_docs(cls):
    """Parameter docs of ``cls`` and its daskrnmf bases (a subclass's own text wins)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if (klass.__module__ or "").startswith("daskrnmf"):
            docs.update(parse_parameters_section(klass.__dict__.get("__doc__")))
    return docs


_CLI_VALUES = (0, 1, 0.5, 1e-3, True, "text")


def _not_an_option(default, kind, constraints):
    """Callables (callbacks) and arrays are not given on a command line: a parameter whose
    constraints accept no number, flag or text, or whose default or documented type is a
    callable or an array."""
    if constraints and not any(hasattr(c, "values") or any(_accepts(c, x) for x in _CLI_VALUES)
                               for c in constraints):
        return True
    if callable(default) or isinstance(default, np.ndarray):
        return True
    low = kind.lower()
    if "callable" in low or "function" in low:
        return True
    if "array" in low and not re.search(r"\b(int|float|str|bool|string)\b|\{", low):
        return True
    return False


def _accepts(constraint, value):
    try:
        return bool(constraint.accepts(value))
    except Exception:
        return False


def _bool(text):
    low = text.strip().lower()
    if low in ("true", "yes", "on", "1"):
        return True
    if low in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _typed(kind_name, convert):
    def parse(text):
        if text.strip().lower() == "none":
            return None
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind_name}, got {text!r}") from None
    return parse


def _coerce(text):
    """A value of a parameter without a typed default: bool, None, int, float or text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def model_options(cls):
    """The command-line options of an estimator class, from its ``__init__`` signature and
    numpydoc "Parameters": a list of ``(name, default, type, metavar, help)``.  The
    checkpoint parameter is left out: the command gives it as ``--checkpoint`` to the
    models the registry marks resumable (:data:`CHECKPOINT`)."""
    docs = parameter_docs(cls)
    table = getattr(cls, "_parameter_constraints", {})
    options = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", CHECKPOINT) or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind, text = docs.get(name, ("", ""))
        default = None if p.default is p.empty else p.default
        if _not_an_option(default, kind, table.get(name, ())):
            continue
        choices = re.match(r"\{([^}]*)\}", kind)
        if isinstance(default, bool):
            convert, metavar = _bool, "{true,false}"
        elif isinstance(default, int):
            convert, metavar = _typed("an integer", int), "INT"
        elif isinstance(default, float):
            convert, metavar = _typed("a number", float), "FLOAT"
        else:
            convert, metavar = _coerce, "VALUE"
        if choices:
            names = (c.strip().strip("\"'") for c in choices.group(1).split(","))
            metavar = "{" + ",".join(names) + "}"
        help_text = (text + " " if text else "") + f"(default: {default!r})"
        options.append((name, default, convert, metavar, help_text.replace("%", "%%")))
    return options
