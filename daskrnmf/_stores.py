"""Where daskrnmf writes: path safety, the stores it owns, atomic replacement, scratch.

One place for the rules every writer follows (the CLI's outputs, ``model.save``,
``make_zarr_blobs``, spilled per-block state):

* **Never the input.** A location to be written must not be a store that is read, lie
  inside one, or (for outputs) contain one (:func:`refuse_overlap`); nor may it lie inside
  any existing Zarr hierarchy (:func:`refuse_inside_zarr`): writing there would add a node
  to somebody's store.
* **Replace only what daskrnmf wrote.** ``overwrite`` replaces a location only when it is
  a store daskrnmf marked as its own: a Zarr group whose root attributes carry
  ``"written_by": "daskrnmf"`` (or, for stores written before the mark existed, a saved
  model's ``"format": "daskrnmf-model"``, a fit output's ``versions.daskrnmf`` or a
  make-data store's ``generator``), holding nothing but Zarr's own files
  (:func:`check_replaceable`).  An ordinary directory (a thesis folder, ``.``, a home
  tree), a file, a symbolic link or somebody else's Zarr store is never deleted.
* **Checked before the work.** A location is checked before anything is computed
  (:func:`check_destination` for a store, :func:`check_file_destination` for a single
  file): not existing unless replaceable, its directory there and writable.
* **Whole or not at all.** A result is written under a temporary name next to its
  location and renamed into place when complete (:func:`write_whole`,
  :func:`replace_with`).  :mod:`daskrnmf.io` adds the object-store side of both rules
  (a URL has no rename: a fresh prefix and a commit pointer), behind one
  ``check_destination`` and one ``write_whole`` for a path or a URL.
* **Scratch that outlives its process is swept.** Scratch directories
  (``daskrnmf-state-*``) record their owner (host, process id and its start time); a
  later run removes those whose owner process is gone (:func:`make_scratch`), so a job
  killed with SIGKILL leaks its scratch only until the next run in the same place.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
import uuid

OWNER_KEY = "written_by"
OWNER = "daskrnmf"
SCRATCH_PREFIX = "daskrnmf-state-"
_SCRATCH_OWNER = ".daskrnmf-owner.json"
_CHUNK_NAME = re.compile(r"c|\d+([./]\d+)*|c[./]\d+([./]\d+)*")


# ---------------------------------------------------------------- paths
def is_url(path) -> bool:
    """True for an fsspec URL (``s3://…``, ``memory://…``); ``file://`` is a local path."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local_path(path) -> str:
    """A local path as a string, without a ``file://`` prefix."""
    return os.fspath(path).removeprefix("file://")


def real(path) -> str:
    """``path`` absolute, ``~`` expanded, symbolic links resolved."""
    return os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


def within(a: str, b: str) -> bool:
    """``a`` is ``b`` or inside it (both resolved)."""
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def is_zarr_node(directory: str) -> bool:
    """``directory`` is a Zarr group or array (v3 or v2 metadata)."""
    return any(os.path.exists(os.path.join(directory, m)) for m in ("zarr.json", ".zgroup",
                                                                    ".zarray"))


def zarr_root(path) -> str:
    """The outermost directory of the Zarr hierarchy that holds ``path`` (resolved)."""
    root = real(path)
    while True:
        parent = os.path.dirname(root)
        if parent == root or not is_zarr_node(parent):
            return root
        root = parent


def refuse_overlap(path, protected, what, *, around=True):
    """``path`` (to be written) must not be a protected store, inside one, or (``around``)
    contain one.  ``protected``: ``(resolved root or URL key, role)`` pairs.  Paths are
    compared resolved, symbolic links followed; URLs by their path.  A ValueError
    otherwise."""
    if is_url(path):
        target = url_key(path)
        for store, role in protected:
            if is_url(store) and (target == store or target.startswith(store + "/") or (
                    around and store.startswith(target + "/"))):
                raise ValueError(_overlap_message(what, path, role, store, "location"))
        return
    target = real(path)
    for store, role in protected:
        if is_url(store):
            continue
        if within(target, store) or (around and within(store, target)):
            raise ValueError(_overlap_message(what, path, role, store, "path"))


def _overlap_message(what, path, role, store, kind):
    if role in ("input", "labels"):
        return (f"{what} {path} would write into the {role} store {store}; daskrnmf never "
                f"writes its input: choose another {kind}.")
    return (f"{what} {path} would overlap the {role} {store} (one inside the other); choose "
            f"another {kind}.")


def input_stores(X) -> list[tuple[str, str]]:
    """The Zarr stores ``X`` reads (a ``zarr.Array``, or the arrays in a Dask array's
    graph) as ``(resolved root or URL key, "input")`` pairs for :func:`refuse_overlap`."""
    import zarr

    if isinstance(X, zarr.Array):
        arrays = [X]
    elif hasattr(X, "__dask_graph__"):
        arrays = []
        for task in X.__dask_graph__().values():
            # a task-spec DataNode (a source in a task of its own), or a read's Task whose
            # arguments hold the source (dask.array.from_array(..., inline_array=True))
            for value in (task, *getattr(task, "args", ())):
                value = getattr(value, "value", value)
                value = getattr(value, "array", value)    # daskrnmf._reader.ZarrRows
                if isinstance(value, zarr.Array) and not any(value is a for a in arrays):
                    arrays.append(value)
    else:
        return []
    out = []
    for z in arrays:
        store = z.store
        root = getattr(store, "root", None)               # a LocalStore
        if root is not None:
            out.append((zarr_root(os.path.join(os.fspath(root), z.path)), "input"))
            continue
        fs, where = getattr(store, "fs", None), getattr(store, "path", None)
        if fs is not None and where is not None:          # an FsspecStore
            protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
            if set(protocols) & {"file", "local"}:        # a local path opened by fsspec
                out.append((zarr_root(os.path.join(where, z.path)), "input"))
            else:
                out.append((url_key(f"{protocols[0]}://{where}"), "input"))
    return out


def refuse_inside_zarr(path, what):
    """``path`` (to be created or replaced) must not lie inside an existing Zarr hierarchy
    (its directory a group or an array of somebody's store)."""
    if is_url(path):
        return
    parent = os.path.dirname(real(path))
    if is_zarr_node(parent):
        raise ValueError(f"{what} {path} would be written inside the Zarr store "
                         f"{zarr_root(parent)}, changing it; choose a path outside it.")


def protected(path, role) -> tuple[str, str]:
    """``(resolved root or URL key, role)``: the store ``path`` reads, as
    :func:`refuse_overlap` takes it (a local path: the outermost Zarr hierarchy that holds
    it; a URL: its protocol and path)."""
    return (url_key(path) if is_url(path) else zarr_root(path)), role


def url_key(url) -> str:
    """A URL compared by its protocol and path: ``s3://b/x/`` and ``s3://b//x`` alike."""
    protocol, _, rest = str(url).partition("://")
    return protocol + "://" + "/".join(part for part in rest.split("/") if part)


def nearest_existing(path) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_writable(directory, what):
    """Create and remove a probe in ``directory`` (its nearest existing ancestor when it
    does not exist yet): permission bits alone lie for root, and on read-only mounts."""
    where = nearest_existing(directory)
    if not os.path.isdir(where):
        raise ValueError(f"{what} {directory} cannot be created: {where} is not a directory.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".daskrnmf-probe-", dir=where))
    except OSError as exc:
        raise ValueError(f"{what} {directory} is not writable ({exc.strerror or exc}).") \
            from None


# ---------------------------------------------------------------- checksums
def digest(value) -> str:
    """SHA-256 (hex) of an array's dtype, shape and values: what model files, checkpoints
    and the chunks a checkpointed fit read are verified against."""
    return digest_rows([value])


def digest_rows(parts) -> str:
    """:func:`digest` of the concatenation of arrays ``parts`` along their first axis
    (one dtype, the same other dimensions; at least one), without making it."""
    import hashlib

    import numpy as np

    parts = [np.ascontiguousarray(p) for p in parts]
    shape = (sum(p.shape[0] for p in parts),) + parts[0].shape[1:] if parts[0].ndim else ()
    h = hashlib.sha256(str(parts[0].dtype).encode() + str(shape).encode())
    for value in parts:
        h.update(memoryview(value).cast("B") if value.dtype.kind in "biuf"
                 else value.tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------- owned stores
def mark(attrs: dict) -> dict:
    """``attrs`` with the owner mark that lets a later ``overwrite`` replace the store."""
    return {**attrs, OWNER_KEY: OWNER}


def _owned_attrs(attrs: dict) -> bool:
    if attrs.get(OWNER_KEY) == OWNER or attrs.get("format") == "daskrnmf-model":
        return True
    versions = attrs.get("versions")               # fit outputs before the mark
    if isinstance(versions, dict) and "daskrnmf" in versions and "model" in attrs:
        return True
    generator = attrs.get("generator")             # make-data stores before the mark
    return isinstance(generator, str) and "random_state" in attrs


def _root_attrs(path):
    try:
        with open(os.path.join(path, "zarr.json")) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("node_type") != "group":
        return None
    attrs = meta.get("attributes", {})
    return attrs if isinstance(attrs, dict) else None


def _zarr_entries(path):
    """``(path, ours)`` for every file under the Zarr node ``path``, and for every
    directory that is neither a Zarr node nor chunk storage (not descended into) or is a
    symbolic link (never followed).  ``ours``: Zarr's metadata, or a chunk — a file
    under an array's own ``c/`` folder, or a chunk key beside an array's metadata."""
    chunk_dirs = set()
    for top, dirs, files in os.walk(path):
        in_chunks = top in chunk_dirs
        array_here = not in_chunks and _is_array(top)
        for name in files:
            yield os.path.join(top, name), bool(
                in_chunks or name == "zarr.json" or (array_here and _CHUNK_NAME.fullmatch(name)))
        for name in list(dirs):
            full = os.path.join(top, name)
            if in_chunks or (array_here and name == "c"):
                chunk_dirs.add(full)
            elif os.path.islink(full) or not is_zarr_node(full):
                dirs.remove(name)
                yield full, False


def _foreign_entry(path):
    """The first file or directory under the Zarr group ``path`` that is not one of
    Zarr's own (:func:`_zarr_entries`), or None."""
    return next((entry for entry, ours in _zarr_entries(path) if not ours), None)


def _is_array(directory):
    try:
        with open(os.path.join(directory, "zarr.json")) as fh:
            return json.load(fh).get("node_type") == "array"
    except (OSError, ValueError, AttributeError):
        return False


def check_replaceable(path, what="output", *, how="--overwrite"):
    """Raise unless the local ``path`` is absent or a store daskrnmf wrote (see the
    module's rule): the error says why and that daskrnmf leaves it alone.  An object
    store location: :func:`daskrnmf.io.check_replaceable`."""
    path = os.path.abspath(local_path(path))
    if not os.path.lexists(path):
        return
    refusal = f"; {how} replaces only a store daskrnmf wrote: choose another path " \
              "or remove it yourself."
    if os.path.islink(path):
        raise FileExistsError(f"{what} {path} is a symbolic link" + refusal)
    if not os.path.isdir(path):
        raise FileExistsError(f"{what} {path} is a file, not a daskrnmf store" + refusal)
    attrs = _root_attrs(path)
    if attrs is None or not _owned_attrs(attrs):
        kind = "a Zarr store" if is_zarr_node(path) else "a directory"
        raise FileExistsError(f"{what} {path} is {kind} daskrnmf did not write" + refusal)
    foreign = _foreign_entry(path)
    if foreign is not None:
        raise FileExistsError(f"{what} {path} holds {os.path.relpath(foreign, path)}, which "
                              "daskrnmf did not write" + refusal)


def remove_zarr_tree(path) -> list[str]:
    """Delete the Zarr group or array at ``path`` that daskrnmf wrote: Zarr's own files
    (metadata, chunks under an array) and the directories they leave empty.  Anything
    else found in it (a user's file) stays, with the directories that hold it; returns
    the paths left.  A symbolic link is removed as a link, never followed."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return []
    if not os.path.isdir(path):
        return []
    left = []
    for entry, ours in list(_zarr_entries(path)):
        if ours:
            os.unlink(entry)
        else:
            left.append(entry)
    for top, dirs, _ in os.walk(path, topdown=False):     # the folders left empty
        for name in dirs:
            with contextlib.suppress(OSError):
                if not os.path.islink(os.path.join(top, name)):
                    os.rmdir(os.path.join(top, name))
    try:
        os.rmdir(path)
    except OSError:
        pass
    return left


def partial_name(path) -> str:
    """A fresh temporary name next to ``path`` for a result being written."""
    return f"{os.path.abspath(os.fspath(path))}.partial-{uuid.uuid4().hex[:8]}"


def check_target(path, what, *, overwrite, how="overwrite=True"):
    """A local ``path`` to be written: not inside a Zarr store and, when it exists, only
    with ``overwrite`` and only a store daskrnmf wrote."""
    refuse_inside_zarr(path, what)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(f"{what} {path} exists; pass {how} to replace it.")
        check_replaceable(path, what, how=how)


def check_destination(path, what, *, overwrite, how="overwrite=True"):
    """A local store to be written at ``path``, checked before any work:
    :func:`check_target`, and its directory there and writable."""
    path = local_path(path)
    check_target(path, what, overwrite=overwrite, how=how)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"the directory of {what} {path} does not exist.")
    check_writable(parent, f"the directory of {what}")


def check_file_destination(path, what, *, overwrite, how="overwrite=True", protected=()):
    """A single file to be written at ``path`` (a table, a figure), checked before any
    work: not a protected store nor inside one (:func:`refuse_overlap`), not a directory,
    not existing unless ``overwrite``, its directory there and writable."""
    refuse_overlap(path, protected, what)
    if os.path.isdir(path):
        raise ValueError(f"{what} {path} is a directory; give a file name.")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{what} {path} exists; pass {how} to replace it.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"the directory of {what} {path} does not exist.")
    check_writable(parent, f"the directory of {what}")


def write_file_whole(path, write) -> str:
    """Write a single file whole or not at all: ``write(tmp)`` on a temporary name next to
    ``path`` with the same extension (a writer may read the format from it), then
    renamed over ``path``; the temporary is removed whatever happens."""
    path = os.path.abspath(os.fspath(path))
    root, ext = os.path.splitext(path)
    tmp = f"{partial_name(root)}{ext}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def write_whole(path, write, what, *, overwrite, how="overwrite=True", tmp=None):
    """Write a local store whole or not at all: ``path`` checked (:func:`check_target`),
    ``write(tmp)`` run on a temporary name next to it, the target checked again (it may
    have changed meanwhile) and the result renamed into place; the temporary is removed
    whatever happens.  ``tmp``: the temporary name (default: a fresh
    :func:`partial_name`), for a caller that must also remove it later (after the
    workers writing into it have stopped).  Returns the absolute path."""
    path = os.path.abspath(local_path(path))
    check_target(path, what, overwrite=overwrite, how=how)
    tmp = tmp or partial_name(path)
    try:
        write(tmp)
        check_target(path, what, overwrite=overwrite, how=how)
        replace_with(tmp, path)
    finally:
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def replace_with(tmp: str, path: str) -> None:
    """Move the finished directory ``tmp`` to ``path``, replacing what is there (which the
    caller has checked with :func:`check_replaceable`): the old one is renamed aside
    first and put back if the move fails, then removed."""
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    parent, name = os.path.split(path)
    trash = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(path, trash)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(trash, path)          # the earlier one stays where it was
        raise
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)


# ---------------------------------------------------------------- scratch
def _process_start(pid):
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def make_scratch(root) -> str:
    """A new scratch directory ``root/daskrnmf-state-*`` that names its owner process;
    stale ones in ``root`` (their owner on this host gone) are removed first."""
    sweep_scratch(root)
    path = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=root)
    owner = {"host": socket.gethostname(), "pid": os.getpid(),
             "started": _process_start(os.getpid())}
    with open(os.path.join(path, _SCRATCH_OWNER), "w") as fh:
        json.dump(owner, fh)
    return path


def sweep_scratch(root) -> list[str]:
    """Remove the scratch directories in ``root`` whose owner process (on this host) has
    ended; returns their paths.  A directory without an owner record, of another host,
    or of a live process is left alone."""
    removed = []
    try:
        entries = os.listdir(root)
    except OSError:
        return removed
    here = socket.gethostname()
    for name in entries:
        if not name.startswith(SCRATCH_PREFIX):
            continue
        path = os.path.join(root, name)
        try:
            with open(os.path.join(path, _SCRATCH_OWNER)) as fh:
                owner = json.load(fh)
            pid, host, started = int(owner["pid"]), owner["host"], owner.get("started")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host != here or os.path.islink(path):
            continue
        now = _process_start(pid)
        if now is not None and (started is None or abs(now - float(started)) < 1.0):
            continue                                   # the owner is alive
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
