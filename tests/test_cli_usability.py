"""The ``daskrnmf`` command as a newcomer meets it: option spellings, help texts, a pipe
closed early, output names (issue 41).  No cluster is started."""

import argparse
import subprocess
import sys

import numpy as np
import pytest
import zarr

from daskrnmf import RFNMTF, cli
from daskrnmf.cli import _fit, _parser


def _params(argv):
    argv, model = _parser.normalise_model(argv)
    return vars(_parser.build(model).parse_args(argv))


def test_option_names_are_taken_in_any_case_when_unambiguous():
    base = ["x.zarr", "--output", "o.zarr"]
    assert _params(["fit", "ONMFO", *base, "--alpha-r", "2"])["param:alpha_R"] == 2.0
    assert _params(["fit", "ONMFO", *base, "--ALPHA-R=3"])["param:alpha_R"] == 3.0
    assert _params(["fit", "MNMF", *base, "--labels", "y.zarr", "--c", "4"])["param:C"] == 4.0
    assert _params(["fit", "rfnmf", *base, "--N-Clusters", "3"])["param:n_clusters"] == 3


@pytest.mark.parametrize("argv, meant", [
    (["fit", "RFNMF", "x.zarr", "--output", "o.zarr", "--n_clusters", "3"], "--n-clusters"),
    (["fit", "ONMFO", "x.zarr", "--output", "o.zarr", "--alpha_r", "1"], "--alpha-R"),
    (["choose-k", "RFNMF", "x.zarr", "--ks", "2-4", "--n_seeds", "2"], "--n-seeds"),
    (["make-data", "blobs", "o.zarr", "--chunk_rows", "10"], "--chunk-rows"),
])
def test_an_unknown_option_names_the_one_meant(argv, meant, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {argv[-2]} {argv[-1]}; did you mean {meant}?" in err


def test_an_unknown_option_like_no_other_is_only_unrecognized(capsys):
    assert cli.main(["fit", "RFNMF", "x.zarr", "--output", "o.zarr", "--zzz", "1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzz 1" in err and "did you mean" not in err


def test_help_gives_each_default_once_and_every_command_a_description(capsys):
    assert cli.main(["choose-k", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text
    assert text.count("(default: the model's)") == 3 and "(default: 5)" in text   # --n-seeds
    assert cli.main(["make-data", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: 20000)" in text   # --chunk-rows
    (sub,) = [a for a in _parser.build()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(cli.COMMANDS)
    for name, parser in sub.choices.items():
        assert parser.description and len(parser.description) > 40, name


def test_info_into_a_pipe_closed_early_exits_0_quietly(tmp_path):
    """``daskrnmf info STORE | head -1``: more output than the pipe holds, the reader
    gone after one line."""
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    group.attrs.update({f"key{i:04d}": "x" * 100 for i in range(1500)})     # ~170 kB of lines
    proc = subprocess.Popen([sys.executable, "-m", "daskrnmf", "info", str(tmp_path / "s.zarr")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"group ")
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read().decode() == ""
    proc.stderr.close()


def test_rfnmtf_writes_its_row_labels_once_as_labels():
    from daskrnmf.datasets import make_coclusters

    X = make_coclusters(60, 8, random_state=0)[0]
    model = RFNMTF(3, 2, n_init=1, max_iter=5, random_state=0).fit(X)
    arrays = _fit.fit_outputs(model, X)
    assert "labels" in arrays and "row_labels" not in arrays
    np.testing.assert_array_equal(np.asarray(arrays["labels"]), model.row_labels_)
    assert "column_labels" in arrays and "block_medians" in arrays
