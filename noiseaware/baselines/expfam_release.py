"""Bernstein & Sheldon 2018's release (docs/baselines.md §1.1, §0.2): z = Σ_i t(x_i) + noise, once per data set.

w_c ~ Laplace(0, Δ₁/ε) iid (pure ε-DP, the default) or w ~ N(0, σ² I) (analytic Gaussian, (ε, δ)-DP); the
sensitivity comes from the family's bounded domain, fixed before the data, never from the data.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..util.checks import choice, positive_float
from .expfam import Family, GammaExponential
from .expfam import family as make_family
from .mechanisms import MECHANISMS, NEIGHBOURING, Mechanism, Neighbouring, keys_for, noise_scale

__all__ = ["Release", "ReleaseSettings", "release_statistics"]


@dataclasses.dataclass(frozen=True)
class ReleaseSettings:
    """How Σ t(x) is released, fixed before seeing data: mechanism "laplace" (pure ε) or "gaussian" (analytic
    Gaussian at (ε, δ)); neighbouring "add-remove" (N public) or "substitute"; bound: M1's truncation B (None:
    the prior-predictive 0.99 quantile 1.557; the other models' statistics are bounded already)."""

    mechanism: Mechanism = "laplace"
    neighbouring: Neighbouring = "add-remove"
    bound: float | None = None

    def __post_init__(self):
        choice("mechanism", self.mechanism, MECHANISMS)
        choice("neighbouring relation", self.neighbouring, NEIGHBOURING)
        if self.bound is not None:
            positive_float("bound", self.bound, hint="M1's truncation bound B, fixed before seeing data")


@dataclasses.dataclass(frozen=True, eq=False)
class Release:
    """M released statistics z (M, D) of one family at one privacy level, with the facts of the release.

    sensitivity: Δ₁ (Laplace) or Δ₂ (Gaussian) of Σ t(x); scale: b = Δ₁/ε or σ; delta: δ spent (0 for Laplace).
    """

    family: Family
    z: np.ndarray
    mechanism: str
    neighbouring: str
    epsilon: float
    delta: float
    sensitivity: float
    scale: float

    def facts(self) -> dict[str, Any]:
        """The privacy facts a posterior reports in its diagnostics."""
        facts = {
            "mechanism": self.mechanism,
            "neighbouring": self.neighbouring,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "noise_scale": self.scale,
            "n_examples": self.family.n,
        }
        if isinstance(self.family, GammaExponential):
            facts["bound"] = self.family.bound
        return facts


def release_statistics(
    model: str, x, *, keys, epsilon: float, delta: float | None = 1e-5, settings: ReleaseSettings = ReleaseSettings()
) -> Release:
    """Release z_m = Σ_i t(x_mi) + noise for each of M data sets: x (M, N), keys (M,) → Release with z (M, D).

    model: 'gamma-exponential', 'beta-bernoulli', 'dirichlet-categorical' (or M1/M2/M3); N = x.shape[-1]
    is public; data set m's noise depends on keys[m] alone. The sensitivity comes from the family's bounded
    domain (M1: settings.bound, fixed before the data), never from the data. δ is spent by the Gaussian only.
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {x.shape}; it must be (M, N): the N records of each of M data sets")
    keys = keys_for(keys, x.shape[0])
    fam = make_family(model, x.shape[-1], bound=settings.bound)
    fam.check_domain(x)
    l1, l2 = fam.sensitivity(settings.neighbouring)
    scale, spent = noise_scale(settings.mechanism, l1=l1, l2=l2, epsilon=epsilon, delta=delta)
    with jax.enable_x64(True):
        z = _release(fam, settings.mechanism, jnp.asarray(x), keys, scale)
    return Release(
        fam,
        np.asarray(z),
        settings.mechanism,
        settings.neighbouring,
        float(epsilon),
        spent,
        l1 if settings.mechanism == "laplace" else l2,
        scale,
    )


@functools.partial(jax.jit, static_argnames=("fam", "mechanism"))
def _release(fam: Family, mechanism: str, x, keys, scale):
    """z (M, D) = statistic(x_m) + scale·(Laplace or normal noise), x (M, N), keys (M,)."""

    def one(x, key):
        draw = jax.random.laplace if mechanism == "laplace" else jax.random.normal
        return fam.statistic(x) + scale * draw(key, (fam.released,), jnp.float64)

    return jax.vmap(one)(x, keys)
