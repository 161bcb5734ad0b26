"""The "exact" route: φ* integrated out in closed form, (ã, u) by adaptive deterministic quadrature.

The posterior factorises over the P coordinates. Given (ã_j, u_j) the model is linear-Gaussian in
φ*_j (`integrate_optimum`), which leaves the 2-D density p(ã_j, u_j | trace) (1-D without extra
noise). It is evaluated on a tensor grid per coordinate, placed adaptively: a first grid around a
closed-form guess (OLS slope and residual variance, combined with the prior), then `passes` − 1
re-placements around the grid's own median and spread. The ã nodes are equally spaced in t for
ã = centre + scale·sinh(t): dense at the bulk, sparse but present out to the prior's tails. The
trapezoid rule is spectrally accurate for such smooth, decaying integrands; in u it stays so at the
boundary u = 0 because the integrand is even in u (only u² enters and both u priors are symmetric).

Moments of φ* are exact mixtures over the grid (no Monte Carlo error); draws pick a grid cell with
probability ∝ its weight, jitter uniformly inside the cell, and draw φ* from its conditional Gaussian.

Why this module is long: the grid's placement, evaluation, moments and draws and the batched solve are one algorithm
over one structure (`QuadratureGrid`); apart, each part would reach into the others' internals.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from ..util.diagnostics import Diagnostics
from ..util.errors import NON_FINITE, FitFailure
from ..util.progress import Progress
from .blocks import solve_in_blocks
from .coupled import coupled_draws, is_coupled
from .draws import Draws
from .expansion import solve_optimum
from .gradient_model import (
    GradientModel,
    integrate_optimum,
    ols_fit,
    prior_distributions,
)
from .statistics import centred_phiphi
from .stein import partner_log_likelihood, stein_draws

__all__ = [
    "QuadratureGrid",
    "exact_grid",
    "exact_cdf",
    "exact_moments",
    "exact_draws",
    "ExactSettings",
    "fit_exact_batch",
]

WIDTH = 9.0
JOINT_STREAM = 7
"""The key stream (fold_in of a trace's key) of the coupled μ rows' other coefficients (`coupled.coupled_draws`)."""
GRID_DEFAULTS = {"hessian_nodes": 96, "extra_nodes": 32, "passes": 3}
PARTNER_NODES = 32
"""Nodes over the extra noise u of the Stein model's partner scale rows (`_partner_weight`)."""
"""The exact route's grid: nodes over ã_j and u_j, and its placements (`ExactOptions`' defaults, and the grid of
NUTS's warm start)."""


class QuadratureGrid(NamedTuple):
    """A per-coordinate tensor grid over (ã, u) with normalised trapezoid weights.

    ã = hessian_centre + hessian_scale·sinh(t) at equally spaced hessian_t (n_a, P), i.e. the nodes
    hessian_raw (n_a, P); extra_noise (n_u, P) equally spaced u nodes; weights (n_a, n_u, P) summing to one per
    coordinate; optimum_mean / optimum_sd (n_a, n_u, P): φ*'s conditional Gaussian at each node;
    edge_mass (P,): the largest normalised weight on the grid's outer rows/columns (u = 0 excluded),
    near zero when the grid covers the posterior; log_evidence (P,): log p(trace_j), the trapezoid rule's
    integral of the unnormalised weights (node spacings included).
    """

    hessian_centre: jax.Array
    hessian_scale: jax.Array
    hessian_t: jax.Array
    hessian_raw: jax.Array
    extra_noise: jax.Array
    weights: jax.Array
    optimum_mean: jax.Array
    optimum_sd: jax.Array
    edge_mass: jax.Array
    log_evidence: jax.Array


def _initial_guess(model: GradientModel):
    """A closed-form guess of each coordinate's (ã, u) posterior: ã's centre and scale, u's lower and upper
    ends, (P,) each.

    ã: the OLS slope with a free intercept and its standard error, mapped through link⁻¹ and combined
    with the prior (and, in the Stein model, the partner ρ row's slope: `ScalePartner`) by precision; u²: the
    residual variance in excess of the DP noise ± 9 sampling sds (sd(r²) ≈ v·sqrt(2/T')), clipped at 0. Where u
    carries the noise (a non-private trace, σ = 0) its posterior is narrow, and a grid from 0 would be too coarse to
    place the next one.
    """
    s = model.stats
    n, q = s.count, model.sampling_rate
    slope, residual = ols_fit(s)
    variance = jnp.maximum(residual, model.noise_var)
    slope_se = jnp.sqrt(variance / centred_phiphi(s)) / q
    raw, raw_se = _raw_scale(model, jnp.maximum(jnp.abs(slope) / q, slope_se), slope_se)
    precision = 1.0 / raw_se**2 + 1.0 / model.hessian_sd**2
    centre = raw / raw_se**2 + model.hessian_loc / model.hessian_sd**2
    if model.partner is not None:  # the Stein model: the partner ρ row's estimate of the same slope, by precision
        partner = model.partner
        shared = jnp.where(partner.active, jnp.maximum(partner.slope, partner.slope_se), 1.0)
        shared_raw, shared_se = _raw_scale(model, shared, jnp.where(partner.active, partner.slope_se, 1.0))
        weight = jnp.where(partner.active, 1.0 / shared_se**2, 0.0)
        precision, centre = precision + weight, centre + weight * jnp.where(partner.active, shared_raw, 0.0)
    centre = centre / precision
    return (centre, jax.lax.rsqrt(precision)) + _extra_range(residual, model.noise_var, n)


def _extra_range(residual, noise_var, n):
    """u's lower and upper ends (P,): u² within the residual variance r² in excess of the DP noise variance ± 9
    sampling sds of r² (sd(r²) ≈ v·sqrt(2/n), v = max(r², noise variance)), clipped at 0."""
    variance = jnp.maximum(residual, noise_var)
    excess, spread = residual - noise_var, WIDTH * variance * jnp.sqrt(2.0 / n)
    return tuple(jnp.sqrt(jnp.maximum(excess + sign * spread, 0.0)) for sign in (-1.0, 1.0))


def _partner_weight(model: GradientModel, raw, extra):
    """The Stein model's partner ρ rows' share of the μ columns' log weights at ã = `raw`, u = `extra`
    (`stein.partner_log_likelihood`), their own u on `PARTNER_NODES` nodes over the range their residual allows,
    by the trapezoid rule (one node at u = 0 without extra noise); 0 without partners."""
    partner = model.partner
    if partner is None:
        return 0.0
    if model.extra_noise == "none":
        nodes = jnp.zeros((1,) + partner.residual.shape[-1:])
        log_rule = jnp.zeros_like(nodes)
    else:
        low, high = _extra_range(partner.residual, partner.noise_var, model.stats.count)
        nodes = _nodes(low, high, PARTNER_NODES)
        step = jnp.where(high > low, (high - low) / (PARTNER_NODES - 1), 1.0)
        log_rule = jnp.log(_trapezoid(PARTNER_NODES)[:, None] * step)
    return partner_log_likelihood(model, model.hessian(raw), extra**2, nodes, log_rule)


def _raw_scale(model: GradientModel, a, se):
    """A slope estimate a > 0 and its standard error on ã's scale (link⁻¹, the delta method)."""
    if model.hessian_link == "exp":
        return jnp.log(a), se / a
    raw = a + jnp.log(-jnp.expm1(-a))
    return raw, se / jax.nn.sigmoid(raw)


def _sinh_nodes(model: GradientModel, centre, scale, size: int):
    """Nodes t (size, P), equally spaced, for ã = centre + scale·sinh(t).

    The range covers centre ± 9·scale and the prior's loc ± 10 sd: dense near the bulk, sparse in the
    tails, where the posterior of ã can keep prior-shaped mass toward a → 0 (ã → −∞) and φ* reverts
    to its prior there, so that mass, though small, moves φ*'s variance.
    """
    low = jnp.minimum(centre - WIDTH * scale, model.hessian_loc - (WIDTH + 1) * model.hessian_sd)
    high = jnp.maximum(centre + WIDTH * scale, model.hessian_loc + (WIDTH + 1) * model.hessian_sd)
    return _nodes(jnp.arcsinh((low - centre) / scale), jnp.arcsinh((high - centre) / scale), size)


def _nodes(low, high, size: int):
    """`size` equally spaced nodes from low to high (P,) each → (size, P)."""
    return low + (high - low) * jnp.linspace(0.0, 1.0, size)[:, None]


def _trapezoid(size: int):
    weights = jnp.ones(size)
    return weights if size == 1 else weights.at[jnp.array([0, -1])].set(0.5)


def _evaluate(model: GradientModel, centre, scale, t, extra_noise) -> QuadratureGrid:
    """Normalised trapezoid weights (in t for ã, with the Jacobian dã/dt = scale·cosh t; in u) and φ*'s
    conditional Gaussian on the grid."""
    hessian_raw = centre + scale * jnp.sinh(t)
    jacobian = scale * jnp.cosh(t)
    raw = hessian_raw[:, None, :]
    extra = extra_noise[None, :, :]
    priors = prior_distributions(model)
    conditional = integrate_optimum(model, raw, extra**2)
    log_weight = conditional.log_marginal + priors["hessian_raw"].log_prob(raw)
    log_weight = log_weight + _partner_weight(model, raw, extra)
    if "extra_noise" in priors:
        # the u prior's density is continuous at its boundary u = 0: evaluate the node u = 0 just inside it
        log_weight = log_weight + priors["extra_noise"].log_prob(jnp.maximum(extra, jnp.finfo(extra.dtype).tiny))
    log_weight = log_weight + jnp.log(_trapezoid(raw.shape[0])[:, None] * jacobian)[:, None, :]
    log_weight = log_weight + jnp.log(_trapezoid(extra.shape[1]))[None, :, None]
    # nodes where a = link(ã) overflows carry no mass (the likelihood vanishes there), not NaN
    finite = jnp.isfinite(log_weight)
    log_weight = jnp.where(finite, log_weight, -jnp.inf)
    mean = jnp.where(finite, conditional.mean, model.optimum_loc)
    sd = jnp.where(finite, conditional.sd, model.optimum_sd)
    flat = log_weight.reshape(-1, log_weight.shape[-1])
    weights = jax.nn.softmax(flat, axis=0).reshape(log_weight.shape)
    log_evidence = jax.nn.logsumexp(flat, axis=0) + jnp.log(t[1] - t[0])
    if extra_noise.shape[0] > 1:
        log_evidence = log_evidence + jnp.log(extra_noise[1] - extra_noise[0])
    edges = jnp.maximum(jnp.max(weights[0], axis=0), jnp.max(weights[-1], axis=0))
    if extra_noise.shape[0] > 1:
        # u = 0 is a boundary of the support, not of the grid; a positive lower end is a grid edge
        low_edge = jnp.where(extra_noise[0] > 0.0, jnp.max(weights[:, 0], axis=0), 0.0)
        edges = jnp.maximum(edges, jnp.maximum(low_edge, jnp.max(weights[:, -1], axis=0)))
    return QuadratureGrid(centre, scale, t, hessian_raw, extra_noise, weights, mean, sd, edges, log_evidence)


def _marginal_moments(nodes, weights):
    """Mean and sd of a grid variable with nodes (n, P) and weights (n, P)."""
    mean = jnp.sum(weights * nodes, axis=0)
    return mean, jnp.sqrt(jnp.maximum(jnp.sum(weights * (nodes - mean) ** 2, axis=0), 0.0))


def marginal_quantiles(nodes, weights):
    """The 16, 50 and 84 % quantiles of a grid variable with nodes (n, P) and weights (n, P), (P, 3): the
    trapezoid CDF at the nodes, linearly interpolated."""
    cdf = jnp.cumsum(weights, axis=0) - 0.5 * weights
    return jax.vmap(lambda c, x: jnp.interp(jnp.array([0.16, 0.5, 0.84]), c, x), in_axes=1)(cdf, nodes)


def _median_and_spread(nodes, weights):
    """Median and half the 16–84 % range of a grid variable (robust to light, far tails), (P,) each."""
    quantiles = marginal_quantiles(nodes, weights)
    return quantiles[:, 1], 0.5 * (quantiles[:, 2] - quantiles[:, 0])


def exact_grid(model: GradientModel, *, hessian_nodes: int, extra_nodes: int, passes: int) -> QuadratureGrid:
    """The adaptively placed quadrature grid of each coordinate's (ã, u) posterior; jittable and vmappable.

    `passes` ≥ 1 placements: the first around `_initial_guess`, each later one around the previous grid's
    median and 16–84 % spread for ã (sinh-spaced) and mean ± 9 sd for u (clipped at 0). Without extra
    noise the u grid is the single node u = 0.
    """
    if passes < 1 or hessian_nodes < 3 or (model.extra_noise != "none" and extra_nodes < 3):
        raise ValueError("exact_grid needs passes ≥ 1 and at least 3 nodes per grid axis")
    centre, scale, extra_low, extra_high = _initial_guess(model)
    if model.extra_noise == "none":
        extra_nodes = 1
        extra_low = extra_high = jnp.zeros_like(extra_high)
    placement = (centre, scale, extra_low, extra_high)

    def evaluate(placement):
        centre, scale, extra_low, extra_high = placement
        t = _sinh_nodes(model, centre, scale, hessian_nodes)
        return _evaluate(model, centre, scale, t, _nodes(extra_low, extra_high, extra_nodes))

    def replace(_, placement):
        grid = evaluate(placement)
        centre, scale = _median_and_spread(grid.hessian_raw, jnp.sum(grid.weights, axis=1))
        scale = jnp.maximum(scale, 1e-9 * (1.0 + jnp.abs(centre)))
        extra_low, extra_high = placement[2:]
        if extra_nodes > 1:
            extra_mean, extra_sd = _marginal_moments(grid.extra_noise, jnp.sum(grid.weights, axis=0))
            extra_low = jnp.maximum(extra_mean - WIDTH * extra_sd, 0.0)
            extra_high = extra_mean + WIDTH * jnp.maximum(extra_sd, 1e-9 * (1.0 + extra_mean))
        return centre, scale, extra_low, extra_high

    return evaluate(jax.lax.fori_loop(0, passes - 1, replace, placement))


class ExactMoments(NamedTuple):
    """Posterior means and sds, (P,) each, computed from the grid without Monte Carlo error."""

    optimum_mean: jax.Array
    optimum_sd: jax.Array
    hessian_mean: jax.Array
    hessian_sd: jax.Array


def exact_moments(model: GradientModel, grid: QuadratureGrid) -> ExactMoments:
    """E[φ*], sd[φ*] as mixtures over the grid (E over nodes of the conditional mean and second moment); E[a], sd[a]."""
    w = grid.weights
    mean = jnp.sum(w * grid.optimum_mean, axis=(0, 1))
    second = jnp.sum(w * (grid.optimum_sd**2 + grid.optimum_mean**2), axis=(0, 1))
    hessian = model.hessian(grid.hessian_raw)
    hessian_mean, hessian_sd = _marginal_moments(hessian, jnp.sum(w, axis=1))
    return ExactMoments(mean, jnp.sqrt(jnp.maximum(second - mean**2, 0.0)), hessian_mean, hessian_sd)


def exact_cdf(grid: QuadratureGrid, values):
    """P(φ*_j ≤ values_j | trace), (P,): the grid mixture of φ*'s conditional Gaussian CDFs (no Monte Carlo error)."""
    z = (values - grid.optimum_mean) / grid.optimum_sd
    return jnp.sum(grid.weights * jax.scipy.stats.norm.cdf(z), axis=(0, 1))


def exact_draws(model: GradientModel, grid: QuadratureGrid, key, draws: int):
    """`draws` joint draws (φ*, a, |u|), each (draws, P): a grid cell ∝ its weight, uniform jitter in it, φ* | ã, u."""
    n_a, n_u, n_params = grid.weights.shape
    cell_key, raw_key, extra_key, optimum_key = jax.random.split(key, 4)
    cdf = jnp.cumsum(grid.weights.reshape(n_a * n_u, n_params), axis=0).T
    uniform = jax.random.uniform(cell_key, (n_params, draws)) * cdf[:, -1:]
    cells = jnp.minimum(jax.vmap(jnp.searchsorted)(cdf, uniform), n_a * n_u - 1).T
    index_a, index_u = cells // n_u, cells % n_u
    columns = jnp.arange(n_params)
    step_t = grid.hessian_t[1] - grid.hessian_t[0]
    t = grid.hessian_t[index_a, columns] + step_t * jax.random.uniform(raw_key, cells.shape, minval=-0.5, maxval=0.5)
    raw = grid.hessian_centre + grid.hessian_scale * jnp.sinh(t)
    extra = grid.extra_noise[index_u, columns]
    if n_u > 1:
        step_u = grid.extra_noise[1] - grid.extra_noise[0]
        extra = jnp.abs(extra + step_u * jax.random.uniform(extra_key, cells.shape, minval=-0.5, maxval=0.5))
    conditional = integrate_optimum(model, raw, extra**2)
    mean, sd, noise_key = conditional.mean, conditional.sd, optimum_key
    if conditional.by_set is not None:
        set_key, noise_key, solve_key = jax.random.split(optimum_key, 3)
        # a term set per (draw, coordinate) by its share of the likelihood at (ã, u), then φ*' from that set's Gaussian
        log_marginal, set_mean, set_sd = conditional.by_set
        chosen = jax.random.categorical(set_key, jnp.moveaxis(log_marginal, -2, -1), axis=-1)
        mean = jnp.take_along_axis(set_mean, chosen[..., None, :], axis=-2)[..., 0, :]
        sd = jnp.take_along_axis(set_sd, chosen[..., None, :], axis=-2)[..., 0, :]
    hessian = model.hessian(raw)
    if model.scale_model == "variance":
        return _scale_rows_to_rho(model, mean, sd, hessian, noise_key) + (extra,)
    optimum = mean + sd * jax.random.normal(noise_key, cells.shape)
    if model.terms:
        var, q = model.noise_var + extra**2, model.sampling_rate
        optimum = solve_optimum(model.stats, model.terms, optimum - model.stats.centre, hessian, var, solve_key, q)
    return optimum, hessian, extra


def _scale_rows_to_rho(model: GradientModel, mean, sd, hessian, key):
    """Draws of φ* and a on φ's scale when the scale rows are modelled in ψ = softplus(ρ)² (method.md §2.9):
    ψ* from its conditional Gaussian truncated to ψ* > 0, ρ* = softplus⁻¹(√ψ*), and the slope a (per unit ψ, as
    G = q a w (ψ − ψ*)) carried to ρ: dG/dρ at ρ* = q·2a·sigmoid(ρ*)²."""
    rows = model.scale_rows
    lower = jnp.where(rows, -mean / sd, -jnp.inf)
    optimum = mean + sd * jax.random.truncated_normal(key, lower, jnp.inf, mean.shape, mean.dtype)
    root = jnp.sqrt(jnp.where(rows, jnp.maximum(optimum, jnp.finfo(optimum.dtype).tiny), 1.0))
    rho = root + jnp.log(-jnp.expm1(-root))
    return jnp.where(rows, rho, optimum), jnp.where(rows, 2.0 * hessian * jax.nn.sigmoid(rho) ** 2, hessian)


def term_probabilities(model: GradientModel, grid: QuadratureGrid):
    """The posterior probability of each term set per coordinate, (S, P): the grid's mixture of p(set | ã, u)."""
    conditional = integrate_optimum(model, grid.hessian_raw[:, None, :], grid.extra_noise[None, :, :] ** 2)
    log_marginal = conditional.by_set[0]
    share = jnp.exp(log_marginal - conditional.log_marginal[..., None, :])
    return jnp.sum(grid.weights[:, :, None, :] * share, axis=(0, 1))


@dataclasses.dataclass(frozen=True)
class ExactDiagnostics(Diagnostics):
    """The exact route's facts: moments of φ* and A from the grid (P,) each, without Monte Carlo error;
    edge_mass (P,), the largest weight on the grid's outer edge (above 1e-6 the grid may cut posterior
    mass); the grid's sizes; log_evidence (P,), log p(trace_j) under the model (`QuadratureGrid`); scale_model,
    "linear", "variance", or "repaired" (some rows from each: `methods.routes`). With extra terms (`Prior.terms`):
    term_sets, the candidate sets, and term_probability (S, P), each set's posterior probability per coordinate.
    φ*'s moments are those of the draws where the model has extra terms or scale rows in ψ."""

    optimum_mean: np.ndarray
    optimum_sd: np.ndarray
    hessian_mean: np.ndarray
    hessian_sd: np.ndarray
    edge_mass: np.ndarray
    hessian_nodes: int
    extra_nodes: int
    passes: int
    term_sets: tuple[str, ...] = ("diagonal",)
    term_probability: np.ndarray | None = None
    log_evidence: np.ndarray | None = None
    scale_model: str = "linear"


class ExactSettings(Protocol):
    """What the exact solver reads from its options (`noiseaware.methods.ExactOptions`, which owns the defaults and
    checks them): draws K of φ* per trace, the grid's nodes over A_j and u_j, and its placements; the coordinates per
    compiled program (block) and the progress over blocks."""

    draws: int
    hessian_nodes: int
    extra_nodes: int
    passes: int
    block: int
    progress: Progress
    devices: int | None


def fit_exact_batch(models: Sequence[GradientModel], *, keys, options: ExactSettings) -> list[Draws | FitFailure]:
    """Fit each trace's gradient model by adaptive quadrature in one vmapped, compiled computation per block of
    `options.block` coordinates (`blocks.solve_in_blocks`; a progress bar over blocks with `options.progress`; the
    blocks shared by `options.devices` of jax's devices):
    Draws (1, K, P) per model (same P and prior), plus exact moments in diagnostics; a trace is a batch of one.

    Model m uses keys[m] (keys: M jax PRNG keys). diagnostics: optimum_mean/optimum_sd/hessian_mean/hessian_sd (P,)
    from the grid, edge_mass (P,) (the largest weight on the grid's outer edge; above 1e-6 the grid may cut
    posterior mass) and the grid sizes. A model whose posterior weights are not finite gets a FitFailure
    (NON_FINITE) in its place.
    """
    results = solve_in_blocks(
        _fit_whole,
        models,
        keys=keys,
        options=options,
        block=options.block,
        progress=options.progress,
        devices=options.devices,
    )
    return [
        _joint_draws(model, result, jax.random.fold_in(key, JOINT_STREAM))
        for model, result, key in zip(models, results, keys)
    ]


def _joint_draws(model: GradientModel, result: Draws | FitFailure, key) -> Draws | FitFailure:
    """The per-column draws made joint where columns share unknowns: the Stein model's ρ rows from their μ partners
    (`stein_draws`, coupled μ rows included), a point trace's coupled μ rows (`coupled_draws`)."""
    if isinstance(result, FitFailure):
        return result
    if model.partner is not None:
        return stein_draws(model, result, key)
    return coupled_draws(model, result, key) if is_coupled(model) else result


def _fit_whole(models: Sequence[GradientModel], *, keys, options: ExactSettings) -> list[Draws | FitFailure]:
    """`fit_exact_batch` of every coordinate in one program."""
    settings = {name: getattr(options, name) for name in ("draws", "hessian_nodes", "extra_nodes", "passes")}
    with jax.enable_x64(True):
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *models)
        grid, moments, sample, probabilities = _fit_batch(stacked, keys, **settings)
        grid, moments, sample, probabilities = jax.tree_util.tree_map(
            np.asarray, (grid, moments, sample, probabilities)
        )
    results = []
    for m, model in enumerate(models):
        optimum, hessian, extra = (np.asarray(x[m], np.float64)[None] for x in sample)
        if not (np.all(np.isfinite(grid.weights[m])) and np.all(np.isfinite(optimum))):
            results.append(
                FitFailure(
                    NON_FINITE,
                    "the exact solver met non-finite posterior weights: the trace's statistics are not finite or the "
                    "prior is degenerate; check the trace with na.diagnose(trace) and trace.describe()",
                )
            )
            continue
        moment_values = {name: value[m] for name, value in moments._asdict().items()}
        if model.terms or model.scale_model != "linear":
            moment_values.update(optimum_mean=optimum[0].mean(axis=0), optimum_sd=optimum[0].std(axis=0))
        if model.scale_model != "linear":
            moment_values.update(hessian_mean=hessian[0].mean(axis=0), hessian_sd=hessian[0].std(axis=0))
        diagnostics = ExactDiagnostics(
            **moment_values,
            edge_mass=grid.edge_mass[m],
            hessian_nodes=options.hessian_nodes,
            extra_nodes=grid.extra_noise.shape[1],
            passes=options.passes,
            term_sets=model.term_sets,
            term_probability=None if probabilities is None else probabilities[m],
            log_evidence=grid.log_evidence[m],
            scale_model=model.scale_model,
        )
        results.append(Draws(optimum, hessian, None if model.extra_noise == "none" else extra, diagnostics))
    return results


def _solve(model, key, *, draws, hessian_nodes, extra_nodes, passes):
    grid = exact_grid(model, hessian_nodes=hessian_nodes, extra_nodes=extra_nodes, passes=passes)
    probabilities = term_probabilities(model, grid) if model.terms else None
    return grid, exact_moments(model, grid), exact_draws(model, grid, key, draws), probabilities


@functools.partial(jax.jit, static_argnames=("draws", "hessian_nodes", "extra_nodes", "passes"))
def _fit_batch(models, keys, **settings):
    return jax.vmap(functools.partial(_solve, **settings))(models, keys)
