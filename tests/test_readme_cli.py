"""The README's command-line tour runs as written: every `noiseaware …` line of its ```sh blocks, in order,
through the command line in a scratch directory (study sizes shrunk by tests/readme_tour.py's SHRINK).

A file of its own, so that the two tours run on different test workers."""

import shlex
import textwrap
from pathlib import Path

import numpy as np
import pytest
from markdown_examples import blocks
from readme_tour import commands, shrunk_readme

from noiseaware.cli import main

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower

USER_MODEL = '''
import numpyro
import numpyro.distributions as dist


def logistic(X=None, y=None):
    """y_i ~ Bernoulli(sigmoid(X_i · theta)); theta ~ N(0, 2² I)."""
    theta = numpyro.sample("theta", dist.Normal(0.0, 2.0).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ theta), obs=y)
'''
"""The `mymodels:logistic` the command-line tour records (the README shows the command, not the file)."""


def user_files(directory: Path) -> None:
    """mymodels.py and mydata.csv (columns X[0], X[1], X[2], y) for the user-model command."""
    (directory / "mymodels.py").write_text(textwrap.dedent(USER_MODEL))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = (rng.random(600) < 1.0 / (1.0 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(int)
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
