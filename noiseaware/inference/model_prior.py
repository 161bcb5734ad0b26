"""The model's own prior on the VI optimum and the slopes (docs/method.md §2.3): what `BenchmarkModel.optimum_prior`
says before any trace, turned into independent normal priors over the mean-field layout (2d,) of the gradient model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..models.benchmark import ModelOptimumPrior
from ..util.numerics import sigmoid

__all__ = ["OPTIMUM_SPREAD_FLOOR", "SCALE_PRIOR_FLOOR", "SLOPE_PRIOR_SD", "OptimumPriorMoments", "model_optimum_prior"]


class OptimumPriorMoments(NamedTuple):
    """Priors from the model (`model_optimum_prior`), over the mean-field layout (2d,): φ*_j ~ N(optimum_loc,
    optimum_sd²) and log a_j ~ N(hessian_loc, hessian_sd²)."""

    optimum_loc: np.ndarray
    optimum_sd: np.ndarray
    hessian_loc: np.ndarray
    hessian_sd: np.ndarray


SCALE_PRIOR_FLOOR = 0.5
"""The least prior sd of ρ* from the model: the simulations' curvature is taken at the truth, not at the optimum, and
on the model's own design, which may differ from the real one (a factor 2.7 in h is 0.5 in ρ*). Measured on the 10D
regression (ε = 0.1 and 1) and M1: TARP within 0.001 of a floor of 0.1."""
OPTIMUM_SPREAD_FLOOR = 0.1
"""The least prior variance of μ*_j from the model, as a fraction of Var θ_j: Var θ_j − 1/E h_j bounds Var μ*_j from
above, but h is averaged over 64 simulations and, above d = 256, estimated from probes; the floor keeps a coordinate
whose estimate of 1/E h reaches Var θ from a point prior."""
SLOPE_PRIOR_SD = 0.3
"""The least prior sd of log a from the model: clipping makes the trace's slope smaller than the model's curvature.
A wider one lets a weakly identified μ row mix components of very different widths, heavy tails that TARP's
joint balls see (10D regression at ε = 0.1, 100 simulations: TARP 0.085 at 1, 0.045 at 0.5, 0.034 at 0.3)."""


def model_optimum_prior(facts: ModelOptimumPrior) -> OptimumPriorMoments:
    """The model's priors on φ* = (μ*, ρ*) and on the slopes a, (2d,) each (docs/method.md §2.3).

    μ*_j ~ N(E θ_j, max(Var θ_j − 1/mean_m h_mj, 0.1·Var θ_j)): μ* ≈ E[θ | x] has variance Var θ − E Var(θ | x),
    and E Var(θ_j | x) ≥ 1/E h_j, the Bayesian Cramér–Rao (van Trees) bound, h the joint log density's curvature
    (docs/method.md §2.3); where mean_m h_mj ≤ 0 the bound says nothing and Var θ_j stands. For a Gaussian VI
    optimum the ρ row's zero is sd*_j = h_j^(−1/2) and the −ELBO's slopes are h_j in μ_j and 2·sigmoid(ρ*_j)²·h_j in
    ρ_j, one curvature h_j per coordinate; over the simulations' h_mj, ρ*_j ~ N(mean, sd² + 0.5²) of
    softplus⁻¹(h_mj^(−1/2)) and log a_j ~ N(mean, sd² + 0.3²) of their logs.
    """
    variance, information = facts.theta_sd**2, np.mean(facts.curvature, axis=0)
    bound = np.where(information > 0, 1.0 / np.where(information > 0, information, 1.0), 0.0)
    spread = np.maximum(variance - bound, OPTIMUM_SPREAD_FLOOR * variance)
    curvature = np.maximum(facts.curvature, np.finfo(np.float64).tiny)
    sd = curvature**-0.5
    rho = sd + np.log(-np.expm1(-sd))
    log_slopes = np.concatenate([np.log(curvature), np.log(2.0 * curvature) + 2.0 * np.log(sigmoid(rho))], axis=1)
    return OptimumPriorMoments(
        np.concatenate([facts.theta_mean, rho.mean(axis=0)]),
        np.concatenate([np.sqrt(spread), np.hypot(rho.std(axis=0), SCALE_PRIOR_FLOOR)]),
        log_slopes.mean(axis=0),
        np.hypot(log_slopes.std(axis=0), SLOPE_PRIOR_SD),
    )
