"""The one fit loop that `fit`, `fit_batch`, the studies' driver, the tuner's scorer and NA-DP-PVI's clients share:
the trace checks in their mode, a trace whose iterates ran away refused, the method's batched fit, each posterior
that is not finite on the model's scale turned into a FitFailure, each posterior with its trace's report. Nothing is
warned or caught here: the notes are data until `fit` issues them.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Literal

import jax
import numpy as np

from ..checks import MIN_STEPS, TraceCheckError, TraceDiagnosis, diagnose_if_long_enough
from ..posteriors.mixture import MixturePosterior
from ..posteriors.summary import constrain
from ..trace import BURN_IN
from ..trace.run import Run
from ..util.errors import DIVERGED, NON_FINITE, FitFailure
from ..util.hints import hint
from ..util.notes import FitWarning, Note, notes_of
from .base import Batch, Method, Outcome, fit_problems

__all__ = ["CHECK_MODES", "Checks", "fit_each", "fit_notes", "run_checks", "runaway_failure"]

Checks = Literal["warn", "raise", "off"]
CHECK_MODES = ("warn", "raise", "off")


def fit_each(
    method: Method, batch: Batch, keys, options, *, checks: Checks = "off"
) -> tuple[list[Outcome], list[TraceDiagnosis | None]]:
    """The one fit loop: the trace checks of the batch's traces at the method's burn-in (`checks`: "warn" runs
    them, "raise" raises `TraceCheckError` for the first trace that fails before any fitting, "off" skips them),
    then `method.fit_batch` on the batch with keys (M,) and its options; each outcome (a posterior with its
    notes, or a FitFailure) and its trace's report (None when not checked). Nothing is warned or caught here."""
    reports = run_checks(list(batch.traces), getattr(options, "burn_in", BURN_IN), checks)
    refused = {m: failure for m, report in enumerate(reports) if (failure := runaway_failure(report)) is not None}
    if refused and method.reads == "trace":
        kept = [m for m in range(len(batch)) if m not in refused]
        fitted = iter(fit_problems(method, _sub_batch(batch, kept), keys[np.asarray(kept)], options) if kept else [])
        outcomes = [refused[m] if m in refused else next(fitted) for m in range(len(batch))]
    else:
        outcomes = fit_problems(method, batch, keys, options)
    outcomes = [_finite_or_failure(outcome) for outcome in outcomes]
    if len(reports) != len(outcomes):  # a data method's batch without traces, or a reference fitted once
        reports = [None] * len(outcomes)
    return [_with_checks(outcome, report) for outcome, report in zip(outcomes, reports)], reports


def runaway_failure(report: TraceDiagnosis | None) -> FitFailure | None:
    """The FitFailure (DIVERGED) of a trace whose iterates ran away (the `runaway` check fired): such a trace holds
    no estimate of the optimum, so it is not fitted (as a frozen coordinate is not); None otherwise."""
    finding = None if report is None else next((f for f in report.findings if f.check == "runaway"), None)
    if finding is None:
        return None
    return FitFailure(DIVERGED, f"not fitted: the trace's {finding}")


def fit_notes(outcome: Outcome, report: TraceDiagnosis | None) -> tuple[Note, ...]:
    """What a fit has to say: its trace checks' findings, then the notes its method kept on the posterior."""
    findings = () if report is None else report.findings
    return tuple(Note(f"trace check: {f.title}", f.advice, tuple(f.parameters)) for f in findings) + notes_of(outcome)


def run_checks(traces: list[Run], burn_in: float, checks: Checks) -> list[TraceDiagnosis | None]:
    """The trace checks of every trace in their mode, the one place that runs them for a fit (`fit_each`, and
    `noiseaware fit`, which prints the reports before fitting): None for "off", and for a trace too short for them,
    with a warning (the method decides whether it can fit it); "raise" raises `TraceCheckError` for the first trace
    that fails."""
    if checks == "off":
        return [None] * len(traces)
    reports = [diagnose_if_long_enough(trace, burn_in) for trace in traces]
    if None in reports:
        warnings.warn(
            FitWarning(
                Note(
                    "trace checks skipped",
                    f"fewer than {MIN_STEPS} steps after the burn-in of {burn_in:g}; record a longer trace",
                )
            ),
            stacklevel=5,
        )
    failing = [index for index, report in enumerate(reports) if report is not None and not report.ok]
    if checks == "raise" and failing:
        where = "" if len(traces) == 1 else f"trace {failing[0]}: "
        raise TraceCheckError(
            f"{where}{reports[failing[0]]}\n(fit with {hint("checks='warn'", '--checks warn')} to fit anyway, or "
            f"{hint("'off'", '--checks off')} to skip the checks)"
        )
    return reports


def _sub_batch(batch: Batch, kept: list[int]) -> Batch:
    """The problems `kept` of `batch` (their traces, and their data where the batch holds it)."""
    index = np.asarray(kept)
    data = None if batch.data is None else jax.tree.map(lambda values: np.asarray(values)[index], dict(batch.data))
    traces = tuple(batch.traces[m] for m in kept)
    return dataclasses.replace(batch, traces=traces, data=data, size=len(kept))


def _finite_or_failure(outcome):
    """The outcome, or a FitFailure (NON_FINITE) for a posterior over the VI optimum whose draws are not finite,
    or whose θ on the model's own scale at its draws of μ* is not: a value that overflows (exp of a log-scale
    site at μ* ≈ 10³ is inf) or that rounds onto the edge of the site's support, whence the inverse transform
    is infinite (exp at μ* ≈ −10³ is 0, a rate of 0 ± 0). Such a posterior is never handed out as an answer."""
    if not isinstance(outcome, MixturePosterior):
        return outcome
    chains = (outcome.optimum_chains, outcome.hessian_chains, outcome.extra_noise_chains)
    finite = all(values is None or np.all(np.isfinite(values)) for values in chains)
    if finite and outcome.site_map is not None:
        centres = np.asarray(outcome.optimum_chains, np.float64)[..., : outcome.dim].reshape(-1, outcome.dim)
        values = constrain(outcome.site_map, centres)
        with jax.enable_x64(True):
            back = np.asarray(outcome.site_map.unconstrain(values))
        finite = all(np.all(np.isfinite(v)) for v in values.values()) and bool(np.all(np.isfinite(back)))
    if finite:
        return outcome
    return FitFailure(
        NON_FINITE,
        f"the {outcome.kind} is not finite on the model's scale (its optimum draws reach values where the sites' "
        "transforms overflow or round to the edge of their support): the trace's iterates went too far; record "
        "again with a smaller learning rate",
    )


def _with_checks(outcome, report: TraceDiagnosis | None):
    """The posterior with its trace's report attached (posteriors over the VI optimum keep it as `checks`)."""
    if report is None or not isinstance(outcome, MixturePosterior):
        return outcome
    return dataclasses.replace(outcome, checks=report)
