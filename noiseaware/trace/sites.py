"""Named model sites ⇄ one flat unconstrained vector θ ∈ R^d.

A model's continuous latent sites (constrained values x_site) are mapped to unconstrained values
u_site = T_site⁻¹(x_site) with numpyro transforms and concatenated, in site order, into θ of shape (d,).
Every transform has a name, so the map can be written into a trace and rebuilt from it:

    identity            R → R                   (real, real_vector)
    exp                 R → (0, ∞)              numpyro's default for positive sites
    softplus            R → (0, ∞)              the research map for positive sites
    sigmoid             R → (0, 1)
    interval(a,b)       R → (a, b)              a + (b − a)·sigmoid(u)
    greater_than(a)     R → (a, ∞)              a + exp(u)
    less_than(a)        R → (−∞, a)             a − exp(u)
    stick_breaking      R^{K−1} → simplex_K     numpyro's default for simplex sites
    alr                 R^{K−1} → simplex_K     additive log-ratio, softmax([u₁, …, u_{K−1}, 0])

A site may carry labels, one per element of its constrained value (row-major), e.g. the feature names of
a regression's coefficients: its elements are then named 'site[label]' instead of 'site[i]'. The
unconstrained coordinate at a multi-index takes the label of the element at the same multi-index, so a
simplex site of K elements names its K − 1 coordinates by the first K − 1 labels (alr: u_k = log(p_k/p_K)).
Labels are the data schema (column names), not data: they are released with the trace.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions import transforms as T

from .families import MeanField

__all__ = [
    "AdditiveLogRatioTransform",
    "SiteSpec",
    "SiteMap",
    "transform_from_name",
    "default_transform_name",
    "RESEARCH_TRANSFORMS",
]


class AdditiveLogRatioTransform(T.ParameterFreeTransform):
    """u ∈ R^{K−1} ↦ p = softmax([u, 0]) on the K-simplex; inverse u_k = log(p_k / p_K).

    log|det ∂p_{1:K−1}/∂u| = Σ_{k=1}^{K} log p_k.
    """

    domain = constraints.real_vector
    codomain = constraints.simplex

    def __call__(self, x):
        padded = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (1,), x.dtype)], axis=-1)
        return jax.nn.softmax(padded, axis=-1)

    def _inverse(self, y):
        return jnp.log(y[..., :-1]) - jnp.log(y[..., -1:])

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        padded = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (1,), x.dtype)], axis=-1)
        return jnp.sum(jax.nn.log_softmax(padded, axis=-1), axis=-1)

    def forward_shape(self, shape):
        return shape[:-1] + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        return shape[:-1] + (shape[-1] - 1,)

    def tree_flatten(self):
        return (), ((), dict())

    def __eq__(self, other):
        return isinstance(other, AdditiveLogRatioTransform)


_PLAIN = {
    "identity": lambda: T.IdentityTransform(),
    "exp": lambda: T.ExpTransform(),
    "softplus": lambda: T.SoftplusTransform(),
    "sigmoid": lambda: T.SigmoidTransform(),
    "stick_breaking": lambda: T.StickBreakingTransform(),
    "alr": lambda: AdditiveLogRatioTransform(),
}
_BOUNDED = re.compile(r"^(interval|greater_than|less_than)\(([^,()]+)(?:,([^,()]+))?\)$")

RESEARCH_TRANSFORMS = "research"
"""Transform preset of the research code: softplus for positive sites, additive log-ratio for simplices."""


_PLAIN_CODOMAINS = {
    "identity": ("real",),
    "exp": ("greater_than", 0.0),
    "softplus": ("greater_than", 0.0),
    "sigmoid": ("interval", 0.0, 1.0),
    "stick_breaking": ("simplex",),
    "alr": ("simplex",),
}


def _codomain(name: str) -> tuple:
    """What the named transform maps onto, as a comparable key: ('real',), ('simplex',),
    ('interval', a, b), ('greater_than', a) or ('less_than', a); ValueError for an unknown name."""
    if name in _PLAIN_CODOMAINS:
        return _PLAIN_CODOMAINS[name]
    match = _BOUNDED.match(name.replace(" ", ""))
    if match:
        kind, a, b = match.group(1), float(match.group(2)), match.group(3)
        if kind == "interval" and b is not None and float(b) > a:
            return kind, a, float(b)
        if kind in ("greater_than", "less_than") and b is None:
            return kind, a
    raise ValueError(
        f"unknown transform {name!r}: use one of {sorted(_PLAIN)}, 'interval(a,b)' with a < b, "
        "'greater_than(a)' or 'less_than(a)'"
    )


def transform_from_name(name: str) -> T.Transform:
    """The numpyro transform (unconstrained → constrained) with the given name (see module doc)."""
    kind, *bounds = _codomain(name)
    if name in _PLAIN:
        return _PLAIN[name]()
    if kind == "interval":
        a, b = bounds
        return T.ComposeTransform([T.SigmoidTransform(), T.AffineTransform(a, b - a)])
    return T.ComposeTransform([T.ExpTransform(), T.AffineTransform(bounds[0], 1.0 if kind == "greater_than" else -1.0)])


def _bound(value) -> float:
    if np.ndim(value) > 0:
        raise ValueError("per-element bounds are not supported: give the site scalar bounds")
    return float(value)


def _base_constraint(support):
    while isinstance(support, constraints._IndependentConstraint):
        support = support.base_constraint
    return support


def default_transform_name(support, preset: str = "numpyro") -> str:
    """Name of the map for a site with this numpyro support: numpyro's `biject_to` or the research preset."""
    base = _base_constraint(support)
    research = preset == RESEARCH_TRANSFORMS
    if isinstance(base, constraints._Real):
        return "identity"
    if isinstance(base, constraints._Simplex):
        return "alr" if research else "stick_breaking"
    if isinstance(base, constraints._SoftplusPositive):
        return "softplus"
    if isinstance(base, constraints._UnitInterval):
        return "sigmoid"
    if isinstance(base, constraints._Interval):
        return f"interval({_bound(base.lower_bound)!r},{_bound(base.upper_bound)!r})"
    if isinstance(base, constraints._GreaterThan) and not isinstance(base, constraints._GreaterThanEq):
        if _bound(base.lower_bound) == 0.0:
            return "softplus" if research else "exp"
        return f"greater_than({_bound(base.lower_bound)!r})"
    if isinstance(base, constraints._LessThan) and not isinstance(base, constraints._LessThanEq):
        return f"less_than({_bound(base.upper_bound)!r})"
    raise ValueError(
        f"support {support} has no supported unconstrained map; noiseaware handles real, positive, "
        "unit-interval, interval, greater-than, less-than and simplex sites"
    )


def _check_preset(preset) -> None:
    if not isinstance(preset, Mapping) and preset not in ("numpyro", RESEARCH_TRANSFORMS):
        raise ValueError(
            f"transforms={preset!r} is not a preset: use 'numpyro' (numpyro's biject_to maps), "
            "'research' (softplus for positive, additive log-ratio for simplex sites) or a dict "
            "{site name: transform name}"
        )


def choose_transform_name(site: str, support, transforms: str | Mapping[str, str]) -> str:
    """The transform name for `site`: an explicit per-site entry of `transforms`, else the preset's."""
    _check_preset(transforms)
    if not isinstance(transforms, Mapping):
        return default_transform_name(support, transforms)
    preset = transforms.get("*", "numpyro")
    _check_preset(preset)
    if isinstance(preset, Mapping):
        raise ValueError("transforms['*'] names the preset for the other sites: 'numpyro' or 'research'")
    if site not in transforms:
        return default_transform_name(support, preset)
    name = transforms[site]
    if _codomain(name) != _codomain(default_transform_name(support)):
        raise ValueError(f"site {site!r} has support {support}; transform {name!r} does not map onto it")
    return name


def _contract_event(g, jacobian, event_dims: int):
    """Σ_i g[..., i] J[i, ...] over the `event_dims` trailing axes of g (the leading axes of J).

    Unrolled over i for small events: XLA's CPU dot and reduce on a size-3 axis batched over thousands
    of examples run ~15× slower than this sum of scaled copies.
    """
    event = g.shape[g.ndim - event_dims :]
    size = math.prod(event)
    if size > 64:
        return jnp.tensordot(g, jacobian, axes=event_dims)
    g = g.reshape(g.shape[: g.ndim - event_dims] + (size,))
    jacobian = jacobian.reshape((size,) + jacobian.shape[event_dims:])
    column = g.shape[:-1] + (1,) * (jacobian.ndim - 1)
    return sum(g[..., i].reshape(column) * jacobian[i] for i in range(size))


def _checked_labels(site: str, shape: tuple[int, ...], labels) -> tuple[str, ...]:
    """`labels` as a tuple of prod(shape) distinct non-empty strings; ValueError naming the problem otherwise."""
    if isinstance(labels, (str, bytes)) or not isinstance(labels, (Sequence, np.ndarray)):
        raise ValueError(f"labels of site {site!r} are {labels!r}; give a sequence of strings, one label per element")
    labels = tuple(labels)
    if tuple(shape) == ():
        raise ValueError(f"site {site!r} is a scalar: it is named by its site name and takes no labels")
    count = math.prod(shape)
    if len(labels) != count:
        raise ValueError(
            f"site {site!r} has {count} elements (shape {tuple(shape)}) but {len(labels)} labels; give one "
            "label per element, in row-major order"
        )
    bad = [label for label in labels if not isinstance(label, str) or not label]
    if bad:
        raise ValueError(f"labels of site {site!r} hold {bad[0]!r}; each label must be a non-empty string")
    repeated = sorted(label for label, count in Counter(labels).items() if count > 1)
    if repeated:
        raise ValueError(f"labels of site {site!r} repeat {repeated}; each element needs its own label")
    return tuple(str(label) for label in labels)


@dataclass(frozen=True)
class SiteSpec:
    """One latent site: its name, its constrained shape, the name of its unconstrained map and optional
    labels, one per element of the constrained value (prod(shape), row-major; see the module doc)."""

    name: str
    shape: tuple[int, ...]
    transform: str
    labels: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.labels is not None:
            object.__setattr__(self, "labels", _checked_labels(self.name, self.shape, self.labels))

    @property
    def unconstrained_shape(self) -> tuple[int, ...]:
        return tuple(transform_from_name(self.transform).inverse_shape(self.shape))

    @property
    def size(self) -> int:
        return math.prod(self.unconstrained_shape)

    def element_names(self) -> tuple[str, ...]:
        """One name per element of the constrained value, (prod(shape),) row-major: 'site' for a scalar,
        'site[label]' with labels, else 'site[i]' / 'site[i,j]'."""
        return self._names(tuple(self.shape))

    def coordinate_names(self) -> tuple[str, ...]:
        """One name per unconstrained coordinate, (size,): the name of the element at the same multi-index."""
        return self._names(self.unconstrained_shape)

    def _names(self, shape: tuple[int, ...]) -> tuple[str, ...]:
        if shape == ():
            return (self.name,)
        if self.labels is None:
            return tuple(f"{self.name}[{','.join(map(str, index))}]" for index in np.ndindex(*shape))
        return tuple(
            f"{self.name}[{self.labels[np.ravel_multi_index(index, self.shape)]}]" for index in np.ndindex(*shape)
        )


@dataclass(frozen=True)
class SiteMap:
    """Ordered latent sites ⇄ flat θ of shape (d,), d = Σ_site prod(unconstrained shape)."""

    sites: tuple[SiteSpec, ...]

    @property
    def dim(self) -> int:
        return sum(site.size for site in self.sites)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(site.name for site in self.sites)

    def site(self, name: str) -> SiteSpec:
        """The site called `name`; ValueError naming the sites when there is none."""
        for site in self.sites:
            if site.name == name:
                return site
        raise ValueError(f"there is no site {name!r}; the sites are {list(self.names)}")

    def with_labels(self, labels: Mapping[str, Sequence[str]] | None) -> SiteMap:
        """This map with `labels` {site name: one label per element} attached (other sites kept as they are).

        ValueError for a site the map lacks, a label count that is not the site's number of elements, or
        repeated or empty labels."""
        if labels is None:
            return self
        if not isinstance(labels, Mapping):
            raise ValueError(
                "labels must map site names to their labels, e.g. labels={'theta': names}; "
                f"got a {type(labels).__name__}"
            )
        unknown = sorted(set(labels) - set(self.names))
        if unknown:
            raise ValueError(f"labels name {unknown}, which are not sites of the model {list(self.names)}")
        return SiteMap(tuple(replace(s, labels=labels[s.name]) if s.name in labels else s for s in self.sites))

    def element_names(self, site: str) -> tuple[str, ...]:
        """Names of the constrained elements of `site`, (prod(shape),) row-major: 'site' for a scalar,
        'site[label]' when the site has labels, else 'site[i]' / 'site[i,j]'."""
        return self.site(site).element_names()

    def _slices(self):
        start = 0
        for site in self.sites:
            yield site, slice(start, start + site.size)
            start += site.size

    def unflatten(self, theta) -> dict:
        """θ (..., d) → {site: unconstrained value (..., *unconstrained_shape)}."""
        batch = theta.shape[:-1]
        return {site.name: theta[..., sl].reshape(batch + site.unconstrained_shape) for site, sl in self._slices()}

    def flatten(self, unconstrained: Mapping) -> jnp.ndarray:
        """{site: unconstrained value (..., *unconstrained_shape)} → θ (..., d); inverse of `unflatten`."""
        parts = []
        for site in self.sites:
            u = jnp.asarray(unconstrained[site.name])
            parts.append(u.reshape(u.shape[: u.ndim - len(site.unconstrained_shape)] + (site.size,)))
        return jnp.concatenate(parts, axis=-1)

    def constrain_sites(self, unconstrained: Mapping) -> dict:
        """{site: unconstrained value} → {site: constrained value} in the model's own space."""
        return {site.name: transform_from_name(site.transform)(unconstrained[site.name]) for site in self.sites}

    def pull_back(self, unconstrained: Mapping) -> Callable[[Mapping], dict]:
        """The chain rule at one θ: {site: ∇_x (B, *shape)} ↦ {site: ∇_u = J_T(u)ᵀ ∇_x (B, *unconstrained_shape)}.

        J_T is formed once per θ (a diagonal for elementwise maps, a matrix for simplex maps), so a batch
        of B per-example gradients costs one product each rather than B backward passes through T.
        """
        factors = {}
        for site in self.sites:
            transform, u = transform_from_name(site.transform), unconstrained[site.name]
            if transform.domain.event_dim == 0:
                factors[site.name] = jax.jvp(transform, (u,), (jnp.ones_like(u),))[1]
            else:
                factors[site.name] = jax.jacfwd(transform)(u)

        def apply(grads: Mapping) -> dict:
            out = {}
            for site in self.sites:
                g, factor = grads[site.name], factors[site.name]
                if transform_from_name(site.transform).domain.event_dim == 0:
                    out[site.name] = g * factor
                else:
                    out[site.name] = _contract_event(g, factor, len(site.shape))
            return out

        return apply

    def constrain(self, theta) -> dict:
        """θ (..., d) → {site: constrained value (..., *shape)} in the model's own space."""
        return self.constrain_sites(self.unflatten(theta))

    def unconstrain(self, values: Mapping) -> jnp.ndarray:
        """{site: constrained value (..., *shape)} → θ (..., d)."""
        return self.flatten(
            {site.name: transform_from_name(site.transform).inv(jnp.asarray(values[site.name])) for site in self.sites}
        )

    def log_abs_det_jacobian(self, theta) -> jnp.ndarray:
        """Σ_site log|det ∂x_site/∂u_site| at θ (d,): the term that turns p(x) into p̃(θ)."""
        total = jnp.zeros((), theta.dtype)
        for site, u in zip(self.sites, self.unflatten(theta).values()):
            transform = transform_from_name(site.transform)
            total = total + jnp.sum(transform.log_abs_det_jacobian(u, transform(u)))
        return total

    def theta_names(self) -> tuple[str, ...]:
        """One name per coordinate of θ, (d,): 'site' for scalars, 'site[label]' for a labelled site, else
        'site[i]' / 'site[i,j]' (a simplex site's K − 1 coordinates take its first K − 1 element names)."""
        return tuple(name for site in self.sites for name in site.coordinate_names())

    def param_names(self) -> tuple[str, ...]:
        """Labels of the mean-field φ = (μ, ρ), shape (2d,): 'mu:<θ label>' then 'rho:<θ label>' (other families:
        `VariationalFamily.param_names`)."""
        return MeanField(self.dim).param_names(self.theta_names())
