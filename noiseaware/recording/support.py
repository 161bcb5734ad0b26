"""Observed data against the support of its likelihood: x = −1 under an Exponential is an error, not a wrong fit.

For an observed site of a traced model run, `support.check(value)` marks each value (each event, for a
multivariate site) inside the support of the site's distribution; `outside_support` turns the values outside
into one message naming the site, how many, one example and the support. A support that depends on the latent
values (Uniform(0, θ), Pareto(scale θ)) cannot be judged at one θ: `depends_on_latents` tells it apart by running
the model under `jax.vmap` over a batch of one θ, where a check that does not involve θ stays a concrete array.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

__all__ = ["depends_on_latents", "describe_support", "distribution_name", "outside_support"]

_WRAPPERS = (dist.ExpandedDistribution, dist.Independent, dist.MaskedDistribution)
_NAMED_RANGES = ("positive", "nonnegative", "unit interval", "integer nonnegative", "integer positive")
"""Supports whose name says their bounds."""


def distribution_name(fn) -> str:
    """The distribution under numpyro's wrappers (plate expansion, to_event, mask): 'Exponential'."""
    while isinstance(fn, _WRAPPERS):
        fn = fn.base_dist
    return type(fn).__name__


def describe_support(constraint) -> str:
    """A numpyro constraint in words: 'positive', 'boolean', 'integer interval 0 to 2', 'greater than 1.0'."""
    while hasattr(constraint, "base_constraint"):  # independent(c, k): the same set per element
        constraint = constraint.base_constraint
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", type(constraint).__name__.lstrip("_")).lower()
    bounds = [getattr(constraint, b) for b in ("lower_bound", "upper_bound") if hasattr(constraint, b)]
    if not bounds or words in _NAMED_RANGES:
        return words
    if any(np.size(b) != 1 for b in bounds):
        return f"{words}, with bounds per example"
    return f"{words} {' to '.join(repr(np.asarray(b).item()) for b in bounds)}"


def outside_support(name: str, site: Mapping, where: str = "") -> str | None:
    """None when every observed value of `site` lies in its distribution's support (or the distribution does not
    state its support), else the message.

    E.g. "x: 3 of 5000 values lie outside the support of Exponential (positive), e.g. -1.0"; `where` follows the
    name (" (data set 4 of 20)"). The value must have the site's shape (batch and event shape).
    """
    fn, value = site["fn"], np.asarray(site["value"])
    if constraints.is_dependent(fn.support):
        return None
    inside = _inside_closure(fn.support, value)
    if inside.all():
        return None
    inside = np.broadcast_to(inside, value.shape[: value.ndim - fn.support.event_dim])  # one flag per value or event
    example = value[tuple(np.argwhere(~inside)[0])].tolist()
    return (
        f"{name}{where}: {int(np.sum(~inside))} of {inside.size} values lie outside the support of "
        f"{distribution_name(fn)} ({describe_support(fn.support)}), e.g. {example}: clean or drop those "
        "examples, or choose a likelihood whose support holds them"
    )


def _inside_closure(support, value: np.ndarray) -> np.ndarray:
    """`support.check(value)`, with the bounds of a continuous interval support closed: a draw that underflows
    onto an open bound (an Exponential draw of exactly 0.0 in float32) has a finite density and is data, while
    x = −1 is not. One flag per value (per event for a multivariate support)."""
    base = support
    while hasattr(base, "base_constraint"):
        base = base.base_constraint
    if base.is_discrete or not isinstance(
        base, (constraints._GreaterThan, constraints._LessThan, constraints._Interval)
    ):
        return np.asarray(support.check(jnp.asarray(value)))
    inside = np.isfinite(value)
    if hasattr(base, "lower_bound"):
        inside &= value >= np.asarray(base.lower_bound)
    if hasattr(base, "upper_bound"):
        inside &= value <= np.asarray(base.upper_bound)
    events = value.ndim - support.event_dim
    return inside.reshape(inside.shape[:events] + (-1,)).all(axis=-1)


def depends_on_latents(run: Callable[[Mapping], Mapping], values: Mapping, name: str) -> bool:
    """Whether observed site `name`'s support check involves the latent values.

    run(values) → model trace with the latent sites substituted by `values` ({site: constrained value}); it is
    called once under `jax.vmap` over a batch of one set of values.
    """
    found = []

    def probe(batch):
        site = run(batch)[name]
        found.append(isinstance(site["fn"].support.check(jnp.asarray(site["value"])), jax.core.Tracer))
        return jnp.zeros(())

    jax.vmap(probe)({k: jnp.asarray(v)[None] for k, v in values.items()})
    return found[0]
