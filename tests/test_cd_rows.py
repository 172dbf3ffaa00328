"""The compiled kernels of ONMFO and RobustNMF: what they compile (issue 38's compile wait)."""

import numpy as np
import pytest


def test_read_only_and_writable_input_compile_one_signature_of_each_kernel():
    """A read-only array is another Numba type than a writable one (a user's memory map,
    ``setflags(write=False)``, a read-only buffer).  The
    kernels get what they only read as read-only views, so writable and read-only input
    compile one signature of each (``_cd_rows`` alone is about a second of compile)."""
    from daskrnmf.kernels import cd_rows, outliers

    rs = np.random.default_rng(0)
    W = rs.uniform(size=(3, 6))
    kernels = (cd_rows._cd_rows, outliers._residual_target, outliers._hals_sweeps)
    counts = []
    for writable in (True, False):
        x = rs.uniform(size=(5, 6))
        B = np.eye(3) + 0.1
        for a in (x, B):
            a.setflags(write=writable)
        cd_rows.solve_rows_fused(x, W, 0.5, 3, 1e-4)
        outliers.residual_target(x, rs.uniform(size=(5, 6)), 0.5)
        outliers.update_components_cd(W, rs.uniform(size=(3, 6)), B, np.zeros((3, 6)), 2, 1e-3)
        counts.append([len(k.signatures) for k in kernels])
    assert counts[1] == counts[0]


def test_the_garbage_collector_waits_while_a_kernel_compiles():
    """A kernel's compile sets off full collections of all the process's objects (about
    0.3 s of ONMFO's and RobustNMF's first fit with an empty cache): the collector is
    held while a daskrnmf kernel compiles (nested compiles counted), given back after,
    and left alone while other code compiles."""
    import gc

    from numba import njit
    from numba.core import event

    from daskrnmf.kernels import outliers

    assert gc.isenabled()
    with event.trigger_event("numba:compile", data={"dispatcher": outliers._residual_target}):
        assert not gc.isenabled()
        with event.trigger_event("numba:compile", data={"dispatcher": njit(lambda a: a)}):
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with event.trigger_event("numba:compile", data={"dispatcher": njit(lambda a: a)}):
        assert gc.isenabled()


def test_the_collector_is_given_back_when_another_listener_raises():
    # Numba stops broadcasting an event at a listener that raises: daskrnmf's listener
    # puts itself first, so its end still runs after another listener, registered before
    # daskrnmf was imported, raised in its own (the collector had stayed off for good);
    # an end whose start it never saw changes nothing
    import gc

    from numba.core import event

    from daskrnmf import kernels
    from daskrnmf.kernels import outliers

    class Raising(event.Listener):
        def __init__(self, where):
            self.where = where

        def on_start(self, ev):
            if self.where == "start":
                raise RuntimeError("start")

        def on_end(self, ev):
            if self.where == "end":
                raise RuntimeError("end")

    data = {"dispatcher": outliers._residual_target}
    listeners = event._registered["numba:compile"]
    saved = list(listeners)
    try:
        for where in ("end", "start"):
            # a listener registered before daskrnmf's import, then daskrnmf's
            listeners[:] = [Raising(where)]
            kernels._pause_gc_while_compiling()
            with pytest.raises(RuntimeError, match=where):
                with event.trigger_event("numba:compile", data=data):
                    pass
            assert gc.isenabled()
            listeners.pop()                         # the raising one, now last
            with event.trigger_event("numba:compile", data=data):     # paused anew
                assert not gc.isenabled()
            assert gc.isenabled()
    finally:
        listeners[:] = saved
        gc.enable()
