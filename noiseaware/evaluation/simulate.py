"""Coverage experiments: simulate, record DPVI for every simulation at once, fit each method, score by TARP.

One simulation m (method.md §4): θ_m ~ prior, x_m ~ p(x | θ_m), trace_m = DPVI(x_m), then for every
method K draws θ_{m,k} ~ p̂(θ | trace_m). The M traces are recorded by `record_dpvi_batch` in chunks
(one compiled program); trace methods read only the traces. A simulation whose fit fails is counted
per method and left out of that method's ECP (reported, never silent).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..baselines.naive import naive_posterior
from ..dpvi import record_dpvi_batch
from ..files import atomic_write
from ..fit import fit, fit_batch
from ..keys import as_key
from ..models.benchmark import BenchmarkModel
from ..posterior import NoiseAwarePosterior
from ..privacy import noise_multiplier as calibrate
from ..trace import BURN_IN, Trace
from .tarp import LEVELS, coverage_rmse, marginal_ecp, reference_box, tarp_repeats

__all__ = ["METHODS", "REFERENCE_RULES", "CoverageResult", "coverage"]

REFERENCE_RULES = ("research", "trace")
"""research: centre μ̄ (post-burn-in mean of the μ trace) ± 4 × the evaluated posterior's sd (the paper's
rule, which depends on the method); trace: the same centre ± 4 × the DPVI sd softplus(ρ_T), one box
for every method."""


def _exact_batch(traces: Sequence[Trace], key, prior) -> list[NoiseAwarePosterior | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fit_batch(traces, "exact", prior=prior, key=key)
        except ValueError:
            keys = jax.random.split(as_key(key), len(traces))
            return [_or_none(lambda t=t, k=k: fit(t, "exact", prior=prior, key=k)) for t, k in zip(traces, keys)]


def _one_by_one(method: str) -> Callable:
    def run(traces, key, prior):
        keys = jax.random.split(as_key(key), len(traces))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [_or_none(lambda t=t, k=k: fit(t, method, prior=prior, key=k)) for t, k in zip(traces, keys)]
    return run


def _naive(traces, key, prior):
    return [_or_none(lambda t=t: naive_posterior(t)) for t in traces]


def _or_none(make):
    try:
        return make()
    except ValueError:
        return None


METHODS: dict[str, Callable] = {
    "exact": _exact_batch,
    "laplace": _one_by_one("laplace"),
    "nuts": _one_by_one("nuts"),
    "naive": _naive,
}
"""Trace methods by name: (traces, key, prior) → one posterior (or None on failure) per trace."""


@dataclasses.dataclass(frozen=True)
class CoverageResult:
    """TARP coverage of several methods on the same simulations.

    levels (L,); ecp[rule][method] (R, L) curves over R reference draws; marginal_rmse[rule][method] (d,);
    failures[method] the number of simulations whose fit failed; seconds per stage; settings (model, ε,
    σ, M, R, K, T, prior, key, …) for the results file.
    """

    levels: np.ndarray
    ecp: Mapping[str, Mapping[str, np.ndarray]]
    marginal_rmse: Mapping[str, Mapping[str, np.ndarray]]
    failures: Mapping[str, int]
    seconds: Mapping[str, float]
    settings: Mapping[str, Any]

    @property
    def rmse(self) -> dict[str, tuple[float, float]]:
        """method → (mean, sd) over the R reference draws of the coverage RMSE, under the research rule."""
        return self.rmse_under("research")

    def rmse_under(self, rule: str) -> dict[str, tuple[float, float]]:
        out = {}
        for method, curves in self.ecp[rule].items():
            values = coverage_rmse(self.levels, curves.T)
            out[method] = (float(np.mean(values)), float(np.std(values, ddof=1)) if values.size > 1 else 0.0)
        return out

    def table(self) -> str:
        """Methods × rules: RMSE mean ± sd, failures."""
        from ..trace import text_table

        rules = list(self.ecp)
        rows = []
        for method in self.ecp[rules[0]]:
            cells = [f"{m:.3f} ± {s:.3f}" for m, s in (self.rmse_under(rule)[method] for rule in rules)]
            rows.append([method, *cells, str(self.failures[method])])
        return text_table(["method", *(f"RMSE ({rule} ref.)" for rule in rules), "failures"], rows)

    def to_json(self, path) -> None:
        """All numbers and settings as JSON, written atomically."""
        payload = {
            "settings": dict(self.settings),
            "levels": self.levels.tolist(),
            "failures": dict(self.failures),
            "seconds": dict(self.seconds),
            "rmse": {rule: {m: {"mean": v[0], "sd": v[1]} for m, v in self.rmse_under(rule).items()} for rule in self.ecp},
            "ecp_mean": {rule: {m: c.mean(axis=0).tolist() for m, c in curves.items()} for rule, curves in self.ecp.items()},
            "ecp_sd": {rule: {m: c.std(axis=0).tolist() for m, c in curves.items()} for rule, curves in self.ecp.items()},
            "marginal_rmse": {rule: {m: np.asarray(v).tolist() for m, v in per.items()}
                              for rule, per in self.marginal_rmse.items()},
        }
        path = Path(path)
        atomic_write(path, lambda temporary: temporary.write_text(json.dumps(payload, indent=2)))


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
    progress: bool = False,
    **overrides,
) -> CoverageResult:
    """TARP coverage of `methods` on `simulations` simulations of `bm` at privacy level ε (or σ).

    All simulations are recorded with one compiled DPVI program (chunks of `chunk`), every method is
    fitted on the same traces, each posterior gives `draws` θ draws, and the ECP curve is recomputed for
    `repeats` reference draws under both reference rules (REFERENCE_RULES). overrides replace entries of
    bm.dpvi_settings (steps, …). The same key gives the same numbers.
    """
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}: choose from {', '.join(METHODS)}")
    settings = dict(bm.dpvi_settings) | overrides
    if (epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of epsilon and noise_multiplier")
    sigma = noise_multiplier if noise_multiplier is not None else calibrate(
        epsilon, delta, settings["sampling_rate"], settings["steps"])
    k_sim, k_dpvi, k_fit, k_draw, k_ref = jax.random.split(as_key(key), 5)
    seconds: dict[str, float] = {}

    start = time.perf_counter()
    truth, data = jax.vmap(bm.simulate)(jax.random.split(k_sim, simulations))
    truth = np.asarray(truth, np.float64)
    dpvi_keys = jax.random.split(k_dpvi, simulations)
    traces: list[Trace] = []
    for first in range(0, simulations, chunk):
        part = slice(first, min(first + chunk, simulations))
        traces += record_dpvi_batch(bm.model, jax.tree.map(lambda a: a[part], data), keys=dpvi_keys[part],
                                    noise_multiplier=sigma, delta=delta, progress=progress, **settings)
    seconds["dpvi"] = time.perf_counter() - start

    d = bm.dim
    centre = np.stack([t.params[math.floor(BURN_IN * t.steps):, :d].mean(axis=0) for t in traces])
    dpvi_sd = np.stack([np.logaddexp(0.0, t.final_iterate()[d:]) for t in traces])
    ecp: dict[str, dict[str, np.ndarray]] = {rule: {} for rule in REFERENCE_RULES}
    marginal: dict[str, dict[str, np.ndarray]] = {rule: {} for rule in REFERENCE_RULES}
    failures: dict[str, int] = {}
    for index, method in enumerate(methods):
        start = time.perf_counter()
        posteriors = METHODS[method](traces, jax.random.fold_in(k_fit, index), prior)
        ok = np.array([p is not None for p in posteriors])
        failures[method] = int((~ok).sum())
        good = [p for p in posteriors if p is not None]
        draw_keys = jax.random.split(jax.random.fold_in(k_draw, index), len(good))
        samples = np.stack([p.sample(k, draws) for p, k in zip(good, draw_keys)])
        theta_sd = np.stack([p.theta_sd for p in good])
        seconds[method] = time.perf_counter() - start
        start = time.perf_counter()
        for rule, half_width in (("research", 4.0 * theta_sd), ("trace", 4.0 * dpvi_sd[ok])):
            levels, curves = tarp_repeats(k_ref, samples, truth[ok], centre[ok], half_width, repeats=repeats)
            ecp[rule][method] = curves
            marginal[rule][method] = _marginal_rmse(k_ref, samples, truth[ok], centre[ok], half_width, repeats)
        seconds[f"tarp_{method}"] = time.perf_counter() - start
    return CoverageResult(
        levels=np.asarray(LEVELS),
        ecp=ecp,
        marginal_rmse=marginal,
        failures=failures,
        seconds=seconds,
        settings={
            "model": bm.name, "epsilon": epsilon, "noise_multiplier": sigma, "delta": delta,
            "simulations": simulations, "repeats": repeats, "draws": draws, "steps": settings["steps"],
            "prior": prior if isinstance(prior, str) else repr(prior), "key": _key_repr(key),
            "methods": list(methods), "reference_rules": {r: _RULE_TEXT[r] for r in REFERENCE_RULES},
        },
    )


_RULE_TEXT = {
    "research": "post-burn-in mean of the μ trace ± 4 × the evaluated posterior's sd (per method)",
    "trace": "post-burn-in mean of the μ trace ± 4 × softplus(ρ_T) (the same box for every method)",
}


def _marginal_rmse(key, samples, truth, centre, half_width, repeats) -> np.ndarray:
    """Per-dimension coverage RMSE (d,), averaged over the same reference draws as `tarp_repeats`."""
    references = np.asarray(reference_box(key, centre, half_width, repeats))
    values = [coverage_rmse(*marginal_ecp(samples, truth, references[r])) for r in range(repeats)]
    return np.mean(values, axis=0)


def _key_repr(key) -> Any:
    return key if isinstance(key, int) else np.asarray(jax.random.key_data(as_key(key))).tolist()
