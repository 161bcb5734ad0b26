"""The coupled μ rows (docs/method.md §2.11, §6): where the trace shows that each μ row's gradient responds to the
other μ coordinates, the exact route solves each row on its partial sums (`statistics.partial_on_others`), and here

* (in the likelihood, `gradient_model.others_log_factor`) each row's d − 1 other coefficients integrated out under a
  flat prior, ½·(d − 1)·log 2πv;
* per draw, the whole matrix of slopes and the joint root: row j's slope b_j = q·a_j, its other coefficients
  β_j,−j ~ N(K_−j⁻¹(g_−j,j − b_j K_−j,j), v_j K_−j⁻¹), its intercept c_j = −b_j (μ'_j − μ̄_j) from the column's own
  root μ'_j (the others at their means), B = (b, β) row by row, and μ* = μ̄ − B⁻¹c (`coupled_draws`). B/q is a draw
  of the Hessian Λ of the objective, E G_μ = qΛ(μ − μ*), which the Laplace posterior of a point trace reads.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from .draws import Draws, redrawn
from .gradient_model import GradientModel

__all__ = ["coupled_draws", "is_coupled"]


def is_coupled(model: GradientModel) -> bool:
    """Whether the model's μ rows were solved on partial sums (some row regressed on the other μ coordinates)."""
    return bool(np.any(np.asarray(model.others) > 0))


def coupled_draws(model: GradientModel, draws: Draws, key) -> Draws:
    """`draws` (1, K, P) with the μ rows' φ* redrawn jointly and the matrix Λ = B/q per draw in `Draws.hessian_matrix`
    (1, K, d, d); the μ rows' optimum moments in the diagnostics are then those of the draws. key: a jax key."""
    dim = np.asarray(model.stats.mu_phiphi).shape[0]
    optimum = np.array(draws.optimum, np.float64)
    own, slope = optimum[0][:, :dim], np.asarray(draws.hessian, np.float64)[0][:, :dim]
    extra = 0.0 if draws.extra_noise is None else np.asarray(draws.extra_noise, np.float64)[0][:, :dim] ** 2
    noise = np.broadcast_to(np.asarray(model.noise_var, np.float64), optimum.shape[-1:])[:dim] + extra
    matrix = _slope_matrix(model, slope, noise, key)
    centre = np.asarray(model.stats.centre, np.float64)[:dim]
    intercept = -float(model.sampling_rate) * slope * (own - centre)
    optimum[0][:, :dim] = centre - np.linalg.solve(matrix, intercept[..., None])[..., 0]
    joint = redrawn(draws, np.arange(dim), optimum=optimum)
    return dataclasses.replace(joint, hessian_matrix=(matrix / float(model.sampling_rate))[None])


def _slope_matrix(model: GradientModel, slope, noise, key) -> np.ndarray:
    """B (K, d, d) per draw from the rows' slopes a (K, d) and noise variances v (K, d) (module doc)."""
    stats = model.stats
    phiphi, gphi = np.asarray(stats.mu_phiphi, np.float64), np.asarray(stats.mu_gphi, np.float64)
    draws, dim = slope.shape
    b = float(model.sampling_rate) * slope
    z = np.asarray(jax.random.normal(key, (dim, draws, dim - 1)), np.float64)
    matrix = np.zeros((draws, dim, dim))
    for j in range(dim):
        others = np.delete(np.arange(dim), j)
        inverse = np.linalg.inv(phiphi[np.ix_(others, others)])
        mean = (gphi[others, j][None, :] - b[:, j : j + 1] * phiphi[others, j][None, :]) @ inverse
        spread = np.linalg.cholesky(0.5 * (inverse + inverse.T))
        matrix[:, j, others] = mean + np.sqrt(noise[:, j : j + 1]) * (z[j] @ spread.T)
        matrix[:, j, j] = b[:, j]
    return matrix
