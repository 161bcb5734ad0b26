"""The paper's benchmark models with their research presets (docs/experiments.md of the research notes).

Common preset: T = 10⁴ steps, q = 0.1, S = 10 Monte Carlo draws, N = 5 000 simulated examples,
κ learning rate λ = v ⊙ s / (sqrt(T·P)·σ·C); research transforms (softplus for positive sites,
additive log-ratio for simplices). Per model: clip C, grad_scale s = (s_μ, s_ρ), lr_multiplier v,
init (μ₀, ρ₀).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .adult import ADULT_CATEGORIES, ADULT_FEATURE_NAMES, ADULT_N
from .benchmark import BenchmarkModel, from_numpyro
from .presets import PRESETS, chosen_by_epsilon, preset_at

__all__ = ["RESEARCH_COMMON", "get", "names"]

RESEARCH_COMMON = {"steps": 10_000, "sampling_rate": 0.1, "mc_draws": 10}
"""The DP-SGD settings every research preset shares (T, q, S); `noiseaware account`'s defaults."""
_N = 5_000


GAMMA_PRIOR = (8.0, 2.0)
"""M1's prior on λ: Gamma(shape, rate); its exact posterior is Gamma(shape + N, rate + Σx)."""


def gamma_exponential(x=None, n_examples=None):
    """M1: λ ~ Gamma(shape 8, rate 2); x_i ~ Exponential(rate λ)."""
    rate = numpyro.sample("rate", dist.Gamma(*GAMMA_PRIOR))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Exponential(rate), obs=x)


def beta_bernoulli(x=None, n_examples=None):
    """M2: p ~ Beta(10, 10); x_i ~ Bernoulli(p)."""
    p = numpyro.sample("p", dist.Beta(10.0, 10.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Bernoulli(probs=p), obs=x)


def dirichlet_categorical(x=None, n_examples=None):
    """M3: p ~ Dirichlet(5, 5, 5); x_i ~ Categorical(p)."""
    p = numpyro.sample("p", dist.Dirichlet(jnp.full(3, 5.0)))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Categorical(probs=p), obs=x)


def linear_regression(X, y=None):
    """σ² ~ InvGamma(shape 20, rate 0.5); w ~ N(0, 4σ² I); y_i ~ N(w·X_i, σ²). X (N, k) includes a bias column."""
    sigma2 = numpyro.sample("sigma2", dist.InverseGamma(20.0, 0.5))
    w = numpyro.sample("w", dist.Normal(0.0, 2.0 * jnp.sqrt(sigma2)).expand([X.shape[-1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, jnp.sqrt(sigma2)), obs=y)


SEED_REGRESSION = (5.0, 0.5)
"""The seed-004 regression: the prior variance of the slope θ and the noise sd σ_e."""


def regression_1d(X, y=None):
    """θ ~ N(0, 5); y_i ~ N(θ x_i, 0.5²), x_i ~ U(−1, 1): seed 004's Bayesian linear regression (known noise)."""
    variance, noise = SEED_REGRESSION
    theta = numpyro.sample("theta", dist.Normal(0.0, math.sqrt(variance)))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(theta * X[..., 0], noise), obs=y)


def logistic_regression(X, y=None):
    """θ ~ N(0, I_k); y_i ~ Bernoulli(sigmoid(X_i·θ))."""
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([X.shape[-1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ theta), obs=y)


def _with_bias(X):
    return jnp.concatenate([X, jnp.ones(X.shape[:-1] + (1,), X.dtype)], axis=-1)


def regression_design(key, n):
    """X_i = (z_i, 1) with z_i ~ N(0, I₁₀): the 10D regression design, (n, 11)."""
    return {"X": _with_bias(jax.random.normal(key, (n, 10)))}


def uniform_design(key, n):
    """X_i ~ U(−1, 1)³: the synthetic logistic regression design, (n, 3)."""
    return {"X": jax.random.uniform(key, (n, 3), minval=-1.0, maxval=1.0)}


def slope_design(key, n):
    """x_i ~ U(−1, 1): the 1D regression design, (n, 1)."""
    return {"X": jax.random.uniform(key, (n, 1), minval=-1.0, maxval=1.0)}


def adult_like_design(key, n):
    """A synthetic stand-in with the shape of preprocessed Adult, (n, 57): 5 standard-normal columns,
    one-hot columns of 6 uniform categoricals (7, 16, 7, 14, 5, 2 levels: `adult.ADULT_LEVELS`) and a bias
    column, in the order of `adult.ADULT_FEATURE_NAMES`.
    The real UCI Adult design is `na.datasets.adult()`; this stand-in serves tests and models without the data."""
    keys = jax.random.split(key, len(ADULT_CATEGORIES) + 1)
    blocks = [jax.random.normal(keys[0], (n, 5))]
    for k, levels in zip(keys[1:], ADULT_CATEGORIES):
        blocks.append(jax.nn.one_hot(jax.random.randint(k, (n,), 0, levels), levels))
    return {"X": _with_bias(jnp.concatenate(blocks, axis=-1))}


def _preset(clip, s_rho, v, rho0, mu0=0.0):
    return {**RESEARCH_COMMON, "clip": clip, "grad_scale": (1.0, s_rho), "lr_multiplier": v, "init": (mu0, rho0)}


def _linreg_lr_multiplier():
    v = 4 * math.sqrt(2)
    return tuple([v] * 11 + [v / 28] + [v] * 12)


def _build(name: str) -> BenchmarkModel:
    sqrt2 = math.sqrt(2)
    if name == "gamma-exponential":
        return from_numpyro(
            gamma_exponential,
            n_examples=_N,
            name=name,
            transforms="research",
            description=gamma_exponential.__doc__,
            batch="map",  # one parameter: lax.map runs 2× faster than vmap (benchmarks/batch_strategy.py)
            **_preset(2.0, 100.0, sqrt2, -4.0),
        )
    if name == "beta-bernoulli":
        return from_numpyro(
            beta_bernoulli,
            n_examples=_N,
            name=name,
            transforms="research",
            description=beta_bernoulli.__doc__,
            batch="map",  # one parameter: lax.map runs 2× faster than vmap (benchmarks/batch_strategy.py)
            **_preset(2.0, 120.0, sqrt2, -4.0),
        )
    if name == "dirichlet-categorical":
        return from_numpyro(
            dirichlet_categorical,
            n_examples=_N,
            name=name,
            transforms="research",
            description=dirichlet_categorical.__doc__,
            **_preset(sqrt2, 100.0, sqrt2, -6.0),
        )
    if name == "linreg-10d":
        init = (tuple([1.0] * 11 + [-4.0]), -6.0)
        preset = {**_preset(260.0, 1500.0, _linreg_lr_multiplier(), -6.0), "init": init}
        return from_numpyro(
            linear_regression,
            n_examples=_N,
            covariates=regression_design,
            name=name,
            transforms="research",
            sites=("w", "sigma2"),
            description=linear_regression.__doc__,
            **preset,
        )
    if name == "logistic-3d":
        return from_numpyro(
            logistic_regression,
            n_examples=_N,
            covariates=uniform_design,
            name=name,
            transforms="research",
            description=logistic_regression.__doc__,
            **_preset(2.0, 100.0, sqrt2, -6.0),
        )
    if name == "regression-1d":
        return from_numpyro(
            regression_1d,
            n_examples=_N,
            covariates=slope_design,
            name=name,
            transforms="research",
            description=regression_1d.__doc__,
            **_preset(2.0, 100.0, sqrt2, -4.0),
        )
    if name == "adult-logistic":
        return from_numpyro(
            logistic_regression,
            n_examples=ADULT_N,
            covariates=adult_like_design,
            name=name,
            transforms="research",
            labels={"theta": ADULT_FEATURE_NAMES},
            description=logistic_regression.__doc__ + " Adult preset; coefficients named by Adult's "
            "features; simulated designs are a synthetic stand-in with Adult's shape.",
            **_preset(11.0, 550.0, math.sqrt(114), -6.0),
        )
    raise KeyError(name)


_NAMES = (
    "gamma-exponential",
    "beta-bernoulli",
    "dirichlet-categorical",
    "linreg-10d",
    "logistic-3d",
    "regression-1d",
    "adult-logistic",
)
_ALIASES = {"m1": "gamma-exponential", "m2": "beta-bernoulli", "m3": "dirichlet-categorical"}


def names() -> tuple[str, ...]:
    """Names of the built-in benchmark models."""
    return _NAMES


def get(name: str, *, preset: str | bool = "auto", epsilon: float | None = None) -> BenchmarkModel:
    """The built-in benchmark model `name` (also 'M1', 'M2', 'M3').

    preset: "auto" (the default) carries the research preset until the model is used at an ε (`na.coverage`,
    `na.preflight`, a coverage study, or `epsilon` here), where it takes the tuned preset shipped at that ε if
    one applies, as the command line does (`noiseaware.models.presets`; `bm.preset` says which it carries);
    "research" keeps the paper's settings at every ε; "tuned" insists on the tuned preset at `epsilon` (an error
    where none is shipped); False is the model as a user would write it: numpyro's default transforms (exp,
    stick-breaking) and no DPVI settings (find them with `na.tune`). epsilon: choose the preset for this ε now, e.g. for
    `record_dpvi(bm.model, data, epsilon=ε, **bm.dpvi_settings)`.
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _NAMES:
        raise KeyError(f"unknown model {name!r}: choose one of {', '.join(_NAMES)} (or M1, M2, M3)")
    preset = "auto" if preset is True else preset
    if preset is not False and preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: choose one of {', '.join(map(repr, PRESETS))}, or False")
    if preset == "tuned" and epsilon is None:
        raise ValueError("preset='tuned' is chosen at a privacy level: pass epsilon=…")
    bm = _built(key, preset is not False)
    if preset is False:
        return bm
    bm = chosen_by_epsilon(bm, preset)
    return bm if epsilon is None else preset_at(bm, epsilon, insist=preset == "tuned").model


@functools.cache
def _built(key: str, preset: bool) -> BenchmarkModel:
    """Each model is built, and its contract checked (`from_numpyro`), once per process: it is immutable."""
    bm = _build(key)
    if preset:
        return bm
    order = bm.dpvi_settings.get("sites")
    return from_numpyro(
        bm.model,
        n_examples=bm.n_examples,
        covariates=bm.covariates,
        name=bm.name,
        sites=order,
        labels=bm.dpvi_settings.get("labels"),
        description=bm.description,
        batch=bm.batch,
    )
