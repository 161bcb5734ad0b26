"""`Draws`: what every route of the gradient model returns; `prior_draws`: the same from the model's prior alone."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ..util.diagnostics import Diagnostics, NoDiagnostics
from .gradient_model import GradientModel

__all__ = ["Draws", "prior_draws"]


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


def prior_draws(model: GradientModel, key, draws: int) -> Draws:
    """K draws (chains 1) of φ* ~ N(optimum_loc, optimum_sd²) and a = link(ã), ã ~ N(hessian_loc, hessian_sd²): the
    gradient model's prior alone, the posterior of a trace that says nothing (`checks.clip_reach`). The scale rows
    must be read in ρ (scale_model "linear")."""
    if np.any(np.asarray(model.scale_rows)):
        raise ValueError("prior_draws takes a model whose scale rows are read in ρ (scale_model='linear')")
    k_optimum, k_hessian = jax.random.split(key)
    shape = (1, draws, model.n_params)
    normal = (np.asarray(jax.random.normal(k, shape), np.float64) for k in (k_optimum, k_hessian))
    optimum = np.asarray(model.optimum_loc) + np.asarray(model.optimum_sd) * next(normal)
    hessian = np.asarray(model.hessian(np.asarray(model.hessian_loc) + np.asarray(model.hessian_sd) * next(normal)))
    return Draws(optimum, hessian, None, NoDiagnostics())
