"""The example notebook runs from top to bottom (nbclient), on a smaller store."""

import os

import pytest

NOTEBOOK = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "cluster_zarr.ipynb")


def test_example_notebook_executes(tmp_path, monkeypatch):
    import importlib.util

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if importlib.util.find_spec("ipykernel") is None:   # the kernel runs in a subprocess
        pytest.skip("ipykernel is not installed")
    monkeypatch.setenv("DASKRNMF_NB_SAMPLES", "60000")
    monkeypatch.setenv("DASKRNMF_NB_OUT", str(tmp_path))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    table = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    assert "| l21 |" in table and "| l1 |" in table
    acc = [float(line.split("|")[2]) for line in table.splitlines()
           if line.startswith(("| l21 |", "| l1 |"))]
    assert min(acc) > 0.7   # 6 clusters, 5 % gross outliers, 4 restarts (chance: 0.17)
    assert (tmp_path / "objective.png").stat().st_size > 1000


def test_plot_example_saves_its_figures(tmp_path):
    pytest.importorskip("matplotlib")
    import runpy

    script = os.path.join(os.path.dirname(NOTEBOOK), "plots.py")
    runpy.run_path(script, run_name="plots")["main"](["--out", str(tmp_path),
                                                      "--n-components", "9"])
    for name in ("onmfo_bases.png", "objective.png", "ornmf_codes.png"):
        assert (tmp_path / name).stat().st_size > 2000
