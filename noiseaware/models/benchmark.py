"""BenchmarkModel: a numpyro model with its prior-predictive simulator and its DPVI settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np

from ..recording.contract import (
    N_EXAMPLES_ARG,
    ModelError,
    check_plates,
    inspect_model,
    log_joint,
    model_arguments,
    run_model,
)
from ..recording.dpvi import BATCH_STRATEGIES
from ..trace.sites import SiteMap
from ..util.checks import positive_int
from ..util.keys import as_key

__all__ = ["BenchmarkModel", "ModelOptimumPrior", "from_numpyro"]

Covariates = Callable[[jax.Array, int], Mapping[str, jax.Array]]
_SIMULATION_STREAM = 0x53494D  # "SIM": separates simulation randomness from a recorder given the same seed
_PRIOR_STREAM = 0x505249  # "PRI": the prior draws of `prior_moments`
PRIOR_DRAWS = 4000
"""Prior draws of θ behind `BenchmarkModel.optimum_prior` (Monte Carlo error of the mean: 1.6 % of the prior sd)."""
PRIOR_SIMULATIONS = 64
"""Simulated data sets whose curvature at the truth `BenchmarkModel.optimum_prior` keeps."""
DENSE_CURVATURE = 256
"""The largest d whose curvature `optimum_prior` reads off the d × d Hessian, with the coupling; above it the diagonal
is estimated from `CURVATURE_PROBES` Hessian–vector products and there is no coupling (d² numbers would not fit)."""
CURVATURE_PROBES = 64
"""Rademacher probes v of the estimate h ≈ −mean_k v_k ⊙ H v_k (unbiased; its error falls as 1/√probes, and with the
off-diagonal share of each row of H)."""
PRIOR_CHUNK = 100
"""Prior draws per compiled step when d > DENSE_CURVATURE: θ's moments are summed chunk by chunk, O(d) memory."""


def _identity(value):
    """A hashable stand-in: functions by identity, everything else as itself."""
    return id(value) if callable(value) else value


_OPTIMUM_PRIORS: dict = {}
"""`BenchmarkModel.optimum_prior` per model, N and sizes, in this process (a model is immutable)."""


@dataclass(frozen=True)
class ModelOptimumPrior:
    """The model's own facts about the VI optimum (`BenchmarkModel.optimum_prior`), before any trace.

    theta_mean, theta_sd (d,): θ's prior moments (unconstrained). Under the prior predictive the VI optimum's mean
    μ* ≈ E[θ | x] has mean E θ and variance Var θ − E Var(θ | x) ≤ Var θ − 1/E h (`model_optimum_prior`).
    curvature (M, d): h_mj = −∂²_jj log p(x_m, θ_m) of M simulated data sets at N examples; for a Gaussian VI
    optimum sd*_j = h_j^(−1/2) and the −ELBO's slope in μ_j is h_j, in ρ_j 2·sigmoid(ρ*_j)²·h_j (method.md §2.3).
    coupling (d, d): c_kj = ∂_j h_k / h_k, the simulations' mean: how coordinate k's wander δ_k moves coordinate j's
    gradient, ½ Σ_k c_kj h_k δ_k² (the third derivatives of log p, relative to the curvature; method.md §2.10); None
    for d > DENSE_CURVATURE, whose curvature is estimated (`CURVATURE_PROBES`) and whose coupling is not computed.
    """

    theta_mean: np.ndarray
    theta_sd: np.ndarray
    curvature: np.ndarray
    coupling: np.ndarray | None


def _chunked_moments(draw, key, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean and sd of `draws` draws of θ = draw(key_i) (d,), summed PRIOR_CHUNK at a time in the draws' dtype:
    O(d) memory for any number of draws (the draws beyond whole chunks are left out)."""
    chunks = max(draws // PRIOR_CHUNK, 1)
    keys = jax.random.split(key, chunks * PRIOR_CHUNK).reshape(chunks, PRIOR_CHUNK)

    @jax.jit
    def sums(keys):
        def add(total, chunk):
            theta = jax.vmap(draw)(chunk)
            return (total[0] + theta.sum(axis=0), total[1] + (theta * theta).sum(axis=0)), None

        zero = jnp.zeros_like(draw(keys[0, 0]))
        return jax.lax.scan(add, (zero, zero), keys)[0]

    first, second = (np.asarray(x, np.float64) for x in sums(keys))
    n = chunks * PRIOR_CHUNK
    mean = first / n
    return mean, np.sqrt(np.maximum(second / n - mean**2, 0.0))


@dataclass(frozen=True)
class BenchmarkModel:
    """A model under the contract of `noiseaware.recording.contract`, ready for simulation studies.

    model: the numpyro model; n_examples: N of simulated data sets; covariates(key, n) → dict of
    non-modelled inputs (None when there are none); site_map: θ ⇄ named latent sites, with their labels
    (e.g. adult-logistic's feature names); observed: observed site names; dpvi_settings: keyword arguments
    of `record_dpvi` except the privacy level (steps, sampling_rate, clip, grad_scale, lr_multiplier, init,
    mc_draws, transforms, sites, and labels when the sites have them); preset: where those settings come from,
    "yours" for a model of the user's own, else a built-in's "tuned" or "research" preset; by_epsilon: whether
    a built-in takes the preset that applies at the ε where it is used (`noiseaware.models.presets`); batch: how
    simulation studies and the tuner run many data sets in one compiled program, "vmap" or "map"
    (`recording.dpvi.BATCH_STRATEGIES`: the same numbers, at the speed measured for the model).
    """

    name: str
    model: Callable
    n_examples: int
    site_map: SiteMap
    observed: tuple[str, ...]
    dpvi_settings: Mapping = field(default_factory=dict)
    covariates: Covariates | None = None
    description: str = ""
    preset: str = "yours"
    by_epsilon: bool = False
    batch: str = "vmap"

    @property
    def dim(self) -> int:
        """d, the dimension of θ."""
        return self.site_map.dim

    def model_inputs(self, key, n: int) -> dict:
        """The model's non-modelled keyword inputs for n examples: the covariates simulated with `key`, and
        n_examples where the model takes it (no observed data)."""
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

    def optimum_prior(self, draws: int = PRIOR_DRAWS, simulations: int = PRIOR_SIMULATIONS, key=0) -> ModelOptimumPrior:
        """What the model itself says about the VI optimum before any trace (docs/method.md §2.3): θ's prior
        moments from `draws` prior draws, and the curvature h_j = −∂²_jj log p(x, θ) of `simulations`
        prior-predictive data sets at N = n_examples (covariates from the model's own simulator, never real data)
        at their true θ. No privacy is spent: only the model and the public N enter.
        """
        positive_int("draws", draws, minimum=2, hint="the number of prior draws of θ, e.g. draws=4000")
        positive_int("simulations", simulations, minimum=2, hint="the number of simulated data sets, e.g. 64")
        # what determines the answer (the functions held, so their ids stay theirs): computed once per process
        seed = tuple(np.asarray(jax.random.key_data(as_key(key))).ravel().tolist())
        memo = (self.model, self.covariates, self.site_map, self.n_examples, draws, simulations, seed)
        cached = _OPTIMUM_PRIORS.get(tuple(map(_identity, memo)))
        if cached is not None and cached[0][:2] == memo[:2]:
            return cached[1]
        key_draws, key_simulations = jax.random.split(jax.random.fold_in(as_key(key), _PRIOR_STREAM))

        def one(key):
            key_covariates, key_model = jax.random.split(key)
            trace = run_model(self.model, self.model_inputs(key_covariates, 1), None, seed=key_model)
            return self.site_map.unconstrain({name: trace[name]["value"] for name in self.site_map.names})

        def simulated(key):
            """A simulated data set's true θ and its log density as a function of θ."""
            theta, data = self.simulate(key)
            kwargs = dict(data)
            if N_EXAMPLES_ARG in model_arguments(self.model):
                kwargs[N_EXAMPLES_ARG] = self.n_examples
            return theta, lambda u: log_joint(self.model, self.site_map, kwargs, u)

        def curvature(key):
            theta, log_density = simulated(key)

            def diagonal(t):
                return -jnp.diagonal(jax.hessian(log_density)(t))

            h, third = diagonal(theta), jax.jacfwd(diagonal)(theta)
            return h, third / h[:, None]

        def estimated(key):
            theta, log_density = simulated(key)
            gradient = jax.grad(log_density)
            probes = jax.random.rademacher(jax.random.fold_in(key, 1), (CURVATURE_PROBES, theta.size), theta.dtype)
            return -jnp.mean(jax.lax.map(lambda v: v * jax.jvp(gradient, (theta,), (v,))[1], probes), axis=0)

        keys = jax.random.split(key_simulations, simulations)
        if self.dim <= DENSE_CURVATURE:
            theta = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(key_draws, draws)), np.float64)
            theta_mean, theta_sd = theta.mean(axis=0), theta.std(axis=0)
            hessian, coupling = (np.asarray(x, np.float64) for x in jax.jit(lambda k: jax.lax.map(curvature, k))(keys))
            coupling = coupling.mean(axis=0)
        else:
            theta_mean, theta_sd = _chunked_moments(one, key_draws, draws)
            hessian, coupling = np.asarray(jax.jit(lambda k: jax.lax.map(estimated, k))(keys), np.float64), None
        finite = np.all(np.isfinite(theta_sd)) and np.all(np.isfinite(hessian))
        if not (finite and (coupling is None or np.all(np.isfinite(coupling)))):
            raise ModelError(
                f"the prior of {self.name!r} gives non-finite unconstrained values of θ or of its log density's "
                "curvature: check its latent sites' priors"
            )
        facts = ModelOptimumPrior(theta_mean, theta_sd, hessian, coupling)
        _OPTIMUM_PRIORS[tuple(map(_identity, memo))] = (memo, facts)
        return facts

    def simulate_given(self, theta, key) -> dict:
        """data ~ p(x | θ) for a given unconstrained θ (d,), covariates from the model's simulator: a dict of
        keyword arrays (`simulate`'s data). Pure in `key`, so it vmaps over keys (a parametric bootstrap)."""
        trace, kwargs = self._run(key, self.site_map.constrain(theta))
        return self._data(trace, kwargs)

    def _run(self, key, values):
        """One run of the model on simulated covariates, with the latent sites at `values` (None: drawn)."""
        key = jax.random.fold_in(as_key(key), _SIMULATION_STREAM)
        key_covariates, key_model = jax.random.split(key)
        kwargs = self.model_inputs(key_covariates, self.n_examples)
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
    batch: str = "vmap",
    **dpvi_settings,
) -> BenchmarkModel:
    """Wrap any numpyro model (under the model contract) as a BenchmarkModel simulating its prior predictive.

    The observed sites are those named after one of the model's keyword arguments; `covariates(key, n)`
    supplies non-modelled inputs; `transforms` ('numpyro', 'research' or {site: name}) and `sites` (order)
    fix the map θ ⇄ sites; batch: "vmap" or "map", how studies run many data sets at once (`BenchmarkModel`);
    labels {site: one label per element} name the sites' elements (`theta[age]`
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
    if batch not in BATCH_STRATEGIES:
        raise ModelError(f"batch must be one of {sorted(BATCH_STRATEGIES)}, got {batch!r}")
    arguments = model_arguments(model)
    draft = BenchmarkModel(
        name or getattr(model, "__name__", "model"), model, n_examples, SiteMap(()), (), covariates=covariates
    )
    kwargs = draft.model_inputs(jax.random.key(0), n_examples)
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
        draft.name,
        model,
        int(n_examples),
        site_map,
        observed,
        MappingProxyType(settings),
        covariates,
        description,
        batch=batch,
    )
