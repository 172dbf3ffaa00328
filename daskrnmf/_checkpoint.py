"""Atomic, verified checkpoints of a streaming fit, in a directory the library owns.

Layout of a checkpoint directory::

    path/
      .daskrnmf-checkpoint      marker: this directory holds a daskrnmf checkpoint
      daskrnmf-checkpoint/      the library's own subfolder; nothing else is touched
        LATEST                  name of the newest complete generation (replaced atomically)
        gen-00000007/           a Zarr group: the state's arrays, its scalars in the attributes

A generation is written under a temporary name, renamed when complete, and only then
named in ``LATEST`` (written to a temporary file and ``os.replace``-d), so a process killed
at any moment leaves either the previous checkpoint or the new one, never a torn one.
Older generations and abandoned temporaries — only names this module writes, only in its
subfolder — are removed after the switch.  Every array is stored with its SHA-256, and a
generation is read back only if its arrays are all there, unchanged and finite; anything
else (a garbage or missing ``LATEST``, a deleted or corrupt chunk, NaN) is a ValueError
naming the file, never a silent restart.  On local (or POSIX-mounted shared) file systems
the atomicity rests on ``rename``.  An entry of a name this module writes that is not of
the kind it writes (``LATEST`` a directory or a link, a ``gen-*`` that is a symbolic
link or a file, the subfolder itself a link) is a ValueError naming it: nothing is read
through it or deleted.

One fit at a time: a fit holds a lock (:class:`Lock`, ``flock`` on the marker file,
released by the operating system when the process ends, however it ends) from before it
reads or claims the directory until it returns; a second fit on the same directory is a
ValueError saying it is in use.  Where the file system has no ``flock`` (some cluster
file systems) no lock is taken.

On an object store (``checkpoint`` an fsspec URL, ``s3://bucket/run.ckpt``, with the fit's
``storage_options``), which has no rename, the same layout is written by the
commit-marker rule (:mod:`daskrnmf.io`): a generation is written straight under its
fresh prefix ``gen-NNNNNNNN/`` (a number no earlier generation, complete or abandoned,
used), then its completion marker ``gen-NNNNNNNN/.complete``, then ``LATEST`` naming it —
one PUT, atomic on S3, the commit.  Readers follow ``LATEST`` only, so a writer killed
at any moment leaves the previous generation as the checkpoint; older and abandoned
generations are deleted after the switch.  One writer at a time.

:func:`data_fingerprint` describes the data a run streams (shape, dtype, chunking and
checksums of a few deterministically sampled row ranges) so that a resume on other data
is refused (:func:`check_same_data`).
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import uuid
import warnings

import numpy as np

from ._stores import digest as _digest
from ._stores import input_stores, is_url, refuse_overlap, remove_zarr_tree

MARKER = ".daskrnmf-checkpoint"
SUBDIR = "daskrnmf-checkpoint"
_LATEST = "LATEST"
_NOTHING = "none"      # LATEST of a claimed directory before its first commit
_GEN = re.compile(r"gen-(\d{8})")
_OURS = re.compile(r"gen-\d{8}|\.gen-\d{8}\.[0-9a-f]{32}\.partial|\.LATEST\.[0-9a-f]{32}")


def _paths(path):
    path = os.fspath(path)
    return path, os.path.join(path, MARKER), os.path.join(path, SUBDIR)


def _is_url(path):
    return is_url(os.fspath(path) if isinstance(path, os.PathLike) else path)


def _options(storage_options):
    """The options given, else the running fit's (``fit(..., storage_options=...)``)."""
    if storage_options is not None:
        return storage_options
    from ._validation import current_storage_options

    return current_storage_options()


def _generations(sub):
    try:
        names = os.listdir(sub)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _GEN.fullmatch(n) and os.path.isdir(os.path.join(sub, n)))


def holds_run(path, storage_options=None):
    """True when ``path`` holds an earlier run's checkpoint, or what could be one (a
    damaged pointer); False for a claimed directory whose pointer is still empty (a
    generation renamed but never named in it was never committed)."""
    if _is_url(path):
        return _Remote(path, storage_options).holds_run()
    _, marker, sub = _paths(path)
    if not os.path.exists(marker):
        return False
    try:
        return _read_latest(sub) is not None
    except (ValueError, RuntimeError):  # damaged, or replaced on every read: a run's
        return True


@dataclasses.dataclass(frozen=True)
class Claim:
    """What :func:`claim` found and made: whether it created the directory, and whether
    an earlier run's checkpoint was there (which then stays until this run's first save
    replaces it, whatever happens to this run)."""

    created: bool
    had_run: bool


def check_location(path, X):
    """Refuse a checkpoint location that is, lies inside or contains a Zarr store X is
    read from (a ValueError naming both): a checkpoint never writes its input."""
    refuse_overlap(path, input_stores(X), "checkpoint")


def _foreign(path, sub):
    """ValueError naming the first entry of our names that is not of the kind this module
    writes (see the module's docstring); nothing is read through it or removed."""
    bad = []
    if os.path.islink(sub):
        bad.append((sub, "directory"))
    else:
        try:
            names = sorted(os.listdir(sub))
        except (FileNotFoundError, NotADirectoryError):
            names = []
        for name in names:
            full = os.path.join(sub, name)
            if name == _LATEST and (os.path.islink(full) or not os.path.isfile(full)):
                bad.append((full, "file"))
            elif _GEN.fullmatch(name) and (os.path.islink(full) or not os.path.isdir(full)) \
                    and os.path.lexists(full):      # not deleted since (a writer's commit)
                bad.append((full, "directory"))
    if bad:
        full, kind = bad[0]
        what = ("a symbolic link" if os.path.islink(full) else
                "a directory" if os.path.isdir(full) else "a file")
        raise ValueError(f"{full} is {what}, not the {kind} daskrnmf writes under that name: "
                         f"the checkpoint directory {path} holds something daskrnmf did not "
                         "write. Move it away (daskrnmf deletes nothing it did not write), "
                         "then resume or fit again.")


class Lock:
    """The lock of one fit on a local checkpoint directory (see the module's docstring).

    :meth:`acquire` locks the marker file once it exists (call it before reading the
    directory and again after :func:`claim` has created it); :meth:`release` unlocks.
    A no-op for a URL, on a file system without ``flock`` and on platforms without
    :mod:`fcntl`.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fh = None

    def acquire(self):
        """Lock the marker (if it exists and is not locked by this object yet); a
        ValueError when another fit holds it."""
        if self._fh is not None or _is_url(self.path):
            return
        try:
            import fcntl
        except ImportError:         # no flock on this platform
            return
        _, marker, _ = _paths(self.path)
        for _ in range(3):
            try:
                fh = open(marker, "rb")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return              # not claimed yet: claim() comes first
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                raise ValueError(f"The checkpoint directory {self.path} is in use by another "
                                 f"fit (a process holds the lock on {marker}). Wait for that "
                                 "fit to end, or give this one another checkpoint "
                                 "directory.") from None
            except OSError:         # no flock on this file system: no lock
                fh.close()
                return
            try:                    # the marker replaced (released, claimed again) meanwhile
                same = os.stat(marker).st_ino == os.fstat(fh.fileno()).st_ino
            except OSError:
                same = False
            if same:
                self._fh = fh
                return
            fh.close()
        raise ValueError(f"The checkpoint directory {self.path} kept changing while it was "
                         "locked: another fit is using it.")

    def release(self):
        """Unlock (closing the file unlocks it)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def claim(path, *, overwrite=False, storage_options=None):
    """Make ``path`` the checkpoint directory of a new run (before any work is done).

    Creates the directory, its marker and subfolder (so an unwritable location fails
    now, not at the first save).  Refuses a directory that holds an earlier run's
    checkpoint unless ``overwrite`` (its generations are then replaced at the new run's
    first save, not before), and a subfolder of our name that the library did not
    create.  Returns a :class:`Claim` for :func:`release`.
    """
    if _is_url(path):
        return _Remote(path, storage_options).claim(overwrite)
    path, marker, sub = _paths(path)
    created = not os.path.exists(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"The checkpoint location {path} is a file, not a directory.")
    if os.path.exists(sub) and not os.path.exists(marker):
        raise ValueError(f"{sub} exists but was not created by daskrnmf (no {MARKER} next to "
                         "it); choose another checkpoint directory.")
    _foreign(path, sub)
    had_run = holds_run(path)
    if had_run and not overwrite:
        raise ValueError(f"The checkpoint directory {path} holds an earlier run's checkpoint. "
                         "Pass resume=True to continue it, or overwrite_checkpoint=True to "
                         "replace it.")
    os.makedirs(sub, exist_ok=True)
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(json.dumps({"format": 2, "written_by": "daskrnmf"}) + "\n")
    if not had_run:
        # a pointer naming no generation: nothing committed yet.  A process killed between
        # its first generation's rename and the pointer's write leaves a directory that is
        # not a run (a missing or empty pointer beside generations is damage)
        _write_pointer(sub, _NOTHING)
    return Claim(created=created, had_run=had_run)


def _write_pointer(sub, name):
    """``LATEST`` holding ``name``, replaced atomically."""
    pointer = os.path.join(sub, f".{_LATEST}.{uuid.uuid4().hex}")
    with open(pointer, "w") as fh:
        fh.write(name)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(pointer, os.path.join(sub, _LATEST))


def release(path, claimed, storage_options=None):
    """Undo :func:`claim` for a run that failed before it was worth resuming (bad data
    found while streaming, or an error before its first save).

    When ``claimed`` (the :class:`Claim`) found an earlier run's checkpoint, nothing is
    removed: the earlier generation stays until a save replaces it, and a generation
    this run saved had already replaced it.  Otherwise the generations this run wrote,
    the pointer, the library's marker and subfolder go — only names this module writes,
    and in a generation only Zarr's own files (anything else put there stays) — and the
    directory too when ``claim`` created it and nothing else is in it.
    """
    if claimed.had_run:
        return
    if _is_url(path):
        return _Remote(path, storage_options).release()
    path, marker, sub = _paths(path)
    _remove_ours(sub)
    with contextlib.suppress(OSError):
        os.rmdir(sub)
    if os.path.exists(marker) and not os.path.exists(sub):
        os.remove(marker)
    if claimed.created:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _remove_ours(sub, keep=None):
    """Remove what this module wrote in ``sub`` except the names in ``keep``:
    generations (their Zarr files only), abandoned temporaries and the pointer's
    temporary files; ``LATEST`` too when ``keep`` is None."""
    try:
        entries = os.listdir(sub)
    except OSError:
        return
    for entry in entries:
        if (keep is not None and entry in keep) or not (
                _OURS.fullmatch(entry) or (keep is None and entry == _LATEST)):
            continue
        full = os.path.join(sub, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            remove_zarr_tree(full)      # a user's file put inside stays, with its folder
        else:
            os.remove(full)


def save(path, arrays, attrs, storage_options=None, *, extra=None, keep=()):
    """Write a new generation holding ``arrays`` (name -> ndarray) and ``attrs`` (JSON),
    then remove the older ones but those named in ``keep``.  ``path`` must have been
    :func:`claim`-ed.  ``extra(where)``, called once the generation's group exists and
    before it is complete, writes more into it (per-block state,
    :mod:`daskrnmf._resume`) and returns attributes to add.  Returns the generation's
    name."""
    if _is_url(path):
        return _Remote(path, storage_options).save(arrays, attrs, extra, keep)
    import zarr

    path, marker, sub = _paths(path)
    if not os.path.exists(marker):
        raise ValueError(f"{path} is not a daskrnmf checkpoint directory (no {MARKER}).")
    os.makedirs(sub, exist_ok=True)
    gens = _generations(sub)
    number = int(_GEN.fullmatch(gens[-1]).group(1)) + 1 if gens else 0
    name = f"gen-{number:08d}"
    tmp = os.path.join(sub, f".{name}.{uuid.uuid4().hex}.partial")
    group = zarr.open_group(tmp, mode="w")
    if extra is not None:
        attrs = {**attrs, **extra(tmp)}
    _write_generation(group, arrays, attrs)
    os.rename(tmp, os.path.join(sub, name))
    _write_pointer(sub, name)
    _remove_ours(sub, keep={name, *keep})      # only names this module writes
    return name


def prune(path, storage_options=None):
    """Remove every generation but the newest (those a resumed fit kept while it read
    from them)."""
    if _is_url(path):
        remote = _Remote(path, storage_options)
        try:
            latest = remote._do("read", remote.fs.cat_file,
                                f"{remote.sub}/{_LATEST}")[:64].decode("ascii", "replace")
        except FileNotFoundError:
            return
        for entry in remote._names(remote.sub):
            if _GEN.fullmatch(entry) and entry != latest.strip():
                remote._remove_generation(entry)
        return
    _, _, sub = _paths(path)
    latest = _read_latest(sub)
    if latest is not None:
        _remove_ours(sub, keep={latest})


def write_arrays(group, arrays):
    """Every array of ``arrays`` (name -> ndarray) as one chunk of the Zarr ``group``;
    their SHA-256, by name."""
    sums = {}
    for key, value in arrays.items():
        value = np.ascontiguousarray(value)
        group.create_array(key, shape=value.shape, dtype=value.dtype,
                           chunks=value.shape or None)[...] = value
        sums[key] = _digest(value)
    return sums


def _write_generation(group, arrays, attrs):
    sums = write_arrays(group, arrays)
    group.attrs.update(json.loads(json.dumps({**attrs, "_arrays": sorted(arrays),
                                              "_sha256": sums})))


def load(path, storage_options=None, *, finite=True):
    """``(arrays, attrs)`` of the newest generation, or None when ``path`` holds none.

    ``attrs["_file"]`` is the generation's directory (for error messages).  Raises a
    ValueError naming the file when the checkpoint is damaged: ``LATEST`` missing while
    generations exist, ``LATEST`` naming no generation, an array missing, changed (its
    SHA-256) or holding NaN/inf.  Safe against a writer in another process: a generation
    replaced (and deleted) while it was being read is read again from the new pointer.
    """
    if _is_url(path):
        return _Remote(path, storage_options).load(finite)
    path, marker, sub = _paths(path)
    if not os.path.exists(marker):
        if os.path.exists(sub):
            raise ValueError(f"{sub} was not created by daskrnmf (no {MARKER} next to it).")
        if _old_layout(path):
            raise ValueError(f"The checkpoint at {path} was written by daskrnmf 0.1 (LATEST and "
                             "gen-* at its top level); this version cannot resume it. Fit "
                             "without resume=True to start afresh (it is left in place).")
        return None
    _foreign(path, sub)
    for _ in range(20):
        name = _read_latest(sub)
        if name is None:
            return None
        where = os.path.join(sub, name)
        try:
            arrays, attrs = _read_generation(where, finite=finite)
        except ValueError:
            if _read_latest(sub) != name:   # replaced while being read: read the new one
                continue
            raise
        attrs["_file"] = where
        return arrays, attrs
    raise RuntimeError(f"Checkpoint at {path} kept changing while it was read.")


def _old_layout(path):
    try:
        with open(os.path.join(path, _LATEST)) as fh:
            name = fh.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(_GEN.fullmatch(name)) and os.path.isfile(os.path.join(path, name, "zarr.json"))


def _read_latest(sub):
    """The name of the newest complete generation (``LATEST``), or None.  A generation
    named by a pointer read just before a writer in another process replaced it (and
    deleted that generation) is not damage: the pointer is read again."""
    for _ in range(20):
        name = _pointer(sub)
        if name is None or os.path.isdir(os.path.join(sub, name)):
            return name
        if _pointer(sub) == name:
            raise ValueError(f"The checkpoint pointer {os.path.join(sub, _LATEST)} names "
                             f"{name}, which is missing from {sub}: the checkpoint is "
                             "damaged.")
    raise RuntimeError(f"Checkpoint at {sub} kept changing while it was read.")


def _pointer(sub):
    latest = os.path.join(sub, _LATEST)
    try:
        with open(latest, "rb") as fh:
            raw = fh.read(64)
    except FileNotFoundError:
        gens = _generations(sub)
        if gens:
            raise ValueError(f"The checkpoint pointer {latest} is missing but {sub} holds "
                             f"{len(gens)} generation(s) ({gens[-1]} the newest): the checkpoint "
                             "is damaged. Restore the file (it holds the name of the newest "
                             "complete generation) or fit with overwrite_checkpoint=True."
                             ) from None
        return None
    name = raw.decode("ascii", "replace").strip()
    if name == _NOTHING:
        return None                 # claimed, nothing committed yet
    if not _GEN.fullmatch(name):
        raise ValueError(f"The checkpoint pointer {latest} is damaged: it holds {raw[:40]!r}, "
                         "not the name of a generation (gen-NNNNNNNN).")
    return name


def _read_generation(where, storage_options=None, finite=True):
    import zarr

    from .io import zarr_target

    try:
        with warnings.catch_warnings():   # a half-deleted old generation
            warnings.simplefilter("ignore")
            # Zarr v3 only, as written: a v2 array may name a pickle codec
            group = zarr.open_group(zarr_target(where, storage_options, read_only=True),
                                    mode="r", zarr_format=3)
            attrs = dict(group.attrs)
            names = attrs.get("_arrays")
            sums = attrs.get("_sha256")
            if names is None or sums is None:
                raise ValueError("no list of arrays and checksums in its attributes")
            arrays = {}
            for key in names:
                try:
                    node = group[key]
                except KeyError:
                    raise ValueError(f"array {key!r} is missing") from None
                try:
                    arrays[key] = np.asarray(node[...])
                except Exception as exc:    # a codec's error: name the (only) chunk
                    chunk = node.metadata.encode_chunk_key((0,) * node.ndim)
                    raise ValueError(f"the chunk {key}/{chunk} cannot be read "
                                     f"({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        raise ValueError(f"The checkpoint generation {where} is damaged: {exc}.") from exc
    except Exception as exc:   # zarr/codec errors: a corrupt chunk or metadata file
        raise ValueError(f"The checkpoint generation {where} is damaged: cannot read it "
                         f"({type(exc).__name__}: {exc}).") from exc
    for key, value in arrays.items():
        if _digest(value) != sums.get(key):
            raise ValueError(f"The checkpoint array {os.path.join(where, key)} is damaged: its "
                             "content differs from what was saved (a deleted or changed chunk).")
        if finite and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"The checkpoint array {os.path.join(where, key)} holds NaN or "
                             "infinite values; it cannot be resumed from.")
    return arrays, attrs


class _Remote:
    """The checkpoint layout on an object store (fsspec URL), by the commit-marker rule:
    see the module's docstring.  Errors of the store (credentials, a missing bucket)
    are one clear line naming the URL (:func:`daskrnmf.io.explained`)."""

    COMPLETE = ".complete"

    def __init__(self, url, storage_options):
        from .io import filesystem

        self.url = os.fspath(url).rstrip("/")
        self.options = _options(storage_options)
        self.fs, root = filesystem(self.url, self.options)
        self.root = root.rstrip("/")
        self.marker = f"{self.root}/{MARKER}"
        self.sub = f"{self.root}/{SUBDIR}"

    def _url(self, *names):
        return "/".join([self.url, *names])

    def _do(self, action, fn, *args, **kwargs):
        from .io import explained

        with explained(self.url if action != "write" else f"checkpoint {self.url}", action):
            return fn(*args, **kwargs)

    def _exists(self, p):
        return self._do("read", self.fs.exists, p)

    def _names(self, p):
        try:
            entries = self._do("read", self.fs.ls, p, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def _generations(self, complete=True):
        gens = sorted(n for n in self._names(self.sub) if _GEN.fullmatch(n))
        if complete:
            gens = [g for g in gens if self._exists(f"{self.sub}/{g}/{self.COMPLETE}")]
        return gens

    def holds_run(self):
        return self._exists(self.marker) and (bool(self._generations())
                                              or self._exists(f"{self.sub}/{_LATEST}"))

    def claim(self, overwrite):
        created = not self._names(self.root)
        if not self._exists(self.marker) and self._names(self.sub):
            raise ValueError(f"{self._url(SUBDIR)} exists but was not created by daskrnmf (no "
                             f"{MARKER} next to it); choose another checkpoint location.")
        had_run = self.holds_run()
        if had_run and not overwrite:
            raise ValueError(f"The checkpoint location {self.url} holds an earlier run's "
                             "checkpoint. Pass resume=True to continue it, or "
                             "overwrite_checkpoint=True to replace it.")
        if not self._exists(self.marker):   # a write now: wrong credentials fail here
            body = json.dumps({"format": 2, "written_by": "daskrnmf"}) + "\n"
            self._do("write", self.fs.pipe_file, self.marker, body.encode())
        return Claim(created=created, had_run=had_run)

    def release(self):
        for entry in self._names(self.sub):
            if _GEN.fullmatch(entry):
                self._remove_generation(entry)
        for p in (f"{self.sub}/{_LATEST}", self.marker):
            try:
                self._do("write", self.fs.rm, p)
            except FileNotFoundError:
                pass

    def save(self, arrays, attrs, extra=None, keep=()):
        import zarr

        from .io import store

        if not self._exists(self.marker):
            raise ValueError(f"{self.url} is not a daskrnmf checkpoint location (no {MARKER}).")
        gens = self._generations(complete=False)     # abandoned numbers are not reused
        number = int(_GEN.fullmatch(gens[-1]).group(1)) + 1 if gens else 0
        name = f"gen-{number:08d}"
        where = self._url(SUBDIR, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            group = self._do("write", zarr.open_group,
                             store(where, self.options, read_only=False), mode="w")
            if extra is not None:
                attrs = {**attrs, **extra(where)}
            self._do("write", _write_generation, group, arrays, attrs)
        self._do("write", self.fs.pipe_file, f"{self.sub}/{name}/{self.COMPLETE}", b"")
        self._do("write", self.fs.pipe_file, f"{self.sub}/{_LATEST}", name.encode())  # commit
        for entry in self._names(self.sub):
            if _GEN.fullmatch(entry) and entry != name and entry not in keep:
                self._remove_generation(entry)      # only names this module writes
        return name

    def _remove_generation(self, name):
        """Delete a generation's own objects (Zarr metadata and chunks, its completion
        marker); any other object under its prefix stays."""
        where = f"{self.sub}/{name}"
        try:
            found = self._do("read", self.fs.find, where)
        except FileNotFoundError:
            return
        ours = [p for p in found if _ours_in_generation(p[len(where):].strip("/"))]
        if ours:
            try:
                self._do("write", self.fs.rm, ours)
            except FileNotFoundError:
                pass

    def load(self, finite=True):
        if not self._exists(self.marker):
            if self._names(self.sub):
                raise ValueError(f"{self._url(SUBDIR)} was not created by daskrnmf (no "
                                 f"{MARKER} next to it).")
            return None
        latest = self._url(SUBDIR, _LATEST)
        for _ in range(20):
            try:
                raw = self._do("read", self.fs.cat_file, f"{self.sub}/{_LATEST}")[:64]
            except FileNotFoundError:
                # the pointer is only ever replaced (one PUT), never removed: without it
                # no generation was committed (a run killed while writing its first one,
                # or a reader looking while it is written); those are ignored, and
                # removed by the next commit
                return None
            name = raw.decode("ascii", "replace").strip()
            if not _GEN.fullmatch(name):
                raise ValueError(f"The checkpoint pointer {latest} is damaged: it holds "
                                 f"{raw[:40]!r}, not the name of a generation (gen-NNNNNNNN).")
            if not self._exists(f"{self.sub}/{name}/{self.COMPLETE}"):
                if self._replaced(name):
                    continue        # (and deleted) since the pointer was read
                raise ValueError(f"The checkpoint pointer {latest} names {name}, which is "
                                 f"missing from {self._url(SUBDIR)}: the checkpoint is damaged.")
            where = self._url(SUBDIR, name)
            try:
                arrays, attrs = _read_generation(where, self.options, finite)
            except ValueError:
                if self._replaced(name):
                    continue                        # while being read
                raise
            attrs["_file"] = where
            return arrays, attrs
        raise RuntimeError(f"Checkpoint at {self.url} kept changing while it was read.")

    def _replaced(self, name):
        """Whether the pointer, read again, names another generation than ``name`` (a
        writer in another process committed since it was read)."""
        again = self._do("read", self.fs.cat_file, f"{self.sub}/{_LATEST}")[:64]
        return again.decode("ascii", "replace").strip() != name


def _ours_in_generation(rel):
    """``rel`` (a path inside a generation) is one of the objects a generation is made
    of: Zarr metadata, a chunk under ``c/``, or the completion marker."""
    parts = rel.split("/")
    return parts[-1] in ("zarr.json", _Remote.COMPLETE) or "c" in parts[:-1]


# ---------------------------------------------------------------- data fingerprints
_SAMPLES = 4        # row ranges checksummed
_SAMPLE_ROWS = 64   # rows per range


def sample_ranges(n):
    """The row ranges a fingerprint checksums: the first and last rows and two ranges at
    positions drawn from a generator seeded by ``n`` (the same for the same shape)."""
    m = min(n, _SAMPLE_ROWS)
    starts = {0, n - m}
    rng = np.random.default_rng([n, 17])
    starts.update(int(s) for s in rng.integers(0, n - m + 1, size=_SAMPLES - 2))
    return [(s, s + m) for s in sorted(starts)]


def data_fingerprint(X):
    """Shape, dtype, row chunking and SHA-256 of sampled row ranges of X (NumPy or Dask).

    The checksums are of the values (in X's dtype), independent of X's chunking, so the
    same data re-chunked, or as NumPy instead of Dask, has the same ``rows``.
    """
    n, d = (int(s) for s in X.shape)
    ranges = sample_ranges(n)
    if isinstance(X, np.ndarray):
        parts = [X[a:b] for a, b in ranges]
        chunks = None
    else:
        import dask

        # through X's blocks as the fit's passes take them (to_delayed): slicing X itself
        # would submit its blocks' keys with other task specs than the passes then do,
        # which the distributed scheduler warns of ("different run_spec")
        blocks = X.to_delayed().ravel()
        bounds = np.cumsum((0,) + tuple(X.chunks[0]))
        rows = dask.delayed(_rows_of_blocks, pure=True)
        parts = dask.compute(*[
            rows([blocks[i] for i in range(len(blocks)) if bounds[i] < b and bounds[i + 1] > a],
                 [int(bounds[i]) for i in range(len(blocks))
                  if bounds[i] < b and bounds[i + 1] > a], a, b)
            for a, b in ranges])
        chunks = hashlib.sha256(np.asarray(X.chunks[0], dtype=np.int64).tobytes()).hexdigest()[:16]
    return {"shape": [n, d], "dtype": str(np.dtype(X.dtype)), "row_chunks": chunks,
            "rows": [[a, b, _digest(np.asarray(p))] for (a, b), p in zip(ranges, parts)]}


def _rows_of_blocks(blocks, starts, a, b):
    """Rows ``a:b`` of X from the blocks that hold them (``starts``: their first rows)."""
    return np.concatenate([np.asarray(blk)[max(a - s, 0):b - s] for blk, s in zip(blocks, starts)])


def check_same_data(saved, current, where):
    """ValueError unless the fingerprints describe the same data (shape, dtype, sampled
    rows).  The chunking is recorded but not compared here: when it matters (it sets the
    batches) the model's own fingerprint holds the batches."""
    differ = []
    if list(saved.get("shape", [])) != current["shape"]:
        differ.append(f"shape {tuple(saved.get('shape', ()))} there, "
                      f"{tuple(current['shape'])} here")
    if saved.get("dtype") != current["dtype"]:
        differ.append(f"dtype {saved.get('dtype')} there, {current['dtype']} here")
    if not differ:
        for (a, b, old), (_, _, new) in zip(saved.get("rows", []), current["rows"]):
            if old != new:
                differ.append(f"rows {a}..{b - 1} differ")
        if len(saved.get("rows", [])) != len(current["rows"]):
            differ.append("no data fingerprint there")
    if differ:
        raise ValueError(f"The checkpoint {where} was made from other data than this X: "
                         + "; ".join(differ) + ". Resume with the X it was made from, or fit "
                         "with overwrite_checkpoint=True to start afresh.")
