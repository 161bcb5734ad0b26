"""The search space of DP-SGD settings, in quantities that mean the same for every model.

Gradient scales from the simulations: in block b (a site's μ or ρ coordinates) s_j = w_b / (r_b √K_b), with
r_b the root-mean-square per-example gradient of block b at the non-private optimum and K_b the number of
blocks of its kind, w_b = 1 for μ blocks and w for ρ blocks (so E‖s ⊙ g_i‖² ≈ 1 + w² at the optimum). The clip
is C = c · Q, Q the CLIP_QUANTILE quantile of ‖s ⊙ g_i(φ̂_m)‖ over the simulations' examples: c ≥ 1 clips
fewer than 1 % of examples at the optimum. Step sizes from the simulated curvature:
λ_j = κ_b / (q H̄_jj), H̄ the median of diag H over the simulations (a step's gradient sums about qN examples),
so κ_b is the per-step relaxation rate of block b's coordinates; the learning-rate multipliers v of
`record_dpvi` follow as v = λ ⊙ √(T·P)·σ·C ⊘ s. Initial values: the median non-private optimum over the
simulations (data drawn from the prior: no privacy spent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..util.checks import positive_float
from .facts import SimulationFacts

__all__ = ["CLIP_QUANTILE", "Candidate", "SearchSpace", "blocks", "settings_for"]

CLIP_QUANTILE = 0.99
"""The quantile of the per-example gradient norms at the simulated optimum that the clip is measured in."""


@dataclass(frozen=True)
class SearchSpace:
    """Ranges of the searched quantities (log-uniform); steps and sampling_rate: the choices of T and q
    (None: the model's preset, else T = 10⁴ and q = 0.1)."""

    clip: tuple[float, float] = (0.3, 4.0)
    rho_weight: tuple[float, float] = (0.03, 3.0)
    relaxation_mu: tuple[float, float] = (1e-3, 0.3)
    relaxation_rho: tuple[float, float] = (1e-3, 0.3)
    steps: tuple[int, ...] | None = None
    sampling_rate: tuple[float, ...] | None = None

    def __post_init__(self):
        for name in ("clip", "rho_weight", "relaxation_mu", "relaxation_rho"):
            low, high = getattr(self, name)
            if not 0 < positive_float(name, low) <= positive_float(name, high):
                raise ValueError(f"SearchSpace.{name} must be a range (low, high) with 0 < low ≤ high, got {low, high}")
        if self.steps == () or self.sampling_rate == ():
            raise ValueError("SearchSpace.steps and sampling_rate need at least one choice each (or None)")

    def clamp(self, point: dict[str, float]) -> dict[str, float]:
        """`point` ({searched name: value}) with each value moved into its range."""
        return {name: min(max(value, getattr(self, name)[0]), getattr(self, name)[1]) for name, value in point.items()}

    def with_grid(self, steps: int, sampling_rate: float) -> SearchSpace:
        """This space with the T and q choices it leaves open (None) set to the given ones."""
        return replace(
            self,
            steps=self.steps or (int(steps),),
            sampling_rate=self.sampling_rate or (float(sampling_rate),),
        )


@dataclass(frozen=True)
class Candidate:
    """One point of the search: C relative to the 99 % quantile of gradient norms, the ρ weight w, relaxation
    rates κ, T, q."""

    clip: float
    rho_weight: float
    relaxation_mu: float
    relaxation_rho: float
    steps: int
    sampling_rate: float

    @classmethod
    def from_trial(cls, trial, space: SearchSpace) -> Candidate:
        """The candidate an Optuna trial suggests."""
        log = {"log": True}
        return cls(
            trial.suggest_float("clip", *space.clip, **log),
            trial.suggest_float("rho_weight", *space.rho_weight, **log),
            trial.suggest_float("relaxation_mu", *space.relaxation_mu, **log),
            trial.suggest_float("relaxation_rho", *space.relaxation_rho, **log),
            trial.suggest_categorical("steps", list(space.steps)),
            trial.suggest_categorical("sampling_rate", list(space.sampling_rate)),
        )


def blocks(site_map) -> list[tuple[str, np.ndarray]]:
    """The coordinate blocks of φ = (μ, ρ): a μ block and a ρ block per site, as (name, indices (k,)) in φ order."""
    mu, rho, start = [], [], 0
    for site in site_map.sites:
        index = np.arange(start, start + site.size)
        mu.append((f"mu:{site.name}", index))
        rho.append((f"rho:{site.name}", index + site_map.dim))
        start += site.size
    return mu + rho


def settings_for(
    candidate: Candidate, facts: SimulationFacts, site_map, noise_multiplier: float, base: Mapping
) -> dict:
    """The `record_dpvi` settings of a candidate (module doc): base (mc_draws, transforms, sites) plus
    steps, sampling_rate, clip, grad_scale (P,), lr_multiplier (P,) and init (P,)."""
    parts = blocks(site_map)
    kinds = {kind: sum(name.startswith(kind) for name, _ in parts) for kind in ("mu:", "rho:")}
    P = 2 * site_map.dim
    scale = np.empty(P)
    relaxation = np.empty(P)
    for name, index in parts:
        rms = math.sqrt(float(np.mean(facts.gradients[..., index] ** 2)))
        mu = name.startswith("mu:")
        weight = 1.0 if mu else candidate.rho_weight
        scale[index] = weight / (max(rms, 1e-30) * math.sqrt(kinds["mu:" if mu else "rho:"]))
        relaxation[index] = candidate.relaxation_mu if mu else candidate.relaxation_rho
    curvature = np.maximum(np.median(facts.hessian, axis=0), 1e-12)
    learning_rate = relaxation / (candidate.sampling_rate * curvature)
    norms = np.linalg.norm(facts.gradients * scale, axis=-1)
    clip = candidate.clip * float(np.quantile(norms, CLIP_QUANTILE))
    v = learning_rate * math.sqrt(candidate.steps * P) * noise_multiplier * clip / scale
    return {
        **base,
        "steps": int(candidate.steps),
        "sampling_rate": float(candidate.sampling_rate),
        "clip": float(clip),
        "grad_scale": tuple(scale.tolist()),
        "lr_multiplier": tuple(v.tolist()),
        "init": tuple(np.median(facts.optimum, axis=0).tolist()),
    }
