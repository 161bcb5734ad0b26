"""DPVI: DP-SGD on the ELBO of any numpyro model, recorded as a Trace (docs/method.md §1).

Variational family q_φ(θ) = N(μ, A Aᵀ) (`trace.families`): mean-field A = diag(softplus(ρ)), φ = (μ, ρ),
P = 2d (the default); full-rank A = L, φ = (μ, ρ, ℓ); low-rank A = [diag(softplus ρ), B], φ = (μ, ρ, b). Per
example

    ℓ_i(φ) = (1/S) Σ_s [ −log p(x_i | θ_s) − (1/N) log p̃(θ_s) ] − (1/N) · ½ log det(A Aᵀ),
    θ_s = μ + A ε_s,  ε_s ~ N(0, I_m) shared by all examples of a step,

(the entropy of q_φ exactly; ½ log det = Σ_j log softplus(ρ_j) for mean-field and full-rank), so Σ_i ℓ_i
estimates −ELBO up to a constant. One step t:
Poisson-sample the examples (rate q); h_i = s ⊙ ∇ℓ_i(φ_t), clipped to joint L2 norm C;
G_t = (Σ_i h_i + ξ_t) ⊘ s with ξ_t ~ N(0, σ²C² I_P); record (φ_t, G_t); φ_{t+1} = φ_t − λ ⊙ G_t
(or an optax optimizer named by `na.Optimizer`). κ heuristic: λ = v ⊙ s / (sqrt(T·P)·σ·C) (Abadi et al. 2016;
Jälkö et al. 2017; Alrawajfeh et al. 2025).

`record_dpvi` is the convenient entry point. Under it, `Recorder` holds the compiled program: its
`init(key)` and `run(state, data, n_steps)` are pure functions of arrays and keys, so they `vmap`
over keys and over data sets of equal size (`record_dpvi_batch` does exactly that). Settings are
resolved in `recording.settings`.

Poisson subsampling and per-example clipping, which DP-SGLD shares, are in `recording.subsampling`.

Why this module is long: the per-example gradient program, the scan over steps and the recorder that drives it in
chunks are one compiled program; split, their shapes and keys would have to be kept in step across modules.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib.metadata import version
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from ..trace import Convention, Trace, TraceError, WindowedTrace
from ..trace.families import VariationalFamily
from ..util.chunks import run_chunks
from ..util.deprecation import warn_renamed
from ..util.keys import as_key, as_keys
from ..util.progress import progress_bar
from .config import DPVISettings, as_settings
from .contract import ModelSpec, as_data, check_data_sets, first_data_set, inspect_model
from .settings import (
    DEFAULT_DELTA,
    UNCHECKED_HINT,
    ResolvedSettings,
    SettingsHint,
    check_preset_size,
    resolve_settings,
)
from .sparse import SparseFeatures, check_sparse, sparse_summand
from .subsampling import clip_weights, clipped_number, poisson_sum
from .windowed import record_windowed

__all__ = [
    "RUN_KEYWORDS",
    "DPVIState",
    "Recorder",
    "build_recorder",
    "record_dpvi",
    "record_dpvi_batch",
    "step_keys",
]


PRODUCED = Convention(producer=f"noiseaware {version('noiseaware')}")
"""What a DPVI trace recorded here says of itself: noisy sums, per-example clipping, Poisson, add/remove."""
RUN_KEYWORDS = ("non_private", "allow_weak_privacy", "preflight", "preset_n_examples")
"""record_dpvi's keywords that are neither settings (`DPVISettings`) nor ε, σ, δ, key or progress."""


class DPVIState(NamedTuple):
    """Recorder state between steps: φ (P,), the optimizer state and the PRNG key."""

    params: jax.Array
    opt_state: Any
    key: jax.Array


class Hyper(NamedTuple):
    """The traced (non-structural) settings of a run; all arrays."""

    sampling_rate: jax.Array  # q, scalar
    clip: jax.Array  # C, scalar
    noise_multiplier: jax.Array  # σ, scalar
    grad_scale: jax.Array  # s, (P,)
    learning_rate: jax.Array  # λ, (P,) (unused by an optax optimizer)
    count_noise: jax.Array  # σ_b, scalar: the noise sd of the clipped count (unused without one)


# ---------------------------------------------------------------- keys


def step_keys(key):
    """The PRNG keys of one step: (next state key, subsampling key, Monte Carlo key, noise key)."""
    return tuple(jax.random.split(key, 4))


# ---------------------------------------------------------------- the compiled program


@dataclass(frozen=True)
class _Program:
    """The structural (hashable, static) part of a run; equal programs share compiled code."""

    spec: ModelSpec
    mc_draws: int
    batch_size: int
    optimizer: optax.GradientTransformation | None
    family: VariationalFamily
    sparse: SparseFeatures | None = None
    counts: bool = False

    @property
    def dim(self) -> int:
        return self.spec.site_map.dim

    def gradient_blocks(self, params, eps, examples, constants):
        """g_i = ∇_φ ℓ_i(φ) as its μ block and the rest: params (P,), eps (S, m), examples (B, …) → (B, d), (B, P − d).

        The blocks stay apart on the hot path: concatenating them there makes XLA duplicate the work.
        """
        d, n, family = self.dim, self.spec.n_examples, self.family
        thetas = family.sample(params, eps)
        site_map = self.spec.site_map
        grad_loglik = jax.grad(self.spec.constrained_log_likelihood)

        def one_draw(unconstrained):
            # ∇_u log p(x_i | T(u)) = J_T(u)ᵀ ∇_x log p(x_i | x): the transform and its Jacobian once
            # per draw, only the likelihood per example.
            values = site_map.constrain_sites(unconstrained)
            per_example = jax.vmap(grad_loglik, (None, 0, None))(values, examples, constants)
            return site_map.pull_back(unconstrained)(per_example)

        per_draw = jax.vmap(one_draw)(site_map.unflatten(thetas))  # {site: (S, B, *unconstrained_shape)}
        grad_prior = jax.vmap(jax.grad(self.spec.log_prior), (0, None, None))(thetas, examples, constants)
        if family.kind != "mean-field":
            # ∇_θ f_i(θ_s) per draw (S, B, d); the entries of A by `family.scale_gradients`, the entropy exactly
            grads = -site_map.flatten(per_draw) - grad_prior[:, None, :] / n
            rest = family.scale_gradients(params, eps, grads) - jax.grad(family.entropy)(params)[d:] / n
            return jnp.mean(grads, axis=0), rest
        # ∇_θ f_i(θ_s) = −∇ log p(x_i | θ_s) − ∇ log p̃(θ_s)/N. The sums over the S draws are unrolled
        # (XLA fuses them into one pass over the per-draw gradients, far faster than a reduction or
        # einsum) and taken per site, before flattening to (B, d).
        draws = range(eps.shape[0])
        eps_sites = site_map.unflatten(eps)
        sum_grad = site_map.flatten({k: sum(g[s] for s in draws) for k, g in per_draw.items()})
        sum_grad_eps = site_map.flatten({k: sum(g[s] * eps_sites[k][s] for s in draws) for k, g in per_draw.items()})
        sd, dsd = jax.nn.softplus(params[d:]), jax.nn.sigmoid(params[d:])
        g_mu = -sum_grad / len(draws) - jnp.mean(grad_prior, 0) / n
        g_eps = -sum_grad_eps / len(draws) - jnp.mean(grad_prior * eps, 0) / n
        return g_mu, g_eps * dsd - dsd / sd / n

    def per_example_gradients(self, params, eps, examples, constants):
        """g_i = ∇_φ ℓ_i(φ) for a batch: params (P,), eps (S, m), examples (B, …) → (B, P)."""
        return jnp.concatenate(self.gradient_blocks(params, eps, examples, constants), axis=-1)

    def dense_summand(self, hyper: Hyper, params, eps, constants):
        """summand(examples (B, …), mask (B,)) → Σ_i c_i·s ⊙ g_i as its μ block and the rest, c_i the clipping
        weights: every example's gradient in full, (B, P); with `counts`, the number of examples clipped third."""
        d = self.dim
        scale_mu, scale_rho = hyper.grad_scale[:d], hyper.grad_scale[d:]

        def summand(examples, mask):
            g_mu, g_rho = self.gradient_blocks(params, eps, examples, constants)
            h_mu, h_rho = g_mu * scale_mu, g_rho * scale_rho
            norms = jnp.sqrt(jnp.sum(h_mu**2, axis=-1) + jnp.sum(h_rho**2, axis=-1))
            factor, keep = clip_weights(norms, mask, hyper.clip)
            h_mu, h_rho = jnp.where(keep[:, None], h_mu, 0.0), jnp.where(keep[:, None], h_rho, 0.0)
            sums = factor @ h_mu, factor @ h_rho
            return sums + (clipped_number(norms, keep, hyper.clip),) if self.counts else sums

        return summand

    def clipped_sum(self, hyper: Hyper, params, eps, key, per_example, constants):
        """Σ over the Poisson sample of clip_C(s ⊙ g_i), (P,), and the number of examples clipped (a scalar; 0 without
        `counts`): chunks of `batch_size` until the sample ends; a GLM on sparse features (`sparse`) sums its
        examples' k entries (`recording.sparse`) instead of P."""
        d, P = self.dim, self.family.n_params
        if self.sparse is None:
            summand = self.dense_summand(hyper, params, eps, constants)
        else:
            summand = sparse_summand(
                self.sparse, self.spec, params, eps, per_example, constants, hyper.grad_scale, hyper.clip, self.counts
            )
        zeros = (jnp.zeros((d,), params.dtype), jnp.zeros((P - d,), params.dtype))
        zeros += (jnp.zeros((), params.dtype),) if self.counts else ()
        totals = poisson_sum(
            key, hyper.sampling_rate, self.batch_size, self.spec.n_examples, per_example, summand, zeros
        )
        clipped = totals[2] if self.counts else jnp.zeros((), params.dtype)
        return jnp.concatenate(totals[:2]), clipped

    def step(self, hyper: Hyper, data, state: DPVIState):
        """One DP-SGD step: (state, (φ_t, G_t, c̃_t)), c̃_t = the number of examples clipped + N(0, σ_b²) (its noise
        from the noise key folded with 1; 0 without `counts`)."""
        per_example, constants = self.spec.split_data(data)
        params = state.params
        next_key, key_sample, key_mc, key_noise = step_keys(state.key)
        eps = jax.random.normal(key_mc, (self.mc_draws, self.family.noise_dim), params.dtype)
        total, clipped = self.clipped_sum(hyper, params, eps, key_sample, per_example, constants)
        if self.counts:
            key_count = jax.random.fold_in(key_noise, 1)
            clipped = clipped + hyper.count_noise * jax.random.normal(key_count, (), params.dtype)
        noise = hyper.noise_multiplier * hyper.clip * jax.random.normal(key_noise, params.shape, params.dtype)
        grads = (total + noise) / hyper.grad_scale
        if self.optimizer is None:
            updates, opt_state = -hyper.learning_rate * grads, state.opt_state
        else:
            updates, opt_state = self.optimizer.update(grads, state.opt_state, params)
        new_params = (params + updates).astype(params.dtype)
        return DPVIState(new_params, opt_state, next_key), (params, grads, clipped)


def _scan(program: _Program, hyper: Hyper, data, state: DPVIState, n_steps: int):
    return lax.scan(lambda s, _: program.step(hyper, data, s), state, None, length=n_steps)


_run = jax.jit(_scan, static_argnames=("program", "n_steps"))
_run_vmap = jax.jit(jax.vmap(_scan, in_axes=(None, None, 0, 0, None)), static_argnames=("program", "n_steps"))


@functools.partial(jax.jit, static_argnames=("program", "n_steps"))
def _run_map(program: _Program, hyper: Hyper, data, state: DPVIState, n_steps: int):
    return lax.map(lambda one: _scan(program, hyper, one[0], one[1], n_steps), (data, state))


BATCH_STRATEGIES = {"vmap": _run_vmap, "map": _run_map}
"""How `record_dpvi_batch` runs M data sets in one compiled program: "vmap" vectorises them (each step of every
run waits for the run whose Poisson sample needs the most chunks), "map" runs them one after another (lax.map).
Which is faster depends on the model (`BenchmarkModel.batch`; benchmarks/batch_strategy.py measures it)."""


# ---------------------------------------------------------------- the recorder


def _float_dtype(dtype):
    dtype = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if dtype == jnp.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "dtype=float64 needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) at start-up "
            "(or run the CLI with --float64)"
        )
    if dtype not in (jnp.float32, jnp.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


@dataclass(frozen=True)
class Recorder:
    """A DPVI run, compiled once: `init(key)` → state; `run(state, data, n)` → (state, (φ (n, P), G (n, P))), with the
    released clipped counts c̃ (n,) third where the run releases them."""

    program: _Program
    settings: ResolvedSettings
    dtype: Any

    @property
    def spec(self) -> ModelSpec:
        return self.program.spec

    def hyper(self) -> Hyper:
        s, f = self.settings, self.dtype
        return Hyper(
            jnp.asarray(s.sampling_rate, f),
            jnp.asarray(s.clip, f),
            jnp.asarray(s.noise_multiplier, f),
            jnp.asarray(s.grad_scale, f),
            jnp.asarray(s.learning_rate, f),
            jnp.asarray(s.count_noise_multiplier or 0.0, f),
        )

    def init(self, key) -> DPVIState:
        """Initial state φ₀ = init for one PRNG key (vmap over keys for many)."""
        key = as_key(key)
        params = jnp.asarray(self.settings.init, self.dtype)
        opt_state = () if self.program.optimizer is None else self.program.optimizer.init(params)
        return DPVIState(params, opt_state, key)

    def run(self, state: DPVIState, data: Mapping, n_steps: int):
        """`n_steps` DP-SGD steps from `state` on `data` (pure, jittable, vmappable; data as from `prepare`).

        Returns (state after the steps, (φ_t (n_steps, P), G_t (n_steps, P))), and for a run that releases counts of
        clipped examples (`clip_count_share`) their noisy values c̃_t (n_steps,) third.
        """
        state, rows = _scan(self.program, self.hyper(), data, state, n_steps)
        return state, rows if self.program.counts else rows[:2]

    def prepare(self, data: Mapping, batched: bool = False) -> dict:
        """Data cast to the run's float dtype (integer arrays kept) and checked: N examples, all finite.

        batched: data sets stacked along a leading axis (the example axis is then axis 1).
        """
        check_finite(data)
        n = self.spec.n_examples
        out = {k: self._cast(v) for k, v in data.items()}
        for k in self.spec.per_example:
            if k not in out or out[k].shape[int(batched)] != n:
                raise ValueError(f"data[{k!r}] must have {n} examples along axis {int(batched)}")
        return out

    def _cast(self, value):
        value = jnp.asarray(value)
        return value.astype(self.dtype) if jnp.issubdtype(value.dtype, jnp.floating) else value

    def to_trace(self, params, grads, final_params, clipped=None) -> Trace:
        """A Trace from one run's φ (T, P), G (T, P), φ_T (P,) and noisy clipped counts c̃ (T,) (kept when the run
        released them) with this recorder's settings."""
        s = self.settings
        counted = s.count_noise_multiplier is not None
        sgd = self.program.optimizer is None
        return Trace(
            params=np.asarray(params),
            grads=np.asarray(grads),
            noise_multiplier=s.noise_multiplier,
            clip=s.clip,
            sampling_rate=s.sampling_rate,
            n_examples=self.spec.n_examples,
            grad_scale=np.asarray(s.grad_scale, np.asarray(params).dtype),
            learning_rate=np.asarray(s.learning_rate, np.asarray(params).dtype) if sgd else None,
            final_params=np.asarray(final_params),
            epsilon=s.epsilon,
            delta=s.delta,
            accountant=s.accountant,
            mc_draws=s.mc_draws,
            optimizer="sgd" if sgd else f"optax.{s.optimizer.name}",
            variational_family=s.family.name,
            param_names=s.family.param_names(self.spec.site_map.theta_names()),
            sites=self.spec.site_map.sites,
            convention=PRODUCED,
            clipped_counts=np.asarray(clipped) if counted else None,
            count_noise_multiplier=s.count_noise_multiplier,
        )


def build_recorder(
    model: Callable,
    data: Mapping,
    settings: DPVISettings | Mapping | None = None,
    *,
    batched: bool = False,
    epsilon: float | None = None,
    delta: float = DEFAULT_DELTA,
    noise_multiplier: float | None = None,
    non_private: bool = False,
    allow_weak_privacy: bool = False,
    preflight: str | None = None,
    preset_n_examples: int | None = None,
    **overrides,
) -> Recorder:
    """Check the settings, then the model against the data, then resolve the settings at the privacy level (see
    `record_dpvi`) into a Recorder.

    settings: a `DPVISettings` (or a mapping of its fields); `overrides` replace its fields, or are all of them.
    batched: data holds M data sets stacked along a leading axis; the model is inspected on the first and
    every data set is checked (`check_data_sets`) before the settings are resolved. preflight: accepted, so
    that `**TunedSettings` (and a tuned model's `dpvi_settings`) pass through; a recorder never hints.
    preset_n_examples: the N such settings were tuned for (`TunedSettings` carries it); data far from it are
    refused before any work (`check_preset_size`).
    """
    del preflight
    settings = as_settings(settings, overrides)
    data = as_data(data)
    check_finite(data)
    first = first_data_set(data) if batched else data
    spec = inspect_model(model, first, transforms=settings.transforms, sites=settings.sites)
    if preset_n_examples is not None:
        check_preset_size(spec.n_examples, preset_n_examples)
    if batched:
        check_data_sets(spec, data)
    spec = replace(spec, site_map=spec.site_map.with_labels(settings.labels))
    resolved = resolve_settings(
        spec,
        settings,
        epsilon=epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        non_private=non_private,
        allow_weak_privacy=allow_weak_privacy,
    )
    optimizer = None if settings.optimizer is None else settings.optimizer.transformation(settings.steps)
    counts = resolved.count_noise_multiplier is not None
    program = _Program(
        spec, resolved.mc_draws, resolved.batch_size, optimizer, resolved.family, settings.sparse, counts
    )
    recorder = Recorder(program, resolved, _float_dtype(settings.dtype))
    if settings.sparse is not None:
        indices = data[settings.sparse.indices] if settings.sparse.indices in data else None
        check_sparse(program, recorder.hyper(), recorder.prepare(first), jax.random.key(0), indices)
    return recorder


def check_finite(data: Mapping) -> None:
    """Raise a ValueError naming the first data entry that holds NaN or inf."""
    for k, v in data.items():
        v = np.asarray(v)
        if np.issubdtype(v.dtype, np.floating) and not np.all(np.isfinite(v)):
            raise ValueError(f"data[{k!r}] contains NaN or inf: clean or drop those examples first")


def _drive(run, state, steps: int, progress, description: str):
    """Run `steps` in `run_chunks`, updating a progress bar between chunks; a TraceError at the first chunk whose
    iterates or gradients are not finite (the run diverged; nothing is released). Returns (state, φ, G, c̃)."""
    params, grads, clipped = [], [], []
    with progress_bar(steps, description, progress) as bar:
        for n in run_chunks(steps, progress):
            state, (p, g, c) = run(state, n)
            # waiting for the chunk (rather than its asynchronous dispatch) keeps the bar's rate honest
            params.append(np.asarray(p))
            grads.append(np.asarray(g))
            clipped.append(np.asarray(c))
            if not (np.isfinite(params[-1]).all() and np.isfinite(grads[-1]).all()):
                done = sum(part.shape[-2] for part in params)
                raise TraceError(
                    f"DPVI diverged: its iterates or gradients are not finite by step {done} of {steps}, so nothing "
                    "is released; record again with a smaller learning rate"
                )
            bar(n)
    axis = params[0].ndim - 2
    return state, *(np.concatenate(rows, axis=axis) for rows in (params, grads, clipped))


def record_dpvi(
    model: Callable,
    data: Mapping,
    *,
    key,
    epsilon: float | None = None,
    delta: float = DEFAULT_DELTA,
    noise_multiplier: float | None = None,
    non_private: bool = False,
    allow_weak_privacy: bool = False,
    settings: DPVISettings | Mapping | None = None,
    preflight: str | None = None,
    progress: bool | Callable = False,
    windowed: bool = False,
    summary: bool | None = None,
    **overrides,
) -> Trace | WindowedTrace:
    """Run DPVI on `model(**data)` and return its released Trace (module doc has the algorithm); with
    `windowed=True` the same run kept as a `WindowedTrace` (window sums and sample rows, O(P) memory for any T:
    `recording.windowed`, docs/windowed.md; `summary=` is its deprecated name).

    Privacy: exactly one of `epsilon` (σ calibrated by the PLD accountant at `delta`),
    `noise_multiplier`, or `non_private=True` (σ = 0, ε = ∞; needs a learning_rate or an optimizer). δ should
    be well below 1/N: δ ≥ 1/N warns, δ ≥ 0.5 is refused unless `allow_weak_privacy=True`. Before any work
    the settings are validated and the data checked against the model as traced on them (lengths, each
    observed site's shape and support).
    Settings (`na.DPVISettings`, whose doc lists them with their defaults): `settings`, with `overrides` in
    place of its fields, or the keyword arguments alone (`steps`, `sampling_rate` and `clip` are then
    required): `record_dpvi(model, data, key=1, epsilon=1.0, **bm.dpvi_settings)` and
    `record_dpvi(model, data, key=1, epsilon=1.0, settings=na.DPVISettings(**bm.dpvi_settings))` are one run.
    Per-coordinate settings (grad_scale s, lr_multiplier v, learning_rate λ, init (μ₀, ρ₀)): a scalar, one
    entry per block of φ (μ, ρ, then ℓ or b), a pair (μ block, ρ block) — ℓ_ij and b_ij then take μ_i's s, v
    and λ, ℓ starts at 0 and B at diag(softplus ρ₀) — or a (P,) vector. family: 'mean-field', 'full-rank'
    (Σ = L Lᵀ, P = 2d + d(d−1)/2) or 'low-rank' with `rank` r (Σ = diag(softplus(ρ)²) + B Bᵀ);
    docs/recording.md. `labels`: {site: one label per element}, e.g. {"theta": feature_names}, names θ's
    coordinates in the trace (`theta[age]`, released with it: column names are the data schema, not data).
    `preflight`: the fingerprint of the simulation check the settings passed (`na.TunedSettings` carries it);
    a private run without one gets a one-line `SettingsHint` to check the settings on simulations first.
    """
    if summary is not None:
        warn_renamed("record_dpvi(summary=)", "record_dpvi(windowed=)")
        windowed = summary
    recorder = build_recorder(
        model,
        data,
        settings,
        epsilon=epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        non_private=non_private,
        allow_weak_privacy=allow_weak_privacy,
        **overrides,
    )
    if preflight is None and not non_private:
        warnings.warn(UNCHECKED_HINT, SettingsHint, stacklevel=2)
    prepared = recorder.prepare(data)
    if windowed:
        return record_windowed(recorder, prepared, key, progress)
    hyper = recorder.hyper()
    state, params, grads, clipped = _drive(
        lambda st, n: _run(recorder.program, hyper, prepared, st, n),
        recorder.init(key),
        recorder.settings.steps,
        progress,
        "DPVI",
    )
    return recorder.to_trace(params, grads, state.params, clipped)


def record_dpvi_batch(
    model: Callable,
    data: Mapping,
    *,
    keys,
    settings: DPVISettings | Mapping | None = None,
    preflight: str | None = None,
    progress: bool | Callable = False,
    batch: str = "vmap",
    **kwargs,
) -> list[Trace]:
    """`record_dpvi` for M data sets of equal size at once (one vmapped, compiled program).

        data: dict of arrays with a leading axis M (e.g. `jax.vmap(bm.simulate)(keys)[1]`); keys: (M,) PRNG
        keys (or M int seeds). Returns M traces. The privacy level and settings are those of `record_dpvi`
    (`kwargs`: its privacy keywords and setting overrides); every data set is
        checked against the model (lengths, shapes, support) before the program runs. Batches serve simulation
        studies: no `SettingsHint` (`preflight` is accepted, so `**TunedSettings` pass through). batch: how the
        M runs share the program (`BATCH_STRATEGIES`: "vmap" or "map"; the same numbers either way).
    """
    if batch not in BATCH_STRATEGIES:
        raise ValueError(f"batch must be one of {sorted(BATCH_STRATEGIES)}, got {batch!r}")
    recorder = build_recorder(model, data, settings, batched=True, preflight=preflight, **kwargs)
    keys = as_keys(keys)
    prepared = recorder.prepare(data, batched=True)
    if keys.shape[0] != next(iter(prepared.values())).shape[0]:
        raise ValueError(f"got {keys.shape[0]} keys for {next(iter(prepared.values())).shape[0]} data sets")
    hyper = recorder.hyper()
    states, params, grads, clipped = _drive(
        lambda st, n: BATCH_STRATEGIES[batch](recorder.program, hyper, prepared, st, n),
        jax.vmap(recorder.init)(keys),
        recorder.settings.steps,
        progress,
        f"DPVI ×{keys.shape[0]}",
    )
    return [recorder.to_trace(params[m], grads[m], states.params[m], clipped[m]) for m in range(params.shape[0])]
