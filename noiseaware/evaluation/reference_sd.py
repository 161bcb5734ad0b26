"""The non-private posterior's sd per coordinate, the yardstick of interval widths in a coverage study.

For simulation m with data x_m, in the traces' own θ coordinates (their site map and transforms):

    θ̂_m = argmax log p̃(θ | x_m),   sd_mj = sqrt([(−∇² log p̃(θ̂_m | x_m))⁻¹]_jj),

the Laplace approximation at the MAP (p̃ includes the transforms' log-Jacobian). θ̂ is found by damped Newton
steps from the simulation's true θ, so it never fails to start in the right basin; at N in the thousands the
Laplace sd is within a few per cent of the exact posterior sd (tests/test_coverage.py checks M2 against its
Beta posterior). It is a reference computed from the data, so only simulations may use it; nothing private is
released by it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..recording.contract import ModelSpec, inspect_model
from ..trace import Trace

__all__ = ["NEWTON_STEPS", "WIDTH_Z", "nonprivate_sd", "nonprivate_width"]

NEWTON_STEPS = 30
"""Damped Newton steps to the MAP (each tries the full step and halvings of it, keeping the best)."""
_STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)
WIDTH_Z = 1.6448536269514722
"""Φ⁻¹(0.95): a normal's central 90 % interval is ±WIDTH_Z sd."""


def nonprivate_width(model, trace: Trace, data: Mapping, start) -> np.ndarray:
    """The non-private posterior's central 90 % interval width, 2·WIDTH_Z·sd (M, d) (`nonprivate_sd`)."""
    return 2.0 * WIDTH_Z * nonprivate_sd(model, trace, data, start)


def nonprivate_sd(model, trace: Trace, data: Mapping, start) -> np.ndarray:
    """sd (M, d) of the non-private posterior (module doc) of M simulated data sets `data` (arrays with a leading
    M axis), in the θ coordinates of `trace` (any of the simulations' traces); start (M, d): the true θ. Rows
    whose Newton steps meet a non-finite value are NaN."""
    first = {name: np.asarray(value)[0] for name, value in data.items()}
    transforms = {site.name: site.transform for site in trace.sites}
    spec = inspect_model(model, first, transforms=transforms, sites=[site.name for site in trace.sites])
    with jax.enable_x64(True):
        arrays = {name: jnp.asarray(value) for name, value in data.items()}
        sd = _laplace_sd(spec, arrays, jnp.asarray(start, jnp.float64))
    return np.asarray(sd, np.float64)


@functools.partial(jax.jit, static_argnums=0)
def _laplace_sd(spec: ModelSpec, data, start):
    return jax.vmap(functools.partial(_one, spec))(data, start)


def _one(spec: ModelSpec, data, start):
    per_example, constants = spec.split_data(data)

    def log_joint(theta):
        likelihood = jax.vmap(lambda example: spec.example_log_likelihood(theta, example, constants))(per_example)
        return spec.log_prior(theta, per_example, constants) + jnp.sum(likelihood)

    sizes = jnp.asarray(_STEP_SIZES, start.dtype)

    def step(theta, _):
        gradient, curvature = jax.grad(log_joint)(theta), jax.hessian(log_joint)(theta)
        direction = jnp.linalg.solve(-curvature, gradient)
        candidates = theta + sizes[:, None] * direction
        values = jax.vmap(log_joint)(candidates)
        best = jnp.argmax(jnp.where(jnp.isfinite(values), values, -jnp.inf))
        return candidates[best], None

    optimum, _ = jax.lax.scan(step, start, None, length=NEWTON_STEPS)
    covariance = jnp.linalg.inv(-jax.hessian(log_joint)(optimum))
    sd = jnp.sqrt(jnp.diagonal(covariance))
    return jnp.where(jnp.all(jnp.isfinite(sd)) & jnp.all(jnp.diagonal(covariance) > 0), sd, jnp.nan)
