"""Noise scales of the one-shot releases used by the sufficient-statistic baselines (docs/baselines.md §0.2).

* Laplace mechanism, pure ε-DP: z = s + w, w_c ~ Laplace(0, b) iid, b = Δ₁/ε (Δ₁ the L1 sensitivity).
* Analytic Gaussian mechanism, (ε, δ)-DP (Balle & Wang 2018, Thm 8): z = s + N(0, σ² I) with the
  smallest σ such that Φ(Δ₂/(2σ) − εσ/Δ₂) − e^ε Φ(−Δ₂/(2σ) − εσ/Δ₂) ≤ δ (Δ₂ the L2 sensitivity).
"""

from __future__ import annotations

import math
import numbers

from scipy.optimize import brentq
from scipy.special import log_ndtr

__all__ = ["MECHANISMS", "NEIGHBOURING", "laplace_scale", "analytic_gaussian_sigma", "noise_scale", "check_epsilon",
           "check_choice", "check_integers"]

MECHANISMS = ("laplace", "gaussian")
NEIGHBOURING = ("add-remove", "substitute")


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """b = Δ₁/ε: the Laplace scale of an ε-DP release of a statistic with L1 sensitivity Δ₁."""
    check_epsilon(epsilon)
    return sensitivity / epsilon


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """σ of the analytic Gaussian mechanism: the smallest σ with δ(σ) ≤ `delta` for L2 sensitivity Δ₂.

    δ(σ) = Φ(1/(2u) − εu) − e^ε Φ(−1/(2u) − εu) with u = σ/Δ₂ is decreasing in u; solved on log u.
    """
    check_epsilon(epsilon)
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta is {delta!r}; the Gaussian mechanism needs 0 < δ < 1")

    def excess(log_u):
        u = math.exp(log_u)
        first = math.exp(log_ndtr(1 / (2 * u) - epsilon * u))
        second = math.exp(epsilon + log_ndtr(-1 / (2 * u) - epsilon * u))
        return math.log(max(first - second, 1e-300)) - math.log(delta)

    return sensitivity * math.exp(brentq(excess, math.log(1e-4), math.log(1e8), xtol=1e-12, rtol=1e-12))


def noise_scale(mechanism: str, *, l1: float, l2: float, epsilon: float, delta: float) -> tuple[float, float]:
    """(scale, δ spent): Laplace b = Δ₁/ε with δ = 0, or the analytic Gaussian σ for (ε, δ)."""
    check_choice("mechanism", mechanism, MECHANISMS)
    if mechanism == "laplace":
        return laplace_scale(l1, epsilon), 0.0
    return analytic_gaussian_sigma(l2, epsilon, delta), float(delta)


def check_epsilon(epsilon) -> None:
    """ValueError unless ε is a finite real number > 0 (None: a run given by its noise multiplier has no ε)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 < epsilon < math.inf:
        raise ValueError(f"epsilon is {epsilon!r}; the release needs a finite ε > 0")


def check_choice(name: str, value, allowed: tuple[str, ...]) -> None:
    """ValueError 'unknown NAME …: choose one of …' unless value is one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}: choose one of {', '.join(map(repr, allowed))}")


def check_integers(settings, minima: dict[str, int]) -> None:
    """ValueError unless every field `name` of `settings` is an integer ≥ minima[name] (sampler settings)."""
    for name, minimum in minima.items():
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise ValueError(f"{name} is {value!r}; it must be an integer ≥ {minimum}")
