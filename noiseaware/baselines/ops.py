"""One posterior sample (OPS; Wang, Fienberg & Smola 2015; Foulds et al. 2016 §2.2) for the conjugate M1–M3.

With each record's log-likelihood bounded, ℓ(x, θ) ∈ [ℓ_min, ℓ_max] over a public data domain and a truncated
parameter region Θ, one draw from the tempered posterior

    p_t(θ | x) ∝ p(θ) 1[θ ∈ Θ] Π_i p(x_i | θ)^t

is (t·R)-DP under add/remove neighbours, R = ℓ_max − ℓ_min: adding a record z multiplies the density by
e^{t ℓ(z, θ)} / E_{p_t(·|x)}[e^{t ℓ(z, θ)}] ∈ [e^{−tR}, e^{tR}]; substituting one, by at most e^{2tR}. k draws
at ε/k each: t = min(1, ε / (k·c·R)), c = 1 (add/remove) or 2 (substitute). The k draws are released; as a
posterior, their empirical distribution (too few draws for intervals when k is small: `draws`).

Regions (public, fixed before any data): each parameter's prior central 1 − 2·tail mass,
  M1  λ ∈ [λ_lo, λ_hi] of Gamma(8, rate 2); records clipped to [0, B], B = 1.557 the prior-predictive 0.99
      quantile (as bs2018): ℓ = log λ − λx, ℓ_max = log λ_hi, ℓ_min = min over the corners of log λ − λB;
  M2  p ∈ [a, 1 − a], a the Beta(10, 10) tail quantile: ℓ ∈ [log a, log(1 − a)];
  M3  every p_k ≥ a, a the tail quantile of the marginal Beta(5, 10): ℓ ∈ [log a, log(1 − 2a)].
The tempered posteriors are conjugate (M1 Gamma(α₀ + tN, β₀ + tΣx̃), M2 Beta(α₀ + tk, β₀ + t(N − k)),
M3 Dirichlet(α + t·counts)) and are truncated to Θ by rejection, which is exact. θ is on the research
transforms' scale, as the other sufficient-statistic baselines' (`expfam`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from ..posteriors.draws import DrawsPosterior
from ..util.checks import choice, positive_int, probability
from .expfam import BetaBernoulli, DirichletCategorical, Family, GammaExponential, family
from .mechanisms import NEIGHBOURING, Neighbouring, check_epsilon, keys_for
from .sampled import ReleaseDiagnostics

__all__ = ["OPSDiagnostics", "OPSSettings", "Region", "ops_batch", "region", "temperature"]

MECHANISM = "one posterior sample (exponential mechanism)"


@dataclasses.dataclass(frozen=True)
class OPSSettings:
    """draws k: released draws, each at ε/k; tail: the prior mass cut from each end of every parameter's range
    (the truncation region); neighbouring: "add-remove" or "substitute"."""

    draws: int = 10
    tail: float = 1e-4
    neighbouring: Neighbouring = "add-remove"

    def __post_init__(self):
        positive_int("draws", self.draws, hint="the number of released posterior draws, e.g. draws=10")
        probability("tail", self.tail)
        if not 0 < self.tail < 0.25:
            raise ValueError(f"tail must be in (0, 0.25): the prior mass cut from each end; got {self.tail!r}")
        choice("neighbouring", self.neighbouring, NEIGHBOURING)


@dataclasses.dataclass(frozen=True)
class Region:
    """The truncation region of θ's parameters and what it implies: bounds (lo, hi) of λ (M1) or of each
    probability (M2, M3), M1's record bound B (None otherwise) and R = ℓ_max − ℓ_min over region and domain."""

    low: float
    high: float
    record_bound: float | None
    log_likelihood_range: float


def region(fam: Family, tail: float) -> Region:
    """The public truncation region of `fam` at prior tail mass `tail` (module doc)."""
    if isinstance(fam, GammaExponential):
        shape, rate = fam.prior
        low, high = stats.gamma(shape, scale=1.0 / rate).ppf([tail, 1.0 - tail])
        bound = fam.bound
        ell_max = math.log(high)
        ell_min = min(math.log(low) - low * bound, math.log(high) - high * bound)
        return Region(float(low), float(high), bound, ell_max - ell_min)
    if isinstance(fam, BetaBernoulli):
        a = float(stats.beta(*fam.prior).ppf(tail))
        return Region(a, 1.0 - a, None, math.log((1.0 - a) / a))
    if isinstance(fam, DirichletCategorical):
        alpha = np.asarray(fam.prior)
        a = float(stats.beta(alpha[0], alpha.sum() - alpha[0]).ppf(tail))
        return Region(a, 1.0 - 2.0 * a, None, math.log((1.0 - 2.0 * a) / a))
    raise TypeError(f"OPS has no region for the family {type(fam).__name__}")


def temperature(epsilon: float, draws: int, reg: Region, neighbouring: str) -> float:
    """t = min(1, ε / (k·c·R)): each of the k draws spends ε/k (c = 2 for substitution)."""
    factor = 1.0 if neighbouring == "add-remove" else 2.0
    return min(1.0, epsilon / (draws * factor * reg.log_likelihood_range))


@dataclasses.dataclass(frozen=True)
class OPSDiagnostics(ReleaseDiagnostics):
    """The release of OPS: its k draws θ (k, d) are the released values, with the temperature among the facts."""

    def describe(self, posterior) -> list[str]:
        draws = posterior.chains.shape[1]
        return super().describe(posterior) + [f"{draws} draws at temperature t = {self.release['temperature']:.3g}"]


OPS = "one posterior sample (OPS) release"


def ops_batch(
    model: str, x, *, keys, epsilon: float, delta: float | None = None, settings: OPSSettings = OPSSettings()
) -> list[DrawsPosterior]:
    """OPS for M data sets x (M, N) of `model` (M1–M3) at ε (pure DP: δ unused): data set m's k draws use
    keys[m]. Returns one posterior per data set: its k released draws (1, k, d), their empirical distribution."""
    epsilon = check_epsilon(epsilon)
    x = np.asarray(x)
    fam = family(model, x.shape[1])
    fam.check_domain(x)
    reg = region(fam, settings.tail)
    t = temperature(epsilon, settings.draws, reg, settings.neighbouring)
    statistics = _statistics(fam, x, reg)
    with jax.enable_x64(True):
        statistics = jnp.asarray(statistics, jnp.float64)
        draws = np.asarray(_draws(fam, reg, t, statistics, keys_for(keys, len(x)), settings.draws), np.float64)
    facts = {
        "mechanism": MECHANISM,
        "neighbouring": settings.neighbouring,
        "epsilon": epsilon,
        "delta": 0.0,
        "draws": settings.draws,
        "temperature": t,
        "log_likelihood_range": reg.log_likelihood_range,
        "bounds": (reg.low, reg.high),
        "bound": reg.record_bound,
    }
    return [
        DrawsPosterior(
            d[None],
            "ops",
            names=fam.theta_names,
            sites=fam.sites,
            diagnostics=OPSDiagnostics(released=d, release=facts),
            kind=OPS,
        )
        for d in draws
    ]


def _statistics(fam: Family, x: np.ndarray, reg: Region) -> np.ndarray:
    """Per data set the tempered posterior's data part (M, S): M1 (N, Σ min(x, B)); M2 (k, N − k); M3 the counts."""
    if isinstance(fam, GammaExponential):
        return np.stack([np.full(len(x), x.shape[1], np.float64), np.clip(x, 0.0, reg.record_bound).sum(axis=1)], 1)
    counts = np.stack([(x == v).sum(axis=1) for v in fam.values], axis=1).astype(np.float64)
    return counts[:, ::-1] if isinstance(fam, BetaBernoulli) else counts


@functools.partial(jax.jit, static_argnames=("fam", "reg", "draws"))
def _draws(fam: Family, reg: Region, t, statistics, keys, draws: int):
    """(M, k, d) draws of θ from the truncated tempered posteriors, by rejection."""
    params = jnp.asarray(fam.prior, jnp.float64) + t * statistics  # (M, P)

    def one(key, p):
        def propose(state):
            key, _ = state
            key, sub = jax.random.split(key)
            return key, fam.draw(sub, p)

        def outside(state):
            return ~_inside(fam, reg, state[1])

        return jax.lax.while_loop(outside, propose, propose((key, jnp.zeros(fam.dim, jnp.float64))))[1]

    def problem(key, p):
        return jax.vmap(lambda k: one(k, p))(jax.random.split(key, draws))

    return jax.vmap(problem)(keys, params)


def _inside(fam: Family, reg: Region, theta) -> jax.Array:
    """Whether θ's parameters lie in the region: λ = softplus(θ) (M1), p = sigmoid(θ) (M2), p = softmax(θ, 0) (M3)."""
    if isinstance(fam, GammaExponential):
        values = jax.nn.softplus(theta)
    elif isinstance(fam, BetaBernoulli):
        values = jax.nn.sigmoid(theta)
    else:
        values = jax.nn.softmax(jnp.append(theta, 0.0))
    return jnp.all((values >= reg.low) & (values <= reg.high))
