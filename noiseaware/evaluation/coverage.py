"""Coverage experiments: simulate, record DPVI for every simulation at once, fit each method, score by TARP.

One simulation m (docs/method.md §4): θ_m ~ prior, x_m ~ p(x | θ_m), trace_m = DPVI(x_m), then for every
method K draws θ_{m,k} ~ p̂(θ | trace_m) and the TARP fractions and ECP of `tarp` (the one TARP
implementation). The M traces come from one compiled DPVI program (`record_dpvi_batch`, in chunks); the
methods run through the shared experiment driver (`experiment.run_methods`) on the same traces; the
draws are scored chunk by chunk, so no (M, K, d) array is ever held. A simulation whose fit fails is
counted per method and left out of that method's ECP (reported, never silent). Every method is scored
against the same uniform draws U ~ U(−1, 1)^d: θ_ref = centre + U ⊙ half-width under each reference rule.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..methods.base import Batch, Method, Outcome, Registry
from ..methods.registry import DEFAULT_REGISTRY
from ..models.benchmark import BenchmarkModel
from ..privacy import noise_multiplier as calibrate
from ..recording.dpvi import record_dpvi_batch
from ..recording.settings import check_delta
from ..trace import BURN_IN, Trace
from ..util.checks import positive_int
from ..util.keys import as_key, key_repr
from ..util.progress import Progress, progress_bar
from .experiment import check_methods, check_overrides, run_methods, with_progress
from .result import REFERENCE_RULES, CoverageResult
from .tarp import LEVELS, ecp_from_fractions, tarp_fractions

__all__ = ["Simulations", "coverage", "evaluate", "simulate_traces"]

SCORE_CHUNK = 25
"""Simulations whose K draws are held at once while scoring (25 × 20 000 × d float64)."""


@dataclasses.dataclass(frozen=True)
class Simulations:
    """M simulations at one privacy level: the problems methods see (`batch`) and the truth (M, d) they never see."""

    batch: Batch
    truth: np.ndarray
    noise_multiplier: float

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def traces(self) -> tuple[Trace, ...]:
        return self.batch.traces

    @property
    def model(self) -> BenchmarkModel:
        return self.batch.model


def simulate_traces(
    bm: BenchmarkModel,
    *,
    noise_multiplier: float | None,
    delta: float,
    simulations: int,
    key,
    epsilon: float | None = None,
    chunk: int = 100,
    progress: Progress = False,
    **settings,
) -> Simulations:
    """θ_m ~ prior, x_m ~ p(x | θ_m) and a DPVI trace of x_m for m = 1..M: one compiled program, in chunks.

    settings: record_dpvi's (the preset's, with overrides); noise_multiplier=None with non_private=True
    and a learning_rate records non-private reference runs.
    """
    privacy = {} if noise_multiplier is None else {"noise_multiplier": noise_multiplier}
    k_sim, k_dpvi = jax.random.split(as_key(key))
    truth, data = jax.vmap(bm.simulate)(jax.random.split(k_sim, simulations))
    keys = jax.random.split(k_dpvi, simulations)
    traces: list[Trace] = []
    with progress_bar(simulations, "DPVI", progress, unit="simulation") as advance:
        for first in range(0, simulations, chunk):
            part = slice(first, min(first + chunk, simulations))
            chunk_data = jax.tree.map(lambda a, part=part: a[part], data)
            traces += record_dpvi_batch(bm.model, chunk_data, keys=keys[part], delta=delta, **privacy, **settings)
            advance(part.stop - part.start)
    batch = Batch(tuple(traces), bm, data, epsilon, delta)
    return Simulations(batch, np.asarray(truth, np.float64), traces[0].noise_multiplier if traces else noise_multiplier)


def coverage(
    bm: BenchmarkModel,
    *,
    methods: Sequence[str | Method] = ("exact", "naive"),
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    delta: float = 1e-5,
    simulations: int = 500,
    references: int = 20,
    samples: int = 20_000,
    key,
    chunk: int = 100,
    method_options: Mapping[str, Any] | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress = False,
    **overrides,
) -> CoverageResult:
    """TARP coverage of `methods` on `simulations` simulations of `bm` at privacy level ε (or σ).

    `simulate_traces` (one compiled DPVI program, chunks of `chunk`), then `evaluate` on its traces:
    every method reads the same traces, each posterior gives `samples` θ draws, and the ECP curve is
    computed for `references` sets of reference points under both reference rules. methods: names in
    `registry` or `Method` records (plug-ins); method_options: {method: options object or mapping} (e.g.
    {"exact": {"prior": "paper"}}, {"nuts": {"warmup": 500}}); overrides replace entries of
    bm.dpvi_settings (steps, …). The same key gives the same numbers, whichever other methods run.
    """
    if (epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of epsilon and noise_multiplier")
    check_methods(methods, registry, bm.name, epsilon, method_options)
    check_overrides(overrides)
    check_delta(delta, allow_weak_privacy=overrides.get("allow_weak_privacy", False))
    for name, value in (("simulations", simulations), ("references", references), ("samples", samples)):
        positive_int(name, value)
    settings = dict(bm.dpvi_settings) | overrides
    sigma = (
        noise_multiplier
        if noise_multiplier is not None
        else calibrate(epsilon, delta, settings["sampling_rate"], settings["steps"])
    )
    start = time.perf_counter()
    sims = simulate_traces(
        bm,
        noise_multiplier=sigma,
        delta=delta,
        simulations=simulations,
        key=_streams(key)[0],
        epsilon=epsilon,
        chunk=chunk,
        progress=progress,
        **settings,
    )
    seconds = time.perf_counter() - start
    result = evaluate(
        sims,
        methods,
        references=references,
        samples=samples,
        key=key,
        method_options=method_options,
        registry=registry,
        progress=progress,
    )
    return dataclasses.replace(result, seconds={"dpvi": seconds, **result.seconds})


def evaluate(
    sims: Simulations,
    methods: Sequence[str | Method],
    *,
    references: int = 20,
    samples: int = 20_000,
    key,
    method_options: Mapping[str, Any] | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress = False,
) -> CoverageResult:
    """TARP coverage of `methods` on given simulations (from `simulate_traces`): fit, draw, score.

    Uses the streams 1–3 of jax.random.split(key, 4) (fits, θ draws, reference draws); `coverage`
    simulates with stream 0, so evaluate(simulate_traces(…, key=split(key, 4)[0]), key=key) is
    coverage(…, key=key). Further methods can be scored on the same simulations later.
    """
    resolved, options = check_methods(methods, registry, sims.model.name, sims.batch.epsilon, method_options)
    options = {name: with_progress(o, progress) for name, o in options.items()}
    positive_int("references", references)
    positive_int("samples", samples)
    _, k_fit, k_draw, k_ref = _streams(key)
    d, count = sims.truth.shape[1], len(sims)
    centre = np.stack([t.params[math.floor(BURN_IN * t.steps) :, :d].mean(axis=0) for t in sims.traces])
    dpvi_sd = np.stack([t.family.marginal_sd(np.asarray(t.final_iterate(), np.float64)) for t in sims.traces])
    uniform = np.asarray(
        jax.random.uniform(
            k_ref, (references, count, d), jnp.float64 if jax.config.jax_enable_x64 else jnp.float32, -1.0, 1.0
        ),
        np.float64,
    )

    def score(method: Method, outcomes: list[Outcome], k_samples) -> tuple[dict[str, dict[str, np.ndarray]], int]:
        joint, per_dim, failed = _score(outcomes, sims, k_samples, samples, uniform, centre, dpvi_sd)
        curves = {rule: ecp_from_fractions(joint[rule]) for rule in REFERENCE_RULES}
        marginal = {rule: ecp_from_fractions(per_dim[rule]) for rule in REFERENCE_RULES}
        return {"curves": curves, "marginal": marginal}, failed

    runs = run_methods(sims.batch, resolved, options, key=(k_fit, k_draw), score=score)
    return CoverageResult(
        levels=np.asarray(LEVELS),
        curves={rule: {name: run.score["curves"][rule] for name, run in runs.items()} for rule in REFERENCE_RULES},
        marginal_curves={
            rule: {name: run.score["marginal"][rule] for name, run in runs.items()} for rule in REFERENCE_RULES
        },
        failures={name: run.failures for name, run in runs.items()},
        seconds={
            k: v
            for name, run in runs.items()
            for k, v in ((name, run.fit_seconds), (f"tarp_{name}", run.score_seconds))
        },
        diagnostics={name: run.diagnostics for name, run in runs.items()},
        theta_names=tuple(name.removeprefix("mu:") for name in sims.traces[0].param_names[:d]),
        settings={
            "model": sims.model.name,
            "epsilon": sims.batch.epsilon,
            "noise_multiplier": sims.noise_multiplier,
            "delta": sims.batch.delta,
            "simulations": count,
            "references": references,
            "samples": samples,
            "steps": sims.traces[0].steps,
            "key": key_repr(key),
            "methods": [m.name for m in resolved],
            "method_options": {name: repr(o) for name, o in options.items()},
            "reference_rules": dict(REFERENCE_RULES),
        },
    )


def _score(
    outcomes: Sequence[Outcome],
    sims: Simulations,
    key,
    samples: int,
    uniform: np.ndarray,
    centre: np.ndarray,
    dpvi_sd: np.ndarray,
):
    """f for each rule over the simulations whose posterior exists and gives finite draws.

    Returns ({rule: joint f (R, M_ok)}, {rule: marginal f (R, M_ok, d)}, further failures (non-finite draws)).
    """
    repeats = uniform.shape[0]
    keys = jax.random.split(key, len(sims))
    alive = np.flatnonzero([not isinstance(o, Exception) for o in outcomes])
    joint: list[np.ndarray] = []
    marginal: list[np.ndarray] = []
    non_finite = 0
    for first in range(0, alive.size, SCORE_CHUNK):
        index = alive[first : first + SCORE_CHUNK]
        draws = np.stack([np.asarray(outcomes[m].sample(keys[m], samples), np.float64) for m in index])
        finite = np.all(np.isfinite(draws), axis=(1, 2))
        non_finite += int(np.sum(~finite))
        index, draws = index[finite], draws[finite]
        if index.size == 0:
            continue
        half_widths = {"research": 4.0 * draws.std(axis=1), "trace": 4.0 * dpvi_sd[index]}
        references = np.concatenate([centre[index] + uniform[:, index] * half_widths[rule] for rule in REFERENCE_RULES])
        f, fm = tarp_fractions(draws, sims.truth[index], references)
        joint.append(f)
        marginal.append(fm)
    d = sims.truth.shape[1]
    f = np.concatenate(joint, axis=1) if joint else np.zeros((repeats * len(REFERENCE_RULES), 0))
    fm = np.concatenate(marginal, axis=1) if marginal else np.zeros((repeats * len(REFERENCE_RULES), 0, d))
    split = {rule: slice(i * repeats, (i + 1) * repeats) for i, rule in enumerate(REFERENCE_RULES)}
    return {rule: f[s] for rule, s in split.items()}, {rule: fm[s] for rule, s in split.items()}, non_finite


def _streams(key) -> jax.Array:
    """The four keys of a coverage run: simulations, fits, θ draws, reference draws."""
    return jax.random.split(as_key(key), 4)
