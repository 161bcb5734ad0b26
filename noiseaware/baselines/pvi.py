"""Partitioned variational inference (PVI; Bui et al. 2018; seed 004) in one parallel round: the arithmetic.

The N examples are split over M clients (shards of N/M). Client m answers with a mean-field Gaussian
q_m = N(μ_m, diag s_m²) ≈ p·L_m (its local posterior under the prior p); PVI's factor is t_m = q_m / p, and the
global approximation q(θ) = p(θ) Π_m t_m(θ) is Gaussian with natural parameters (per coordinate)

    Λ = Λ₀ + Σ_m (Λ_m − Λ₀),   h = h₀ + Σ_m (h_m − h₀),   Λ = 1/s², h = μ/s²,

p = N(μ₀, diag s₀²) the prior of the unconstrained θ: a Gaussian prior exactly, any other by its moments
(`prior_gaussian`). One client gives q = q₁. A combination with Λ ≤ 0 in some coordinate is no distribution.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import numpy as np

from ..models.benchmark import BenchmarkModel

__all__ = ["PRIOR_DRAWS", "combine", "prior_gaussian", "split_clients"]

PRIOR_DRAWS = 100_000
"""Prior draws whose moments give p's Gaussian (variance to ≈ 0.5 %)."""
_PRIOR_STREAM = 0x505649  # "PVI"


def split_clients(data: Mapping, clients: int) -> dict:
    """P data sets (P, N, …) as P·M client shards (P·M, N/M, …): shard p·M + m holds examples m·N/M … (m+1)·N/M − 1
    of data set p. A ValueError when M does not divide N."""
    n = next(iter(data.values())).shape[1]
    if n % clients:
        raise ValueError(f"{n} examples do not split into {clients} equal shards: choose clients dividing {n}")
    return {k: np.asarray(v).reshape(v.shape[0] * clients, n // clients, *v.shape[2:]) for k, v in data.items()}


def prior_gaussian(bm: BenchmarkModel, draws: int = PRIOR_DRAWS) -> tuple[np.ndarray, np.ndarray]:
    """(μ₀, s₀²) (d,) each: the mean and variance of the unconstrained θ under the prior, from `draws` prior draws
    (fixed key); computed once per model function, site map and number of draws in a process (a study's parts
    share it)."""
    key = (bm.model, bm.covariates, bm.site_map, draws)  # what the prior draws depend on
    if key not in _PRIOR_MOMENTS:
        _PRIOR_MOMENTS[key] = _prior_moments(dataclasses.replace(bm, n_examples=1), draws)
    return _PRIOR_MOMENTS[key]


_PRIOR_MOMENTS: dict = {}


def _prior_moments(one: BenchmarkModel, draws: int) -> tuple[np.ndarray, np.ndarray]:
    keys = jax.random.split(jax.random.fold_in(jax.random.key(0), _PRIOR_STREAM), draws)
    theta = np.asarray(jax.jit(jax.vmap(lambda k: one.simulate(k)[0]))(keys), np.float64)
    return theta.mean(axis=0), theta.var(axis=0)


def combine(
    prior_mean: np.ndarray, prior_var: np.ndarray, means: np.ndarray, variances: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q = p Π_m (q_m / p): clients' means, variances (…, M, d) → (mean, variance (…, d), ok (…,)): ok where
    every coordinate's precision is positive (elsewhere mean and variance are NaN)."""
    prior_precision = 1.0 / prior_var
    precision = prior_precision + np.sum(1.0 / variances - prior_precision, axis=-2)
    shift = prior_mean * prior_precision
    h = shift + np.sum(means / variances - shift, axis=-2)
    ok = np.all(precision > 0, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = np.where(ok[..., None], 1.0 / precision, np.nan)
        mean = np.where(ok[..., None], h / precision, np.nan)
    return mean, variance, ok
