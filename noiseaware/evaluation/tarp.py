"""TARP: expected coverage probabilities of balls around reference points (Lemos et al. 2023; docs/method.md §4).

For simulation m with truth θ_m, posterior draws θ_{m,k} (k = 1..K) and a reference point θ_ref,m chosen
without θ_m,

    f_m = (1/K) Σ_k 1[ ‖θ_{m,k} − θ_ref,m‖ < ‖θ_m − θ_ref,m‖ ],    ECP(1 − α) = (1/M) Σ_m 1[ f_m < 1 − α ],

and a calibrated posterior has ECP(1 − α) = 1 − α at every level. `coverage_rmse` summarises a curve
over the paper's 21 levels (paper eq. 27).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LEVELS",
    "chance_rmse",
    "coverage_rmse",
    "ecp_from_fractions",
    "marginal_ecp",
    "reference_box",
    "tarp_ecp",
    "tarp_fractions",
    "tarp_repeats",
]

LEVELS = np.round(np.sort(1.0 - np.concatenate([[0.001], np.round(np.arange(0.05, 0.951, 0.05), 2), [0.999]])), 3)
"""The paper's 21 credibility levels 1 − α, ascending: 0.001, 0.05, 0.10, …, 0.95, 0.999 (each the float64
nearest its decimal, so that a fraction k/K equal to a level compares equal to it)."""

METRICS = ("euclidean", "standardised")


def _levels(levels) -> jnp.ndarray:
    levels = LEVELS if levels is None else np.asarray(levels, np.float64)
    if levels.ndim != 1 or np.any(np.diff(levels) <= 0) or levels[0] <= 0 or levels[-1] >= 1:
        raise ValueError("levels must be strictly increasing credibility levels inside (0, 1)")
    return levels


def _check(samples, truth, references) -> tuple[jax.Array, jax.Array, jax.Array]:
    samples, truth, references = (jnp.asarray(x) for x in (samples, truth, references))
    if samples.ndim != 3:
        raise ValueError(f"samples must be (M, K, d); got shape {samples.shape}")
    m, _, d = samples.shape
    for name, value in (("truth", truth), ("references", references)):
        if value.shape != (m, d):
            raise ValueError(f"{name} must be (M, d) = ({m}, {d}) to match samples; got shape {value.shape}")
    return samples, truth, references


def _scale(metric: str, scale, d: int) -> jax.Array:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    if metric == "euclidean":
        return jnp.ones(d)
    if scale is None:
        raise ValueError("metric='standardised' needs scale=…, the prior's sd of each dimension, shape (d,)")
    scale = jnp.asarray(scale)
    if scale.shape != (d,) or not bool(jnp.all(scale > 0)):
        raise ValueError(f"scale must be {d} positive sds; got {scale}")
    return scale


@jax.jit
def _closer(samples, truth, references, scale):
    """(M,) int: how many of the K draws are closer to the reference than the truth (in units of `scale`)."""
    sample_distance = jnp.sum(((samples - references[:, None, :]) / scale) ** 2, axis=-1)
    truth_distance = jnp.sum(((truth - references) / scale) ** 2, axis=-1)
    return jnp.sum(sample_distance < truth_distance[:, None], axis=1)


@jax.jit
def _marginal_closer(samples, truth, references):
    """(M, d) int: the same per dimension, with distances |θ_j − θ_ref,j|."""
    return jnp.sum(jnp.abs(samples - references[:, None, :]) < jnp.abs(truth - references)[:, None, :], axis=1)


@jax.jit
def _closer_per_set(samples, truth, references, scale):
    """Joint counts (G, M) and per-dimension counts (G, M, d) for G reference sets, references (G, M, d)."""

    def one(ref):
        return _closer(samples, truth, ref, scale), _marginal_closer(samples, truth, ref)

    return jax.lax.map(one, references)


def _fractions(counts, draws: int) -> np.ndarray:
    """f = count / K in float64 (exact ties with the levels, whatever JAX's float width)."""
    return np.asarray(counts, np.float64) / draws


def tarp_fractions(samples, truth, references, *, metric: str = "euclidean", scale=None):
    """TARP fractions for G reference sets at once: (joint f (G, M), per-dimension f (G, M, d)), numpy.

    samples (M, K, d), truth (M, d), references (G, M, d). f_m is the fraction of draws closer to the
    reference than the truth; the per-dimension f uses |θ_j − θ_ref,j|.
    """
    samples, truth = jnp.asarray(samples), jnp.asarray(truth)
    references = jnp.asarray(references)
    if references.ndim != 3:
        raise ValueError(f"references must be (G, M, d); got shape {references.shape}")
    _check(samples, truth, references[0])
    joint, marginal = _closer_per_set(samples, truth, references, _scale(metric, scale, samples.shape[-1]))
    return _fractions(joint, samples.shape[1]), _fractions(marginal, samples.shape[1])


def ecp_from_fractions(fractions, levels=None) -> np.ndarray:
    """ECP curves from fractions along axis 1 (the M simulations): f (R, M) → (R, L); f (R, M, d) → (R, L, d).

    ecp[r, i] = mean over m of 1[f[r, m] < levels[i]]; NaN where M = 0.
    """
    levels, f = _levels(levels), np.asarray(fractions)
    if f.shape[1] == 0:
        return np.full((f.shape[0], levels.size) + f.shape[2:], np.nan)
    below = f[:, None] < levels.reshape((1, -1, 1) + (1,) * (f.ndim - 2))
    return below.mean(axis=2)


def tarp_ecp(samples, truth, references, *, levels=None, metric: str = "euclidean", scale=None):
    """(levels (L,), ecp (L,)): ECP at each credibility level; ecp[i] = mean over m of 1[f_m < levels[i]].

    samples (M, K, d) posterior draws, truth (M, d), references (M, d). metric "euclidean" or
    "standardised" (each dimension divided by `scale`, the prior's sd, (d,)). Invariant to the order of
    the K draws.
    """
    samples, truth, references = _check(samples, truth, references)
    levels = _levels(levels)
    f = _fractions(_closer(samples, truth, references, _scale(metric, scale, samples.shape[-1])), samples.shape[1])
    return levels, ecp_from_fractions(f[None], levels)[0]


def marginal_ecp(samples, truth, references, *, levels=None):
    """(levels (L,), ecp (L, d)): the TARP curve of each dimension alone (1-D balls |θ_j − θ_ref,j|)."""
    samples, truth, references = _check(samples, truth, references)
    levels = _levels(levels)
    f = _fractions(_marginal_closer(samples, truth, references), samples.shape[1])
    return levels, ecp_from_fractions(f[None], levels)[0]


def coverage_rmse(levels, ecp) -> float | np.ndarray:
    """sqrt(mean over levels of (ECP − level)²); ecp (L,) or (L, …) gives one value per trailing column."""
    levels, ecp = np.asarray(levels), np.asarray(ecp)
    if ecp.shape[0] != levels.shape[0]:
        raise ValueError(f"ecp has {ecp.shape[0]} levels, levels has {levels.shape[0]}")
    deviation = ecp - levels.reshape((-1,) + (1,) * (ecp.ndim - 1))
    rmse = np.sqrt(np.mean(deviation**2, axis=0))
    return float(rmse) if rmse.ndim == 0 else rmse


def chance_rmse(simulations: int) -> float:
    """sqrt(1/(6M)): the coverage RMSE a calibrated method scores by chance on M simulations (the ECP at level α
    has variance α(1 − α)/M, whose mean over α in [0, 1] is 1/6)."""
    return (6 * simulations) ** -0.5


def reference_box(key, centre, half_width, repeats: int):
    """Reference points θ_ref = centre + U ⊙ half_width, U ~ Uniform(−1, 1)^d: (repeats, M, d).

    The research rule uses centre = the post-burn-in mean of the μ trace and half_width = 4 × the
    posterior's sd per dimension; any rule that does not look at the truth is valid. centre and
    half_width are (M, d).
    """
    centre, half_width = jnp.asarray(centre), jnp.asarray(half_width)
    u = jax.random.uniform(key, (repeats,) + centre.shape, centre.dtype, -1.0, 1.0)
    return centre + u * half_width


def tarp_repeats(
    key, samples, truth, centre, half_width, *, repeats: int = 20, levels=None, metric: str = "euclidean", scale=None
):
    """ECP curves for `repeats` fresh reference draws from `reference_box` (samples fixed): (levels (L,), ecp (R, L)).

    The mean ± sd over the R curves of `coverage_rmse` is the paper's error band.
    """
    samples, truth, _ = _check(samples, truth, centre)
    levels = _levels(levels)
    scale = _scale(metric, scale, samples.shape[-1])
    references = reference_box(key, centre, half_width, repeats)
    counts = jax.lax.map(functools.partial(_closer, samples, truth, scale=scale), references)
    return levels, ecp_from_fractions(_fractions(counts, samples.shape[1]), levels)
