"""The Bayesian linear gradient model's data: per-coordinate sufficient statistics of a trace (method.md §2).

Near the VI optimum φ*, the noisy gradient sums of the stationary part t = B..T−1 of a trace follow

    G_tj ~ N( q · a_j · (φ_tj − φ*_j),  v_j ),   v_j = (σC / s_j)² + u_j²,

independently over coordinates j. The log-likelihood of coordinate j is a quadratic form in the trace,
so it depends on the T' = T − B pairs only through six sums. With φ̃_tj = φ_tj − φ̄_j (φ̄ the
post-burn-in mean, so Σ_t φ̃_tj = 0 up to rounding) and δ_j = φ*_j − φ̄_j,

    Σ_t (G_tj − q a_j (φ̃_tj − δ_j))² = S_GG − 2 q a (S_Gφ − δ S_G) + q² a² (S_φφ − 2 δ S_φ + T' δ²).

The sums are accumulated in float64 around φ̄ (raw Σφ² and ΣGφ lose precision in float32).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .trace import BURN_IN, Trace

__all__ = ["TraceStatistics", "trace_statistics", "log_likelihood", "slope_estimates"]


class TraceStatistics(NamedTuple):
    """Per-coordinate sums over the post-burn-in steps, all (P,) float64 arrays except `count`.

    count T'; centre φ̄; sum_g Σ G; sum_phi Σ φ̃; sum_gg Σ G²; sum_phiphi Σ φ̃²; sum_gphi Σ G φ̃;
    noise_var (σC/s)², the DP noise variance of G; sampling_rate q.
    """

    count: int
    centre: np.ndarray
    sum_g: np.ndarray
    sum_phi: np.ndarray
    sum_gg: np.ndarray
    sum_phiphi: np.ndarray
    sum_gphi: np.ndarray
    noise_var: np.ndarray
    sampling_rate: float


def trace_statistics(trace: Trace, burn_in: float = BURN_IN) -> TraceStatistics:
    """The sufficient statistics of `trace` over steps t ≥ B = ⌊burn_in · T⌋ (float64, centred at φ̄)."""
    if not 0.0 <= burn_in < 1.0:
        raise ValueError(f"burn_in must be a fraction in [0, 1), got {burn_in}")
    start = math.floor(burn_in * trace.steps)
    if trace.steps - start < 2:
        raise ValueError(
            f"the trace has {trace.steps} steps, leaving {trace.steps - start} after a burn-in of {burn_in:g}: "
            "the gradient model needs at least 2 (and many more for a useful posterior)"
        )
    params = np.asarray(trace.params[start:], np.float64)
    grads = np.asarray(trace.grads[start:], np.float64)
    centre = params.mean(axis=0)
    phi = params - centre
    return TraceStatistics(
        count=params.shape[0],
        centre=centre,
        sum_g=grads.sum(axis=0),
        sum_phi=phi.sum(axis=0),
        sum_gg=np.sum(grads * grads, axis=0),
        sum_phiphi=np.sum(phi * phi, axis=0),
        sum_gphi=np.sum(grads * phi, axis=0),
        noise_var=np.asarray(trace.noise_sd, np.float64) ** 2,
        sampling_rate=float(trace.sampling_rate),
    )


def log_likelihood(stats: TraceStatistics, optimum, hessian, extra_var=0.0):
    """Per-coordinate log-likelihood of the trace, (P,) (broadcasting over leading axes of the arguments).

    optimum φ* (…, P), hessian a (…, P) (the positive Hessian diagonal), extra_var u² (…, P) added to
    the DP noise variance. Evaluated from the sufficient statistics in O(P).
    """
    delta = optimum - stats.centre
    qa = stats.sampling_rate * hessian
    var = stats.noise_var + extra_var
    squares = (
        stats.sum_gg
        - 2.0 * qa * (stats.sum_gphi - delta * stats.sum_g)
        + qa**2 * (stats.sum_phiphi - 2.0 * delta * stats.sum_phi + stats.count * delta**2)
    )
    return -0.5 * stats.count * jnp.log(2.0 * jnp.pi * var) - 0.5 * squares / var


def slope_estimates(stats: TraceStatistics) -> tuple[np.ndarray, np.ndarray]:
    """The OLS slope of G on φ with φ* fixed at φ̄, per coordinate, and its standard error, both (P,):

    â_j = |Σ G_tj φ̃_tj / Σ φ̃_tj²| / q,   τ_j = (σC/s_j) / sqrt(Σ φ̃_tj²) / q.
    A coordinate whose trace does not move (Σ φ̃² ≈ 0) carries no slope information: ValueError.
    """
    # "never moves": the spread of φ after burn-in is at rounding level (1e-12 relative to φ̄)
    still = stats.sum_phiphi <= stats.count * (1e-12 * np.maximum(1.0, np.abs(stats.centre))) ** 2
    if np.any(still):
        frozen = np.flatnonzero(still).tolist()
        raise ValueError(
            f"parameters {frozen} never move after burn-in, so the trace says nothing about their Hessian: "
            "record with a larger learning rate or check the trace"
        )
    q = stats.sampling_rate
    slope = np.abs(stats.sum_gphi / stats.sum_phiphi) / q
    return slope, np.sqrt(stats.noise_var / stats.sum_phiphi) / q
