"""The posterior protocol: what every method's posterior offers, whatever it was fitted from.

A posterior is a distribution over the unconstrained θ (d,) of a model. The noise-aware posterior, the
naive and DPVIm baselines (mixtures over the VI optimum, `posteriors.mixture`) and the Bernstein–Sheldon
posteriors (Gibbs draws or closed forms, `baselines`) all implement it, so experiments, plots and the CLI
treat them alike.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np

from ..util.diagnostics import Diagnostics
from ..util.tables import text_table

__all__ = ["Posterior", "interval_table", "tail_probability"]


@runtime_checkable
class Posterior(Protocol):
    """A posterior over θ (d,), unconstrained.

    kind: what it is, in words ("noise-aware posterior", "naive posterior", …); method: the registered
    method that produced it; theta_names (d,); diagnostics: a typed `Diagnostics` record.
    """

    kind: str
    method: str
    diagnostics: Diagnostics

    @property
    def theta_names(self) -> tuple[str, ...]: ...

    def sample(self, key, n: int) -> np.ndarray:
        """n draws of θ, (n, d)."""
        ...

    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` credible interval of each θ_j, (d,) ends (key: for posteriors known by a sampler)."""
        ...

    def summary(self, level: float = 0.9, *, key=None) -> str:
        """A table of θ: mean, sd and central interval, under a one-line description."""
        ...

    def save(self, path: str | os.PathLike, key=None) -> None:
        """Write the posterior to a netCDF file (atomically); key: required where the file holds fresh draws
        (θ paired with each φ* of a mixture)."""
        ...


def tail_probability(level: float) -> float:
    """α/2 for a central interval of credibility `level` ∈ (0, 1)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level}")
    return 0.5 * (1.0 - level)


def interval_table(names, mean, sd, low, high, level: float, label: str = "θ (unconstrained)") -> str:
    """A text table with one row per coordinate: mean, sd and the central `level` interval."""
    rows = [
        (name, f"{m:.4g}", f"{s:.3g}", f"{lo:.4g}", f"{hi:.4g}")
        for name, m, s, lo, hi in zip(names, mean, sd, low, high)
    ]
    percent = f"{100 * level:g}"
    return text_table((label, "mean", "sd", f"{percent}% low", f"{percent}% high"), rows)
