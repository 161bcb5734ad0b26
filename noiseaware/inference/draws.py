"""`Draws`: what every route of the gradient model returns."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..util.diagnostics import Diagnostics

__all__ = ["Draws"]


@dataclasses.dataclass(frozen=True)
class Draws:
    """Posterior draws of the gradient model's unknowns, each (chains, K, P) float64.

    optimum: φ* = (μ*, ρ*); hessian: the Hessian diagonal a = model.hessian(ã) (softplus or exp of ã);
    extra_noise: |u|, the extra
    gradient-noise sd (None when the prior has no extra noise). diagnostics: the route's typed record of its
    facts (R-hat, ESS, divergences, convergence flags, grid sizes …): `ExactDiagnostics`, `LaplaceDiagnostics`
    or `NutsDiagnostics`, each a frozen `noiseaware.util.diagnostics.Diagnostics` that also reads as a mapping.
    """

    optimum: np.ndarray
    hessian: np.ndarray
    extra_noise: np.ndarray | None
    diagnostics: Diagnostics

    def __post_init__(self):
        for name in ("optimum", "hessian", "extra_noise"):
            value = getattr(self, name)
            if value is not None and np.ndim(value) != 3:
                raise ValueError(f"Draws.{name} must be (chains, draws, P); got shape {np.shape(value)}")
