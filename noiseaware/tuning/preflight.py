"""The preflight check: DP-SGD settings run on fresh prior-predictive simulations, before any privacy is spent.

preflight(bm, settings, epsilon=…, key=…) simulates M data sets, finds their non-private facts
(`facts.simulation_facts`), records DPVI with the settings at the privacy level, fits exact NA-DPVI and
reports (`PreflightReport`): TARP coverage RMSE, the posterior sd relative to the non-private VI posterior,
the pooled calibration tests, the clipped fraction and clipping shift at the optimum, the trace checks; with
one `PreflightWarning` per finding (clipping active at the optimum, traces that do not converge, coverage
off) saying what to change.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import jax
import numpy as np

from ..evaluation.coverage import CoverageDesign, Simulations, evaluate
from ..evaluation.experiment import check_overrides
from ..methods.base import Batch
from ..models.benchmark import BenchmarkModel
from ..models.presets import preset_at, transforms_obstacle
from ..privacy import noise_multiplier as calibrate
from ..recording.config import required_settings
from ..recording.settings import DEFAULT_DELTA, check_delta
from ..util.checks import positive_float, positive_int
from ..util.defaults import field_default
from ..util.hints import hint
from ..util.keys import as_key, key_repr
from ..util.progress import Progress, busy, progress_bar
from .design import TUNING
from .facts import SimulationFacts, facts_for_settings
from .preflight_report import LIMITS, PreflightReport, PreflightWarning, rmse_limit
from .score import Score, record_batches, score_traces
from .tuned import TunedSettings

__all__ = ["check_settings", "fresh_check", "fresh_facts", "preflight", "record_settings"]

REFERENCES, SAMPLES = (field_default(CoverageDesign, name) for name in ("references", "samples"))
"""A check's TARP reference sets R and θ draws K: a coverage study's."""
CHUNK = TUNING.check_batch
"""Simulations per compiled DPVI program and exact fit of a check (padded): every check shares them."""


def record_settings(bm: BenchmarkModel, settings: Mapping | None) -> dict:
    """The record_dpvi settings to check: the model's preset overridden by `settings` (TunedSettings are
    checked against the model first); the preflight mark and the N it was tuned for are dropped. An unknown name
    is a ValueError before any work."""
    if isinstance(settings, TunedSettings):
        settings.check_model(bm)
    merged = dict(bm.dpvi_settings) | dict(settings or {})
    merged.pop("preflight", None)
    merged.pop("preset_n_examples", None)
    check_overrides(merged)
    missing = [name for name in required_settings() if name not in merged]
    if missing:
        raise ValueError(
            f"model {bm.name!r} has no preset and the settings lack {missing}: pass complete settings, "
            f"or find them with {_tuner()}"
        )
    return merged


def preflight(
    bm: BenchmarkModel,
    settings: Mapping | None = None,
    *,
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    simulations: int = TUNING.preflight_simulations,
    key,
    references: int = REFERENCES,
    samples: int = SAMPLES,
    chunk: int = CHUNK,
    progress: Progress = True,
) -> PreflightReport:
    """Check `settings` (TunedSettings or record_dpvi keywords over the model's preset) on `simulations` fresh
    simulations at (ε, δ): the report, and one PreflightWarning per finding (for TunedSettings, whose settings
    the tuner already chose, the advice is to tune again rather than to let the tuner choose). A built-in from
    `na.models.get(name)` brings the preset `noiseaware preflight` would use at ε (`na.models.preset_at`)."""
    tuned = isinstance(settings, TunedSettings)
    if not tuned:
        bm = preset_at(bm, epsilon, obstacle=transforms_obstacle(settings or {})).model
    settings = record_settings(bm, settings)
    epsilon = positive_float("epsilon", epsilon)
    check_delta(delta, bm.n_examples)
    positive_int("simulations", simulations, minimum=2)
    report = fresh_check(
        bm,
        settings,
        epsilon=epsilon,
        delta=delta,
        simulations=simulations,
        key=key,
        references=references,
        samples=samples,
        chunk=chunk,
        progress=progress,
        tuned=tuned,
    )
    for finding in report.findings:
        warnings.warn(finding, PreflightWarning, stacklevel=2)
    return report


def fresh_check(
    bm: BenchmarkModel,
    settings: dict,
    *,
    epsilon: float,
    delta: float,
    simulations: int,
    key,
    references: int = REFERENCES,
    samples: int = SAMPLES,
    chunk: int = CHUNK,
    progress: Progress = False,
    tuned: bool = False,
) -> PreflightReport:
    """`check_settings` on M fresh simulations and their facts (`fresh_facts`)."""
    facts = fresh_facts(bm, settings, simulations, key)
    return check_settings(
        bm,
        settings,
        facts,
        epsilon=epsilon,
        delta=delta,
        key=jax.random.split(as_key(key), 3)[2],
        references=references,
        samples=samples,
        chunk=chunk,
        progress=progress,
        key_text=key_repr(key),
        tuned=tuned,
    )


def fresh_facts(bm: BenchmarkModel, settings: dict, simulations: int, key) -> SimulationFacts:
    """M fresh simulations and their facts for `settings` (their init, S, transforms and sites), drawn with
    split(key, 3)[:2]; split(key, 3)[2] is the check's (`fresh_check`). Settings that share those share the facts."""
    k_sim, k_facts, _ = jax.random.split(as_key(key), 3)
    return facts_for_settings(bm, settings, simulations, simulation_key=k_sim, facts_key=k_facts)


def check_settings(
    bm: BenchmarkModel,
    settings: dict,
    facts: SimulationFacts,
    *,
    epsilon: float,
    delta: float,
    key,
    references: int = REFERENCES,
    samples: int = SAMPLES,
    chunk: int = CHUNK,
    progress: Progress = False,
    key_text: str = "",
    tuned: bool = False,
) -> PreflightReport:
    """The check on given simulations and their facts: record, fit, score, TARP (no warnings issued: the fits'
    warnings are counted in the report). tuned: the settings came from the tuner (`findings`)."""
    sigma = calibrate(epsilon, delta, settings["sampling_rate"], settings["steps"])
    k_dpvi, k_fit, k_tarp = jax.random.split(as_key(key), 3)
    keys = jax.random.split(k_dpvi, len(facts))
    with progress_bar(len(facts), f"DPVI at ε = {epsilon:g}", progress, unit="simulation") as advance:
        traces = record_batches(
            bm, facts.data, keys, batch=chunk, advance=advance, noise_multiplier=sigma, delta=delta, **settings
        )
    shown = progress is True
    with busy(f"fitting the {len(facts)} simulations", shown):
        score = score_traces(facts, traces, settings, fit_key=k_fit, model=bm, batch=chunk)
    sims = Simulations(Batch(tuple(traces), bm, facts.data, epsilon, delta), facts.truth, sigma)
    with busy(f"coverage of the {len(facts)} fits (TARP)", shown):
        result = evaluate(sims, ["exact"], references=references, samples=samples, key=k_tarp)
    rmse = result.rmse["exact"]
    return PreflightReport(
        model=bm.name,
        epsilon=epsilon,
        delta=delta,
        noise_multiplier=sigma,
        simulations=len(facts),
        key=key_text,
        coverage_rmse=rmse,
        levels=tuple(result.levels.tolist()),
        ecp=tuple(np.mean(result.ecp["exact"], axis=0).tolist()),
        theta_names=result.theta_names,
        sd_ratio=tuple(score.sd_ratio.tolist()),
        z2=tuple(score.z2.tolist()),
        theta_p=tuple(score.theta_p.tolist()),
        optimum_p=float(score.optimum_p.min()),
        clipped=score.clipped,
        shift=score.shift,
        flagged=score.flagged,
        checks=dict(score.checks),
        failures=score.failures + result.failures["exact"],
        findings=findings(score, rmse[0], result.theta_names, tuned=tuned),
        warnings=score.fit_warnings,
    )


def findings(score: Score, rmse: float, theta_names, *, tuned: bool = False) -> tuple[str, ...]:
    """What the check found wrong, each "title: what it saw; what to do" (LIMITS say where it speaks up).
    tuned: the settings are the tuner's choice, so the advice is to tune again with a larger search."""
    out: list[str] = []
    tuner = _retune() if tuned else f"let {_tuner()} choose them"
    if score.clipped > LIMITS["clipped"] or score.shift > LIMITS["shift"]:
        out.append(
            f"clipping is active at the optimum: {100 * score.clipped:.1f} % of examples clipped, moving the "
            f"optimum DP-SGD reaches by up to {score.shift:.2f} posterior sds of φ*, which no trace can show; "
            f"raise clip (or lower grad_scale), or {tuner}"
        )
    if score.flagged > LIMITS["flagged"]:
        fired = ", ".join(f"{name} {n}" for name, n in score.checks.items())
        out.append(
            f"the traces do not settle: trace checks fire on {100 * score.flagged:.0f} % of simulated traces "
            f"({fired}); change the learning rates (lr_multiplier), steps or init, or {tuner}"
        )
    alpha = LIMITS["alpha"]
    narrow = [name for name, p in zip(theta_names, score.theta_p) if p < alpha / len(score.theta_p)]
    limit = rmse_limit(score.simulations)
    if narrow or rmse > limit:
        worst = f"; intervals too narrow or off centre for {', '.join(narrow)}" if narrow else ""
        out.append(
            f"coverage is off: TARP coverage RMSE {rmse:.3f} (tolerated on {score.simulations} simulations: "
            f"{limit:.3f}){worst}; "
            f"the intervals would not mean what they say — change the settings ({tuner}), or, when the trace "
            "part passes, the variational family cannot represent this posterior"
        )
    if score.location_p.min() < alpha / score.location_p.size and not out:
        out.append(
            "the gradient model does not hold: the noise-aware posterior of μ* misses the non-private optimum on "
            "the simulations although clipping and the trace checks pass; lower the learning rates or raise the "
            f"gradient scales, or {tuner}"
        )
    if score.failures:
        reasons = ", ".join(f"{reason} {count}" for reason, count in score.failure_reasons.items())
        out.append(
            f"fits failed: {score.failures} of {score.simulations} fits failed on simulated traces ({reasons}); "
            "the settings leave some traces without a usable posterior"
        )
    return tuple(out)


def _tuner() -> str:
    """The tuner, as the caller would run it."""
    return hint("na.tune", "noiseaware tune")


def _retune() -> str:
    """Advice for settings the tuner chose that fail their check: a larger search, not the same one."""
    return (
        f"tune again with more trials ({hint('trials=', '--trials')}) or a wider search space: these settings "
        "are already the tuner's choice"
    )
