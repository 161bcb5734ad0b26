"""What a prior-predictive simulation shows that a released trace cannot (docs/tuning.md §1).

For M data sets x_m ~ p(x | θ_m), θ_m ~ p(θ): the non-private VI optimum φ̂_m (Adam on the ELBO, annealed to
zero), the per-example gradients g_i(φ̂_m) at it (with the run's S Monte Carlo draws) and the diagonal of the
−ELBO Hessian H_m = ∂(Σ_i g_i)/∂φ at it (Adam's answer polished by full Newton steps on the full data).
From these, for any clip C and gradient scale s:

    clipped fraction  f_m = #{i : ‖s ⊙ g_i‖ > C} / N,
    clipping shift    δφ_m ≈ −b_m ⊘ diag H_m,   b_m = Σ_i [clip_C(s ⊙ g_i) ⊘ s − g_i],

the move of the optimum DP-SGD converges to away from φ̂_m (first order, diagonal H). Simulation spends no
privacy: these facts are what tuning and the preflight check rest on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..models.benchmark import BenchmarkModel
from ..recording.dpvi import build_recorder, record_dpvi_batch
from ..recording.optimizer import Optimizer
from ..recording.settings import DEFAULT_INIT
from ..trace.families import MEAN_FIELD, VariationalFamily, family_for
from ..util.keys import as_key

__all__ = ["SimulationFacts", "facts_for_settings", "simulate", "simulation_facts"]

OPTIMISER_STEPS = 3000
"""Adam steps of the non-private runs (learning rate 0.05, cosine-annealed to 0; minibatches of ≤ 1000)."""
GRADIENT_EXAMPLES = 2000
"""Examples per simulation whose gradients at φ̂ are kept (clipping statistics scale the sums to N)."""
HESSIAN_DRAWS = 64
"""Monte Carlo draws of each Newton step's full-data gradient and Hessian."""
GRADIENT_ROUNDS = 16
"""Rounds of HESSIAN_DRAWS draws averaged in each Newton step's gradient (the ρ block's Monte Carlo noise)."""
NEWTON_STEPS = 3
"""Newton steps that polish Adam's optimum (the last one's Hessian diagonal is kept)."""


@dataclass(frozen=True)
class SimulationFacts:
    """M prior-predictive simulations and the non-private facts about them.

    truth (M, d): θ_m; data: the data sets, arrays with leading axis M; optimum (M, P): φ̂_m;
    gradients (M, n, P): per-example gradients at φ̂_m for n ≤ N examples; hessian (M, P): diag H_m;
    n_examples: N; family: the name of the variational family φ parametrises (`trace.families`).
    """

    truth: np.ndarray
    data: dict
    optimum: np.ndarray
    gradients: np.ndarray
    hessian: np.ndarray
    n_examples: int
    family: str = MEAN_FIELD

    def __len__(self) -> int:
        return self.truth.shape[0]

    @property
    def dim(self) -> int:
        return self.truth.shape[1]

    @property
    def variational_family(self) -> VariationalFamily:
        return family_for(self.family, self.optimum.shape[1])

    @property
    def vi_sd(self) -> np.ndarray:
        """The non-private VI posterior sds sqrt(Σ_jj(φ̂_m)) (softplus(ρ̂_m) for mean-field), (M, d): the width a
        private posterior is measured against."""
        return self.variational_family.marginal_sd(self.optimum)

    def subset(self, index) -> SimulationFacts:
        """The facts of simulations `index` (a slice or index array)."""
        return SimulationFacts(
            self.truth[index],
            {k: np.asarray(v)[index] for k, v in self.data.items()},
            self.optimum[index],
            self.gradients[index],
            self.hessian[index],
            self.n_examples,
            self.family,
        )

    def _scaled_norms(self, clip: float, grad_scale: np.ndarray) -> np.ndarray:
        return np.linalg.norm(self.gradients * grad_scale, axis=-1) / clip

    def clipped_fraction(self, clip: float, grad_scale) -> np.ndarray:
        """f_m: the fraction of examples whose scaled gradient ‖s ⊙ g_i(φ̂_m)‖ exceeds C, (M,)."""
        return np.mean(self._scaled_norms(clip, np.asarray(grad_scale)) > 1.0, axis=1)

    def clipping_shift(self, clip: float, grad_scale) -> np.ndarray:
        """δφ_m ≈ −b_m ⊘ diag H_m, b_m = Σ_i [clip_C(s ⊙ g_i) ⊘ s − g_i] (sum scaled from n to N), (M, P)."""
        norms = self._scaled_norms(clip, np.asarray(grad_scale))
        excess = (np.minimum(1.0, 1.0 / np.maximum(norms, 1e-300)) - 1.0)[..., None] * self.gradients
        b = excess.sum(axis=1) * (self.n_examples / self.gradients.shape[1])
        return -b / self.hessian


def simulate(bm: BenchmarkModel, simulations: int, key) -> tuple[np.ndarray, dict]:
    """θ_m ~ prior and x_m ~ p(x | θ_m), m = 1..M: (truth (M, d), data {name: (M, …)})."""
    truth, data = jax.vmap(bm.simulate)(jax.random.split(as_key(key), simulations))
    return np.asarray(truth, np.float64), {k: np.asarray(v) for k, v in data.items()}


def simulation_facts(
    bm: BenchmarkModel,
    truth: np.ndarray,
    data: dict,
    *,
    key,
    init,
    mc_draws: int,
    transforms="numpyro",
    sites=None,
    family: str = "mean-field",
    rank: int | None = None,
    progress=False,
) -> SimulationFacts:
    """The non-private facts of given simulations (θ_m, x_m): φ̂_m, g_i(φ̂_m) and diag H_m (module doc).

    init: φ₀ of the non-private runs, (P,) or a pair (μ₀, ρ₀); mc_draws: S of the DPVI run the facts serve;
    family, rank: the variational family (record_dpvi's).
    """
    n = bm.n_examples
    steps = OPTIMISER_STEPS
    count = truth.shape[0]
    k_opt, k_grad, k_hess = jax.random.split(as_key(key), 3)
    runs = record_dpvi_batch(
        bm.model,
        data,
        keys=jax.random.split(k_opt, count),
        non_private=True,
        optimizer=Optimizer("adam", 0.05, schedule="cosine-decay"),
        steps=steps,
        sampling_rate=min(1.0, 1000 / n),
        clip=1e30,
        init=init,
        mc_draws=mc_draws,
        transforms=transforms,
        sites=sites,
        family=family,
        rank=rank,
        progress=progress,
        batch=bm.batch,
    )
    optimum = np.stack([run.params[-steps // 10 :].mean(axis=0) for run in runs])
    recorder = build_recorder(
        bm.model,
        data,
        batched=True,
        transforms=transforms,
        sites=sites,
        non_private=True,
        learning_rate=1.0,
        steps=1,
        sampling_rate=1.0,
        clip=1.0,
        mc_draws=mc_draws,
        family=family,
        rank=rank,
    )
    program, m = recorder.program, recorder.settings.family.noise_dim
    prepared = recorder.prepare(data, batched=True)
    per_example, constants = program.spec.split_data(prepared)
    kept = min(n, GRADIENT_EXAMPLES)
    head = {k: v[:, :kept] for k, v in per_example.items()}
    eps = jax.random.normal(k_grad, (count, mc_draws, m), recorder.dtype)
    params = jnp.asarray(optimum, recorder.dtype)
    optimum, grads, hessian = _polished(
        program, m, params, eps, jax.random.split(k_hess, count), per_example, head, constants
    )
    optimum = np.asarray(optimum, np.float64)
    return SimulationFacts(
        truth,
        data,
        optimum,
        np.asarray(grads, np.float64),
        np.asarray(hessian, np.float64),
        n,
        recorder.settings.family.name,
    )


@functools.partial(jax.jit, static_argnames=("program", "noise_dim"))
def _polished(program, noise_dim: int, params, eps, keys, per_example, head, constants):
    """Per simulation m (lax.map over the leading axis): NEWTON_STEPS Newton steps φ ← φ − H⁻¹∇ on the full data
    from Adam's φ (params (M, P)), then g_i(φ̂) on the first examples (`head`) with `eps` (M, S, noise_dim) and diag H
    at the last step: ((M, P), (M, n', P), (M, P)). One compiled program per recorder program and shapes."""

    def one(params, eps, k_newton, examples, few, consts):
        def total(p, key):
            # moment-matched draws (each coordinate's sample mean 0 and variance 1): exact for a Gaussian
            # likelihood, and far less Monte Carlo noise in the ρ block for any other
            draws = jax.random.normal(key, (HESSIAN_DRAWS, noise_dim), params.dtype)
            draws = (draws - draws.mean(axis=0)) / draws.std(axis=0)
            return program.per_example_gradients(p, draws, examples, consts).sum(axis=0)

        def gradient(p, key):  # the full-data gradient averaged over GRADIENT_ROUNDS × HESSIAN_DRAWS draws
            return jax.lax.map(lambda k: total(p, k), jax.random.split(key, GRADIENT_ROUNDS)).mean(axis=0)

        def newton(p, key):
            k_h, k_g = jax.random.split(key)
            hessian = jax.jacfwd(total)(p, k_h)
            return p - jnp.linalg.solve(hessian, gradient(p, k_g)), jnp.diagonal(hessian)

        params, diagonals = jax.lax.scan(newton, params, jax.random.split(k_newton, NEWTON_STEPS))
        return params, program.per_example_gradients(params, eps, few, consts), diagonals[-1]

    return jax.lax.map(lambda a: one(*a), (params, eps, keys, per_example, head, constants))


def facts_for_settings(bm: BenchmarkModel, settings, simulations: int, *, simulation_key, facts_key) -> SimulationFacts:
    """M fresh simulations (drawn with `simulation_key`) and their facts for the record_dpvi `settings` (their
    init, S, transforms and sites)."""
    truth, data = simulate(bm, simulations, simulation_key)
    return simulation_facts(
        bm,
        truth,
        data,
        key=facts_key,
        init=settings.get("init", DEFAULT_INIT),
        mc_draws=settings.get("mc_draws", 10),
        transforms=settings.get("transforms", "numpyro"),
        sites=settings.get("sites"),
        family=settings.get("family", "mean-field"),
        rank=settings.get("rank"),
    )
