"""DP-SGLD: stochastic-gradient Langevin dynamics with per-example clipping (Wang, Fienberg & Smola 2015; seed 000
ch. 4–5), on θ ∈ R^d, the model's unconstrained space (a trace's θ). One step:

    S_t = Σ_{i ∈ B_t} clip_C(∇ log p(x_i | θ_t)),   B_t a Poisson(q) sample of the N examples,
    θ_{t+1} = θ_t + (η/2)·(∇ log p̃(θ_t) + S_t / q) + N(0, v I),   v = max(η, (σ η C / 2q)²).

With v = η this is SGLD (Welling & Teh 2011), whose iterates sample p(θ | x) as η → 0. Privacy: θ_{t+1} is a
Gaussian mechanism on S_t, whose sensitivity is C (add/remove one example) scaled by η/(2q), with noise sd √v, so
its noise multiplier is σ_eff = 2q√v/(ηC) ≥ σ, the accountant's σ for (ε, δ, q, T): the Langevin noise pays
for privacy, and noise is added on top only where η is too large for it (v > η: the chain then samples a
wider, tempered distribution). The post-burn-in iterates, thinned, are the posterior draws.

Step size, clip and burn-in are chosen on data sets simulated from the prior (`choose_settings`, no privacy
spent), as the DPVI settings are: a grid of η around η_DP = (2q/(σC))², the largest step whose Langevin noise
alone is private, and C at quantiles of the per-example gradient norms at the simulated truths; each
candidate is scored by how far its marginal interval coverage of the simulated truths is from nominal.
T and q are the model's DPVI preset's, so both methods spend the same budget over the same number of steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..models.benchmark import BenchmarkModel
from ..posteriors.draws import DrawsPosterior
from ..privacy import epsilon_spent, noise_multiplier
from ..recording.contract import ModelSpec, first_data_set, inspect_model
from ..recording.settings import default_batch_size
from ..recording.subsampling import clip_weights, poisson_sum
from ..util.checks import positive_float, positive_int, probability
from ..util.diagnostics import Diagnostics
from ..util.errors import FitFailure

__all__ = [
    "SGLDDiagnostics",
    "SGLDPlan",
    "SGLDSettings",
    "choose_settings",
    "dpsgld_batch",
    "effective_noise_multiplier",
    "langevin_variance",
    "sgld_chains",
]

DIVERGED = "diverged"
STEP_MULTIPLIERS = (1 / 64, 1 / 16, 1 / 4, 1.0, 4.0)
"""The step-size grid, in units of η_DP = (2q/(σC))²."""
CLIP_QUANTILES = (0.5, 0.9, 0.99)
"""The clip grid: quantiles of the per-example gradient norms at the simulated truths."""
BURN_INS = (0.25, 0.5)
"""The burn-in grid, fractions of T."""
LEVELS = (0.5, 0.8, 0.9, 0.95)
"""The interval levels whose marginal coverage scores a candidate."""
_TUNING_STREAM = 0x53474C44  # "SGLD": the prior simulations of the choice, apart from any study's


@dataclasses.dataclass(frozen=True)
class SGLDSettings:
    """steps T and sampling_rate q (None: the model's DPVI preset's); step_size η, clip C and burn_in (a fraction
    of T) (None: chosen on prior simulations); draws: the post-burn-in iterates kept (thinned evenly);
    tuning_simulations: the prior data sets the choice is scored on; tuning_seed: their key."""

    steps: int | None = None
    sampling_rate: float | None = None
    step_size: float | None = None
    clip: float | None = None
    burn_in: float | None = None
    draws: int = 1000
    tuning_simulations: int = 32
    tuning_seed: int = 0

    def __post_init__(self):
        if self.steps is not None:
            positive_int("steps", self.steps)
        if self.sampling_rate is not None:
            probability("sampling_rate", self.sampling_rate)
        for name in ("step_size", "clip"):
            if getattr(self, name) is not None:
                positive_float(name, getattr(self, name))
        if self.burn_in is not None and not 0 <= self.burn_in < 1:
            raise ValueError(f"burn_in is a fraction of the steps in [0, 1); got {self.burn_in!r}")
        positive_int("draws", self.draws)
        positive_int("tuning_simulations", self.tuning_simulations)


@dataclasses.dataclass(frozen=True)
class SGLDPlan:
    """A resolved DP-SGLD run: T, q, η, C, the Langevin-step variance v, the burn-in fraction; sigma: the
    accountant's σ at (ε, δ, q, T); chosen: the settings the prior simulations chose (names), and score: the
    chosen candidate's mean |coverage − level| on them (None when nothing was chosen)."""

    steps: int
    sampling_rate: float
    step_size: float
    clip: float
    variance: float
    burn_in: float
    sigma: float
    chosen: tuple[str, ...] = ()
    score: float | None = None

    @property
    def noise_multiplier(self) -> float:
        """σ_eff = 2q√v/(ηC), the noise multiplier each step's release has (≥ sigma)."""
        return effective_noise_multiplier(self.step_size, self.clip, self.sampling_rate, self.variance)


@dataclasses.dataclass(frozen=True)
class SGLDDiagnostics(Diagnostics):
    """The run's plan (`SGLDPlan`) and the ε its effective noise multiplier spends at its δ."""

    plan: SGLDPlan
    epsilon: float
    delta: float


def langevin_variance(step_size: float, clip: float, sampling_rate: float, sigma: float) -> float:
    """v = max(η, (σηC/2q)²): the noise variance per coordinate of one step, Langevin's η unless privacy needs more."""
    return max(step_size, (sigma * step_size * clip / (2.0 * sampling_rate)) ** 2)


def effective_noise_multiplier(step_size: float, clip: float, sampling_rate: float, variance: float) -> float:
    """σ_eff = √v / (ηC/2q): the step's noise sd over the sensitivity of its gradient term."""
    return 2.0 * sampling_rate * math.sqrt(variance) / (step_size * clip)


@dataclasses.dataclass(frozen=True)
class _Chain:
    """The structural (static) part of a DP-SGLD program: the model, T, the chunk size and the thinning."""

    spec: ModelSpec
    steps: int
    chunk: int
    thin: int

    def drift(self, theta, data, key, sampling_rate, clip):
        """∇ log p̃(θ) + S/q: the prior's gradient and the clipped Poisson-sample sum of ∇ log p(x_i | θ), (d,)."""
        per_example, constants = self.spec.split_data(data)
        grad_one = jax.grad(self.spec.example_log_likelihood)

        def summand(examples, mask):
            grads = jax.vmap(grad_one, in_axes=(None, 0, None))(theta, examples, constants)
            factor, keep = clip_weights(jnp.sqrt(jnp.sum(grads**2, axis=-1)), mask, clip)
            return factor @ jnp.where(keep[:, None], grads, 0.0)

        total = poisson_sum(
            key, sampling_rate, self.chunk, self.spec.n_examples, per_example, summand, jnp.zeros_like(theta)
        )
        prior = jax.grad(self.spec.log_prior)(theta, per_example, constants)
        return prior + total / sampling_rate

    def run(self, data, key, init, sampling_rate, step_size, clip, variance):
        """T steps from θ₀ = init (d,): every `thin`-th iterate, (T // thin, d)."""

        def step(theta, key):
            key_sample, key_noise = jax.random.split(key)
            drift = self.drift(theta, data, key_sample, sampling_rate, clip)
            noise = jnp.sqrt(variance) * jax.random.normal(key_noise, theta.shape, theta.dtype)
            return theta + 0.5 * step_size * drift + noise, None

        def block(theta, key):
            theta, _ = lax.scan(step, theta, jax.random.split(key, self.thin))
            return theta, theta

        _, kept = lax.scan(block, init, jax.random.split(key, self.steps // self.thin))
        return kept


@functools.partial(jax.jit, static_argnames=("chain",))
def _run_chains(chain: _Chain, data, keys, init, sampling_rate, step_size, clip, variance):
    """M chains at once: data (M, …) (or shared), keys (M,), step_size, clip, variance (M,) → (M, T // thin, d)."""
    return jax.vmap(chain.run, in_axes=(0, 0, None, None, 0, 0, 0))(
        data, keys, init, sampling_rate, step_size, clip, variance
    )


def sgld_chains(spec: ModelSpec, data: Mapping, keys, *, init, plan: SGLDPlan, chains_per: np.ndarray | None = None):
    """The thinned iterates (M, T // thin, d) of M DP-SGLD chains on data (M, …) with keys (M,), from θ₀ = init (d,);
    chains_per: optional (M, 3) per-chain (η, C, v) in place of the plan's (the settings grid)."""
    m = len(keys)
    thin = max(1, plan.steps // (2 * _KEPT_MAX))
    chain = _Chain(spec, plan.steps, default_batch_size(spec.n_examples, plan.sampling_rate), thin)
    if chains_per is None:
        chains_per = np.tile([plan.step_size, plan.clip, plan.variance], (m, 1))
    dtype = jnp.result_type(float)
    per = jnp.asarray(chains_per, dtype)
    data = {k: jnp.asarray(v, dtype) if np.issubdtype(np.asarray(v).dtype, np.floating) else v for k, v in data.items()}
    init, rate = jnp.asarray(init, dtype), jnp.asarray(plan.sampling_rate, dtype)
    return np.asarray(_run_chains(chain, data, keys, init, rate, per[:, 0], per[:, 1], per[:, 2]))


_KEPT_MAX = 2000
"""At most this many iterates are stored per chain (T // thin ≤ 2·_KEPT_MAX)."""


def model_spec(bm: BenchmarkModel, data: Mapping) -> ModelSpec:
    """The model's contract checked on the first of the data sets (M, …), with the BenchmarkModel's site map."""
    settings = bm.dpvi_settings
    spec = inspect_model(
        bm.model, first_data_set(data), transforms=settings.get("transforms", "numpyro"), sites=settings.get("sites")
    )
    return dataclasses.replace(spec, site_map=bm.site_map)


def initial_theta(bm: BenchmarkModel) -> np.ndarray:
    """θ₀ (d,): the DPVI preset's initial μ (public), else 0."""
    init = bm.dpvi_settings.get("init")
    mu = 0.0 if init is None else (init[0] if isinstance(init, (tuple, list)) else init)
    return np.broadcast_to(np.asarray(mu, np.float64), (bm.dim,)).copy()


def _kept(draws: np.ndarray, burn_in: float, count: int) -> np.ndarray:
    """The post-burn-in iterates of draws (…, S, d), thinned evenly to at most `count`."""
    start = int(round(burn_in * draws.shape[-2]))
    tail = draws[..., start:, :]
    step = max(1, math.ceil(tail.shape[-2] / count))
    return tail[..., ::step, :]


def coverage_error(draws: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Mean over LEVELS and coordinates of |marginal coverage − level| of draws (J, S, d) for truths (J, d)."""
    rank = np.mean(draws < truth[:, None, :], axis=1)  # (J, d)
    return np.mean([np.abs(np.mean(np.abs(rank - 0.5) <= level / 2) - level) for level in LEVELS])


def choose_settings(
    bm: BenchmarkModel, epsilon: float, delta: float, settings: SGLDSettings = SGLDSettings()
) -> SGLDPlan:
    """The run's plan at (ε, δ): T and q from the settings or the preset, σ from the accountant, and η, C and burn-in
    as given or chosen on `tuning_simulations` data sets from the prior (module doc). Kept per model, level and
    settings within the process (a study's parts share one choice; it is a function of these alone)."""
    name = (bm.name, bm.n_examples, id(bm.model), id(bm.covariates), repr(sorted(bm.dpvi_settings.items())))
    key = (name, float(epsilon), float(delta), settings)
    if key not in _CHOSEN:
        _CHOSEN[key] = _choose(bm, float(epsilon), float(delta), settings)
    return _CHOSEN[key]


_CHOSEN: dict = {}


def _choose(bm: BenchmarkModel, epsilon: float, delta: float, settings: SGLDSettings) -> SGLDPlan:
    steps = settings.steps or int(bm.dpvi_settings["steps"])
    rate = settings.sampling_rate or float(bm.dpvi_settings["sampling_rate"])
    sigma = noise_multiplier(epsilon, delta, rate, steps)
    fixed = settings.step_size is not None and settings.clip is not None and settings.burn_in is not None
    if fixed:
        variance = langevin_variance(settings.step_size, settings.clip, rate, sigma)
        return SGLDPlan(steps, rate, settings.step_size, settings.clip, variance, settings.burn_in, sigma)
    key = jax.random.fold_in(jax.random.key(settings.tuning_seed), _TUNING_STREAM)
    k_sim, k_run = jax.random.split(key)
    truth, data = jax.vmap(bm.simulate)(jax.random.split(k_sim, settings.tuning_simulations))
    spec = model_spec(bm, data)
    clips = [settings.clip] if settings.clip is not None else _clip_grid(spec, np.asarray(truth), data)
    grid = [
        (eta, clip)
        for clip in clips
        for eta in ([settings.step_size] if settings.step_size is not None else _step_grid(clip, rate, sigma))
    ]
    j = settings.tuning_simulations
    per = np.array([[eta, clip, langevin_variance(eta, clip, rate, sigma)] for eta, clip in grid])
    plan = SGLDPlan(steps, rate, float(per[0, 0]), float(per[0, 1]), float(per[0, 2]), 0.5, sigma)
    stacked = jax.tree.map(lambda a: jnp.tile(a, (len(grid),) + (1,) * (a.ndim - 1)), data)
    draws = sgld_chains(
        spec,
        stacked,
        jax.random.split(k_run, len(grid) * j),
        init=initial_theta(bm),
        plan=plan,
        chains_per=np.repeat(per, j, axis=0),
    ).reshape(len(grid), j, -1, bm.dim)
    truth = np.asarray(truth)
    burn_ins = [settings.burn_in] if settings.burn_in is not None else list(BURN_INS)
    scores = {
        (g, b): (coverage_error(_kept(draws[g], b, settings.draws), truth) if np.all(np.isfinite(draws[g])) else np.inf)
        for g in range(len(grid))
        for b in burn_ins
    }
    (g, burn_in), score = min(scores.items(), key=lambda item: item[1])
    if not np.isfinite(score):
        raise FitFailure(DIVERGED, "every DP-SGLD setting tried on the prior simulations diverged")
    chosen = tuple(
        name
        for name, value in (("step_size", settings.step_size), ("clip", settings.clip), ("burn_in", settings.burn_in))
        if value is None
    )
    eta, clip, variance = (float(v) for v in per[g])
    return SGLDPlan(steps, rate, eta, clip, variance, burn_in, sigma, chosen, float(score))


def _step_grid(clip: float, rate: float, sigma: float) -> list[float]:
    """η_DP·STEP_MULTIPLIERS, η_DP = (2q/(σC))²."""
    eta = (2.0 * rate / (sigma * clip)) ** 2
    return [eta * m for m in STEP_MULTIPLIERS]


def _clip_grid(spec: ModelSpec, truth: np.ndarray, data: Mapping) -> list[float]:
    """CLIP_QUANTILES of ‖∇ log p(x_i | θ)‖ over the examples of the simulated data sets at their truths."""
    grad_one = jax.grad(spec.example_log_likelihood)

    def norms(theta, one):
        per_example, constants = spec.split_data(one)
        grads = jax.vmap(grad_one, in_axes=(None, 0, None))(theta, per_example, constants)
        return jnp.sqrt(jnp.sum(grads**2, axis=-1))

    values = np.asarray(jax.jit(jax.vmap(norms))(jnp.asarray(truth), data)).ravel()
    values = values[np.isfinite(values)]
    return [float(max(np.quantile(values, q), 1e-6)) for q in CLIP_QUANTILES]


def dpsgld_batch(
    bm: BenchmarkModel, data: Mapping, *, keys, epsilon: float, delta: float, settings: SGLDSettings = SGLDSettings()
) -> list[DrawsPosterior | FitFailure]:
    """DP-SGLD on M data sets (data (M, …)) at (ε, δ): chain m uses keys[m]; one posterior (or FitFailure) each."""
    plan = choose_settings(bm, epsilon, delta, settings)
    spec = model_spec(bm, data)
    draws = sgld_chains(spec, data, keys, init=initial_theta(bm), plan=plan)
    spent = epsilon_spent(plan.noise_multiplier, delta, plan.sampling_rate, plan.steps)
    diagnostics = SGLDDiagnostics(plan=plan, epsilon=spent, delta=delta)
    outcomes: list[DrawsPosterior | FitFailure] = []
    for chain in draws:
        if not np.all(np.isfinite(chain)):
            outcomes.append(FitFailure(DIVERGED, "the DP-SGLD chain left the finite numbers"))
            continue
        kept = _kept(chain, plan.burn_in, settings.draws)
        outcomes.append(
            DrawsPosterior(chains=kept[None], method="dp-sgld", sites=bm.site_map.sites, diagnostics=diagnostics)
        )
    return outcomes
