"""BenchmarkModel: a numpyro model with its prior-predictive simulator and its DPVI settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import jax

from ..recording.contract import N_EXAMPLES_ARG, ModelError, check_plates, inspect_model, model_arguments, run_model
from ..trace.sites import SiteMap
from ..util.checks import positive_int
from ..util.keys import as_key

__all__ = ["BenchmarkModel", "from_numpyro"]

Covariates = Callable[[jax.Array, int], Mapping[str, jax.Array]]
_SIMULATION_STREAM = 0x53494D  # "SIM": separates simulation randomness from a recorder given the same seed


@dataclass(frozen=True)
class BenchmarkModel:
    """A model under the contract of `noiseaware.recording.contract`, ready for simulation studies.

    model: the numpyro model; n_examples: N of simulated data sets; covariates(key, n) → dict of
    non-modelled inputs (None when there are none); site_map: θ ⇄ named latent sites, with their labels
    (e.g. adult-logistic's feature names); observed: observed site names; dpvi_settings: keyword arguments
    of `record_dpvi` except the privacy level (steps, sampling_rate, clip, grad_scale, lr_multiplier, init,
    mc_draws, transforms, sites, and labels when the sites have them).
    """

    name: str
    model: Callable
    n_examples: int
    site_map: SiteMap
    observed: tuple[str, ...]
    dpvi_settings: Mapping = field(default_factory=dict)
    covariates: Covariates | None = None
    description: str = ""

    @property
    def dim(self) -> int:
        """d, the dimension of θ."""
        return self.site_map.dim

    def _kwargs(self, key, n: int) -> dict:
        kwargs = dict(self.covariates(key, n)) if self.covariates is not None else {}
        if N_EXAMPLES_ARG in model_arguments(self.model):
            kwargs[N_EXAMPLES_ARG] = n
        return kwargs

    def simulate(self, key) -> tuple[jax.Array, dict]:
        """θ ~ prior (unconstrained, shape (d,)) and data ~ p(x | θ): a dict of keyword arrays for the model.

        Pure in `key` (an int seed or a PRNG key), so `jax.vmap(bm.simulate)(keys)` simulates many.
        The key is folded with a constant first, so the same seed given to `record_dpvi` draws
        independent randomness.
        """
        trace, kwargs = self._run(key, None)
        theta = self.site_map.unconstrain({name: trace[name]["value"] for name in self.site_map.names})
        return theta, self._data(trace, kwargs)

    def simulate_given(self, theta, key) -> dict:
        """data ~ p(x | θ) for a given unconstrained θ (d,), covariates from the model's simulator: a dict of
        keyword arrays (`simulate`'s data). Pure in `key`, so it vmaps over keys (a parametric bootstrap)."""
        trace, kwargs = self._run(key, self.site_map.constrain(theta))
        return self._data(trace, kwargs)

    def _run(self, key, values):
        """One run of the model on simulated covariates, with the latent sites at `values` (None: drawn)."""
        key = jax.random.fold_in(as_key(key), _SIMULATION_STREAM)
        key_covariates, key_model = jax.random.split(key)
        kwargs = self._kwargs(key_covariates, self.n_examples)
        return run_model(self.model, kwargs, values, seed=key_model), kwargs

    def _data(self, trace, kwargs) -> dict:
        data = {k: v for k, v in kwargs.items() if k != N_EXAMPLES_ARG}
        data.update({name: trace[name]["value"] for name in self.observed})
        return data


def from_numpyro(
    model: Callable,
    *,
    n_examples: int,
    covariates: Covariates | None = None,
    name: str | None = None,
    transforms="numpyro",
    sites: Sequence[str] | None = None,
    labels: Mapping[str, Sequence[str]] | None = None,
    description: str = "",
    **dpvi_settings,
) -> BenchmarkModel:
    """Wrap any numpyro model (under the model contract) as a BenchmarkModel simulating its prior predictive.

    The observed sites are those named after one of the model's keyword arguments; `covariates(key, n)`
    supplies non-modelled inputs; `transforms` ('numpyro', 'research' or {site: name}) and `sites` (order)
    fix the map θ ⇄ sites; labels {site: one label per element} name the sites' elements (`theta[age]`
    rather than `theta[0]`) in the site map and in every trace recorded with `dpvi_settings`; the remaining
    keywords become `dpvi_settings` for `record_dpvi`. The whole model contract is checked here, on one
    simulated data set, as `record_dpvi` checks it on real data (`noiseaware.recording.contract`): a model that
    breaks it (a plate with `subsample_size`, a local latent, data outside the support …) is refused before any
    study runs.
    """
    privacy = sorted(
        set(dpvi_settings) & {"epsilon", "delta", "noise_multiplier", "non_private", "allow_weak_privacy", "key"}
    )
    if privacy:
        raise ModelError(
            f"from_numpyro takes the DPVI settings without the privacy level or key; pass {privacy} to "
            "record_dpvi instead"
        )
    n_examples = positive_int("n_examples", n_examples, error=ModelError)
    arguments = model_arguments(model)
    draft = BenchmarkModel(
        name or getattr(model, "__name__", "model"), model, n_examples, SiteMap(()), (), covariates=covariates
    )
    kwargs = draft._kwargs(jax.random.key(0), n_examples)
    try:
        trace = run_model(model, kwargs, seed=0)
    except Exception as err:
        raise ModelError(
            f"the model failed when simulating {n_examples} examples from its prior: {type(err).__name__}: {err}. "
            f"A model without covariates must size its plate from a keyword argument {N_EXAMPLES_ARG!r}"
        ) from err
    check_plates(trace)  # before the simulated data are inspected: a subsampling plate simulates too few examples
    observed = tuple(n for n, s in trace.items() if s["type"] == "sample" and n in arguments)
    if not observed:
        raise ModelError(
            "no sample site is named after a keyword argument of the model: name each observed site after "
            "the argument that holds its data (e.g. `numpyro.sample('y', ..., obs=y)`)"
        )
    simulated = {k: v for k, v in kwargs.items() if k != N_EXAMPLES_ARG} | {n: trace[n]["value"] for n in observed}
    spec = inspect_model(model, simulated, transforms=transforms, sites=sites)
    if spec.n_examples != n_examples:
        raise ModelError(
            f"the model simulated {spec.n_examples} examples for n_examples = {n_examples}: size its data plate "
            f"from the data's length, or from a keyword argument {N_EXAMPLES_ARG!r}"
        )
    site_map = spec.site_map
    try:
        site_map = site_map.with_labels(labels)
    except ValueError as err:
        raise ModelError(str(err)) from None
    settings = {"transforms": transforms, "sites": None if sites is None else tuple(sites), **dpvi_settings}
    if labels is not None:
        settings["labels"] = MappingProxyType({s.name: s.labels for s in site_map.sites if s.labels is not None})
    return BenchmarkModel(
        draft.name, model, int(n_examples), site_map, observed, MappingProxyType(settings), covariates, description
    )
