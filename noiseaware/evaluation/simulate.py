"""Coverage experiments: simulate, record DPVI for every simulation at once, fit each method, score by TARP.

One simulation m (method.md §4): θ_m ~ prior, x_m ~ p(x | θ_m), trace_m = DPVI(x_m), then for every
method K draws θ_{m,k} ~ p̂(θ | trace_m) and the TARP fractions

    f_m = (1/K) Σ_k 1[‖θ_{m,k} − θ_ref,m‖ < ‖θ_m − θ_ref,m‖],   ECP(1 − α) = (1/M) Σ_m 1[f_m < 1 − α].

The M traces come from one compiled DPVI program (`record_dpvi_batch`, in chunks); the built-in trace
methods fit all traces in one vmapped computation; the draws are scored chunk by chunk, so no (M, K, d)
array is ever held. A simulation whose fit fails is counted per method and left out of that method's
ECP (reported, never silent). Every method is scored against the same reference draws U ~ U(−1, 1)^d:
θ_ref = centre + U ⊙ half-width under each reference rule (REFERENCE_RULES).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..baselines.bernstein_sheldon import bs2018_batch, bs2018_naive_batch
from ..baselines.bernstein_sheldon_regression import MODEL as REGRESSION_MODEL
from ..baselines.bernstein_sheldon_regression import bs2019_batch, naive_ss_batch
from ..baselines.dpvim import dpvim_posterior
from ..baselines.expfam import FAMILIES
from ..baselines.naive import naive_posterior
from ..dpvi import record_dpvi_batch
from ..fit import fit_batch
from ..keys import as_key
from ..models.benchmark import BenchmarkModel
from ..privacy import noise_multiplier as calibrate
from ..progress import Progress, progress_bar
from ..trace import BURN_IN, Trace
from .result import REFERENCE_RULES, CoverageResult
from .tarp import LEVELS

__all__ = ["METHODS", "RELEASE_METHODS", "Simulation", "Simulations", "coverage", "evaluate", "register_method",
           "simulate_traces"]

SCORE_CHUNK = 25
"""Simulations whose K draws are held at once while scoring (25 × 20 000 × d float64)."""


@dataclasses.dataclass(frozen=True)
class Simulation:
    """What a method may see of simulation m: the model, its data and its trace, never the truth."""

    index: int
    model: BenchmarkModel
    data: Mapping[str, Any]
    trace: Trace


@dataclasses.dataclass(frozen=True)
class Simulations:
    """M simulations at one privacy level: truth (M, d), data (arrays with a leading M axis), M traces."""

    model: BenchmarkModel
    truth: np.ndarray
    data: Mapping[str, Any]
    traces: list[Trace]
    epsilon: float | None
    delta: float
    noise_multiplier: float

    def __len__(self) -> int:
        return len(self.traces)

    def simulation(self, m: int) -> Simulation:
        return Simulation(m, self.model, jax.tree.map(lambda a: a[m], dict(self.data)), self.traces[m])


def simulate_traces(bm: BenchmarkModel, *, noise_multiplier: float | None, delta: float, simulations: int, key,
                    epsilon: float | None = None, chunk: int = 100, progress: Progress = False,
                    **settings) -> Simulations:
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
            traces += record_dpvi_batch(bm.model, jax.tree.map(lambda a: a[part], data), keys=keys[part],
                                        delta=delta, **privacy, **settings)
            advance(part.stop - part.start)
    return Simulations(bm, np.asarray(truth, np.float64), data, traces, epsilon, delta,
                       traces[0].noise_multiplier if traces else noise_multiplier)


# ---------------------------------------------------------------- methods

BatchMethod = Callable[..., list]
"""(simulations, key, **options) → one posterior (anything with .sample(key, n) → (n, d)) or None per simulation."""


def _route(method: str) -> BatchMethod:
    def run(sims: Simulations, key, *, prior="default", **options):
        return fit_batch(sims.traces, method, prior=prior, key=key, on_error="skip", **options)
    run.__doc__ = f"na.fit_batch(traces, {method!r}), all traces in one vmapped computation"
    return run


def per_trace(make: Callable) -> BatchMethod:
    """A method from a function of one trace (and a key): called trace by trace, a ValueError → None."""
    def run(sims: Simulations, key, **options):
        keys = jax.random.split(as_key(key), len(sims))
        return [none_on_failure(lambda t=t, k=k: make(t, key=k, **options)) for t, k in zip(sims.traces, keys)]
    run.__doc__ = make.__doc__
    return run


def none_on_failure(make):
    """make(), or None where it raises a numerical failure (ValueError, FloatingPointError): counted, not fatal."""
    try:
        return make()
    except (ValueError, FloatingPointError):
        return None


RELEASE_METHODS: dict[str, tuple[BatchMethod, tuple[str, ...]]] = {
    "bs2018": (bs2018_batch, tuple(FAMILIES)),
    "bs2018-naive": (bs2018_naive_batch, tuple(FAMILIES)),
    "bs2019": (bs2019_batch, (REGRESSION_MODEL,)),
    "bs2019-naive": (naive_ss_batch, (REGRESSION_MODEL,)),
}
"""Sufficient-statistic baselines (docs/baselines.md §1, §2): (batch method, the models it supports).

They ignore the traces: each releases its own DP statistics of the simulated data at the run's ε (the
same budget as DP-SGD, an alternative analysis, never composed with it). A run given by its noise
multiplier passes the nominal ε as the method option `epsilon` (benchmarks/coverage.py does)."""


def _release_method(name: str) -> BatchMethod:
    batch, models = RELEASE_METHODS[name]

    def run(sims: Simulations, key, *, epsilon: float | None = None, **options):
        _check_release_method(name, sims.model.name, sims.epsilon if epsilon is None else epsilon)
        if epsilon is not None:
            sims = dataclasses.replace(sims, epsilon=float(epsilon))
        return batch(sims, key, **options)

    run.__doc__ = batch.__doc__
    return run


METHODS: dict[str, BatchMethod] = {
    "exact": _route("exact"),
    "laplace": _route("laplace"),
    "nuts": _route("nuts"),
    "naive": per_trace(lambda trace, key: naive_posterior(trace)),
    "dpvim": per_trace(dpvim_posterior),
    **{name: _release_method(name) for name in RELEASE_METHODS},
}
"""Methods by name: (simulations, key, **options) → one posterior or None (failed) per simulation."""


def register_method(name: str, method: Callable) -> None:
    """Add a coverage method: method(simulation, *, epsilon, delta, key) → posterior with .sample(key, n).

    `simulation` is a `Simulation` (model, data, trace; never the truth). Trace methods read only
    simulation.trace; mechanism baselines may release their own DP statistics of simulation.data at the
    given (ε, δ). A ValueError or FloatingPointError counts as a failed simulation.
    """
    if not callable(method):
        raise TypeError(f"method {name!r} must be callable")

    def run(sims: Simulations, key, **options):
        keys = jax.random.split(as_key(key), len(sims))
        return [none_on_failure(lambda m=m: method(sims.simulation(m), epsilon=sims.epsilon, delta=sims.delta,
                                            key=keys[m], **options)) for m in range(len(sims))]

    METHODS[name] = run


# ---------------------------------------------------------------- scoring


@jax.jit
def _fractions(samples, truth, references):
    """TARP fractions for G reference sets: samples (c, K, d), truth (c, d), references (G, c, d) →
    joint f (G, c) and per-dimension f (G, c, d)."""
    def one(ref):
        offset, truth_offset = samples - ref[:, None, :], truth - ref
        joint = jnp.mean(jnp.sum(offset**2, -1) < jnp.sum(truth_offset**2, -1)[:, None], axis=1)
        marginal = jnp.mean(jnp.abs(offset) < jnp.abs(truth_offset)[:, None, :], axis=1)
        return joint, marginal
    return jax.lax.map(one, references)


def _score(posteriors, sims: Simulations, key, draws: int, uniform: np.ndarray, centre: np.ndarray,
           dpvi_sd: np.ndarray):
    """f for each rule over the simulations whose posterior exists and gives finite draws.

    Returns ({rule: joint f (R, M_ok)}, {rule: marginal f (R, M_ok, d)}, failed (M,) bool).
    """
    repeats = uniform.shape[0]
    keys = jax.random.split(key, len(sims))
    failed = np.array([p is None for p in posteriors])
    joint: list[np.ndarray] = []
    marginal: list[np.ndarray] = []
    alive = np.flatnonzero(~failed)
    for first in range(0, alive.size, SCORE_CHUNK):
        index = alive[first:first + SCORE_CHUNK]
        samples = np.stack([np.asarray(posteriors[m].sample(keys[m], draws), np.float64) for m in index])
        finite = np.all(np.isfinite(samples), axis=(1, 2))
        failed[index[~finite]] = True
        index, samples = index[finite], samples[finite]
        if index.size == 0:
            continue
        half_widths = {"research": 4.0 * samples.std(axis=1), "trace": 4.0 * dpvi_sd[index]}
        references = np.concatenate([centre[index] + uniform[:, index] * half_widths[rule] for rule in REFERENCE_RULES])
        f, fm = (np.asarray(x) for x in _fractions(samples, sims.truth[index], references))
        joint.append(f)
        marginal.append(fm)
    if not joint:
        empty = {rule: np.zeros((repeats, 0)) for rule in REFERENCE_RULES}
        return empty, {rule: np.zeros((repeats, 0, sims.truth.shape[1])) for rule in REFERENCE_RULES}, failed
    f, fm = np.concatenate(joint, axis=1), np.concatenate(marginal, axis=1)
    split = {rule: slice(i * repeats, (i + 1) * repeats) for i, rule in enumerate(REFERENCE_RULES)}
    return {rule: f[s] for rule, s in split.items()}, {rule: fm[s] for rule, s in split.items()}, failed


def _ecp(f: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """ECP curves from fractions: f (R, M) → (R, L); f (R, M, d) → (R, L, d). NaN when M = 0."""
    if f.shape[1] == 0:
        return np.full((f.shape[0], levels.size) + f.shape[2:], np.nan)
    below = f[:, None] < levels.reshape((1, -1, 1) + (1,) * (f.ndim - 2))
    return below.mean(axis=2)


def _diagnostics(posteriors, caught) -> dict[str, Any]:
    """Per method: sampler and convergence facts summed over simulations, and the warnings raised."""
    out: dict[str, Any] = {}
    fitted = [p for p in posteriors if p is not None]
    rhat = [p.diagnostics["max_rhat"] for p in fitted if "max_rhat" in getattr(p, "diagnostics", {})]
    if rhat:
        out["max_rhat"] = float(np.max(rhat))
        out["simulations_rhat_above_1.01"] = int(np.sum(np.asarray(rhat) > 1.01))
        divergences = [p.diagnostics["divergences"] for p in fitted if "divergences" in p.diagnostics]
        if divergences:  # NUTS only; the Gibbs samplers have none to report
            out["divergences"] = int(sum(divergences))
    flags = [p.diagnostics["any_not_converged"] for p in fitted if "any_not_converged" in getattr(p, "diagnostics", {})]
    if flags:
        out["simulations_not_converged"] = int(np.sum(flags))
    ess = [p.diagnostics["min_ess"] for p in fitted if "min_ess" in getattr(p, "diagnostics", {})]
    if ess:
        out["min_ess"] = float(np.min(ess))
        out["median_min_ess"] = float(np.median(ess))
    fallbacks = [p.diagnostics["fallbacks"] for p in fitted if "fallbacks" in getattr(p, "diagnostics", {})]
    if fallbacks:  # support projections of the sufficient-statistic samplers (baselines.md §0.3.4)
        out["fallbacks"] = int(np.sum(fallbacks))
        out["simulations_with_fallbacks"] = int(np.count_nonzero(fallbacks))
    if fitted:
        facts = getattr(fitted[0], "diagnostics", {})
        release = {k: _plain(facts[k]) for k in RELEASE_FACTS if k in facts}
        if release:
            out["release"] = release
    out["warnings"] = sorted({str(w.message) for w in caught})
    return out


RELEASE_FACTS = ("mechanism", "neighbouring", "epsilon", "delta", "sensitivity", "noise_scale", "bound", "bounds",
                 "moments", "statistic_epsilon", "statistic_sensitivity", "statistic_noise_scale", "moment_epsilon",
                 "moment_sensitivity", "moment_noise_scale", "chains", "warmup", "draws", "thin", "retries", "init",
                 "n_examples")
"""Privacy and sampler facts of the sufficient-statistic baselines, copied from one posterior (they are shared)."""


def _plain(value):
    """A JSON-ready copy: numpy scalars to Python numbers, tuples to lists."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def method_stream(name: str) -> int:
    """A key offset per method name: a method's numbers do not depend on which other methods run."""
    return zlib.crc32(name.encode())


# ---------------------------------------------------------------- the experiment


def coverage(
    bm: BenchmarkModel,
    *,
    methods: Sequence[str] = ("exact", "naive"),
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    delta: float = 1e-5,
    simulations: int = 500,
    repeats: int = 20,
    draws: int = 20_000,
    key=0,
    prior="default",
    chunk: int = 100,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress = False,
    **overrides,
) -> CoverageResult:
    """TARP coverage of `methods` on `simulations` simulations of `bm` at privacy level ε (or σ).

    `simulate_traces` (one compiled DPVI program, chunks of `chunk`), then `evaluate` on its traces:
    every method reads the same traces, each posterior gives `draws` θ draws, and the ECP curve is
    computed for `repeats` reference draws under both reference rules. prior: the gradient-model prior
    of exact/laplace/nuts; method_options: {method: keyword options} (e.g. {"nuts": {"warmup": 500}});
    overrides replace entries of bm.dpvi_settings (steps, …). The same key gives the same numbers,
    whichever other methods run beside a method.
    """
    _check_methods(methods)
    if (epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of epsilon and noise_multiplier")
    for method in set(methods) & set(RELEASE_METHODS):  # before the DPVI runs, not after them
        _check_release_method(method, bm.name, dict((method_options or {}).get(method, {})).get("epsilon", epsilon))
    _check_counts(simulations=simulations, repeats=repeats, draws=draws)
    settings = dict(bm.dpvi_settings) | overrides
    sigma = noise_multiplier if noise_multiplier is not None else calibrate(
        epsilon, delta, settings["sampling_rate"], settings["steps"])
    start = time.perf_counter()
    sims = simulate_traces(bm, noise_multiplier=sigma, delta=delta, simulations=simulations,
                           key=_streams(key)[0], epsilon=epsilon, chunk=chunk, progress=progress, **settings)
    seconds = time.perf_counter() - start
    result = evaluate(sims, methods, repeats=repeats, draws=draws, key=key, prior=prior,
                      method_options=method_options, progress=progress)
    return dataclasses.replace(result, seconds={"dpvi": seconds, **result.seconds})


def evaluate(
    sims: Simulations,
    methods: Sequence[str],
    *,
    repeats: int = 20,
    draws: int = 20_000,
    key=0,
    prior="default",
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress = False,
) -> CoverageResult:
    """TARP coverage of `methods` on given simulations (from `simulate_traces`): fit, draw, score.

    Uses the streams 1–3 of jax.random.split(key, 4) (fits, θ draws, reference draws); `coverage`
    simulates with stream 0, so evaluate(simulate_traces(…, key=split(key, 4)[0]), key=key) is
    coverage(…, key=key). Further methods can be scored on the same simulations later.
    """
    _check_methods(methods)
    _check_counts(repeats=repeats, draws=draws)
    method_options = dict(method_options or {})
    _, k_fit, k_draw, k_ref = _streams(key)
    d, count = sims.truth.shape[1], len(sims)
    centre = np.stack([t.params[math.floor(BURN_IN * t.steps):, :d].mean(axis=0) for t in sims.traces])
    dpvi_sd = np.stack([np.logaddexp(0.0, t.final_iterate()[d:]) for t in sims.traces])
    uniform = np.asarray(jax.random.uniform(k_ref, (repeats, count, d), jnp.float64 if jax.config.jax_enable_x64
                                            else jnp.float32, -1.0, 1.0), np.float64)
    levels = np.asarray(LEVELS)
    curves: dict[str, dict[str, np.ndarray]] = {rule: {} for rule in REFERENCE_RULES}
    marginal: dict[str, dict[str, np.ndarray]] = {rule: {} for rule in REFERENCE_RULES}
    failures: dict[str, int] = {}
    diagnostics: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        options = dict(method_options.get(method, {}))
        if method in ("exact", "laplace", "nuts"):
            options.setdefault("prior", prior)
        if method == "nuts":
            options.setdefault("progress", progress)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            posteriors = METHODS[method](sims, jax.random.fold_in(k_fit, method_stream(method)), **options)
        seconds[method] = time.perf_counter() - start
        start = time.perf_counter()
        joint, per_dim, failed = _score(posteriors, sims, jax.random.fold_in(k_draw, method_stream(method)), draws,
                                        uniform, centre, dpvi_sd)
        for rule in REFERENCE_RULES:
            curves[rule][method] = _ecp(joint[rule], levels)
            marginal[rule][method] = _ecp(per_dim[rule], levels)
        failures[method] = int(failed.sum())
        diagnostics[method] = _diagnostics(posteriors, caught)
        seconds[f"tarp_{method}"] = time.perf_counter() - start
    return CoverageResult(
        levels=levels,
        curves=curves,
        marginal_curves=marginal,
        failures=failures,
        seconds=seconds,
        diagnostics=diagnostics,
        theta_names=tuple(name.removeprefix("mu:") for name in sims.traces[0].param_names[:d]),
        settings={
            "model": sims.model.name, "epsilon": sims.epsilon, "noise_multiplier": sims.noise_multiplier,
            "delta": sims.delta, "simulations": count, "repeats": repeats, "draws": draws,
            "steps": sims.traces[0].steps, "prior": prior if isinstance(prior, str) else repr(prior),
            "key": _key_repr(key), "methods": list(methods),
            "method_options": {m: {k: repr(v) for k, v in o.items()} for m, o in method_options.items()},
            "reference_rules": dict(REFERENCE_RULES),
        },
    )


def _streams(key) -> jax.Array:
    """The four keys of a coverage run: simulations, fits, θ draws, reference draws."""
    return jax.random.split(as_key(key), 4)


def _check_methods(methods: Sequence[str]) -> None:
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}: choose from {', '.join(METHODS)} (or register_method)")


def _check_release_method(method: str, model: str, epsilon: float | None) -> None:
    """A ValueError unless the sufficient-statistic baseline supports the model and has an ε to spend."""
    models = RELEASE_METHODS[method][1]
    if model not in models:
        raise ValueError(f"method {method!r} supports the models {', '.join(models)}, not {model!r}")
    if epsilon is None:
        raise ValueError(f"method {method!r} releases its statistics at an ε, and this run has a noise multiplier "
                         f"only: give the run an ε (--epsilon), or the ε that σ stands for as "
                         f"method_options={{{method!r}: {{'epsilon': …}}}}")


def _check_counts(**counts) -> None:
    for name, value in counts.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be a positive int; got {value!r}")


def _key_repr(key) -> Any:
    return key if isinstance(key, int) else np.asarray(jax.random.key_data(as_key(key))).tolist()
