"""The locations a command reads and writes, checked before a cluster starts.

The rules are the library's (:mod:`daskrnmf._stores` for paths, :mod:`daskrnmf.io` for
URLs, the same that ``model.save`` follows); this module says which location plays which
part in a command: the stores it reads (never written: every location to be written is
refused in, at or around them), the output, a resumable fit's checkpoint, the scratch
directory, and the single files ``choose-k`` writes.
"""

import os

from .. import _checkpoint, _files, _stores, io
from ._run import CommandError


def protected(*paths):
    """The stores a command reads, from ``(path or URL, role)`` pairs (``None`` paths
    skipped), as :func:`daskrnmf._stores.refuse_overlap` takes them."""
    return [_stores.protected(path, role) for path, role in paths if path]


def open_input(path, component=None, what="input", storage_options=None, files=False):
    """The Zarr array at ``path``; with ``files``, also the reader of a ``.npy`` file or an
    HDF5 dataset (``FILE.h5/DATASET``), as :func:`daskrnmf.io.open_input` gives it."""
    url = io.is_url(path)
    found = None if url or not files else _files.split_file_path(path)
    if not url and found is None and not os.path.exists(path):
        raise CommandError(f"{what} {path} does not exist.")
    if files:
        return io.open_input(path, component, storage_options=storage_options)
    return io.open_array(path, component, storage_options=storage_options)


def check_output(path, overwrite, protected=(), storage_options=None):
    """The output store: not a store the command reads (nor inside or around one), not
    inside any Zarr store, absent unless ``overwrite`` (and then only a store daskrnmf
    wrote), its directory there and writable (a URL: a probe object written and deleted,
    so that wrong credentials and a missing bucket fail now)."""
    _stores.refuse_overlap(path, protected, "output")
    io.check_destination(path, "output", overwrite=overwrite, how="--overwrite",
                         storage_options=storage_options)


def check_checkpoint(path, protected, *, resume, overwrite, storage_options=None):
    """A resumable fit's ``--checkpoint``: not a store the command reads or writes, nor in
    or around one (``protected`` includes the output); writable; and holding no earlier
    run's checkpoint unless the fit resumes it (``resume``) or replaces it
    (``overwrite``)."""
    _stores.refuse_overlap(path, protected, "checkpoint")
    if io.is_url(path):
        io.check_writable(path, storage_options, "checkpoint location")
    else:
        _stores.check_writable(path, "checkpoint directory")
    if not resume and not overwrite and _checkpoint.holds_run(path, storage_options):
        raise CommandError(f"checkpoint directory {path} holds an earlier run's checkpoint; "
                           "pass --resume to continue it or --overwrite to replace it.")


def check_scratch(root, protected):
    """Where the run's scratch directory goes: not in a store the command reads (it may
    contain one: a scratch directory of its own is made inside), and writable."""
    _stores.refuse_overlap(root, protected, "scratch directory", around=False)
    _stores.check_writable(root, "scratch directory")


def check_file(path, what, overwrite, protected):
    """A single file a command writes at its end (``choose-k``'s table and figure),
    checked before the work (:func:`daskrnmf._stores.check_file_destination`), and for a
    figure a format matplotlib writes."""
    _stores.check_file_destination(path, what, overwrite=overwrite, how="--overwrite",
                                   protected=protected)
    if what == "--plot":
        from matplotlib.figure import Figure      # matplotlib only for a --plot

        kinds = Figure().canvas.get_supported_filetypes()
        ext = os.path.splitext(path)[1].lower().lstrip(".")
        if ext not in kinds:
            found = f"matplotlib cannot write '.{ext}' files" if ext else "no file extension"
            raise CommandError(f"{what} {path}: {found}; end the name with one of "
                               f".{', .'.join(sorted(kinds))}.")
