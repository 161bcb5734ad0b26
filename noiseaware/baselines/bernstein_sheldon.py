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

The release is `expfam_release`. Everything after the release reads only z and N. Problem m of a batch
uses keys[m] alone: split into its release key and its sampler key (`problem_keys`). The sampler is one
jitted program, vmapped over chains and problems, `lax.scan` over sweeps, in float64.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from ..posteriors.draws import DrawsPosterior
from ..util.checks import choice, positive_int
from ..util.errors import FitFailure
from ..util.keys import as_key
from .expfam import Family
from .expfam_release import Release, ReleaseSettings, release_statistics
from .mechanisms import Mechanism, Neighbouring, keys_for, problem_keys
from .primitives import condition_gaussian, mixing_variance
from .sampled import ClosedFormPosterior, Marginal, ReleaseDiagnostics, gibbs_posterior, single

__all__ = [
    "INITS",
    "ConjugateLaw",
    "GibbsSettings",
    "Init",
    "Release",
    "ReleaseSettings",
    "bernstein_sheldon_naive",
    "bernstein_sheldon_posterior",
    "bs2018_batch",
    "bs2018_naive_batch",
    "naive_posteriors",
    "noise_aware_posteriors",
    "release_statistics",
]

METHOD, NAIVE_METHOD = "bs2018", "bs2018-naive"


# ---------------------------------------------------------------- Gibbs sampler

Init = Literal["naive", "prior"]
INITS: tuple[str, ...] = get_args(Init)


@dataclasses.dataclass(frozen=True)
class GibbsSettings:
    """Chains × (warmup + draws) sweeps per data set; retries R of the support redraws before projecting;
    where the chains start.

    Default 4 × (1000 + 5000) = 20 000 kept draws (docs/baselines.md §1.3 [I]; the released code: 1 × (500 + 1000)).
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
    init: Init = "naive"

    def __post_init__(self):
        for name, minimum in {"chains": 1, "warmup": 0, "draws": 4, "retries": 1}.items():
            positive_int(name, getattr(self, name), minimum=minimum)
        choice("init", self.init, INITS)


def noise_aware_posteriors(
    release: Release, keys, settings: GibbsSettings = GibbsSettings()
) -> list[DrawsPosterior | FitFailure]:
    """B&S's Gibbs sampler on every released z of `release`: one compiled program for all M × chains.

    keys (M,): the sampler key of each data set (its chains start from split(split(keys[m])[0], chains) and
    run on split(split(keys[m])[1], chains)). Returns one DrawsPosterior per data set, or the
    FitFailure of a data set whose draws are not finite. Diagnostics (`GibbsDiagnostics`): mixing,
    fallbacks (projections after R failed redraws) and redraws (extra support draws) over all sweeps,
    the released z and the release's facts with the settings.
    """
    fam, count, chains = release.family, release.z.shape[0], settings.chains
    halves = jax.vmap(jax.random.split)(keys_for(keys, count))
    with jax.enable_x64(True):
        k_init, k_run = (jax.vmap(lambda k: jax.random.split(k, chains))(halves[:, i]) for i in (0, 1))
        z = jnp.asarray(release.z, jnp.float64)
        params = (
            jnp.tile(jnp.asarray(fam.prior, jnp.float64), (count * chains, 1))
            if settings.init == "prior"
            else jnp.repeat(jax.vmap(fam.naive_params)(z), chains, axis=0)
        )
        init = _start_draws(fam, params, k_init.reshape(-1))
        theta, tries, fallbacks = (
            np.asarray(a) for a in _gibbs(fam, release.mechanism, settings, k_run, z, release.scale, init)
        )
    sweeps = chains * (settings.warmup + settings.draws)
    facts = release.facts() | dataclasses.asdict(settings)
    return [
        gibbs_posterior(
            theta[m],
            method=METHOD,
            theta_names=fam.theta_names,
            sites=fam.sites,
            fallbacks=int(fallbacks[m].sum()),
            redraws=int(tries[m].sum()) - sweeps,
            sweeps=sweeps,
            released=release.z[m],
            release=facts,
        )
        for m in range(count)
    ]


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
        return draws[config.warmup :], tries, fallbacks

    m, c = keys.shape
    out = jax.vmap(chain)(keys.reshape(m * c), jnp.repeat(z, c, axis=0), init)  # flat: compiles faster than nested
    return jax.tree.map(lambda a: a.reshape((m, c) + a.shape[1:]), out)


@functools.partial(jax.jit, static_argnames=("fam",))
def _start_draws(fam: Family, params, keys):
    """One θ draw (n, d) from each of n conjugate posteriors: params (n, P), keys (n,)."""
    return jax.vmap(fam.draw)(keys, params)


# ---------------------------------------------------------------- naive counterpart


@dataclasses.dataclass(frozen=True, eq=False)
class ConjugateLaw:
    """The noise-naive SSP posterior's law: the conjugate update with the projected z as the statistic (§1.4).

    params (P,): the conjugate posterior's parameters (M1 Gamma (shape, rate), M2 Beta (a, b), M3 Dirichlet α).
    """

    family: Family
    params: np.ndarray

    def draw(self, key, n: int) -> np.ndarray:
        """n exact draws of θ (n, d) from the conjugate posterior."""
        with jax.enable_x64(True):
            return np.asarray(
                _conjugate_draws(self.family, jnp.asarray(self.params, jnp.float64), jax.random.split(key, n))
            )

    def marginals(self) -> list[Marginal]:
        return self.family.marginals(np.asarray(self.params, np.float64))

    def parameters(self) -> dict[str, Any]:
        return {"family": self.family.name, "n_examples": self.family.n, "params": self.params}


CONJUGATE = "noise-naive sufficient-statistic posterior (conjugate update of the released z)"


@functools.partial(jax.jit, static_argnames=("fam",))
def _conjugate_draws(fam: Family, params, keys):
    """θ draws (n, d) from one conjugate posterior: params (P,), keys (n,)."""
    return jax.vmap(lambda k: fam.draw(k, params))(keys)


def naive_posteriors(release: Release) -> list[ClosedFormPosterior]:
    """The naive posterior of every released z (no sampler: an exact conjugate update, no key)."""
    fam = release.family
    with jax.enable_x64(True):
        params = np.asarray(jax.vmap(fam.naive_params)(jnp.asarray(release.z, jnp.float64)))
    facts = release.facts()
    return [
        ClosedFormPosterior(
            law=ConjugateLaw(fam, p),
            kind=CONJUGATE,
            theta_names=fam.theta_names,
            sites=fam.sites,
            method=NAIVE_METHOD,
            diagnostics=ReleaseDiagnostics(released=z, release=facts),
        )
        for p, z in zip(params, release.z)
    ]


# ---------------------------------------------------------------- entry points


def bs2018_batch(
    model: str,
    x,
    *,
    keys,
    epsilon: float,
    delta: float | None,
    release: ReleaseSettings = ReleaseSettings(),
    gibbs: GibbsSettings = GibbsSettings(),
) -> list[DrawsPosterior | FitFailure]:
    """B&S 2018 for M data sets x (M, N) of `model`: data set m is released at (ε, δ) with the first half of
    split(keys[m]) and sampled with the second (keys (M,)), all in one compiled sampler."""
    release_keys, sampler_keys = problem_keys(keys, np.shape(x)[0])
    released = release_statistics(model, x, keys=release_keys, epsilon=epsilon, delta=delta, settings=release)
    return noise_aware_posteriors(released, sampler_keys, gibbs)


def bs2018_naive_batch(
    model: str, x, *, keys, epsilon: float, delta: float | None, release: ReleaseSettings = ReleaseSettings()
) -> list[ClosedFormPosterior]:
    """The naive SSP counterpart for x (M, N): the release `bs2018_batch` makes with the same keys, then
    the conjugate update of each z."""
    release_keys, _ = problem_keys(keys, np.shape(x)[0])
    return naive_posteriors(
        release_statistics(model, x, keys=release_keys, epsilon=epsilon, delta=delta, settings=release)
    )


def bernstein_sheldon_posterior(
    model: str,
    data,
    *,
    key,
    epsilon: float,
    delta: float = 1e-5,
    mechanism: Mechanism = "laplace",
    neighbouring: Neighbouring = "add-remove",
    bound: float | None = None,
    **settings,
) -> DrawsPosterior:
    """B&S 2018 for one data set: release Σ t(x) at (ε, δ), then the Gibbs sampler on the released z.

    data: the records x (N,) or a mapping with key 'x'. settings: GibbsSettings (chains, warmup, draws,
    retries, init). Equals problem m of `bs2018_batch` when keys[m] = key; a failed fit raises its
    FitFailure.
    """
    return single(
        bs2018_batch(
            model,
            _records(data)[None],
            keys=as_key(key)[None],
            epsilon=epsilon,
            delta=delta,
            release=ReleaseSettings(mechanism, neighbouring, bound),
            gibbs=GibbsSettings(**settings),
        )
    )


def bernstein_sheldon_naive(
    model: str,
    data,
    *,
    key,
    epsilon: float,
    delta: float = 1e-5,
    mechanism: Mechanism = "laplace",
    neighbouring: Neighbouring = "add-remove",
    bound: float | None = None,
) -> ClosedFormPosterior:
    """The naive SSP counterpart for one data set: the same release (same key → same z), conjugate update."""
    return bs2018_naive_batch(
        model,
        _records(data)[None],
        keys=as_key(key)[None],
        epsilon=epsilon,
        delta=delta,
        release=ReleaseSettings(mechanism, neighbouring, bound),
    )[0]


def _records(data) -> np.ndarray:
    """The records x (N,) of one data set, given as an array or a mapping with key 'x'."""
    if isinstance(data, Mapping):
        if "x" not in data:
            raise ValueError(f"data has keys {sorted(data)}; Bernstein & Sheldon reads the records under 'x'")
        data = data["x"]
    x = np.asarray(data)
    if x.ndim != 1:
        raise ValueError(f"x has shape {x.shape}; one data set's records are (N,)")
    return x
