"""Noise scales of the one-shot releases used by the sufficient-statistic baselines (docs/baselines.md §0.2).

* Laplace mechanism, pure ε-DP: z = s + w, w_c ~ Laplace(0, b) iid, b = Δ₁/ε (Δ₁ the L1 sensitivity).
* Analytic Gaussian mechanism, (ε, δ)-DP (Balle & Wang 2018, Thm 8): z = s + N(0, σ² I) with the
  smallest σ such that Φ(Δ₂/(2σ) − εσ/Δ₂) − e^ε Φ(−Δ₂/(2σ) − εσ/Δ₂) ≤ δ (Δ₂ the L2 sensitivity).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import jax
from scipy.optimize import brentq
from scipy.special import log_ndtr

from ..util.checks import choice, positive_float, probability
from ..util.keys import as_keys

__all__ = [
    "MECHANISMS",
    "NEIGHBOURING",
    "Mechanism",
    "Neighbouring",
    "analytic_gaussian_sigma",
    "check_epsilon",
    "keys_for",
    "laplace_scale",
    "noise_scale",
    "problem_keys",
]

Mechanism = Literal["laplace", "gaussian"]
Neighbouring = Literal["add-remove", "substitute"]
MECHANISMS: tuple[str, ...] = get_args(Mechanism)
NEIGHBOURING: tuple[str, ...] = get_args(Neighbouring)


def check_epsilon(epsilon) -> float:
    """ε as a float, checked to be a finite number > 0 (None, a run given by its noise multiplier only, fails)."""
    return positive_float("epsilon", epsilon, hint="the release needs a finite ε > 0")


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """b = Δ₁/ε: the Laplace scale of an ε-DP release of a statistic with L1 sensitivity Δ₁."""
    return sensitivity / check_epsilon(epsilon)


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """σ of the analytic Gaussian mechanism: the smallest σ with δ(σ) ≤ `delta` for L2 sensitivity Δ₂.

    δ(σ) = Φ(1/(2u) − εu) − e^ε Φ(−1/(2u) − εu) with u = σ/Δ₂ is decreasing in u; solved on log u.
    """
    epsilon = check_epsilon(epsilon)
    delta = probability("delta", delta, hint="the Gaussian mechanism needs 0 < δ < 1")

    def excess(log_u):
        u = math.exp(log_u)
        first = math.exp(log_ndtr(1 / (2 * u) - epsilon * u))
        second = math.exp(epsilon + log_ndtr(-1 / (2 * u) - epsilon * u))
        return math.log(max(first - second, 1e-300)) - math.log(delta)

    return sensitivity * math.exp(brentq(excess, math.log(1e-4), math.log(1e8), xtol=1e-12, rtol=1e-12))


def noise_scale(
    mechanism: Mechanism, *, l1: float, l2: float, epsilon: float, delta: float | None
) -> tuple[float, float]:
    """(scale, δ spent): Laplace b = Δ₁/ε with δ = 0 (delta unused), or the analytic Gaussian σ for (ε, δ)."""
    choice("mechanism", mechanism, MECHANISMS)
    if mechanism == "laplace":
        return laplace_scale(l1, epsilon), 0.0
    return analytic_gaussian_sigma(l2, epsilon, delta), float(delta)


def keys_for(keys, count: int) -> jax.Array:
    """keys as `count` typed PRNG keys (count,), one per data set; a ValueError when their number differs."""
    keys = as_keys(keys)
    if keys.shape != (count,):
        raise ValueError(f"{keys.shape[0]} keys for {count} data sets: give one PRNG key per data set")
    return keys


def problem_keys(keys, count: int) -> tuple[jax.Array, jax.Array]:
    """Each problem's release key and sampler key, (k_release, k_sampler) = jax.random.split(keys[m]):
    keys (count,) → two (count,) key arrays. Problem m's release and draws depend on keys[m] alone."""
    pairs = jax.vmap(jax.random.split)(keys_for(keys, count))
    return pairs[:, 0], pairs[:, 1]
