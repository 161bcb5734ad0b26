"""The model contract: what noiseaware needs from a numpyro model, and the densities derived from it.

A supported model

* has continuous latent sites only, none of them inside the data plate (no local latents);
* puts its likelihood in a `numpyro.plate` whose size is the number of examples passed to it (never a
  `subsample_size`: the recorder subsamples itself and numpyro's subsampling would silently rescale);
* names each observed site after the keyword argument that holds its data; with that keyword set to
  None the model samples the data (the simulator);
* takes non-modelled inputs (regression designs) as further keyword arguments;
* may declare a keyword `n_examples`: it then receives the number of examples in the arrays it is
  passed (or the simulated data set size), so a model without covariates can size its plate.

The data must fit the model as traced on them (`inspect_model`, before any DP-SGD work): every per-example
array has the same leading length N, each observed array has exactly its site's shape (batch and event
shape: N values of the per-example shape the likelihood declares), and each observed value lies in the
support of its likelihood (`recording.support`). `check_data_sets` applies the same checks to M stacked
data sets.

From such a model and the site map θ ⇄ sites (noiseaware.sites) we derive, for θ ∈ R^d,

    log p(x_i | θ)   per example (sum of the observed sites' log densities for example i), and
    log p̃(θ) = Σ_latent log p(x_site | parents) + log|det ∂x/∂θ|   (the prior of the unconstrained θ).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from ..trace.sites import SiteMap, SiteSpec, choose_transform_name
from .support import depends_on_latents, distribution_name, outside_support

__all__ = [
    "ModelError",
    "ModelSpec",
    "as_data",
    "build_site_map",
    "check_data_sets",
    "check_plates",
    "first_data_set",
    "inspect_model",
    "log_joint",
    "latent_sites",
    "model_arguments",
    "run_model",
]

N_EXAMPLES_ARG = "n_examples"


class ModelError(ValueError):
    """A numpyro model or its data does not meet the model contract."""


def model_arguments(model: Callable) -> tuple[str, ...]:
    """Names of the keyword arguments a model accepts."""
    try:
        params = inspect.signature(model).parameters.values()
    except (TypeError, ValueError) as err:
        raise ModelError(f"cannot read the signature of {model!r}: pass a plain Python function") from err
    return tuple(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def run_model(model: Callable, kwargs: Mapping, values: Mapping | None = None, seed=None):
    """Trace of one execution of `model(**kwargs)`, with latent `values` substituted or a PRNG seed."""
    fn = model
    if values is not None:
        fn = handlers.substitute(fn, data=dict(values))
    if seed is not None:
        fn = handlers.seed(fn, rng_seed=seed)
    return handlers.trace(fn).get_trace(**kwargs)


def _plates_of(site) -> dict:
    return {frame.name: frame.size for frame in site["cond_indep_stack"]}


def check_plates(trace) -> None:
    """A ModelError for a plate that subsamples (`subsample_size` below its size) or a `numpyro.param` site."""
    for site in trace.values():
        if site["type"] == "plate":
            size, subsample_size = site["args"]
            if subsample_size is not None and subsample_size != size:
                raise ModelError(
                    f"plate {site['name']!r} uses subsample_size={subsample_size}: remove it — the recorder "
                    "subsamples the data itself (numpyro's subsampling would rescale the likelihood)"
                )
        if site["type"] == "param":
            raise ModelError(
                f"site {site['name']!r} is a numpyro.param: make it a sample site with a prior, or a constant"
            )


def latent_sites(trace, observed: Sequence[str], n: int) -> list[dict]:
    """The trace's latent sample sites (all sites but the observed ones), checked: continuous and global.

    The data plates are the plates of size n (the number of examples) around the observed sites; a
    latent site inside one of them is local to the examples, which DPVI here does not support.
    """
    data_plates = {name for o in observed for name, size in _plates_of(trace[o]).items() if size == n}
    latents = []
    for site in trace.values():
        if site["type"] != "sample" or site["name"] in observed:
            continue
        if site["fn"].support.is_discrete:
            raise ModelError(f"latent site {site['name']!r} is discrete; DPVI needs continuous latent sites only")
        if data_plates & set(_plates_of(site)):
            raise ModelError(
                f"latent site {site['name']!r} sits inside the data plate (a local latent variable); "
                "noiseaware supports global latent sites only"
            )
        latents.append(site)
    return latents


def build_site_map(latents: Sequence[dict], transforms, order: Sequence[str] | None) -> SiteMap:
    """Site map of the latent sites in execution order, or in `order` (a permutation of their names)."""
    by_name = {site["name"]: site for site in latents}
    if isinstance(transforms, Mapping):
        unknown = sorted(set(transforms) - set(by_name) - {"*"})
        if unknown:
            raise ModelError(f"transforms names {unknown}, which are not latent sites of the model {tuple(by_name)}")
    if order is None:
        order = tuple(by_name)
    elif sorted(order) != sorted(by_name):
        raise ModelError(f"sites={tuple(order)} must list each latent site once: the model has {tuple(by_name)}")
    if not by_name:
        raise ModelError("the model has no latent sample site: there is nothing to infer")
    return SiteMap(tuple(_site_spec(by_name[name], transforms) for name in order))


def _site_spec(site: dict, transforms) -> SiteSpec:
    try:
        transform = choose_transform_name(site["name"], site["fn"].support, transforms)
    except ValueError as err:
        raise ModelError(f"latent site {site['name']!r}: {err}") from err
    return SiteSpec(site["name"], tuple(int(k) for k in np.shape(site["value"])), transform)


@dataclass(frozen=True)
class ModelSpec:
    """A numpyro model checked against its data: what to subsample and how θ maps to its sites.

    observed: observed site names (= data keywords); per_example: keywords whose arrays have leading
    axis n_examples and are subsampled along it; every other data entry is passed to the model whole.
    """

    model: Callable
    site_map: SiteMap
    observed: tuple[str, ...]
    per_example: tuple[str, ...]
    n_examples: int
    takes_n_examples: bool

    def model_kwargs(self, per_example: Mapping, constants: Mapping, n: int) -> dict:
        """Keyword arguments for a call on `n` examples."""
        kwargs = {**constants, **per_example}
        if self.takes_n_examples:
            kwargs[N_EXAMPLES_ARG] = n
        return kwargs

    def split_data(self, data: Mapping) -> tuple[dict, dict]:
        """data → (per-example arrays, constants)."""
        per_example = {k: data[k] for k in self.per_example}
        constants = {k: v for k, v in data.items() if k not in self.per_example}
        return per_example, constants

    def site_log_likelihood(self, unconstrained: Mapping, example: Mapping, constants: Mapping):
        """log p(x_i | θ) for one example (arrays without the example axis), θ as {site: unconstrained value}.

        Differentiating per site (rather than through the flat θ) keeps the per-draw, per-example
        gradients free of the slicing and padding that flattening adds to them.
        """
        return self.constrained_log_likelihood(self.site_map.constrain_sites(unconstrained), example, constants)

    def constrained_log_likelihood(self, values: Mapping, example: Mapping, constants: Mapping):
        """log p(x_i | θ) for one example, θ as {site: value in the model's own (constrained) space}."""
        one = {k: v[None] for k, v in example.items()}
        trace = run_model(self.model, self.model_kwargs(one, constants, 1), values)
        total = 0.0
        for name in self.observed:
            log_density = _site_log_density(trace[name], summed=False)
            if np.shape(log_density)[:1] != (1,):
                raise ModelError(
                    f"observed site {name!r} has a log density of shape {np.shape(log_density)} for one example: "
                    "size the data plate from the data (len(x), or the n_examples argument), not a constant"
                )
            total = total + jnp.sum(log_density)
        return total

    def example_log_likelihood(self, theta, example: Mapping, constants: Mapping):
        """log p(x_i | θ) for one example (arrays without the example axis); θ (d,)."""
        return self.site_log_likelihood(self.site_map.unflatten(theta), example, constants)

    def log_prior(self, theta, examples: Mapping, constants: Mapping):
        """log p̃(θ): the latent sites' log densities plus the log-Jacobian of the site map; θ (d,).

        `examples` only lets the model run (any one example will do); the likelihood is not included.
        """
        one = {k: v[:1] for k, v in examples.items()}
        trace = run_model(self.model, self.model_kwargs(one, constants, 1), self.site_map.constrain(theta))
        return self.site_map.log_abs_det_jacobian(theta) + sum(
            _site_log_density(trace[name]) for name in self.site_map.names
        )


def log_joint(model: Callable, site_map: SiteMap, kwargs: Mapping, theta):
    """log p(x, θ) + log|det ∂T(θ)/∂θ|: the model's log joint density of unconstrained θ (d,) with its observed
    sites given in `kwargs` (the whole data set), the density whose negative Hessian is the posterior's curvature."""
    trace = run_model(model, kwargs, site_map.constrain(theta))
    total = site_map.log_abs_det_jacobian(theta)
    for site in trace.values():
        if site["type"] == "sample":
            total = total + _site_log_density(site)
    return total


def _site_log_density(site: dict, summed: bool = True):
    """The log density of one traced sample site times its numpyro scale, summed unless `summed=False`."""
    scale = 1.0 if site["scale"] is None else site["scale"]
    log_density = scale * site["fn"].log_prob(site["value"])
    return jnp.sum(log_density) if summed else log_density


def as_data(data: Mapping) -> dict:
    """The model's keyword data as a dict of arrays; a clear error for anything else."""
    if not isinstance(data, Mapping):
        raise ModelError(f"data must be a dict of keyword arrays for the model, got {type(data).__name__}")
    return {k: (v if isinstance(v, jax.Array) else np.asarray(v)) for k, v in data.items()}


def inspect_model(
    model: Callable, data: Mapping, *, transforms="numpyro", sites: Sequence[str] | None = None
) -> ModelSpec:
    """Check `model(**data)` against the contract (module doc) and derive its ModelSpec."""
    data = as_data(data)
    arguments = model_arguments(model)
    unknown = sorted(set(data) - set(arguments))
    if unknown:
        raise ModelError(f"data keys {unknown} are not arguments of {getattr(model, '__name__', model)}{arguments}")
    takes_n = N_EXAMPLES_ARG in arguments
    if takes_n and N_EXAMPLES_ARG in data:
        raise ModelError(f"do not pass {N_EXAMPLES_ARG!r} in data: noiseaware sets it from the data's length")
    probe = dict(data)
    if takes_n:
        probe[N_EXAMPLES_ARG] = _leading_length(data)
    try:
        trace = run_model(model, probe, seed=0)
    except ModelError:
        raise
    except Exception as err:
        raise ModelError(
            f"the model failed when run on its data: {type(err).__name__}: {err}{_length_hint(data)}"
        ) from err
    observed = tuple(name for name, site in trace.items() if site["type"] == "sample" and site["is_observed"])
    if not observed:
        raise ModelError("the model has no observed site: pass its data under the observed site's name")
    for name in observed:
        if name not in data:
            raise ModelError(
                f"observed site {name!r} must take its data from a keyword argument named {name!r}: "
                f"rename the site or the argument"
            )
    lengths = {name: np.shape(data[name])[0] if np.ndim(data[name]) else 0 for name in observed}
    n = lengths[observed[0]]
    if n < 1:
        raise ModelError(f"observed data must have a leading example axis of length ≥ 1, got {lengths}")
    for name, length in lengths.items():
        if length != n:
            raise ModelError(_length_mismatch(name, data[name], observed[0], n))
    check_plates(trace)
    for name in observed:
        _check_observed_site(name, trace[name], data, n)
    per_example = tuple(k for k, v in data.items() if np.ndim(v) >= 1 and np.shape(v)[0] == n)
    latents = latent_sites(trace, observed, n)
    _check_support(model, observed, trace, probe, {site["name"]: site["value"] for site in latents})
    spec = ModelSpec(model, build_site_map(latents, transforms, sites), observed, per_example, int(n), takes_n)
    example, constants = spec.split_data(data)
    spec.site_log_likelihood(  # one example at θ = 0: checks the plate follows the data's length
        spec.site_map.unflatten(jnp.zeros(spec.site_map.dim)), {k: v[0] for k, v in example.items()}, constants
    )
    return spec


def check_data_sets(spec: ModelSpec, data: Mapping) -> None:
    """M data sets stacked along a leading axis, for a `spec` inspected on one of them: every array has the
    leading axis M, the per-example arrays N examples each, and every observed value lies in its site's support."""
    data = as_data(data)
    first_data_set(data)
    for k in spec.per_example:
        if np.shape(data[k])[1:2] != (spec.n_examples,):
            raise ModelError(f"{k} has shape {np.shape(data[k])}: every data set needs {spec.n_examples} examples")
    count = len(next(iter(data.values())))
    values = spec.site_map.constrain(jnp.zeros(spec.site_map.dim))
    for m in range(count):
        per_example, constants = spec.split_data({k: v[m] for k, v in data.items()})
        kwargs = spec.model_kwargs(per_example, constants, spec.n_examples)
        trace = run_model(spec.model, kwargs, values)
        _check_support(spec.model, spec.observed, trace, kwargs, values, f" (data set {m} of {count})")


def first_data_set(data: Mapping) -> dict:
    """The first of M ≥ 1 data sets stacked along a leading axis; a ModelError unless every array has that axis."""
    sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in data.items()}
    if not sizes or None in sizes.values() or len(set(sizes.values())) != 1 or 0 in sizes.values():
        raise ModelError(f"stacked data sets need one leading axis of M ≥ 1 data sets on every array, got {sizes}")
    return {k: v[0] for k, v in data.items()}


def _check_support(model: Callable, observed, trace, kwargs: Mapping, values: Mapping, where: str = "") -> None:
    """A ModelError for the first observed site of `trace` (a run of model(**kwargs) at the latent `values`) with
    data outside its support, unless that support depends on the latent values (no single θ can judge it)."""
    for name in observed:
        message = outside_support(name, trace[name], where)
        if message is not None and not depends_on_latents(lambda v: run_model(model, kwargs, v), values, name):
            raise ModelError(message)


def _check_observed_site(name: str, site: dict, data: Mapping, n: int) -> None:
    """Observed site `name` sits in a plate of size n (the number of examples) and its data have exactly the
    site's shape: N values of the shape the likelihood declares per example."""
    sizes = set(_plates_of(site).values())
    if n not in sizes:
        if n == 1:
            return  # a single example needs no plate
        others = [k for k, v in data.items() if k != name and np.ndim(v) and np.shape(v)[0] in sizes]
        if others:
            raise ModelError(_length_mismatch(others[0], data[others[0]], name, n))
        raise ModelError(
            f"observed site {name!r} is not inside a numpyro.plate of size {n} (the number of examples); "
            "wrap the likelihood in `with numpyro.plate('data', n):`"
        )
    expected, given = tuple(site["fn"].shape()), np.shape(data[name])
    if given != expected:
        per_example = "one value" if expected[1:] == () else f"an array of shape {expected[1:]}"
        raise ModelError(
            f"{name} has shape {given} but the model's observed site {name!r} ({distribution_name(site['fn'])}) "
            f"has shape {expected} on these data: {per_example} per example, N = {n} — pass {name} of shape "
            f"{expected}"
        )


def _length_mismatch(name: str, array, reference: str, n: int) -> str:
    unit = "rows" if np.ndim(array) >= 2 else "entries"
    return (
        f"{name} has {np.shape(array)[0]} {unit} but {reference} has {n}: every per-example array needs the "
        "same leading length N"
    )


def _length_hint(data: Mapping) -> str:
    """A note on the data's leading lengths when they differ (a per-example array of the wrong length)."""
    lengths = {k: np.shape(v)[0] for k, v in data.items() if np.ndim(v)}
    if len(set(lengths.values())) < 2:
        return ""
    return f"; note that the data's leading lengths differ, {lengths}: every per-example array needs the same N"


def _leading_length(data: Mapping) -> int:
    """The number of examples to announce to a model that takes `n_examples`: the longest leading axis."""
    lengths = [np.shape(v)[0] for v in data.values() if np.ndim(v) >= 1]
    if not lengths:
        raise ModelError("data holds no array with an example axis: pass the observed data as arrays")
    return max(lengths)
