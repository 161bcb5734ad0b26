"""Numerical primitives of the sufficient-statistic baselines (docs/baselines.md §0.3): pure JAX, float64.

* Laplace(0, b) as a Gaussian scale mixture: w | ω² ~ N(0, ω²) with ω² ~ Exponential(mean 2b²); given
  w, τ = 1/ω² ~ InverseGaussian(mean 1/(b|w|), shape 1/b²)                  (`mixing_variance`).
* s ~ N(m, A) observed through z = H s + v, v ~ N(0, diag Ω):
  s | z ~ N(m + Γ(z − Hm), A − ΓHA), Γ = AHᵀG⁻¹, G = HAHᵀ + Ω, with no inverse of A  (`condition_gaussian`).
* Support constraints: redraw up to R times, then project and count a fallback   (`draw_in_support`).
* PSD projection: symmetrise, clip the eigenvalues at 1e-10·max(1, |λ_max|), reconstruct   (`project_psd`).

All functions act on one chain's arrays; vmap them over chains and simulations.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve

__all__ = [
    "inverse_gaussian",
    "mixing_variance",
    "condition_gaussian",
    "covariance_root",
    "draw_in_support",
    "project_psd",
]

_MIN_RESIDUAL = 1e-12
"""|z − s| is floored at this multiple of b before the inverse-Gaussian step (its mean 1/(b|w|) → ∞ at w = 0)."""


def inverse_gaussian(key, mean, shape):
    """Draws of InverseGaussian(μ = mean, λ = shape), broadcast shape (Michael, Schucany & Haas 1976).

    y = ν², ν ~ N(0, 1); x = μ + μ²y/(2λ) − (μ/2λ)·sqrt(4μλy + μ²y²), rewritten without cancellation as
    x = μ / (√q + √(q + 1))², q = μy/(4λ); return x with probability μ/(μ + x), else μ²/x.
    """
    mean, shape = jnp.broadcast_arrays(jnp.asarray(mean, jnp.float64), jnp.asarray(shape, jnp.float64))
    k_normal, k_uniform = jax.random.split(key)
    y = jnp.square(jax.random.normal(k_normal, mean.shape, jnp.float64))
    q = mean * y / (4.0 * shape)
    x = mean / jnp.square(jnp.sqrt(q) + jnp.sqrt(q + 1.0))
    u = jax.random.uniform(k_uniform, mean.shape, jnp.float64)
    return jnp.where(u * (mean + x) <= mean, x, mean * (mean / x))


def mixing_variance(key, residual, b):
    """ω² | w for Laplace(0, b) written as N(0, ω²) mixed over ω² ~ Exp(mean 2b²): 1/τ, τ ~ IG(1/(b|w|), 1/b²).

    residual w = z − Hs (D,), b scalar → ω² (D,).
    """
    w = jnp.maximum(jnp.abs(residual), _MIN_RESIDUAL * b)
    return 1.0 / inverse_gaussian(key, 1.0 / (b * w), 1.0 / b**2)


def condition_gaussian(mean, cov, observe, z, noise_var):
    """s | z for s ~ N(m, A) and z = H s + N(0, diag Ω).

    mean m (L,), cov A (L, L) PSD (may be singular), observe H (D, L), z (D,), noise_var Ω (D,) > 0
    → conditional mean (L,) and covariance (L, L), symmetrised.
    """
    ha = observe @ cov
    gram = ha @ observe.T + jnp.diag(noise_var)
    gain = cho_solve(cho_factor(gram, lower=True), ha).T  # Γ = A Hᵀ G⁻¹ = (G⁻¹ H A)ᵀ
    cond_mean = mean + gain @ (z - observe @ mean)
    cond_cov = cov - gain @ ha
    return cond_mean, 0.5 * (cond_cov + cond_cov.T)


def covariance_root(cov):
    """R (L, L) with R Rᵀ = cov, through eigh with eigenvalues clipped at 0 (cov may be singular)."""
    values, vectors = jnp.linalg.eigh(cov)
    return vectors * jnp.sqrt(jnp.maximum(values, 0.0))


def project_psd(matrix):
    """The nearest-in-spirit positive-definite matrix (§0.3.5): symmetrise, clip the eigenvalues at
    1e-10·max(1, |λ_max|) (strictly positive), reconstruct."""
    values, vectors = jnp.linalg.eigh(0.5 * (matrix + matrix.T))
    floor = 1e-10 * jnp.maximum(1.0, jnp.max(jnp.abs(values)))
    return (vectors * jnp.maximum(values, floor)) @ vectors.T


def draw_in_support(key, mean, cov, valid: Callable, project: Callable, retries: int):
    """s ~ N(mean (L,), cov (L, L)) restricted to {valid(s)}: up to `retries` draws; if none is valid,
    project the last one. Returns s (L,), the number of draws made (int32, 1..retries) and whether it
    fell back (bool)."""
    root = covariance_root(cov)

    def draw(i):
        return mean + root @ jax.random.normal(jax.random.fold_in(key, i), mean.shape, jnp.float64)

    def cond(state):
        i, s = state
        return (i < retries) & ~valid(s)

    def body(state):
        i, _ = state
        return i + 1, draw(i)

    tries, s = jax.lax.while_loop(cond, body, (jnp.int32(1), draw(0)))
    ok = valid(s)
    return jnp.where(ok, s, project(s)), tries, ~ok
