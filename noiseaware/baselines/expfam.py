"""The exponential families of Table 1 as Bernstein & Sheldon (2018) see them (docs/baselines.md §1.5).

Each family fixes, for N public records x_i with bounded statistic t(x):
* the released sum s = Σ_i t(x_i) (D,) and its sensitivities sup ‖t(x)‖ (add/remove) or
  sup ‖t(x) − t(x')‖ (substitute) over the bounded domain;
* the Gibbs latent statistic (L,) observed through z = H·latent + noise, with H (D, L), and one
  record's mean μ(θ) (L,) and covariance Σ(θ) (L, L) for the CLT latent ~ N(N μ(θ), N Σ(θ));
* the latent's support, and the projection onto it used after R failed redraws;
* the conjugate update: prior parameters → posterior parameters given the latent, and draws of the
  unconstrained θ (d,) from those parameters, with the research transforms of the models:
  M1 θ = softplus⁻¹(λ), M2 θ = logit p, M3 θ = (log p₁/p₃, log p₂/p₃), labelled as the models label θ;
* the conjugate posterior's marginals as increasing maps of 1-D laws, θ_j = g_j(X_j) (exact intervals):
  M1 softplus⁻¹ of a Gamma, M2 and M3 the log of a beta-prime (a ratio of two independent Gammas).
Families are frozen dataclasses (hashable), so jitted code takes them as static arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from ..models.builtin import GAMMA_PRIOR, get
from ..util.checks import positive_int
from ..util.numerics import softplus_inverse
from .primitives import draw_in_support
from .sampled import Marginal

__all__ = [
    "Family",
    "GammaExponential",
    "BetaBernoulli",
    "DirichletCategorical",
    "family",
    "FAMILIES",
    "prior_predictive_bound",
]

BETA_PRIOR = (10.0, 10.0)
DIRICHLET_PRIOR = (5.0, 5.0, 5.0)


def prior_predictive_bound(quantile: float = 0.99, prior: tuple[float, float] = GAMMA_PRIOR) -> float:
    """B with P(x ≤ B) = quantile under M1's prior predictive (Lomax: P(x > B) = (β₀/(β₀ + B))^α₀):
    B = β₀((1 − quantile)^{−1/α₀} − 1); 1.557 for Gamma(8, 2) at 0.99. Fixed before any data is seen."""
    shape, rate = prior
    return rate * ((1.0 - quantile) ** (-1.0 / shape) - 1.0)


@dataclasses.dataclass(frozen=True)
class Family:
    """Base class: N public records; subclasses define the statistic, moments, support and conjugacy."""

    n: int
    name = ""
    dim = 0  # d, the dimension of θ
    released = 0  # D
    latent = 0  # L
    prior: ClassVar[tuple[float, ...]] = ()  # the conjugate prior's parameters

    @property
    def observe(self) -> np.ndarray:
        """H (D, L): which latent coordinates the release observes (the identity unless overridden)."""
        return np.eye(self.released, self.latent)

    @property
    def theta_names(self) -> tuple[str, ...]:
        """The labels of θ (d,): the benchmark model's own."""
        return _theta_names(self.name)

    @property
    def sites(self):
        """The benchmark model's sites (θ here is its unconstrained θ under the research transforms)."""
        return _sites(self.name)

    def marginals(self, params) -> list[Marginal]:
        """(X_j, g_j), j = 1..d, with θ_j = g_j(X_j) under the conjugate posterior of parameters `params`."""
        raise NotImplementedError

    def sensitivity(self, neighbouring: str) -> tuple[float, float]:
        """(Δ₁, Δ₂) of the released sum under the neighbouring relation ('add-remove' or 'substitute')."""
        raise NotImplementedError

    def check_domain(self, x: np.ndarray) -> None:
        """ValueError when a record lies outside the data domain the sensitivity was computed for."""

    def valid(self, latent) -> jax.Array:
        raise NotImplementedError

    def project(self, latent) -> jax.Array:
        raise NotImplementedError

    def draw_latent(self, key, mean, cov, retries: int):
        """latent ~ N(mean, cov) on the support: returns (latent (L,), draws made, fell back)."""
        return draw_in_support(key, mean, cov, self.valid, self.project, retries)


@dataclasses.dataclass(frozen=True)
class GammaExponential(Family):
    """M1: λ ~ Gamma(α₀, rate β₀), x_i ~ Exp(λ) on [0, ∞), truncated at B: t(x) = x·1[0 ≤ x ≤ B].

    Records beyond B are dropped from the release (N stays the full count); the Gibbs latent is
    (s_in, s_out) = (Σ x·1[x ≤ B], Σ x·1[x > B]), of which only s_in is released: H = [1, 0]; S1 draws
    it from the bivariate CLT Gaussian one coordinate after the other (`draw_latent`).
    Δ₁ = Δ₂ = B under both relations (t ∈ [0, B]). Conjugacy: λ | s ~ Gamma(α₀ + N, β₀ + s_in + s_out).
    """

    bound: float = dataclasses.field(default_factory=prior_predictive_bound)
    name = "gamma-exponential"
    dim, released, latent = 1, 1, 2
    prior = GAMMA_PRIOR

    def __post_init__(self):
        if not (math.isfinite(self.bound) and self.bound > 0):
            raise ValueError(f"bound is {self.bound!r}; M1's truncation bound B must be finite and > 0")

    @property
    def observe(self) -> np.ndarray:
        return np.array([[1.0, 0.0]])

    def statistic(self, x):
        """Σ_i x_i·1[0 ≤ x_i ≤ B], (N,) → (1,)."""
        return jnp.sum(jnp.where((x >= 0) & (x <= self.bound), x, 0.0), keepdims=True)

    def sensitivity(self, neighbouring):
        return self.bound, self.bound

    def check_domain(self, x):
        if not np.all(np.isfinite(x)) or np.any(x < 0):
            raise ValueError("gamma-exponential data must be finite and ≥ 0 (exponential records)")

    def moments(self, theta):
        """Mean (2,) and covariance (2, 2) of (x·1[x ≤ B], x·1[x > B]) for one record, λ = softplus(θ).

        inside: p = 1 − e^{−λB}, m = 1/λ − B/(e^{λB} − 1), v = 1/λ² − B²/(4 sinh²(λB/2));
        outside: p = e^{−λB}, m = B + 1/λ, v = 1/λ² (memorylessness).
        """
        lam, b = jax.nn.softplus(theta[0]), self.bound
        p_in, p_out = -jnp.expm1(-lam * b), jnp.exp(-lam * b)
        m_in = 1.0 / lam - b / jnp.expm1(lam * b)
        v_in = 1.0 / lam**2 - b**2 / (4.0 * jnp.sinh(0.5 * lam * b) ** 2)
        m_out, v_out = b + 1.0 / lam, 1.0 / lam**2
        mean = jnp.stack([p_in * m_in, p_out * m_out])
        second = jnp.stack([p_in * (v_in + m_in**2), p_out * (v_out + m_out**2)])
        var = second - mean**2
        cross = -mean[0] * mean[1]
        return mean, jnp.array([[var[0], cross], [cross, var[1]]])

    def valid(self, latent):
        return (latent[0] >= 0) & (latent[0] <= self.n * self.bound) & (latent[1] >= 0)

    def project(self, latent):
        return jnp.stack([jnp.clip(latent[0], 0.0, self.n * self.bound), jnp.maximum(latent[1], 0.0)])

    def draw_latent(self, key, mean, cov, retries):
        """(s_in, s_out) from N(mean, cov) on [0, N·B] × [0, ∞), one coordinate after the other:
        s_in from its marginal truncated to [0, N·B], then s_out from its conditional given s_in truncated
        to [0, ∞), each an exact 1-D truncated-normal draw (no redraws, no projection).

        This leaves out the factor P(s_out ≥ 0 | s_in) of the jointly truncated density (§1.5 M1). That
        factor is 1 unless records beyond B are rare (N·e^{−λB} ≲ 1), and then s_in and s_out are nearly
        uncorrelated (corr ≈ −√(e^{−λB})), so it is nearly constant in s_in. Rejection from the joint
        Gaussian, by contrast, rejects about half of its draws in that regime and falls back once in 2^R.
        """
        k_in, k_out = jax.random.split(key)
        sd_in = jnp.sqrt(jnp.maximum(cov[0, 0], 1e-300))
        s_in = mean[0] + sd_in * _truncated_normal(k_in, -mean[0] / sd_in, (self.n * self.bound - mean[0]) / sd_in)
        slope = cov[1, 0] / jnp.maximum(cov[0, 0], 1e-300)
        mean_out = mean[1] + slope * (s_in - mean[0])
        sd_out = jnp.sqrt(jnp.maximum(cov[1, 1] - slope * cov[1, 0], 1e-300))
        s_out = mean_out + sd_out * _truncated_normal(k_out, -mean_out / sd_out, jnp.inf)
        return _finite_or_fallback(jnp.concatenate([s_in, s_out]), self.project, mean)

    def posterior_params(self, latent):
        """(shape α₀ + N, rate β₀ + s_in + s_out)."""
        return jnp.array([self.prior[0] + self.n, self.prior[1] + latent[0] + latent[1]])

    def naive_params(self, z):
        """Gamma(α₀ + N, β₀ + max(z, 0.01)): the inside-only release taken as the full Σx (biased low)."""
        return jnp.array([self.prior[0] + self.n, self.prior[1] + jnp.maximum(z[0], 0.01)])

    def marginals(self, params):
        """θ = softplus⁻¹(λ), λ ~ Gamma(shape, rate)."""
        return [(stats.gamma(params[0], scale=1.0 / params[1]), softplus_inverse)]

    def draw(self, key, params):
        """θ = softplus⁻¹(λ) = λ + log(−expm1(−λ)), λ ~ Gamma(shape, rate)."""
        lam = jax.random.gamma(key, params[0], dtype=jnp.float64) / params[1]
        return jnp.atleast_1d(lam + jnp.log(-jnp.expm1(-lam)))


@dataclasses.dataclass(frozen=True)
class _Counts(Family):
    """Categorical records x ∈ `values`; t(x) = the one-hot indicators of the `counted` categories.

    One record adds 1 to at most one count: Δ₁ = Δ₂ = 1 under add/remove; a substitution moves a record
    between two categories, changing up to min(#counted, 2) = k counts by 1: Δ₁ = k, Δ₂ = √k.
    The naive posterior is the conjugate update of z projected onto the support.
    """

    values: ClassVar[tuple[int, ...]] = ()
    counted: ClassVar[tuple[int, ...]] = ()

    def statistic(self, x):
        """(Σ_i 1[x_i = c])_c for the counted categories c, (N,) → (D,)."""
        return jnp.stack([jnp.sum(x == c, dtype=jnp.float64) for c in self.counted])

    def sensitivity(self, neighbouring):
        if neighbouring == "add-remove":
            return 1.0, 1.0
        k = min(len(self.counted), 2)
        return float(k), math.sqrt(k)

    def check_domain(self, x):
        if not np.all(np.isin(x, self.values)):
            allowed = f"{', '.join(map(str, self.values[:-1]))} or {self.values[-1]}"
            raise ValueError(f"{self.name} data must be {allowed}")

    def naive_params(self, z):
        """The conjugate posterior's parameters with z̃, the projection of z onto the support, as the counts."""
        return self.posterior_params(self.project(z))

    def marginals(self, params):
        """θ_j = log g_j − log g_last, g ~ independent Gamma(params): g_j/g_last ~ BetaPrime(params_j, params_last)."""
        return [(stats.betaprime(params[j], params[-1]), np.log) for j in range(self.dim)]


@dataclasses.dataclass(frozen=True)
class BetaBernoulli(_Counts):
    """M2: p ~ Beta(α₀, β₀), x_i ~ Bernoulli(p): t(x) = x = 1[x = 1], Δ₁ = Δ₂ = 1 under both relations.

    latent = s ∈ [0, N], μ = p, Σ = p(1 − p); S1 is a truncated-normal draw (never falls back
    unless the draw is not finite). Conjugacy: p | s ~ Beta(α₀ + s, β₀ + N − s).
    """

    name = "beta-bernoulli"
    dim, released, latent = 1, 1, 1
    prior = BETA_PRIOR
    values, counted = (0, 1), (1,)

    def moments(self, theta):
        """Mean (1,) and covariance (1, 1) of x for p = sigmoid(θ): p and p(1 − p)."""
        p, q = jax.nn.sigmoid(theta[0]), jax.nn.sigmoid(-theta[0])
        return jnp.stack([p]), jnp.reshape(p * q, (1, 1))

    def valid(self, latent):
        return (latent[0] >= 0) & (latent[0] <= self.n)

    def project(self, latent):
        return jnp.clip(latent, 0.0, self.n)

    def draw_latent(self, key, mean, cov, retries):
        """N(mean, cov) truncated to [0, N] by inverse-CDF (jax.random.truncated_normal)."""
        sd = jnp.sqrt(jnp.maximum(cov[0, 0], 1e-300))
        s = mean + sd * _truncated_normal(key, -mean[0] / sd, (self.n - mean[0]) / sd)
        return _finite_or_fallback(s, self.project, mean)

    def posterior_params(self, latent):
        return jnp.array([self.prior[0] + latent[0], self.prior[1] + self.n - latent[0]])

    def draw(self, key, params):
        """θ = logit p = log g₁ − log g₂ with g_j ~ Gamma(params_j) (p = g₁/(g₁ + g₂) ~ Beta)."""
        logs = jax.random.loggamma(key, params, dtype=jnp.float64)
        return logs[:1] - logs[1:]


@dataclasses.dataclass(frozen=True)
class DirichletCategorical(_Counts):
    """M3: p ~ Dirichlet(α), x_i ~ Categorical(p) on {0, 1, 2}: t(x) = (1[x = 0], 1[x = 1]) (K − 1 counts).

    Δ₁ = Δ₂ = 1 under add/remove; Δ₁ = 2, Δ₂ = √2 under substitution. μ = p₁:₂,
    Σ = diag(p₁:₂) − p₁:₂p₁:₂ᵀ; support s ≥ 0, s₁ + s₂ ≤ N (projection: clip at 0, then rescale the pair
    to sum N). Conjugacy: p | s ~ Dir(α₁ + s₁, α₂ + s₂, α₃ + N − s₁ − s₂). Independent noise per count.
    """

    name = "dirichlet-categorical"
    dim, released, latent = 2, 2, 2
    prior = DIRICHLET_PRIOR
    values, counted = (0, 1, 2), (0, 1)

    def moments(self, theta):
        """Mean (2,) and covariance (2, 2) of the first two one-hot indicators, p = softmax([θ₁, θ₂, 0])."""
        p = jax.nn.softmax(jnp.append(theta, 0.0))[:2]
        return p, jnp.diag(p) - jnp.outer(p, p)

    def valid(self, latent):
        return jnp.all(latent >= 0) & (jnp.sum(latent) <= self.n)

    def project(self, latent):
        clipped = jnp.maximum(latent, 0.0)
        return clipped * jnp.minimum(1.0, self.n / jnp.maximum(jnp.sum(clipped), 1e-300))

    def posterior_params(self, latent):
        return jnp.asarray(self.prior) + jnp.append(latent, self.n - jnp.sum(latent))

    def draw(self, key, params):
        """θ_j = log g_j − log g₃, g ~ Gamma(params) (g/Σg ~ Dirichlet)."""
        logs = jax.random.loggamma(key, params, dtype=jnp.float64)
        return logs[:2] - logs[2]


def _truncated_normal(key, lower, upper):
    """One N(0, 1) draw truncated to [lower, upper] (shape (1,), float64), by inverse CDF."""
    return jax.random.truncated_normal(key, lower, upper, (1,), jnp.float64)


def _finite_or_fallback(latent, project, mean):
    """(project(latent), 1 draw, False), or the projected mean and True (a fallback) where latent is not finite.

    A 1-D truncated draw lies in its interval up to rounding; the projection removes the rounding."""
    ok = jnp.all(jnp.isfinite(latent))
    return jnp.where(ok, project(latent), project(jnp.nan_to_num(mean))), jnp.int32(1), ~ok


@functools.cache
def _theta_names(model: str) -> tuple[str, ...]:
    return get(model).site_map.theta_names()


@functools.cache
def _sites(model: str):
    return get(model).site_map.sites


FAMILIES = {cls.name: cls for cls in (GammaExponential, BetaBernoulli, DirichletCategorical)}
_ALIASES = {"m1": "gamma-exponential", "m2": "beta-bernoulli", "m3": "dirichlet-categorical"}


def family(model: str, n: int, *, bound: float | None = None) -> Family:
    """The family of a benchmark model name ('gamma-exponential', 'beta-bernoulli', 'dirichlet-categorical'
    or M1/M2/M3) for N = n public records; `bound` is M1's truncation B (default `prior_predictive_bound()`)."""
    name = _ALIASES.get(str(model).lower(), str(model).lower())
    if name not in FAMILIES:
        raise ValueError(
            f"Bernstein & Sheldon 2018 has no family for model {model!r}: choose one of "
            f"{', '.join(FAMILIES)} (or M1, M2, M3)"
        )
    n = positive_int("n", n, hint="n is N, the number of records of a data set")
    if bound is not None and name != "gamma-exponential":
        raise ValueError(f"bound is M1's truncation bound; model {name!r} has a bounded statistic already")
    if name == "gamma-exponential" and bound is not None:
        return GammaExponential(n, float(bound))
    return FAMILIES[name](n)
