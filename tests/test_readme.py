"""The README's tour runs as written: every ```python block in order, in one namespace, and every
`noiseaware …` line of the ```sh blocks through the command line, in a scratch directory.

Only the study sizes shrink, by the exact substitutions in SHRINK (each must occur in the README exactly
once, so a README edit that drops one fails here instead of silently running the full study): a
500-simulation coverage study or 20 Adult runs belong in benchmarks/, not in the test suite.
"""

import os
import re
import shlex
import textwrap
from pathlib import Path

import numpy as np
import pytest

from noiseaware.cli import main

pytestmark = pytest.mark.usefixtures("fast_compilation")  # compile-bound: every snippet compiles its own programs

README = Path(__file__).parents[1] / "README.md"

SHRINK = {
    # Python tour: the studies
    "simulations=500, key=0)": "simulations=4, references=2, samples=400, key=0, steps=400)",
    "runs=20, key=0)": "runs=2, samples=200, key=0, steps=100)",
    # command line: the studies and the 4-chain NUTS fit
    "--methods exact,nuts,naive --out coverage/": "--methods exact,nuts,naive --out coverage/ "
    "--simulations 3 --references 2 --samples 300 --steps 300 --warmup 100",
    "--methods exact,naive,dpvim,nonprivate --out calibration/": "--methods exact,naive,dpvim,nonprivate "
    "--out calibration/ --runs 2 --samples 100 --steps 100 --warmup 50",
    "--chains 4 --out m1-nuts.nc": "--chains 4 --warmup 100 --draws 100 --out m1-nuts.nc",
}

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


def shrunk_readme() -> str:
    text = README.read_text()
    for full, small in SHRINK.items():
        assert text.count(full) == 1, f"README.md should contain {full!r} exactly once"
        text = text.replace(full, small)
    return text


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """The `noiseaware …` command lines of a shell block (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True)[1:] for line in joined.splitlines() if line.startswith("noiseaware ")]


@pytest.fixture
def scratch(tmp_path):
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(previous)


def user_files(directory: Path) -> None:
    """mymodels.py and mydata.csv (columns X[0], X[1], X[2], y) for the user-model command."""
    (directory / "mymodels.py").write_text(textwrap.dedent(USER_MODEL))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = (rng.random(600) < 1.0 / (1.0 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(int)
    rows = [",".join(f"{v:.6g}" for v in (*x, t)) for x, t in zip(X, y)]
    (directory / "mydata.csv").write_text("\n".join(["X[0],X[1],X[2],y", *rows]) + "\n")


@pytest.mark.slow
def test_python_tour_runs_as_written(scratch):
    namespace: dict = {"__name__": "readme"}
    for number, block in enumerate(blocks(shrunk_readme(), "python")):
        exec(compile(block, f"README.md python block {number}", "exec"), namespace)
    assert (scratch / "m1.nc").exists() and (scratch / "m1-posterior.nc").exists()


@pytest.mark.slow
def test_command_line_tour_runs_as_written(scratch, capsys):
    user_files(scratch)
    lines = [argv for block in blocks(shrunk_readme(), "sh") for argv in commands(block)]
    assert len(lines) >= 8
    for argv in lines:
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 0, f"noiseaware {shlex.join(argv)} failed: {err}"
