"""The coordinates the "nuts" route samples, and where its chains start (module doc of `nuts`).

    target, y0, warm = sampled_target(model, start)   # start "exact" (the default) or "prior"

`Target` is numpyro's potential of the gradient model in reparametrised coordinates y (P, k): φ* through its
exact conditional given (ã, u), ã and u centred and scaled per coordinate. `prior_placement` centres them at the
prior means scaled to unit curvature there (the cold start); `exact_placement` at the exact route's marginal
posterior (the warm start), on the sign-symmetric twin of the model (`symmetric`). Both backends of `nuts`
sample this one target.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.util import constrain_fn, get_transforms, potential_energy, unconstrain_fn

from .exact import GRID_DEFAULTS, exact_grid, marginal_quantiles
from .gradient_model import GradientModel, integrate_optimum, numpyro_model

__all__ = [
    "EDGE_TRUST",
    "Target",
    "exact_placement",
    "initial_values",
    "prior_placement",
    "sampled_target",
    "symmetric",
]

EDGE_TRUST = 1e-3
"""The most mass an exact grid may hold on its edge for its coordinates to start there (the grid's placement is a
start and a scale, not the answer: a grid that cuts a little mass off still places the chain well)."""


def initial_values(model: GradientModel) -> dict[str, jax.Array]:
    """The chains' starting point, (P,) per site: the prior means of φ* and ã, and for u the half-normal's
    mean σ_u·sqrt(2/π), or 0.5·σ_u under the sign-symmetric normal prior (at u = 0 its gradient vanishes)."""
    values = {"optimum": model.optimum_loc, "hessian_raw": model.hessian_loc}
    if model.extra_noise == "half-normal":
        values["extra_noise"] = model.extra_sd * math.sqrt(2.0 / math.pi)
    elif model.extra_noise == "normal":
        values["extra_noise"] = 0.5 * model.extra_sd
    return values


class Target(NamedTuple):
    """numpyro's potential of `numpyro_model` in the coordinates y (P, k) that NUTS samples, k = 2 or 3.

    Per coordinate j, y_j = (ε_j, y_ã, y_u): ã_j = centre_ã + scale_ã·y_ã, likewise numpyro's unconstrained
    u_j of `model` (log u under the half-normal prior, u under the normal one; from the exact start `model` is the
    sign-symmetric twin, u on the line), and φ*_j = m_j + s_j·ε_j, where
    N(m_j, s_j²) is φ*_j's exact conditional given (ã_j, u_j) (`integrate_optimum`). The map y → (φ*, ã, u)
    has Jacobian Π_j s_j·scale_j, so U_y(y) = U(φ*, ã, u) − Σ_j log s_j (U numpyro's potential energy)
    targets exactly the posterior whatever m and s are. As p(φ*, ã, u) = p(ã, u)·N(φ*; m, s²), ε is standard
    normal and independent of (ã, u): no φ*–ã correlation, and no funnel where a → 0 sets φ* free.
    """

    model: GradientModel
    names: tuple[str, ...]
    transforms: dict
    centre: dict[str, jax.Array]
    scale: dict[str, jax.Array]

    def unconstrained(self, y) -> tuple[dict[str, jax.Array], jax.Array]:
        """numpyro's unconstrained site values at y (…, P, k), each (…, P), and log s (…, P)."""
        z = {name: self.centre[name] + self.scale[name] * y[..., i + 1] for i, name in enumerate(self.names)}
        extra_var = self.transforms["extra_noise"](z["extra_noise"]) ** 2 if "extra_noise" in z else 0.0
        conditional = integrate_optimum(self.model, z["hessian_raw"], extra_var)
        optimum = conditional.mean + conditional.sd * y[..., 0]
        return {"optimum": self.transforms["optimum"].inv(optimum), **z}, jnp.log(conditional.sd)

    def potential(self, y):
        """U_y(y), a scalar."""
        z, log_sd = self.unconstrained(y)
        return potential_energy(numpyro_model, (self.model,), {}, z) - jnp.sum(log_sd)

    def sites(self, y, batch_ndims: int) -> dict[str, jax.Array]:
        """The constrained sites (and the deterministic "hessian") at draws y with `batch_ndims` leading axes."""
        z, _ = self.unconstrained(y)
        return constrain_fn(numpyro_model, (self.model,), {}, z, return_deterministic=True, batch_ndims=batch_ndims)


def sampled_target(model: GradientModel, start: str = "exact") -> tuple[Target, jax.Array, jax.Array]:
    """The sampled coordinates of `model`, the chains' start y₀ (P, k) and which coordinates start from the exact
    grid, (P,) bool; jittable.

    start "prior": `prior_placement` of `model`. start "exact": the sign-symmetric twin of `model` (`symmetric`)
    placed by `exact_placement`, with the twin's prior placement kept for any coordinate whose grid gives no
    usable placement (`warm` False there). The posterior of (φ*, ã, |u|) is the same either way.
    """
    if start == "prior":
        target, position = prior_placement(model)
        return target, position, jnp.zeros(position.shape[0], bool)
    target, position = prior_placement(symmetric(model))
    centre, scale, warm = exact_placement(model, target.names)
    pick = functools.partial(jnp.where, warm)
    target = target._replace(
        centre={name: pick(centre[name], target.centre[name]) for name in target.names},
        scale={name: pick(scale[name], target.scale[name]) for name in target.names},
    )
    return target, jnp.where(warm[:, None], 0.0, position), warm


def symmetric(model: GradientModel) -> GradientModel:
    """The model with u ~ N(0, σ_u²) on the real line in place of the half-normal prior (else `model` itself).

    The likelihood depends on u² only, so the law of |u| (and of φ*, ã) under this twin's posterior is the
    half-normal model's posterior exactly. Its sampled coordinate is u itself, not log u: where u is weakly
    identified, log u has a long exponential tail towards u → 0 and a doubly exponential wall above, which cost
    NUTS small steps and deep trees; u on the line has neither.
    """
    return dataclasses.replace(model, extra_noise="normal") if model.extra_noise == "half-normal" else model


def prior_placement(model: GradientModel) -> tuple[Target, jax.Array]:
    """The cold start: y₀ maps to `initial_values`; ã and u are centred there and scaled by 1/sqrt|∂²U_y/∂y²|
    there (1 where that is zero or not finite; U_y is a sum of per-coordinate terms, so one Hessian-vector product
    per site gives them). On unit scales, Stan's mass-matrix shrinkage towards 10⁻³·I cannot swamp tiny posterior
    variances (which forces step sizes near 0.02 on raw coordinates).
    """
    args = (model,)
    values = initial_values(model)
    names = tuple(name for name in values if name != "optimum")
    centre = unconstrain_fn(numpyro_model, args, {}, values)
    unit = Target(
        model,
        names,
        get_transforms(numpyro_model, args, {}, values),
        {name: centre[name] for name in names},
        {name: jnp.ones_like(centre[name]) for name in names},
    )
    extra_var = values["extra_noise"] ** 2 if "extra_noise" in values else 0.0
    conditional = integrate_optimum(model, values["hessian_raw"], extra_var)
    noise = (values["optimum"] - conditional.mean) / conditional.sd
    start = jnp.stack([noise] + [jnp.zeros_like(noise)] * len(names), axis=-1)
    gradient = jax.grad(unit.potential)
    scale = {}
    for i, name in enumerate(names, start=1):
        curvature = jnp.abs(jax.jvp(gradient, (start,), (jnp.zeros_like(start).at[:, i].set(1.0),))[1][:, i])
        usable = jnp.isfinite(curvature) & (curvature > 0.0)
        scale[name] = jnp.where(usable, jax.lax.rsqrt(jnp.where(usable, curvature, 1.0)), 1.0)
    return unit._replace(scale=scale), start


def exact_placement(model: GradientModel, names: tuple[str, ...]):
    """The warm start of the sign-symmetric twin (`symmetric`): centre and scale per site in `names`, (P,) each,
    and whether they are usable, (P,) bool.

    From the exact route's grid (`exact_grid`, default sizes) of each coordinate's (ã, u) posterior: ã is centred
    at its marginal median and scaled by half its 16–84 % range. u on the line is symmetric about 0: where |u|'s
    16 % quantile lies further from 0 than half its 16–84 % range (or the trace is non-private, whose likelihood
    vanishes at u = 0), its posterior is two mirror modes, and u is centred at the median of |u| (the chain
    samples the mode u > 0; |u| has the same law in either) and scaled by that half range; else it is one mode
    about 0, and u is centred at 0 and scaled by sqrt(E u²). With ε = 0 there, the start is φ*'s conditional mean
    at the centre, and the target in y is near N(0, I). A coordinate is usable where every centre and scale is
    finite, the scales are positive and the grid holds at most EDGE_TRUST of its mass on its edge.
    """
    grid = exact_grid(model, **GRID_DEFAULTS)
    centre, scale = {}, {}
    quantiles = marginal_quantiles(grid.hessian_raw, jnp.sum(grid.weights, axis=1))
    centre["hessian_raw"], scale["hessian_raw"] = quantiles[:, 1], 0.5 * (quantiles[:, 2] - quantiles[:, 0])
    if "extra_noise" in names:
        weights = jnp.sum(grid.weights, axis=0)
        low, median, high = marginal_quantiles(grid.extra_noise, weights).T
        spread = 0.5 * (high - low)
        apart = (low > spread) | (model.noise_var == 0.0)
        centre["extra_noise"] = jnp.where(apart, median, 0.0)
        scale["extra_noise"] = jnp.where(apart, spread, jnp.sqrt(jnp.sum(weights * grid.extra_noise**2, axis=0)))
    warm = grid.edge_mass <= EDGE_TRUST
    for name in names:
        warm &= jnp.isfinite(centre[name]) & jnp.isfinite(scale[name]) & (scale[name] > 0.0)
    return centre, scale, warm
