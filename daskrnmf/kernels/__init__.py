"""Per-chunk kernels: plain NumPy / Numba functions, one row block in, small arrays out.

Nothing in this package imports dask; graph building lives in :mod:`daskrnmf._blocks`
and :mod:`daskrnmf.reductions`.

The compiled kernels are cached on disk (``cache=True``), so only the first fit in an
environment waits for their compilation.  Numba writes its cache next to the modules
(``__pycache__``) or, where that is read-only, in the user's cache directory
(``~/.cache/numba``); where neither can be written (a read-only installation and a
read-only home, as on some clusters' compute nodes) it refuses to import a cached
function at all.  :func:`cache_dir` then points Numba at a directory of this user's
under the system's temporary directory before any kernel is defined (its submodules
import this package first); an explicit ``NUMBA_CACHE_DIR`` is always used as it is.
"""

import os
import tempfile


def _writable(path):
    """Whether files can be created in ``path`` (made if missing), as Numba checks it."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def cache_dir():
    """Point Numba's cache at a writable directory when it has none, and return it.

    Returns
    -------
    str or None
        ``numba.config.CACHE_DIR`` as set here or by the user (``NUMBA_CACHE_DIR``);
        None when Numba's own places (this package's ``__pycache__``, then the user's
        cache directory) are writable, and it uses them.
    """
    from numba.core import config
    from numba.misc.appdirs import AppDirs

    if config.CACHE_DIR:
        return config.CACHE_DIR
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    if _writable(here) or _writable(AppDirs(appname="numba", appauthor=False).user_cache_dir):
        return None
    config.CACHE_DIR = _private_dir()
    return config.CACHE_DIR


def _private_dir():
    """``daskrnmf-numba-cache-UID`` in the temporary directory, made for this user alone
    (Numba's cache files are pickles: a directory that another user could write is
    not read); a new temporary directory, removed at exit, if that one is not ours."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    path = os.path.join(tempfile.gettempdir(), f"daskrnmf-numba-cache-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if (uid is None or st.st_uid == uid) and not st.st_mode & 0o022 and _writable(path):
            return path
    except OSError:
        pass
    import atexit
    import shutil

    path = tempfile.mkdtemp(prefix="daskrnmf-numba-cache-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


cache_dir()


def _pause_gc_while_compiling():
    """Hold Python's cyclic garbage collector while Numba compiles a kernel of this
    package (and what it calls), and give it back as it was after.

    A compile allocates hundreds of thousands of small objects, which set off full
    collections; in a process that has imported Dask, distributed and scikit-learn each
    of these walks some 300 000 objects: about 0.3 s of CPU of ONMFO's and RobustNMF's
    first fit with an empty kernel cache (3 full collections), nothing when the kernels
    come from the cache.  The compile's garbage waits for the next collection after it.
    Only the compiles of ``daskrnmf``'s own kernels are concerned, under Numba's
    compiler lock (one compile at a time, nested ones counted); another thread's
    garbage meanwhile waits for the same collection."""
    import gc

    from numba.core import event

    class Listener(event.Listener):
        depth = 0
        paused = False

        def on_start(self, ev):
            if self.depth == 0:
                func = getattr(ev.data["dispatcher"], "py_func", None)
                module = getattr(func, "__module__", "") or ""
                self.paused = module.startswith(__name__ + ".") and gc.isenabled()
                if self.paused:
                    gc.disable()
            self.depth += 1

        def on_end(self, ev):
            if self.depth <= 0:
                return          # its start was not seen (a listener before it raised)
            if self.depth == 1 and self.paused:
                gc.enable()     # first: an interrupt after it leaves nothing disabled
                self.paused = False
            self.depth -= 1

    listener = Listener()
    event.register("numba:compile", listener)
    # first among the listeners: Numba stops a broadcast at a listener that raises, and
    # ends a compile whose start raised; first, this one's end always runs when its
    # start did (after another's raising end it would not, leaving the collector off)
    registered = getattr(event, "_registered", {}).get("numba:compile")
    if isinstance(registered, list) and registered and registered[-1] is listener:
        registered.insert(0, registered.pop())


_pause_gc_while_compiling()
