"""The Stein model's scale rows (docs/method.md §2.11). For a mean-field Gaussian q, Stein's identity ties each ρ_j row
to the μ_j row's slope a_j = Λ_jj,

    E G_ρ,tj = q·ω_tj·(a_j ψ_tj − 1),   ψ = softplus(ρ)², ω = sigmoid(ρ)/softplus(ρ),

so ψ*_j = 1/a_j and the ρ row adds no unknown. With each μ column's partner ρ row and its ψ-view sums
(`statistics.ScalePartner`), here: the ρ row's likelihood given a_j, which the exact route multiplies into the μ
column's grid (`partner_log_likelihood`); φ*'s draws, of coupled μ rows and of the ρ rows from their partners' slopes
(`stein_draws`); and the check that the two rows agree on a_j (`partner_conflict`, `shared_curvature_notes`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ..util.notes import Note
from ..util.numerics import sigmoid, softplus_inverse
from .coupled import coupled_draws, is_coupled
from .draws import Draws, redrawn
from .gradient_model import GradientModel
from .statistics import centred_phiphi, ols_fit, residual_squares

__all__ = [
    "partner_conflict",
    "partner_log_likelihood",
    "stein_draws",
    "shared_curvature_notes",
]


def partner_log_likelihood(model: GradientModel, hessian, extra_var, nodes, log_rule):
    """What the Stein model adds to a μ_j column's log weight at slope a_j = `hessian` and extra noise variance u²
    = `extra_var` (…, P): log p(ρ_j's row | a_j), the partner scale row's likelihood at ψ*_j = 1/a_j and slope a_j
    (Stein's identity, docs/method.md §2.11), its own extra noise integrated out under its prior over `nodes` (n, P)
    with the quadrature's log weights `log_rule` (n, P) (the exact route's); and where the μ row's sums are partial
    (`partial_on_others`), the other coordinates' coefficients integrated out (`gradient_model.others_log_factor`, in
    the μ column's own likelihood). 0 where the column has no partner (and for models without one)."""
    partner = model.partner
    if partner is None:
        return jnp.zeros_like(hessian)
    a = jnp.maximum(hessian, jnp.finfo(jnp.result_type(hessian)).tiny)[..., None, :]
    var = partner.noise_var + nodes**2
    squares = residual_squares(partner, 1.0 / a - partner.centre, model.sampling_rate * a)
    log_like = -0.5 * model.stats.count * jnp.log(2.0 * jnp.pi * var) - 0.5 * squares / var + log_rule
    if model.extra_noise != "none":
        prior = dist.HalfNormal(jnp.where(partner.active, partner.extra_sd, 1.0))
        log_like = log_like + prior.log_prob(jnp.maximum(nodes, jnp.finfo(nodes.dtype).tiny))
    return jnp.where(partner.active, jax.nn.logsumexp(log_like, axis=-2), 0.0)


def partner_conflict(model: GradientModel) -> np.ndarray:
    """(P,): how far each μ_j row's own least-squares slope (with a free intercept) lies from its partner ρ_j row's
    estimate of the same Λ_jj (`ScalePartner.slope`), |log â_μ − log â_ρ| in standard errors of the difference, where
    both are identified (above twice their standard errors; 0 elsewhere and without partners). Stein's identity ties
    them; a large value says the rows do not share one curvature (coupled coordinates, whose μ row's slope is a
    marginal one, or active clipping), and the Stein model's ρ* is then not to be trusted."""
    partner = model.partner
    if partner is None:
        return np.zeros(model.n_params)
    slope, residual = ols_fit(model.stats)
    q = float(model.sampling_rate)
    a = np.abs(np.asarray(slope, np.float64)) / q
    se = np.sqrt(np.maximum(residual, model.noise_var) / centred_phiphi(model.stats)) / q
    shared, shared_se = np.asarray(partner.slope, np.float64), np.asarray(partner.slope_se, np.float64)
    identified = np.asarray(partner.active) & (a > 2.0 * se) & (shared > 2.0 * shared_se)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(np.log(a) - np.log(shared)) / np.hypot(se / a, shared_se / shared)
    return np.where(identified, z, 0.0)


def stein_draws(model: GradientModel, draws: Draws, key) -> Draws:
    """The Stein model's draws of φ* from the exact route's per-column draws (docs/method.md §2.11): coupled μ rows
    (partial sums) drawn jointly (`coupled.coupled_draws`), then each ρ_j from its μ_j partner's slope a_j = Λ_jj:
    ρ*_j = softplus⁻¹(a_j^(−½)) (the root of E G_ρj = q ω (a ψ − 1)), its slope in ρ there over q,
    2·a_j·sigmoid(ρ*_j)². φ*'s and the slopes' moments of the redrawn rows are those of the draws.
    draws: (1, K, P) each; key: the coupled rows' jax key."""
    partner = model.partner
    active = np.asarray(partner.active, bool)
    rows = np.flatnonzero(~active)
    if is_coupled(model):
        draws = coupled_draws(model, draws, key)
    optimum, hessian = np.array(draws.optimum, np.float64), np.array(draws.hessian, np.float64)
    shared = hessian[..., np.asarray(partner.column)[rows]]
    with np.errstate(over="ignore"):
        rho = softplus_inverse(np.maximum(shared, np.finfo(np.float64).tiny) ** -0.5)
    optimum[..., rows], hessian[..., rows] = rho, 2.0 * shared * sigmoid(rho) ** 2
    return redrawn(draws, rows, optimum=optimum, hessian=hessian)


STEIN_CONFLICT = 3.0
"""Standard errors by which a μ row's own slope and its ρ partner's estimate of the same curvature may differ before
the Stein model's fit says so (`partner_conflict`)."""
STEIN_ADVICE = (
    "the μ and ρ rows of these coordinates disagree about their shared curvature Λ_jj (Stein's identity, "
    "docs/method.md §2.11): the coordinates are coupled (the μ row's slope is then a marginal one) or clipping is "
    "active, and the Stein model's ρ* is not to be trusted here; fit with prior='default'"
)


def shared_curvature_notes(model: GradientModel, param_names) -> list[Note]:
    """The note on a Stein-model fit whose μ and ρ rows contradict the one curvature they share, naming the θ
    coordinates (their μ and ρ rows), with the largest disagreement in standard errors."""
    conflict = partner_conflict(model)
    rows = np.flatnonzero(conflict > STEIN_CONFLICT)
    if not rows.size:
        return []
    named = tuple(param_names[j] for j in rows) + tuple(param_names[int(model.partner.column[j])] for j in rows)
    return [Note("shared curvature contradicted", STEIN_ADVICE, named, value=float(conflict.max()), combine="max")]
