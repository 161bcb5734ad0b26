"""The "laplace" route: a Gaussian at the posterior mode of each coordinate (docs/method.md §2–3).

The posterior factorises over the P coordinates, so the Laplace approximation is P independent
k-dimensional Gaussians over the unconstrained unknowns x_j = (φ*_j, ã_j, η_j), u_j = exp(η_j), with
log-Jacobian η_j added to `log_density` (numpyro's map for u ≥ 0, so Laplace, NUTS and the exact
route share one target); k = 2 without extra noise. For the research prior u ~ N(0, σ_u²) only u²
enters, so the posterior of u is even and folding it onto |u| = exp(η) changes nothing but a constant.

    x̂_j = argmax log p(x_j | trace),   x_j ≈ N(x̂_j, [−∇² log p(x̂_j | trace)]⁻¹)

The mode is found by damped Newton (Levenberg–Marquardt) with exact k×k Hessians, in a `while_loop`
per coordinate; `laplace_approximation` is pure and reports per-coordinate status values, so it can
be vmapped over a stack of models. `fit_laplace_batch` runs it in float64, checks the status and draws.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from ..util.diagnostics import Diagnostics
from ..util.errors import NO_OPTIMUM, FitFailure
from .draws import Draws
from .gradient_model import GradientModel, is_non_private, log_density

__all__ = ["LaplaceFit", "LaplaceSettings", "fit_laplace_batch", "laplace_approximation", "unconstrained_log_density"]

STYLES = ("full", "paper")
# the largest change of η = log u in one Newton step. Away from its mode −log p is nearly linear in η
# (slope T' where u² ≫ (σC/s)², the Jacobian's −1 where u² ≪ (σC/s)²), and a Newton step overshoots far
MAX_LOG_STEP = 2.0


class LaplaceFit(NamedTuple):
    """Per-coordinate Laplace approximation over x = (φ*, ã[, η]), k = 2 or 3 unknowns per coordinate.

    mode (P, k): the MAP; covariance (P, k, k): the inverse Hessian of −log p at the mode;
    log_density (P,): log p at the mode; steps (P,): Newton steps taken; converged (P,): the Newton
    decrement fell below the tolerance; positive_definite (P,): the Hessian of −log p at the mode is
    positive definite; finite (P,): mode, covariance and log density are finite.
    """

    mode: jax.Array
    covariance: jax.Array
    log_density: jax.Array
    steps: jax.Array
    converged: jax.Array
    positive_definite: jax.Array
    finite: jax.Array


def unconstrained_log_density(model: GradientModel, x):
    """log p(x | trace) per coordinate, (…, P), at x = (φ*, ã, η) (…, P, 3) with u = exp(η) and the
    log-Jacobian η added, or at x = (φ*, ã) (…, P, 2) when the prior has no extra noise."""
    if model.extra_noise == "none":
        return log_density(model, x[..., 0], x[..., 1])
    return log_density(model, x[..., 0], x[..., 1], jnp.exp(x[..., 2])) + x[..., 2]


def _initial_point(model: GradientModel):
    """The prior means in unconstrained space, (P, k); u's is the half-normal mean extra_sd·sqrt(2/π)."""
    columns = [jnp.asarray(model.optimum_loc), jnp.asarray(model.hessian_loc)]
    if model.extra_noise != "none":
        columns.append(jnp.log(model.extra_sd * math.sqrt(2.0 / math.pi)))
    return jnp.stack(columns, axis=-1)


def _per_coordinate_axes(model: GradientModel):
    """vmap in_axes that split a model into its P coordinates: 0 for (P,) arrays, None for scalars."""
    return jax.tree.map(lambda leaf: 0 if jnp.ndim(leaf) else None, model)


class _NewtonState(NamedTuple):
    """One coordinate's Newton iterate x (k,) with f = −log p, its gradient g (k,) and Hessian H (k, k)
    there, |H| (H with absolute eigenvalues), the Newton decrement gᵀ|H|⁻¹g and the damping λ."""

    x: jax.Array
    f: jax.Array
    gradient: jax.Array
    hessian: jax.Array
    absolute: jax.Array
    decrement: jax.Array
    damping: jax.Array
    steps: jax.Array


def laplace_approximation(model: GradientModel, *, tol: float = 1e-8, max_steps: int = 100) -> LaplaceFit:
    """The Laplace approximation of every coordinate's posterior, never raising (see `LaplaceFit`).

    Damped Newton on f = −log p from the prior means: step d = −(|H| + λ diag|H|)⁻¹ ∇f with |H| the
    Hessian with absolute eigenvalues (a descent direction even where H is indefinite), shortened so that
    |d_η| ≤ `MAX_LOG_STEP`; λ shrinks ×10 after a step that does not increase f and grows ×10 otherwise
    (a step is then retried from the same point, and counts). Converged when the Newton decrement
    ∇fᵀ|H|⁻¹∇f < tol² (the distance to the mode in posterior sds); stops after `max_steps` steps.
    Pure and jittable (run it with 64-bit JAX); vmap it over a stack of models (leading axis M) to fit
    M traces at once.
    """
    # one jit cache entry whether or not the defaults were spelled out
    return _laplace_approximation(model, tol, max_steps)


@functools.partial(jax.jit, static_argnums=2)
def _laplace_approximation(model: GradientModel, tol, max_steps: int) -> LaplaceFit:
    def solve(model_j, x0):
        def gradient_and_value(x):
            f, g = jax.value_and_grad(lambda y: -unconstrained_log_density(model_j, y))(x)
            return g, (f, g)

        def evaluate(x, damping, steps):
            hessian, (f, g) = jax.jacfwd(gradient_and_value, has_aux=True)(x)
            eigenvalues, vectors = jnp.linalg.eigh(hessian)
            magnitude = jnp.abs(eigenvalues)
            magnitude = jnp.maximum(magnitude, 1e-12 * jnp.max(magnitude))
            decrement = jnp.sum((vectors.T @ g) ** 2 / magnitude)
            absolute = (vectors * magnitude) @ vectors.T
            return _NewtonState(x, f, g, hessian, absolute, decrement, damping, steps)

        # f differences below rounding level count as "no increase", so steps near the mode are accepted
        slack = 64.0 * jnp.finfo(x0.dtype).eps

        def cond(state):
            return (state.steps < max_steps) & (state.decrement >= tol**2) & (state.damping < 1e16)

        def body(state):
            damped = state.absolute + state.damping * jnp.diag(jnp.diag(state.absolute))
            step = -jnp.linalg.solve(damped, state.gradient)
            if x0.shape[-1] == 3:
                step = step * jnp.minimum(1.0, MAX_LOG_STEP / jnp.abs(step[2]))
            trial = evaluate(state.x + step, state.damping / 10.0, state.steps + 1)
            accept = jnp.isfinite(trial.f) & (trial.f <= state.f + slack * (1.0 + jnp.abs(state.f)))
            rejected = state._replace(damping=state.damping * 10.0, steps=state.steps + 1)
            return jax.tree.map(functools.partial(jnp.where, accept), trial, rejected)

        state = jax.lax.while_loop(cond, body, evaluate(x0, jnp.asarray(1e-3, x0.dtype), jnp.asarray(0)))
        eigenvalues = jnp.linalg.eigvalsh(state.hessian)
        covariance = jnp.linalg.inv(state.hessian)
        covariance = 0.5 * (covariance + covariance.T)
        finite = jnp.isfinite(state.f) & jnp.all(jnp.isfinite(state.x)) & jnp.all(jnp.isfinite(covariance))
        return LaplaceFit(
            mode=state.x,
            covariance=covariance,
            log_density=-state.f,
            steps=state.steps,
            converged=state.decrement < tol**2,
            positive_definite=eigenvalues[0] > 1e-12 * eigenvalues[-1],
            finite=finite,
        )

    return jax.vmap(solve, in_axes=(_per_coordinate_axes(model), 0))(model, _initial_point(model))


def _failure_message(fit: LaplaceFit, max_steps: int) -> str | None:
    """None when every coordinate's fit is usable, else one message naming the failed coordinates."""
    converged, positive_definite, finite = (np.asarray(v) for v in (fit.converged, fit.positive_definite, fit.finite))
    problems = [
        (~finite, "non-finite values at the mode or in its covariance"),
        (
            finite & ~converged,
            f"Newton's method reached no stationary point (in {max_steps} steps, or no step lowered the objective)",
        ),
        (
            finite & converged & ~positive_definite,
            "the Hessian of the negative log posterior at the mode is not positive definite "
            "(a saddle or flat direction)",
        ),
    ]
    parts = [f"{why}: coordinates {np.flatnonzero(bad).tolist()}" for bad, why in problems if np.any(bad)]
    if not parts:
        return None
    return (
        "the Laplace approximation failed (" + "; ".join(parts) + "). The posterior is far from Gaussian "
        'there: use the exact route (method="exact") or NUTS, or record a longer trace.'
    )


@dataclasses.dataclass(frozen=True)
class LaplaceDiagnostics(Diagnostics):
    """The Laplace route's facts per coordinate: the mode (optimum_map, hessian_map, extra_noise_map, (P,)),
    marginal sds in the unconstrained space, the (P, k, k) covariances, Newton steps and convergence flags."""

    style: str
    optimum_map: np.ndarray
    hessian_map: np.ndarray
    extra_noise_map: np.ndarray | None
    optimum_sd: np.ndarray
    hessian_raw_sd: np.ndarray
    log_extra_noise_sd: np.ndarray | None
    covariance: np.ndarray
    steps: np.ndarray
    converged: np.ndarray
    positive_definite: np.ndarray


class LaplaceSettings(Protocol):
    """What the Laplace solver reads from its options (`noiseaware.methods.LaplaceOptions`, which owns the defaults
    and checks them): draws K of φ* per trace, the style ("full" or "paper") and the Newton solve's max_steps."""

    draws: int
    style: str
    max_steps: int


def fit_laplace_batch(models: Sequence[GradientModel], *, keys, options: LaplaceSettings) -> list[Draws | FitFailure]:
    """Draws from the Laplace approximation of each trace's gradient model posterior, arrays (1, K, P) float64: one
    vmapped Newton solve for all the models (same P and prior); a trace is a batch of one. Model m uses keys[m].

    style="full" (the honest default): x_j = (φ*_j, ã_j, η_j) ~ N(x̂_j, Σ_j), so the draws carry the
        uncertainty of both μ* and ρ* (and of A and u) into the θ mixture of docs/method.md §3;
        hessian = model.hessian(ã) (softplus or exp), extra_noise = exp(η) = |u| (None without extra noise).
    style="paper": the research Laplace of the paper's Table 2: u fixed at 0 (its Adam started u at 0,
        where the gradient vanishes), the mode over (φ*, ã), and θ ~ N(μ̂*, diag(V_μ*) + diag(softplus(ρ̂*)²)).
        As draws: the μ-half (first P/2) of `optimum` ~ N(μ̂*, V_μ*) from its marginal, the ρ-half fixed
        at ρ̂*; `hessian` fixed at model.hessian(ã̂); `extra_noise` zeros (None without extra noise).
    A model with a coordinate whose solve did not converge, whose Hessian at the mode is not positive definite, or
    whose values are not finite gets a FitFailure (NO_OPTIMUM) naming it in its place. diagnostics: style, the MAP
    (optimum_map, hessian_map, extra_noise_map), marginal sds in the unconstrained space (optimum_sd,
    hessian_raw_sd, log_extra_noise_sd), covariance (P, k, k), steps, converged, positive_definite.
    """
    style, draws, max_steps = options.style, options.draws, options.max_steps
    _check_models(style, models)
    with jax.enable_x64(True):
        stacked = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *models)
        fits = jax.vmap(lambda m: laplace_approximation(_target(m, style), max_steps=max_steps))(stacked)
        fits = jax.tree.map(np.asarray, fits)
        return [
            _draws_from_fit(
                jax.tree.map(jnp.asarray, model),
                jax.tree.map(lambda x, m=m: x[m], fits),
                keys[m],
                draws,
                style,
                max_steps,
            )
            for m, model in enumerate(models)
        ]


def _check_models(style: str, models: Sequence[GradientModel]) -> None:
    """One ValueError, before any work, for a style="paper" fit the models cannot take."""
    if style == "paper" and models[0].n_params % 2:
        raise ValueError(f"style='paper' splits φ* = (μ*, ρ*) in halves, but P = {models[0].n_params} is odd")
    if style == "paper" and any(is_non_private(model.noise_var) for model in models):
        raise ValueError(
            "style='paper' fixes the extra noise u at 0, and the trace is non-private (σ = 0): without DP noise the "
            "model would have no noise at all; use style='full' (the default), which fits u, the subsampling and "
            "Monte Carlo noise"
        )


def _target(model: GradientModel, style: str) -> GradientModel:
    """The model the mode is sought on: under style="paper", u = 0, i.e. the same model without extra
    noise (u's prior at 0 is a constant)."""
    return dataclasses.replace(model, extra_noise="none") if style == "paper" else model


def _draws_from_fit(
    model: GradientModel, fit: LaplaceFit, key, draws: int, style: str, max_steps: int
) -> Draws | FitFailure:
    """Draws (and diagnostics) of one model's Laplace fit (arrays (P, …)), or the FitFailure (NO_OPTIMUM)
    naming failed coordinates."""
    message = _failure_message(fit, max_steps)
    if message is not None:
        return FitFailure(NO_OPTIMUM, message)
    paper = style == "paper"
    mode = np.asarray(fit.mode)
    hessian_map = np.asarray(model.hessian(fit.mode[:, 1]))
    sd = np.sqrt(np.diagonal(np.asarray(fit.covariance), axis1=-2, axis2=-1))
    if paper:
        half = model.n_params // 2
        z = np.asarray(jax.random.normal(key, (draws, half), jnp.float64))
        optimum = np.broadcast_to(mode[:, 0], (draws, model.n_params)).copy()
        optimum[:, :half] += sd[:half, 0] * z
        hessian = np.broadcast_to(hessian_map, optimum.shape)
        extra = None if model.extra_noise == "none" else np.zeros_like(optimum)
    else:
        z = jax.random.normal(key, (draws, *mode.shape), jnp.float64)
        x = mode + np.asarray(jnp.einsum("pij,npj->npi", jnp.linalg.cholesky(fit.covariance), z))
        optimum, hessian = x[..., 0], np.asarray(model.hessian(x[..., 1]))
        extra = np.exp(x[..., 2]) if mode.shape[-1] == 3 else None
    free = mode.shape[-1] == 3
    diagnostics = LaplaceDiagnostics(
        style=style,
        optimum_map=mode[:, 0],
        hessian_map=hessian_map,
        extra_noise_map=np.exp(mode[:, 2]) if free else None,
        optimum_sd=sd[:, 0],
        hessian_raw_sd=sd[:, 1],
        log_extra_noise_sd=sd[:, 2] if free else None,
        covariance=np.asarray(fit.covariance),
        steps=np.asarray(fit.steps),
        converged=np.asarray(fit.converged),
        positive_definite=np.asarray(fit.positive_definite),
    )
    return Draws(
        optimum=optimum[None],
        hessian=np.array(hessian)[None],
        extra_noise=None if extra is None else np.array(extra)[None],
        diagnostics=diagnostics,
    )
