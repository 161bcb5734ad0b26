"""The clipping check: how often the run clipped after the burn-in, read off its released counts of clipped examples.

A run that releases each step c̃_t = Σ_{i ∈ B_t} 1[‖h_i‖ > C] + N(0, σ_b²) (the query of Andrew, Thakkar, McMahan &
Ramaswamy 2021; `record_dpvi(clip_count_share=…)`, the adapters' `count_noise_multiplier`) measures the fraction of
examples clipped over its n kept steps,

    f̂ = Σ_t c̃_t / (n·N·q),    se(f̂) = s_c / (√n·N·q),

s_c² the sample variance of the c̃_t (the count's DP noise and the batch's own variation together, so no model of
either is needed). Clipping active at the optimum leaves the gradient's slope below the curvature the gradient model
reads off it, and nothing else in the trace says so: the check fires when the one-sided lower bound
f̂ − z_{1−α}·se exceeds `CLIPPED_LIMIT`, the fraction the preflight also allows at the optimum. It is a rule on a
fact, as the transient and runaway rules are: a run that clips well below the limit fires with probability far
below α, whatever its P.
"""

from __future__ import annotations

import dataclasses
import math

from scipy import stats

from ..trace.run import ClipCounts

__all__ = ["CLIPPED_LIMIT", "ClippedFraction", "clipped_fraction"]

CLIPPED_LIMIT = 0.02
"""The largest fraction of examples clipped at the optimum the product accepts: the clipping check fires on a run
that clips more, and the preflight refuses settings whose simulations do."""


@dataclasses.dataclass(frozen=True)
class ClippedFraction:
    """The fraction of examples clipped over the kept steps: the estimate f̂, its two-sided interval (lower, upper) at
    `level`, the one-sided lower bound at the check's α (`bound`), the steps n and the count's noise sd σ_b."""

    fraction: float
    lower: float
    upper: float
    bound: float
    level: float
    steps: int
    noise_multiplier: float

    @property
    def active(self) -> bool:
        """Whether clipping is active at the optimum: the lower bound is above `CLIPPED_LIMIT`."""
        return self.bound > CLIPPED_LIMIT

    def __str__(self) -> str:
        return (
            f"{self.fraction:.1%} of examples clipped after the burn-in ({self.level:.0%} interval "
            f"{max(self.lower, 0.0):.1%}–{min(self.upper, 1.0):.1%}, {self.steps} steps)"
        )


def clipped_fraction(counts: ClipCounts, expected_batch: float, alpha: float, level: float = 0.9) -> ClippedFraction:
    """f̂ and its intervals (module doc) from the kept steps' sums of released counts and the expected batch N·q;
    alpha: the check's level for the one-sided bound. A ValueError for fewer than 2 kept steps."""
    n = counts.steps
    if n < 2:
        raise ValueError(f"the clipping check needs at least 2 kept steps with a released count, got {n}")
    mean = counts.total / n
    variance = max(counts.squares / n - mean * mean, 0.0) * n / (n - 1)
    se = math.sqrt(variance / n) / expected_batch
    fraction = mean / expected_batch
    half = stats.norm.isf((1.0 - level) / 2.0) * se
    return ClippedFraction(
        fraction=fraction,
        lower=fraction - half,
        upper=fraction + half,
        bound=fraction - stats.norm.isf(alpha) * se,
        level=level,
        steps=n,
        noise_multiplier=counts.noise_multiplier,
    )
