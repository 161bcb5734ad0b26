"""`Draws`: what every route of the gradient model returns; `prior_draws`: the same from the model's prior alone."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..util.diagnostics import Diagnostics, NoDiagnostics
from ..util.numerics import sigmoid, softplus, softplus_inverse
from .gradient_model import GradientModel, log_likelihood, prior_distributions, select_rows

__all__ = ["Draws", "draw_log_densities", "prior_draws", "redrawn", "summed_log_densities"]


@dataclasses.dataclass(frozen=True)
class Draws:
    """Posterior draws of the gradient model's unknowns, each (chains, K, P) float64.

    optimum: φ* = (μ*, ρ*); hessian: the Hessian diagonal a = model.hessian(ã) (softplus or exp of ã);
    extra_noise: |u|, the extra
    gradient-noise sd (None when the prior has no extra noise). diagnostics: the route's typed record of its
    facts (R-hat, ESS, divergences, convergence flags, grid sizes …): `ExactDiagnostics`, `LaplaceDiagnostics`
    or `NutsDiagnostics`, each a frozen `noiseaware.util.diagnostics.Diagnostics` that also reads as a mapping.
    hessian_matrix: where the μ rows are coupled and drawn jointly (`coupled.coupled_draws`), Λ per draw
    (chains, K, d, d), E G_μ = qΛ(μ − μ*); else None.
    """

    optimum: np.ndarray
    hessian: np.ndarray
    extra_noise: np.ndarray | None
    diagnostics: Diagnostics
    hessian_matrix: np.ndarray | None = None

    def __post_init__(self):
        for name in ("optimum", "hessian", "extra_noise"):
            value = getattr(self, name)
            if value is not None and np.ndim(value) != 3:
                raise ValueError(f"Draws.{name} must be (chains, draws, P); got shape {np.shape(value)}")


def redrawn(draws: Draws, columns, **values) -> Draws:
    """`draws` with the arrays `values` (optimum=…, hessian=…, each (1, K, P)) in place of theirs and, for the
    `columns` (an index array) redrawn in them, the diagnostics' `<name>_mean` and `<name>_sd` those of the draws."""
    facts = draws.diagnostics
    moments = {}
    for name, value in values.items():
        for stat, of in (("mean", np.mean), ("sd", np.std)):
            column = np.array(getattr(facts, f"{name}_{stat}"), np.float64)
            column[columns] = of(value[0][:, columns], axis=0)
            moments[f"{name}_{stat}"] = column
    return dataclasses.replace(draws, **values, diagnostics=dataclasses.replace(facts, **moments))


def prior_draws(model: GradientModel, key, draws: int) -> Draws:
    """K draws (chains 1) of φ* ~ N(optimum_loc, optimum_sd²) and a = link(ã), ã ~ N(hessian_loc, hessian_sd²): the
    gradient model's prior alone, the posterior of a trace that says nothing (`checks.clip_reach`). The scale rows
    must be read in ρ (scale_model "linear")."""
    if np.any(np.asarray(model.scale_rows)):
        raise ValueError("prior_draws takes a model whose scale rows are read in ρ (scale_model='linear')")
    k_optimum, k_hessian = jax.random.split(key)
    shape = (1, draws, model.n_params)
    normal = (np.asarray(jax.random.normal(k, shape), np.float64) for k in (k_optimum, k_hessian))
    optimum = np.asarray(model.optimum_loc) + np.asarray(model.optimum_sd) * next(normal)
    hessian = np.asarray(model.hessian(np.asarray(model.hessian_loc) + np.asarray(model.hessian_sd) * next(normal)))
    return Draws(optimum, hessian, None, NoDiagnostics())


def draw_log_densities(model: GradientModel, draws: Draws) -> tuple[np.ndarray, np.ndarray]:
    """Each draw's log prior log p(φ*_j, ã_j, u_j) and log-likelihood log p(trace_j | φ*_j, a_j, u_j) under `model`,
    per row, (chains, K, P) each (up to constants; with extra terms the likelihood integrates their coefficients).
    A scale row the model reads in ψ = softplus(ρ)² is carried back from the draws' ρ* and dG/dρ: ψ* = softplus(ρ*)²,
    a_ψ = a_ρ / (2 sigmoid(ρ*)²)."""
    rows = np.asarray(model.scale_rows)
    optimum, hessian = np.asarray(draws.optimum), np.asarray(draws.hessian)
    if rows.any():
        optimum = np.where(rows, softplus(optimum) ** 2, optimum)
        hessian = np.where(rows, hessian / (2.0 * sigmoid(draws.optimum) ** 2), hessian)
    hessian = np.maximum(hessian, np.finfo(np.float64).tiny)
    raw = np.log(hessian) if model.hessian_link == "exp" else softplus_inverse(hessian)
    with jax.enable_x64(True):  # sums over thousands of steps: float32 would lose the differences between draws
        model = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64) if np.ndim(x) or np.isscalar(x) else x, model)
        priors = prior_distributions(model)
        log_prior = priors["optimum"].log_prob(optimum) + priors["hessian_raw"].log_prob(raw)
        extra_var = 0.0
        if "extra_noise" in priors and draws.extra_noise is not None:
            u = np.maximum(np.asarray(draws.extra_noise), np.finfo(np.float64).tiny)
            log_prior = log_prior + priors["extra_noise"].log_prob(u)
            extra_var = u**2
        likelihood = log_likelihood(model, optimum, hessian, extra_var)
        return np.array(log_prior, np.float64), np.array(likelihood, np.float64)  # copies: writable


def summed_log_densities(model: GradientModel, draws: Draws, repaired, curved) -> tuple[np.ndarray, np.ndarray]:
    """Each draw's log prior and log-likelihood summed over the rows, (C, K) each (`draw_log_densities`): the rows
    `repaired` (indices) under the model they were drawn from, `curved()` (the scale rows linear in ψ)."""
    log_prior, log_likelihood = draw_log_densities(model, draws)
    if len(repaired):
        rows = np.asarray(repaired)
        columns = (
            None if x is None else np.asarray(x)[..., rows] for x in (draws.optimum, draws.hessian, draws.extra_noise)
        )
        part = Draws(*columns, draws.diagnostics)
        log_prior[..., rows], log_likelihood[..., rows] = draw_log_densities(select_rows(curved(), rows), part)
    return log_prior.sum(axis=-1), log_likelihood.sum(axis=-1)
