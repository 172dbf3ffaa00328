"""Resuming from the command line, read from the registry (issue 37, the CLI item; issue
39): ``--checkpoint DIR`` and ``--resume`` for every model whose ``ModelSpec`` says
``resumable``, passed on as the estimator's ``checkpoint`` and ``fit``'s ``resume`` and
``overwrite_checkpoint``; for no other model, whatever its signature."""

import inspect
import re
import signal
import subprocess
import sys
import threading

import dask
import numpy as np
import pytest
import yaml
import zarr

from daskrnmf import NMF, _checkpoint, cli, io, models
from daskrnmf.cli import _fit
from daskrnmf.models import REGISTRY, ModelSpec
from daskrnmf.models.onmfo import ONMFO

RESUMABLE = [name for name, spec in REGISTRY.items() if spec.resumable]


@pytest.fixture(scope="module")
def scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(0)
    g = zarr.open_group(str(d / "d.zarr"), mode="w")
    X = np.abs(rng.normal(size=(120, 5)))
    g.create_array("X", shape=X.shape, dtype=X.dtype, chunks=(30, 5))[...] = X
    y = rng.integers(0, 2, size=120)
    g.create_array("y", shape=y.shape, dtype=y.dtype, chunks=(30,))[...] = y
    return d


def _model_args(spec, store):
    """Small, seeded, never converging early: the parameters every model of the
    registry understands, set where the model has them."""
    params = spec.cls().get_params()
    out = [str(store / "d.zarr" / "X")]
    for name in ("n_components", "n_clusters", "n_row_clusters", "n_column_clusters"):
        if name in params:
            out += ["--" + name.replace("_", "-"), "2"]
    for name, value in (("max_iter", "3"), ("tol", "0"), ("random_state", "0"),
                        ("n_init", "2"), ("max_inner_iter", "10")):
        if name in params:
            out += ["--" + name.replace("_", "-"), value]
    if spec.needs_y:
        out += ["--labels", str(store / "d.zarr" / "y")]
    return out


def test_the_registry_says_which_models_take_a_checkpoint():
    """What the command reads from ``ModelSpec.resumable`` holds for the classes: the
    ``checkpoint`` parameter and ``fit(..., resume=, overwrite_checkpoint=)``."""
    assert RESUMABLE                     # ONMFO at least
    for name, spec in REGISTRY.items():
        assert ("checkpoint" in spec.cls().get_params()) == spec.resumable, name
        if spec.resumable:               # (a base's fit may take them for every model)
            fit = inspect.signature(spec.cls.fit).parameters
            assert "resume" in fit and "overwrite_checkpoint" in fit, name


def _group(path):
    """The output store at a path or (committed) URL, read-only."""
    return zarr.open_group(io.store(io.resolve(path), read_only=True) if io.is_url(path)
                           else path, mode="r")


# through the command: the stream's own checkpoint (ONMFO), per-block state written by the
# workers (NMF's H) and a clustering model; every model's exact resume is
# tests/test_resume.py's, in process (MNMF through the command alone took a minute)
@pytest.mark.parametrize("name, where", [("ONMFO", "local"), ("NMF", "local"),
                                         ("RFNMF", "local"),
                                         ("ONMFO", "url")])     # the URL paths, once
def test_a_killed_fit_resumes_to_the_uninterrupted_result(name, where, store, scheduler,
                                                          tmp_path, monkeypatch, capsys,
                                                          request):
    """Checkpoint and outputs in a directory, or at URLs (an in-memory file system that
    the in-process workers share: the object-store code paths)."""
    spec = REGISTRY[name]
    fit = ["fit", name, *_model_args(spec, store), "--scheduler-address", scheduler]
    base = str(tmp_path) if where == "local" else f"memory://{tmp_path.name}"
    if where == "url":              # the process's in-memory file system: emptied after
        fs, root = io.filesystem(base)
        request.addfinalizer(lambda: fs.rm(root, recursive=True))
    ckpt, out, full = base + "/ckpt", base + "/out.zarr", base + "/full.zarr"
    assert cli.main([*fit, "--output", full]) == 0

    class Killed(_fit.ProgressBar):
        """Ctrl-C as a job would get it, once the fit has saved a checkpoint."""

        def __call__(self, info):
            if info["event"] == "iteration" and _checkpoint.holds_run(ckpt):
                raise KeyboardInterrupt
            return super().__call__(info)

    monkeypatch.setattr(_fit, "ProgressBar", Killed)
    assert cli.main([*fit, "--output", out, "--checkpoint", ckpt]) == 130
    monkeypatch.undo()
    assert not io.location_exists(out) and _checkpoint.holds_run(ckpt)
    capsys.readouterr()
    # a new run does not take the earlier one's checkpoint over unasked
    assert cli.main([*fit, "--output", out, "--checkpoint", ckpt]) == 1
    assert "holds an earlier run's checkpoint" in capsys.readouterr().err
    assert cli.main([*fit, "--output", out, "--checkpoint", ckpt, "--resume"]) == 0
    _assert_same(_group(out), _group(full))


def _assert_same(group, expected):
    """Every array of the output store equal to the expected one's."""
    assert sorted(group.array_keys()) == sorted(expected.array_keys())
    for key in expected.array_keys():
        np.testing.assert_array_equal(group[key][:], expected[key][:], err_msg=key)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("path", ["none", "0", "true"])
def test_a_checkpoint_is_a_path_whatever_it_reads_like(path, store, tmp_path, monkeypatch,
                                                       no_cluster, capsys):
    """``--checkpoint none`` is the directory ``none`` (it was read as a parameter value:
    None, no checkpoint at all, or a number or flag the model refused)."""
    monkeypatch.chdir(tmp_path)
    ONMFO(2, max_iter=1, checkpoint=path).fit(np.ones((20, 3)))   # an earlier run's
    assert _checkpoint.holds_run(path)
    capsys.readouterr()
    assert cli.main(["fit", "ONMFO", *_model_args(REGISTRY["ONMFO"], store), "--output",
                     "o.zarr", "--checkpoint", path]) == 1
    err = capsys.readouterr().err
    assert f"checkpoint directory {path} holds an earlier run's checkpoint" in err
    assert not no_cluster


# ---------------------------------------------------------------- the registry, not signatures
class Resumable(ONMFO):
    """A registered model with the resume protocol; its fit records what it was given."""

    calls = []

    def fit(self, X, y=None, *, resume=False, overwrite_checkpoint=False):
        self.calls.append({"checkpoint": self.checkpoint, "resume": resume,
                           "overwrite_checkpoint": overwrite_checkpoint})
        return super().fit(X, resume=resume, overwrite_checkpoint=overwrite_checkpoint)


class Unmarked(Resumable):
    """The same protocol in the signature, but the registry does not say resumable."""


@pytest.fixture
def registered(monkeypatch):
    for cls, resumable in ((Resumable, True), (Unmarked, False)):
        monkeypatch.setitem(REGISTRY, cls.__name__, ModelSpec(
            cls.__name__, __name__, "factorization", "a test model", outputs=("H", "R"),
            resumable=resumable))
    # the fitted test model is saved in the output as the ONMFO it is (a class outside
    # daskrnmf.models is refused by _persist, which does not read the registry)
    monkeypatch.setattr("daskrnmf._persist._check_registered", lambda model: "ONMFO")
    Resumable.calls.clear()
    yield
    Resumable.calls.clear()


def test_resume_options_come_from_the_registry(registered, capsys):
    for name, resumable in (("Unmarked", False), ("Resumable", True)):
        assert cli.main(["fit", name, "--help"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert ("--checkpoint " in out) == resumable and ("--resume" in out) == resumable
        assert ("--checkpoint DIR" in out) == resumable
        assert "parameters of " + name in out and "--checkpoint-every" in out
    assert cli.main(["fit", "Unmarked", "x.zarr", "--output", "o.zarr", "--resume"]) == 2
    assert "unrecognized arguments: --resume" in capsys.readouterr().err
    # (--checkpoint DIR: argparse takes it for --checkpoint-every, which refuses a DIR)
    assert cli.main(["fit", "Unmarked", "x.zarr", "--output", "o.zarr",
                     "--checkpoint", "c"]) == 2


def test_resume_arguments_reach_the_estimator(registered, store, scheduler, tmp_path):
    spec = models.get("Resumable")
    fit = ["fit", "Resumable", *_model_args(spec, store), "--scheduler-address", scheduler]
    ckpt = str(tmp_path / "ckpt")
    assert cli.main([*fit, "--output", str(tmp_path / "a.zarr")]) == 0
    assert cli.main([*fit, "--output", str(tmp_path / "b.zarr"), "--checkpoint", ckpt]) == 0
    assert cli.main([*fit, "--output", str(tmp_path / "c.zarr"), "--checkpoint", ckpt,
                     "--resume"]) == 0
    assert cli.main([*fit, "--output", str(tmp_path / "c.zarr"), "--checkpoint", ckpt,
                     "--overwrite"]) == 0
    assert Resumable.calls == [
        {"checkpoint": None, "resume": False, "overwrite_checkpoint": False},
        {"checkpoint": ckpt, "resume": False, "overwrite_checkpoint": False},
        {"checkpoint": ckpt, "resume": True, "overwrite_checkpoint": False},
        {"checkpoint": ckpt, "resume": False, "overwrite_checkpoint": True},
    ]


# ---------------------------------------------------------------- SIGTERM, outside a batch job
def test_sigterm_leaves_a_checkpoint_that_resume_finishes_identically(store, scheduler,
                                                                      tmp_path, capsys,
                                                                      monkeypatch):
    """``daskrnmf fit NMF ... --checkpoint D`` sent SIGTERM (what a batch system sends at
    the time limit) in the middle of its iterations: exit status 143, no output, and a
    checkpoint holding H block by block that ``--resume`` continues from its last saved
    iteration to the uninterrupted fit's result.  X is read in its 4 stored chunks (dask's
    array.chunk-size of 1,200 bytes: 30 rows a block), in both runs alike."""
    monkeypatch.setenv("DASK_ARRAY__CHUNK_SIZE", "1200")         # the command's process
    monkeypatch.setitem(dask.config.config["array"], "chunk-size", "1200")      # this one
    # (iterations enough after the 4th that the signal, sent once this process reads its
    # line, lands before the fit's end even with another test process on the cores)
    params = {"n_components": 2, "max_iter": 24, "tol": 0, "random_state": 0}
    fit = ["fit", "NMF", str(store / "d.zarr" / "X"), "--output", str(tmp_path / "o.zarr"),
           "--checkpoint", str(tmp_path / "ckpt"), "--progress",
           *[f"--{k.replace('_', '-')}={v}" for k, v in params.items()]]
    (tmp_path / "threads.yaml").write_text(yaml.safe_dump(
        {"cluster": "local", "n_workers": 1, "threads_per_worker": 1, "processes": False}))
    proc = subprocess.Popen([sys.executable, "-m", "daskrnmf", *fit, "--cluster",
                             str(tmp_path / "threads.yaml")],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    timer = threading.Timer(120, proc.kill)
    timer.start()
    try:
        seen = []
        for line in proc.stderr:         # iterations 1 to 3 saved
            seen.append(line)
            if "NMF: iteration 4," in line:
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.stderr.read()
        assert proc.wait() == 143, "".join(seen) + rest
    finally:
        timer.cancel()
    assert rest.splitlines()[-1] == ("daskrnmf: terminated (SIGTERM); partial output and "
                                     "scratch removed"), rest
    assert "Traceback" not in rest and "iteration 24," not in rest
    assert not (tmp_path / "o.zarr").exists() and _checkpoint.holds_run(str(tmp_path / "ckpt"))
    blocks = {p.name for p in tmp_path.glob("ckpt/daskrnmf-checkpoint/gen-*/blocks/*/b*")}
    assert blocks == {f"b{b:06d}" for b in range(4)}             # H of X's 4 chunks
    capsys.readouterr()
    assert cli.main([*fit, "--resume", "--scheduler-address", scheduler]) == 0
    resumed = [int(n) for n in re.findall(r"NMF: iteration (\d+),", capsys.readouterr().err)]
    assert resumed[0] >= 4 and resumed == list(range(resumed[0], 25)), resumed
    stored = _group(str(tmp_path / "o.zarr"))
    local = NMF(**params)
    with pytest.warns(Warning, match="did not converge"):
        H = local.fit_transform(zarr.open_array(str(store / "d.zarr" / "X"), mode="r")[:])
    np.testing.assert_allclose(stored["H"][:], H, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stored["components"][:], local.components_, rtol=1e-12)
    np.testing.assert_allclose(stored["objective_history"][:], local.objective_history_,
                               rtol=1e-12)
