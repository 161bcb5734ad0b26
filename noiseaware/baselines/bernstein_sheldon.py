"""Bernstein & Sheldon (NeurIPS 2018): noise-aware inference from a privately released sufficient statistic.

Release (one shot, docs/baselines.md §1.1, §0.2): z = s + w with s = Σ_i t(x_i) (D,), N public and
    w_c ~ Laplace(0, Δ₁/ε) iid (pure ε-DP, the default) or w ~ N(0, σ² I) (analytic Gaussian, (ε, δ)-DP).
Noise-aware model (§1.2): θ ~ conjugate prior; latent s | θ ≈ N(N μ(θ), N Σ(θ)) (CLT); z | s ~ release.
Gibbs sampler (§1.3), state (θ, ω²), chains started at draws of the naive posterior (GibbsSettings.init),
one sweep:
    S1  s | θ, ω², z: the CLT prior conditioned on z = H s + N(0, diag ω²), on the support of s;
    S2  ω_c² = 1/τ_c, τ_c ~ IG(1/(b|z_c − (Hs)_c|), 1/b²)   (Laplace only; Gaussian: ω² = σ² fixed);
    S3  θ | s: the exact conjugate posterior with s as the data's statistic; θ is recorded after S3.
Naive counterpart (§1.4): the conjugate update with z projected onto the support, as if it were s.

Everything after the release reads only z and N. The sampler is one jitted program, vmapped over
chains and simulations, `lax.scan` over sweeps, in float64.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from ..keys import as_key
from .expfam import Family, GammaExponential, family as make_family
from .mechanisms import MECHANISMS, NEIGHBOURING, check_choice, check_integers, noise_scale
from .primitives import condition_gaussian, mixing_variance

__all__ = [
    "Release",
    "GibbsSettings",
    "GibbsPosterior",
    "chain_mixing",
    "ConjugatePosterior",
    "release_statistics",
    "noise_aware_posteriors",
    "naive_posteriors",
    "bernstein_sheldon_posterior",
    "bernstein_sheldon_naive",
    "bs2018_batch",
    "bs2018_naive_batch",
]


# ---------------------------------------------------------------- release


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
        facts = {"mechanism": self.mechanism, "neighbouring": self.neighbouring, "epsilon": self.epsilon,
                 "delta": self.delta, "sensitivity": self.sensitivity, "noise_scale": self.scale,
                 "n_examples": self.family.n}
        if isinstance(self.family, GammaExponential):
            facts["bound"] = self.family.bound
        return facts


def release_statistics(model: str, x, *, epsilon: float, delta: float = 1e-5, key=0, mechanism: str = "laplace",
                       neighbouring: str = "add-remove", bound: float | None = None) -> Release:
    """Release z = Σ_i t(x_i) + noise for each data set: x (N,) or (M, N) → Release with z (M, D).

    model: 'gamma-exponential', 'beta-bernoulli', 'dirichlet-categorical' (or M1/M2/M3); N = x.shape[-1]
    is public. The sensitivity comes from the family's bounded domain (M1: `bound`, fixed before the
    data, default the prior-predictive 0.99 quantile 1.557), never from the data.
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    check_choice("neighbouring relation", neighbouring, NEIGHBOURING)
    x = np.asarray(x)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ValueError(f"x has shape {x.shape}; it must be (N,) records or (M, N) for M data sets")
    x = x.reshape((-1, x.shape[-1]))
    fam = make_family(model, x.shape[-1], bound=bound)
    fam.check_domain(x)
    l1, l2 = fam.sensitivity(neighbouring)
    scale, spent = noise_scale(mechanism, l1=l1, l2=l2, epsilon=epsilon, delta=delta)
    with jax.enable_x64(True):
        z = _release(fam, mechanism, jnp.asarray(x), jax.random.split(as_key(key), x.shape[0]), scale)
    return Release(fam, np.asarray(z), mechanism, neighbouring, float(epsilon), spent,
                   l1 if mechanism == "laplace" else l2, scale)


@functools.partial(jax.jit, static_argnames=("fam", "mechanism"))
def _release(fam: Family, mechanism: str, x, keys, scale):
    """z (M, D) = statistic(x_m) + scale·(Laplace or normal noise), x (M, N), keys (M,)."""
    def one(x, key):
        draw = jax.random.laplace if mechanism == "laplace" else jax.random.normal
        return fam.statistic(x) + scale * draw(key, (fam.released,), jnp.float64)
    return jax.vmap(one)(x, keys)


# ---------------------------------------------------------------- Gibbs sampler

INITS = ("naive", "prior")


@dataclasses.dataclass(frozen=True)
class GibbsSettings:
    """Chains × (warmup + draws) sweeps per data set; retries R of the support redraws before projecting;
    where the chains start.

    Default 4 × (1000 + 5000) = 20 000 kept draws (baselines.md §1.3 [I]; the released code: 1 × (500 + 1000)).
    init: "naive" (default) starts each chain at an independent draw of the naive posterior of z
    (post-processing of the release); "prior" at a prior draw, as the released code does. With M1's
    truncated sum, E[s_in | λ] = N·P(x ≤ B)·E[x | x ≤ B] is not monotone in λ, so z also fits a small λ
    (≈ 0.2 where the truth is ≈ 4–6). That second mode holds ~1e-7 of the posterior mass (its prior density
    is e^{−12} lower and it is ~20× narrower), but a chain started from the prior below λ ≈ 1 (P ≈ 0.4 %)
    stays in it for the whole run: 2 of 400 chains in a 100-simulation study at ε = 0.1.
    """

    chains: int = 4
    warmup: int = 1000
    draws: int = 5000
    retries: int = 20
    init: str = "naive"

    def __post_init__(self):
        check_integers(self, {"chains": 1, "warmup": 0, "draws": 4, "retries": 1})
        check_choice("init", self.init, INITS)


@dataclasses.dataclass(frozen=True, eq=False)
class GibbsPosterior:
    """Gibbs draws of θ (chains, draws, d) in the model's unconstrained space, with the sampler's diagnostics
    (B&S 2018 here, B&S 2019 in bernstein_sheldon_regression)."""

    chains: np.ndarray
    diagnostics: Mapping[str, Any]
    method: str = "bs2018"

    def sample(self, key, n: int = 20_000) -> np.ndarray:
        """n of the stored draws (n, d), without replacement when n ≤ chains·draws, with it otherwise."""
        flat = self.chains.reshape(-1, self.chains.shape[-1])
        index = jax.random.choice(as_key(key), flat.shape[0], (n,), replace=n > flat.shape[0])
        return flat[np.asarray(index)]


def chain_mixing(chains: np.ndarray) -> dict[str, Any]:
    """Split R-hat and ESS per coordinate (d,), their extremes, and the IAT in kept draws of θ draws (chains, draws, d)."""
    rhat, ess = split_gelman_rubin(chains), effective_sample_size(chains)
    return {"rhat": rhat, "max_rhat": float(np.max(rhat)), "ess": ess, "min_ess": float(np.min(ess)),
            "iat_draws": chains.shape[0] * chains.shape[1] / ess}


def noise_aware_posteriors(release: Release, key=0, **settings) -> list[GibbsPosterior | None]:
    """B&S's Gibbs sampler on every released z of `release`: one compiled program for all M × chains.

    settings: those of GibbsSettings. Returns one GibbsPosterior per data set, or None where a draw is
    not finite (reported by the coverage driver as a failure). Diagnostics: rhat, ess (d,), max_rhat,
    min_ess, fallbacks (projections after R failed redraws), redraws (extra support draws), sweeps,
    the released z and the release's facts.
    """
    config = GibbsSettings(**settings)
    fam = release.family
    count = release.z.shape[0] * config.chains
    with jax.enable_x64(True):
        k_init, k_run = jax.random.split(as_key(key))
        z = jnp.asarray(release.z, jnp.float64)
        params = (jnp.tile(jnp.asarray(fam.prior, jnp.float64), (count, 1)) if config.init == "prior"
                  else jnp.repeat(jax.vmap(fam.naive_params)(z), config.chains, axis=0))
        init = _start_draws(fam, params, jax.random.split(k_init, count))
        keys = jax.random.split(k_run, count).reshape(release.z.shape[0], config.chains)
        theta, tries, fallbacks = (np.asarray(a) for a in _gibbs(
            fam, release.mechanism, config, keys, z, release.scale, init))
    sweeps = config.chains * (config.warmup + config.draws)
    facts = release.facts() | dataclasses.asdict(config)
    posteriors: list[GibbsPosterior | None] = []
    for m in range(theta.shape[0]):
        if not np.all(np.isfinite(theta[m])):
            posteriors.append(None)
            continue
        posteriors.append(GibbsPosterior(theta[m], {
            **chain_mixing(theta[m]), "fallbacks": int(fallbacks[m].sum()), "redraws": int(tries[m].sum()) - sweeps, "sweeps": sweeps,
            "released": release.z[m], **facts}))
    return posteriors


@functools.partial(jax.jit, static_argnames=("fam", "mechanism", "config"))
def _gibbs(fam: Family, mechanism: str, config: GibbsSettings, keys, z, scale, init):
    """keys (M, C), z (M, D), initial θ (M·C, d) → θ draws (M, C, K, d), support draws made (M, C), fallbacks (M, C).

    The initial θ (prior or naive draws) are drawn outside (by `_start_draws`, compiled once per family): a second
    gamma sampler inside this program would add to its compile time.
    """
    observe = jnp.asarray(fam.observe, jnp.float64)
    laplace = mechanism == "laplace"

    def chain(key, z, theta):
        def sweep(state, key):
            theta, omega2, tries, fallbacks = state
            k_latent, k_mix, k_theta = jax.random.split(key, 3)
            mean, cov = fam.moments(theta)  # S1
            cond_mean, cond_cov = condition_gaussian(fam.n * mean, fam.n * cov, observe, z, omega2)
            latent, made, fell = fam.draw_latent(k_latent, cond_mean, cond_cov, config.retries)
            if laplace:  # S2
                omega2 = mixing_variance(k_mix, z - observe @ latent, scale)
            theta = fam.draw(k_theta, fam.posterior_params(latent))  # S3
            return (theta, omega2, tries + made, fallbacks + fell), theta

        k_mix, k_run = jax.random.split(key)
        if laplace:
            omega2 = 2.0 * scale**2 * jax.random.exponential(k_mix, (fam.released,), jnp.float64)
        else:
            omega2 = jnp.full((fam.released,), scale**2, jnp.float64)
        state = (theta, omega2, jnp.int32(0), jnp.int32(0))
        sweeps = jax.random.split(k_run, config.warmup + config.draws)
        (_, _, tries, fallbacks), draws = jax.lax.scan(sweep, state, sweeps)  # one loop: half the compile time
        return draws[config.warmup:], tries, fallbacks

    m, c = keys.shape
    out = jax.vmap(chain)(keys.reshape(m * c), jnp.repeat(z, c, axis=0), init)  # flat: compiles faster than nested
    return jax.tree.map(lambda a: a.reshape((m, c) + a.shape[1:]), out)


# ---------------------------------------------------------------- naive counterpart


@dataclasses.dataclass(frozen=True, eq=False)
class ConjugatePosterior:
    """The noise-naive SSP posterior: the conjugate update with the projected z as the statistic (§1.4).

    params (P,): the conjugate posterior's parameters (M1 Gamma (shape, rate), M2 Beta (a, b), M3 Dirichlet α).
    """

    family: Family
    params: np.ndarray
    diagnostics: Mapping[str, Any]
    method: str = "bs2018-naive"

    def sample(self, key, n: int = 20_000) -> np.ndarray:
        """n exact draws of θ (n, d) from the conjugate posterior."""
        with jax.enable_x64(True):
            return np.asarray(_conjugate_draws(self.family, jnp.asarray(self.params, jnp.float64),
                                               jax.random.split(as_key(key), n)))


@functools.partial(jax.jit, static_argnames=("fam",))
def _conjugate_draws(fam: Family, params, keys):
    """θ draws (n, d) from one conjugate posterior: params (P,), keys (n,)."""
    return jax.vmap(lambda k: fam.draw(k, params))(keys)


@functools.partial(jax.jit, static_argnames=("fam",))
def _start_draws(fam: Family, params, keys):
    """One θ draw (n, d) from each of n conjugate posteriors: params (n, P), keys (n,)."""
    return jax.vmap(fam.draw)(keys, params)


def naive_posteriors(release: Release) -> list[ConjugatePosterior]:
    """The naive posterior of every released z (no sampler: exact conjugate draws)."""
    with jax.enable_x64(True):
        params = np.asarray(jax.vmap(release.family.naive_params)(jnp.asarray(release.z, jnp.float64)))
    facts = release.facts()
    return [ConjugatePosterior(release.family, p, {"released": z, **facts}) for p, z in zip(params, release.z)]


# ---------------------------------------------------------------- public entry points

_RELEASE_OPTIONS = ("mechanism", "neighbouring", "bound")


def bernstein_sheldon_posterior(model: str, data, *, epsilon: float, delta: float = 1e-5, key=0,
                                mechanism: str = "laplace", neighbouring: str = "add-remove",
                                bound: float | None = None, **settings) -> GibbsPosterior | None:
    """B&S 2018 for one data set: release Σ t(x) at (ε, δ), then the Gibbs sampler on the released z.

    data: the records x (N,) or a mapping with key 'x'. settings: GibbsSettings (chains, warmup, draws,
    retries). Returns None when the sampler produced non-finite draws.
    """
    k_release, k_gibbs = jax.random.split(as_key(key))
    release = release_statistics(model, _records(data), epsilon=epsilon, delta=delta, key=k_release,
                                 mechanism=mechanism, neighbouring=neighbouring, bound=bound)
    return noise_aware_posteriors(release, k_gibbs, **settings)[0]


def bernstein_sheldon_naive(model: str, data, *, epsilon: float, delta: float = 1e-5, key=0,
                            mechanism: str = "laplace", neighbouring: str = "add-remove",
                            bound: float | None = None) -> ConjugatePosterior:
    """The naive SSP counterpart for one data set: the same release (same key → same z), conjugate update."""
    k_release, _ = jax.random.split(as_key(key))
    release = release_statistics(model, _records(data), epsilon=epsilon, delta=delta, key=k_release,
                                 mechanism=mechanism, neighbouring=neighbouring, bound=bound)
    return naive_posteriors(release)[0]


def bs2018_batch(sims, key, **options) -> list[GibbsPosterior | None]:
    """Coverage method 'bs2018': release from every simulation's data at sims' (ε, δ), then one vmapped sampler.

    sims: a `noiseaware.evaluation.simulate.Simulations` of M1, M2 or M3; options: mechanism,
    neighbouring, bound (the release) and chains, warmup, draws, retries (the sampler).
    """
    release_options = {k: options.pop(k) for k in _RELEASE_OPTIONS if k in options}
    k_release, k_gibbs = jax.random.split(as_key(key))
    return noise_aware_posteriors(_release_of(sims, k_release, release_options), k_gibbs, **options)


def bs2018_naive_batch(sims, key, **options) -> list[ConjugatePosterior]:
    """Coverage method 'bs2018-naive': the same release as 'bs2018' under the same key, conjugate update of z.

    options: mechanism, neighbouring, bound.
    """
    k_release, _ = jax.random.split(as_key(key))
    return naive_posteriors(_release_of(sims, k_release, options))


def _release_of(sims, key, options) -> Release:
    if sims.epsilon is None:
        raise ValueError("Bernstein & Sheldon needs the coverage run's ε (it was given a noise multiplier only)")
    return release_statistics(sims.model.name, _records(sims.data), epsilon=sims.epsilon, delta=sims.delta,
                              key=key, **options)


def _records(data) -> np.ndarray:
    if isinstance(data, Mapping):
        if "x" not in data:
            raise ValueError(f"data has keys {sorted(data)}; Bernstein & Sheldon reads the records under 'x'")
        data = data["x"]
    return np.asarray(data)
