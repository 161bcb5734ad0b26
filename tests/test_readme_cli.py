"""The README's command-line tour runs as written: every `noiseaware …` line of its ```sh blocks, in order,
through the command line in a scratch directory (study sizes shrunk by tests/readme_tour.py's SHRINK).

A file of its own, so that the two tours run on different test workers."""

import shlex
from pathlib import Path

import numpy as np
import pytest
from markdown_examples import ROOT, blocks, commands, python_examples
from readme_tour import shrunk_readme

from noiseaware.cli import main

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower

MODELS = ROOT / "docs" / "models.md"


def user_files(directory: Path) -> None:
    """The reader's mymodels.py, as docs/models.md writes it (the README's user-model command points there), and
    mydata.csv with the columns it names (X[0], X[1], X[2], y): data of the documented regression."""
    (model,) = [example for example in python_examples(MODELS.read_text()) if example.file == "mymodels.py"]
    (directory / "mymodels.py").write_text(model.code)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.7 * rng.normal(size=600)
    rows = [",".join(f"{v:.6g}" for v in (*x, t)) for x, t in zip(X, y)]
    (directory / "mydata.csv").write_text("\n".join(["X[0],X[1],X[2],y", *rows]) + "\n")


@pytest.mark.slow
def test_command_line_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    user_files(tmp_path)
    lines = [argv for block in blocks(shrunk_readme(), "sh") for argv in commands(block)]
    assert len(lines) >= 8
    for argv in lines:
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 0, f"noiseaware {shlex.join(argv)} failed: {err}"
