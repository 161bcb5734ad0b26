"""The "nuts" route: NUTS on the gradient model's joint posterior of (φ*, ã, u) (docs/method.md §2.7).

Both backends (numpyro, blackjax) sample one target built from numpyro's potential energy U of
`numpyro_model` (−log p(φ*, ã, u | trace) in numpyro's unconstrained space, O(P) from the trace's
sufficient statistics). NUTS runs in reparametrised coordinates (`nuts_target.Target`):

* φ*_j = m_j(ã_j, u_j) + s_j(ã_j, u_j)·ε_j, with N(m, s²) φ*_j's exact conditional given (ã_j, u_j). The
  density of ε is standard normal and independent of (ã, u): no φ*–ã correlation (|corr| up to 0.85 on
  traces whose mean φ̄ is off the optimum) and no funnel where a → 0 sets φ* free (on such a trace the
  smallest bulk ESS of 4000 draws rose from 184–1700 to 1600–2200 over 5 seeds).
* ã and u are centred and scaled per coordinate, where the chains start (`start`):
  - "exact" (the default): at the exact route's answer, computed in the same compiled program (`exact_grid`):
    ã at its marginal median, scaled by half its 16–84 % range, and u on the whole line (the half-normal
    prior's posterior of u is the law of |u| under its sign-symmetric twin, `nuts_target.symmetric`; log u's
    exponential tail and doubly exponential wall cost small steps and deep trees) at |u|'s median or at 0
    (`nuts_target.exact_placement`).
    The target is then near N(0, I), so the warm-up adapts the step size alone with an identity mass matrix:
    300 steps at target acceptance 0.9 (`START_DEFAULTS`). On 50 traces of the 10D regression at ε = 1 this
    halved the leapfrog steps per draw (15 against 32), raised the smallest bulk ESS of 4000 draws (1504 against
    543) and took 2.2× less time per posterior (benchmarks/nuts_warm_start.py, docs/results.md).
  - "prior" (the cold start, the default before; a cross-check): at the prior means with u in numpyro's
    coordinate, scaled to unit curvature there (posterior sds range from 10⁻⁴ to 10², and Stan's mass-matrix
    shrinkage towards 10⁻³·I otherwise pins the step size near 0.02: 3–4× lower ESS), with Stan's window
    adaptation of the step size and a diagonal mass matrix over 1000 steps at target acceptance 0.8.

A change of variables with its log-Jacobian leaves the posterior exactly as numpyro defines it. With
these coordinates a dense mass matrix brought no ESS gain but cost 5–10× the time (measured on
P = 24 OU traces, T = 10⁴, from the cold start), so the diagonal one is the cold start's default.

The target and the two placements are `nuts_target`. Why this module is long: both backends that sample that
target, the vmapped batch and the diagnostics of a run belong together; apart, one backend's settings or
diagnostics could drift from the other's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS

from ..util.defaults import DRAWS, WARM_START_WARMUP, WARMUP
from ..util.diagnostics import MixingDiagnostics
from ..util.errors import DIVERGED, FitFailure
from ..util.progress import Progress, progress_bar
from .draws import Draws
from .gradient_model import GradientModel
from .nuts_target import initial_values, sampled_target

__all__ = [
    "BACKENDS",
    "NutsRun",
    "NutsSettings",
    "fit_nuts_batch",
    "initial_values",
    "nuts_blackjax_draws",
    "nuts_diagnostics",
]

BACKENDS = ("numpyro", "blackjax")
STARTS = ("exact", "prior")
START_DEFAULTS = {
    "exact": {"warmup": WARM_START_WARMUP, "target_accept": 0.9},
    "prior": {"warmup": WARMUP, "target_accept": 0.8},
}
"""Each start's warm-up and target acceptance (NutsOptions' None). From the exact start 0.9 cost no
extra leapfrog steps on the 10D regression (15 per draw at 0.8 and 0.9) and removed its divergent transitions
(7, in 4 of 50 traces, at 0.8); the cold start keeps the route's former 0.8 (docs/results.md, "NUTS from the
exact start")."""
DENSE_FROM_EXACT = (
    "dense_mass=True adapts a dense mass matrix, which only the cold start's window adaptation does (from the exact "
    "start the mass matrix is the identity): use start='prior' with it, or drop dense_mass"
)


class NutsRun(NamedTuple):
    """Draws and per-chain status of a NUTS run; under `jax.vmap` every field gains a leading axis.

    optimum φ*, hessian a = model.hessian(ã), extra_noise |u| (None without extra noise): (chains, draws, P);
    divergences: divergent transitions among the draws, (chains,); step_size, acceptance_rate (mean
    acceptance probability of the draws), leapfrogs (mean integration steps per draw): (chains,);
    finite: whether every draw is finite, (); warm: the coordinates started from the exact grid, (P,) bool.
    """

    optimum: jax.Array
    hessian: jax.Array
    extra_noise: jax.Array | None
    divergences: jax.Array
    step_size: jax.Array
    acceptance_rate: jax.Array
    leapfrogs: jax.Array
    finite: jax.Array
    warm: jax.Array


def _run(sites: dict[str, jax.Array], divergences, step_size, acceptance_rate, leapfrogs, warm) -> NutsRun:
    """A `NutsRun` from the constrained sites (chains, draws, P) and the per-chain status."""
    extra = jnp.abs(sites["extra_noise"]) if "extra_noise" in sites else None
    values = [sites["optimum"], sites["hessian"]] + ([] if extra is None else [extra])
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in values]))
    return NutsRun(
        sites["optimum"], sites["hessian"], extra, divergences, step_size, acceptance_rate, leapfrogs, finite, warm
    )


def nuts_blackjax_draws(
    model: GradientModel,
    key,
    warmup: int = START_DEFAULTS["exact"]["warmup"],
    draws: int = DRAWS,
    chains: int = 1,
    target_accept: float = START_DEFAULTS["exact"]["target_accept"],
    dense_mass: bool = False,
    start: str = "exact",
) -> NutsRun:
    """NUTS with blackjax on the target of `fit_nuts_batch` from `start`, `warmup` ≥ 1 adaptation steps: a `NutsRun`.

    A pure function of (model, key) for fixed settings: jit it, or `jax.vmap` it over a stacked batch of
    models and keys (all with the same P and extra-noise prior); failures show up as divergences and
    `finite`, never as exceptions. Call it with 64-bit JAX enabled for float64 sampling. The chains start
    at `start`'s point and adapt independently: from "exact" the step size alone (Nesterov dual averaging from 1,
    the target's scale there, with an identity mass matrix), from "prior" the step size and the mass matrix (Stan's
    window adaptation). The defaults are the exact start's (`START_DEFAULTS`).
    """
    import blackjax  # deferred: imported only by this backend
    from blackjax.adaptation.base import get_filter_adapt_info_fn
    from blackjax.adaptation.step_size import dual_averaging_adaptation

    target, position, warm = sampled_target(model, start)

    def logdensity(y):
        return -target.potential(y)

    def window(warmup_key):
        adapt = blackjax.window_adaptation(
            blackjax.nuts,
            logdensity,
            is_mass_matrix_diagonal=not dense_mass,
            target_acceptance_rate=target_accept,
            adaptation_info_fn=get_filter_adapt_info_fn(),
        )
        (state, parameters), _ = adapt.run(warmup_key, position, num_steps=warmup)
        return state, parameters

    def step_size_only(warmup_key):
        identity = jnp.ones(position.size)
        init, update, final = dual_averaging_adaptation(target_accept)

        def step(carry, step_key):
            state, averaging = carry
            kernel = blackjax.nuts(logdensity, jnp.exp(averaging.log_step_size), identity)
            state, info = kernel.step(step_key, state)
            return (state, update(averaging, info.acceptance_rate)), None

        carry = (blackjax.nuts.init(position, logdensity), init(1.0))
        (state, averaging), _ = jax.lax.scan(step, carry, jax.random.split(warmup_key, warmup))
        return state, {"step_size": final(averaging), "inverse_mass_matrix": identity}

    def one_chain(chain_key):
        warmup_key, sample_key = jax.random.split(chain_key)
        state, parameters = (window if start == "prior" else step_size_only)(warmup_key)
        kernel = blackjax.nuts(logdensity, **parameters)

        def step(state, step_key):
            state, info = kernel.step(step_key, state)
            return state, (state.position, info.is_divergent, info.acceptance_rate, info.num_integration_steps)

        _, (positions, divergent, accept, leapfrogs) = jax.lax.scan(step, state, jax.random.split(sample_key, draws))
        return positions, jnp.sum(divergent), parameters["step_size"], jnp.mean(accept), jnp.mean(leapfrogs)

    positions, *status = jax.vmap(one_chain)(jax.random.split(key, chains))
    return _run(target.sites(positions, 2), *status, warm)


def _numpyro_draws(model, key, warmup, draws, chains, target_accept, dense_mass, start) -> NutsRun:
    """numpyro's NUTS with vectorized chains, all started at `start`'s point and adapted as in blackjax."""
    target, position, warm = sampled_target(model, start)
    kernel = NUTS(
        potential_fn=target.potential,
        dense_mass=dense_mass,
        target_accept_prob=target_accept,
        adapt_mass_matrix=start == "prior",
    )
    mcmc = MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    position = jnp.broadcast_to(position, (chains,) + position.shape) if chains > 1 else position
    mcmc.run(key, init_params=position, extra_fields=("diverging", "accept_prob", "num_steps", "adapt_state.step_size"))
    fields = mcmc.get_extra_fields(group_by_chain=True)
    return _run(
        target.sites(mcmc.get_samples(group_by_chain=True), 2),
        jnp.sum(fields["diverging"], axis=1),
        fields["adapt_state.step_size"][:, -1],
        jnp.mean(fields["accept_prob"], axis=1),
        jnp.mean(fields["num_steps"], axis=1),
        warm,
    )


def nuts_diagnostics(samples: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021) per site: ({site: (P,)}, {site: (P,)}).

    `samples` maps site names to (chains, draws, P) arrays. One chain is split into halves for R-hat
    (which ArviZ then splits again), so a single chain still reports within-chain drift.
    """
    from arviz_stats.base import array_stats  # deferred: ArviZ is slow to import

    rhat, ess = {}, {}
    for name, value in samples.items():
        value = np.asarray(value, np.float64)
        ess[name] = array_stats.ess(value, chain_axis=0, draw_axis=1, method="bulk")
        if value.shape[0] == 1:
            half = value.shape[1] // 2
            value = np.concatenate([value[:, :half], value[:, half : 2 * half]])
        rhat[name] = array_stats.rhat(value, chain_axis=0, draw_axis=1, method="rank")
    return rhat, ess


@dataclasses.dataclass(frozen=True)
class NutsDiagnostics(MixingDiagnostics):
    """NUTS facts: rank-normalised R-hat and bulk ESS per block {"optimum", "hessian", "extra_noise_squared"}
    → (P,); divergences (total); step_size, acceptance_rate, leapfrogs (chains,); cold_coordinates (those the exact
    start could not place, started cold; 0 from the prior start); and the settings (start among them)."""

    rhat: Mapping[str, np.ndarray]
    ess_bulk: Mapping[str, np.ndarray]
    divergences: int
    step_size: np.ndarray
    acceptance_rate: np.ndarray
    leapfrogs: np.ndarray
    warmup: int
    draws: int
    chains: int
    target_accept: float
    dense_mass: bool
    start: str
    cold_coordinates: int
    backend: str

    @classmethod
    def aggregate(cls, records: Sequence[NutsDiagnostics]) -> dict[str, Any]:
        """The mixing summary and the total number of divergent transitions."""
        if not records:
            return {}
        return MixingDiagnostics.aggregate(records) | {"divergences": int(sum(r.divergences for r in records))}


class NutsSettings(Protocol):
    """What the NUTS solver reads from its options (`noiseaware.methods.NutsOptions`, which owns the defaults and
    checks them); warmup and target_accept None are the start's own (`START_DEFAULTS`)."""

    start: str
    warmup: int | None
    draws: int
    chains: int
    backend: str
    target_accept: float | None
    dense_mass: bool
    chunk: int
    progress: Progress


def fit_nuts_batch(models: Sequence[GradientModel], *, keys, options: NutsSettings) -> list[Draws | FitFailure]:
    """Fit each trace's gradient model by NUTS: Draws (chains, K, P) per model (same P and prior); model m uses
    keys[m] (M jax PRNG keys); a trace is a batch of one.

    start "exact" (the default: the exact route's answer, the target near N(0, I), step-size adaptation only) or
    "prior" (the cold start at the prior means, Stan's window adaptation of step size and mass matrix; a
    cross-check); warmup and target_accept None are the start's own (`START_DEFAULTS`: 300 and 0.9, or 1000 and
    0.8). backend "blackjax" (`nuts_blackjax_draws`): vmapped in chunks of `chunk`, one compiled program for every
    chunk (the last is padded); "numpyro": one model after another, vectorized chains. Both run in float64 on the
    same target; `dense_mass` adapts a dense instead of a diagonal mass matrix (the cold start only). `progress`:
    True for a bar over the traces, or a callable(done, total) called after each chunk.
    diagnostics: rhat and ess_bulk (rank-normalised), {"optimum", "hessian", "extra_noise_squared"} → (P,),
    the extra noise on u² since u's posterior is sign-symmetric; max_rhat, min_ess, divergences (total);
    step_size, acceptance_rate, leapfrogs (mean integration steps per draw): (chains,); cold_coordinates (the
    coordinates the exact start could not place, started cold); and the settings. A model with non-finite draws
    gets a FitFailure (DIVERGED) in its place.
    """
    settings = _settings(options)
    names = ("warmup", "draws", "chains", "target_accept", "dense_mass", "start", "backend")
    warmup, draws, chains, target_accept, dense_mass, start, backend = (settings[name] for name in names)
    count = len(models)
    chunk = 1 if backend == "numpyro" else min(options.chunk, count)
    results: list[Draws | FitFailure] = []
    with jax.enable_x64(True):
        with progress_bar(count, "NUTS", options.progress, unit="trace") as advance:
            if backend == "numpyro":
                for model, key in zip(models, keys):
                    run = _numpyro_draws(
                        jax.tree_util.tree_map(jnp.asarray, model),
                        key,
                        warmup,
                        draws,
                        chains,
                        target_accept,
                        dense_mass,
                        start,
                    )
                    results.append(_draws_from_run(jax.tree_util.tree_map(_to_numpy, run), settings))
                    advance(1)
                return results
            for first in range(0, count, chunk):
                index = [min(i, count - 1) for i in range(first, first + chunk)]
                stacked = jax.tree_util.tree_map(
                    lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *(models[i] for i in index)
                )
                runs = jax.tree_util.tree_map(
                    _to_numpy,
                    _blackjax_batch(
                        stacked,
                        keys[np.asarray(index)],
                        warmup,
                        draws,
                        chains,
                        target_accept,
                        dense_mass,
                        start,
                    ),
                )
                kept = min(chunk, count - first)
                results += [
                    _draws_from_run(jax.tree_util.tree_map(lambda x, m=m: x[m], runs), settings) for m in range(kept)
                ]
                advance(kept)
    return results


def _settings(options: NutsSettings) -> dict:
    """The settings a fit records, with warmup and target_accept None resolved to the start's own (`START_DEFAULTS`)."""
    own = START_DEFAULTS[options.start]
    return {
        "warmup": own["warmup"] if options.warmup is None else options.warmup,
        "draws": options.draws,
        "chains": options.chains,
        "target_accept": own["target_accept"] if options.target_accept is None else options.target_accept,
        "dense_mass": options.dense_mass,
        "start": options.start,
        "backend": options.backend,
    }


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6, 7))
def _blackjax_batch(models, keys, *settings) -> NutsRun:
    return jax.vmap(lambda m, k: nuts_blackjax_draws(m, k, *settings))(models, keys)


def _to_numpy(x):
    return np.asarray(x, np.float64 if x.dtype.kind == "f" else None)


def _draws_from_run(run: NutsRun, settings: dict) -> Draws | FitFailure:
    """Draws with R-hat/ESS diagnostics from one model's NutsRun (numpy), or a FitFailure if any draw is not finite."""
    if not run.finite:
        return FitFailure(
            DIVERGED,
            "NUTS produced non-finite draws: the trace's statistics are not finite or the prior is degenerate; "
            "check the trace with na.diagnose(trace) and trace.describe()",
        )
    samples = {"optimum": run.optimum, "hessian": run.hessian}
    if run.extra_noise is not None:
        samples["extra_noise_squared"] = run.extra_noise**2
    rhat, ess = nuts_diagnostics(samples)
    diagnostics = NutsDiagnostics(
        rhat=rhat,
        ess_bulk=ess,
        max_rhat=float(max(np.max(v) for v in rhat.values())),
        min_ess=float(min(np.min(v) for v in ess.values())),
        divergences=int(np.sum(run.divergences)),
        step_size=run.step_size,
        acceptance_rate=run.acceptance_rate,
        leapfrogs=run.leapfrogs,
        cold_coordinates=int(np.sum(~run.warm)) if settings["start"] == "exact" else 0,
        **settings,
    )
    return Draws(run.optimum, run.hessian, run.extra_noise, diagnostics)
