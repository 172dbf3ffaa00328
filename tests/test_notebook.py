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
    # the two losses on two panels, each named (one axis held two flat lines before)
    axes = _axes(tmp_path / "objective.png")
    assert [(a["xlabel"], a["ylabel"], [l["label"] for l in a["lines"]]) for a in axes] == [
        ("iteration", "objective (L2,1 loss)", ["RFNMF (l21)"]),
        ("iteration", "objective (L1 loss)", ["RFNMF (l1)"])]
    for a in axes:
        assert a["xticks"] and all(t == int(t) for t in a["xticks"])
        assert len(set(a["yticklabels"])) == len(a["yticklabels"]) >= 2


def test_example_notebook_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch):
    """Without DASKRNMF_NB_OUT the notebook writes to a temporary directory and its last
    cell removes it."""
    import json as _json

    nb = _json.loads(open(NOTEBOOK).read())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "TemporaryDirectory" in code and "mkdtemp" not in code
    assert ".cleanup()" in "".join(nb["cells"][-1]["source"])


def test_plot_example_saves_its_figures(tmp_path):
    pytest.importorskip("matplotlib")
    import runpy

    script = os.path.join(os.path.dirname(NOTEBOOK), "plots.py")
    runpy.run_path(script, run_name="plots")["main"](["--out", str(tmp_path),
                                                      "--n-components", "9"])
    for name in ("onmfo_bases.png", "objective.png", "ornmf_codes.png"):
        assert (tmp_path / name).stat().st_size > 2000
    axes = _axes(tmp_path / "objective.png")       # one quantity per axis
    assert [(a["xlabel"], a["ylabel"], [l["label"] for l in a["lines"]]) for a in axes] == [
        ("pass over X", "mean objective per sample", ["ONMFO"]),
        ("iteration", "objective", ["RobustNMF"])]
    for a in axes + _axes(tmp_path / "ornmf_codes.png")[1:]:
        assert a["xticks"] and all(t == int(t) for t in a["xticks"])
        assert all(x == int(x) for line in a["lines"] for x in line["x"])


def _axes(png):
    import json

    from daskrnmf.plotting import read_png_metadata

    return json.loads(read_png_metadata(png)["Description"])
