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

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..util.checks import positive_float
from .facts import SimulationFacts

__all__ = ["CLIP_QUANTILE", "SEARCHED", "Candidate", "SearchSpace", "blocks", "settings_for"]

SEARCHED = ("clip", "rho_weight", "relaxation_mu", "relaxation_rho")
"""The quantities searched over ranges (log-uniform); T and q are searched over choices."""
CLIP_QUANTILE = 0.99
"""The quantile of the per-example gradient norms at the simulated optimum that the clip is measured in."""


@dataclass(frozen=True)
class SearchSpace:
    """Ranges of the searched quantities (log-uniform); steps and sampling_rate: the choices of T and q
    (None: the model's preset, else T = 10⁴ and q = 0.1)."""

    clip: tuple[float, float] = (0.3, 4.0)
    rho_weight: tuple[float, float] = (0.03, 3.0)
    relaxation_mu: tuple[float, float] = (1e-3, 0.3)
    relaxation_rho: tuple[float, float] = (3e-4, 0.3)
    steps: tuple[int, ...] | None = None
    sampling_rate: tuple[float, ...] | None = None

    def __post_init__(self):
        for name in SEARCHED:
            low, high = getattr(self, name)
            if not 0 < positive_float(name, low) <= positive_float(name, high):
                raise ValueError(f"SearchSpace.{name} must be a range (low, high) with 0 < low ≤ high, got {low, high}")
        if self.steps == () or self.sampling_rate == ():
            raise ValueError("SearchSpace.steps and sampling_rate need at least one choice each (or None)")

    def clamp(self, point: dict[str, float]) -> dict[str, float]:
        """`point` ({searched name: value}) with each value moved into its range."""
        return {name: min(max(value, getattr(self, name)[0]), getattr(self, name)[1]) for name, value in point.items()}

    def ranges(self) -> tuple[tuple[float, float], ...]:
        """The log-uniform ranges of `SEARCHED`, in that order."""
        return tuple(getattr(self, name) for name in SEARCHED)

    def grid(self) -> tuple[tuple, tuple]:
        """The choices of T and q (after `with_grid`)."""
        return tuple(self.steps), tuple(self.sampling_rate)

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
        """The candidate an Optuna trial suggests (log-uniform in the ranges, T and q from their choices)."""
        values = [trial.suggest_float(name, *getattr(space, name), log=True) for name in SEARCHED]
        steps, rate = (
            trial.suggest_categorical(name, list(choices))
            for name, choices in zip(("steps", "sampling_rate"), space.grid())
        )
        return cls(*values, int(steps), float(rate))

    @classmethod
    def from_point(cls, point: Mapping, space: SearchSpace) -> Candidate:
        """The candidate of {searched name: value} (`as_point`), moved into the space; T and q default to its first
        choices."""
        point = space.clamp({k: v for k, v in point.items() if k in SEARCHED})
        steps = point.get("steps", space.steps[0])
        return cls(
            *(point[name] for name in SEARCHED), int(steps), float(point.get("sampling_rate", space.sampling_rate[0]))
        )

    def as_point(self) -> dict:
        """{name: value} of the searched quantities, T and q."""
        return dataclasses.asdict(self)


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
