"""What the command-line tests share: running `noiseaware` in process, its one error line, and a trace of plain
SGD built in numpy (nothing compiled)."""

from pathlib import Path

import numpy as np

import noiseaware as na
from noiseaware.cli import main
from noiseaware.trace.sites import SiteSpec


def run(capsys, *argv):
    """(exit status, stdout, stderr) of `noiseaware argv…` run in-process."""
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def single_error(capsys, *argv) -> str:
    """Run a command that must fail; return its one `error:` line."""
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


OPTIMUM = np.array([0.5, -3.0])
"""φ* = (μ*, ρ*) of the simulated traces: θ's noise-aware posterior centres on μ* = 0.5."""


def sgd_trace(steps=4000, contraction=(0.02, 0.02), seed=0, learning_rate=True, sites=True) -> na.Trace:
    """A trace of plain SGD on a quadratic loss with Hessian a = (2000, 50) and optimum OPTIMUM (d = 1, one
    real site x), gradients q·a·(φ − φ*) plus DP noise of sd σC = 10; `contraction` is λ·q·a per coordinate
    (small: a weak slope signal). Built in numpy, so no recording is compiled."""
    q, hessian, noise_sd = 0.1, np.array([2000.0, 50.0]), 10.0
    rate = np.asarray(contraction) / (q * hessian)
    rng = np.random.default_rng(seed)
    params, grads = np.empty((steps, 2)), np.empty((steps, 2))
    phi = OPTIMUM.copy()
    for t in range(steps):
        params[t] = phi
        grads[t] = q * hessian * (phi - OPTIMUM) + noise_sd * rng.standard_normal(2)
        phi = phi - rate * grads[t]
    return na.Trace.from_arrays(
        params,
        grads,
        noise_multiplier=5.0,
        clip=2.0,
        sampling_rate=q,
        n_examples=5000,
        learning_rate=rate if learning_rate else None,
        epsilon=na.epsilon_spent(5.0, 1e-5, q, steps),  # what σ = 5 spends over these steps
        delta=1e-5,
        sites=[SiteSpec("x", (), "identity")] if sites else None,
    )


def saved(trace: na.Trace, path: Path) -> Path:
    trace.save(path)
    return path


def task_counts(report: str) -> dict[str, int]:
    """The `tasks: …` line of `noiseaware report` as numbers: {"done": 2, "failed": 0, …, "of": 2}."""
    (line,) = [line for line in report.splitlines() if line.strip().startswith("tasks: ")]
    counts = {}
    for part in line.strip().removeprefix("tasks: ").split(", "):
        number, name = part.split(" ", 1) if not part.startswith("of ") else part.split(" ")[::-1]
        counts[name] = int(number)
    return counts
